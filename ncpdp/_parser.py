"""Reading a transmission.

Two passes by design: a fast path made of ``str.split`` on the separators with cheap
checks, and, only when that path finds something wrong, a slow scanner that walks the
input with offsets to say exactly where and what. Well-formed input never pays for
the diagnostics.

Decisions (see also the tests in ``tests/ncpdp``):

* strict (default): the input is exactly header + segments + groups. Transaction
  count 109-A9 must be 1-4 and equal the number of groups; a response with no group
  at all (a transmission rejected at header level) is allowed.
* lenient: also accepts STX (0x02) before and ETX (0x03) after, trailing CR/LF, a
  trailing separator, and a 109-A9 that disagrees with the groups; what was tolerated
  is listed in ``Transmission.tolerated`` and kept in ``leading``/``trailing`` so the
  bytes still round-trip.
* never errors: unknown segment ids (``AMXX``, ``AM99``), unknown or punctuation
  field ids (``&B``), all-space values, text glued after the last field, counts inside
  segments (510-FA vs the 511-FB codes) that disagree with what follows: those are
  data, kept as they are, and the views read what is really there.
"""

from __future__ import annotations

from ._errors import ParseError
from ._model import (
    RequestHeader,
    ResponseHeader,
    Segment,
    Transmission,
    TransactionGroup,
)
from ._versions import VERSIONS

__all__ = ["parse"]

_SS = "\x1e"
_FS = "\x1c"
_GS = "\x1d"
_REQ_LEN = RequestHeader.LENGTH
_RESP_LEN = ResponseHeader.LENGTH
_TRAILING_JUNK = "\r\n\x03\x1c\x1d\x1e"


class _Malformed(Exception):
    """Internal signal from the fast path: run the diagnostic scanner."""


def _segments(chunk: str) -> tuple[Segment, ...]:
    if not chunk:
        return ()
    parts = chunk.split(_SS)
    if parts[0]:
        raise _Malformed
    out = []
    trusted = Segment._trusted
    for p in parts[1:]:
        f = p.split(_FS)
        if f[0] or len(f) < 2:
            raise _Malformed
        sid = f[1]
        if len(sid) != 4 or sid[0] != "A" or sid[1] != "M":
            raise _Malformed
        raw = f[2:]
        if raw and min(map(len, raw)) < 2:
            raise _Malformed
        out.append(trusted(sid[2:], tuple(raw)))
    return tuple(out)


def parse(data: bytes | bytearray | memoryview | str, *, strict: bool = True) -> Transmission:
    """Parse one NCPDP request or response (auto-detected by header length).

    ``bytes`` are read as single-byte text (every byte maps to one character), so any
    input round-trips: ``serialize(parse(x)) == x``. Raises :class:`ParseError`.
    """
    if isinstance(data, str):
        text = data
        if not text.isascii():
            for i, ch in enumerate(text):
                if ord(ch) > 0xFF:
                    raise ParseError("character outside the single-byte range", offset=i)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        text = bytes(data).decode("latin-1")
    else:
        raise TypeError(f"parse() takes bytes or str, not {type(data).__name__}")

    leading = trailing = ""
    tolerated: list[str] = []
    if not strict:
        if text[:1] == "\x02":
            leading = "\x02"
            text = text[1:]
            tolerated.append("STX framing before the header")
        stripped = text.rstrip(_TRAILING_JUNK)
        if len(stripped) != len(text):
            trailing = text[len(stripped) :]
            text = stripped
            if "\x03" in trailing:
                tolerated.append("ETX framing after the message")
            if "\r" in trailing or "\n" in trailing:
                tolerated.append("trailing CR/LF")
            if any(c in trailing for c in "\x1c\x1d\x1e"):
                tolerated.append("trailing separator")
    elif text[-1:] in ("\r", "\n", "\x03"):
        stripped = text.rstrip("\r\n\x03")
        raise ParseError(
            "trailing framing after the message (CR/LF or ETX; lenient mode accepts it)",
            offset=len(stripped),
        )
    base = len(leading)

    # Auto-detect: the header ends where the first segment or group separator stands.
    n = len(text)
    ss = text.find(_SS, 0, _REQ_LEN + 1)
    gs = text.find(_GS, 0, _REQ_LEN + 1)
    first = min(i for i in (ss, gs, n) if i != -1)
    if first == _REQ_LEN:
        header: RequestHeader | ResponseHeader = RequestHeader._trusted(text[:_REQ_LEN])  # type: ignore[assignment]
        version_at = 6
        count_at = 20
    elif first == _RESP_LEN:
        header = ResponseHeader._trusted(text[:_RESP_LEN])  # type: ignore[assignment]
        version_at = 0
        count_at = 4
    else:
        _header_error(text, first, base)
    hlen = first

    version = text[version_at : version_at + 2]
    spec = VERSIONS.get(version)
    if spec is None:
        raise ParseError(
            f"unknown version/release {version!r} (known: {', '.join(VERSIONS)})",
            offset=base + version_at,
            field_id="A2",
        )

    chunks = text[hlen:].split(_GS)
    try:
        segments = _segments(chunks[0])
        groups = tuple(TransactionGroup._trusted(_segments(c)) for c in chunks[1:])
    except _Malformed:
        _diagnose(text, hlen, base)
        raise ParseError("malformed transmission", offset=base + hlen) from None

    count_text = text[count_at]
    ngroups = len(groups)
    if not count_text.isdigit() or not 1 <= int(count_text) <= spec.max_transactions:
        problem = f"transaction count 109-A9 must be 1 to {spec.max_transactions}, got {count_text!r}"
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    elif int(count_text) != ngroups and not (ngroups == 0 and isinstance(header, ResponseHeader)):
        problem = f"transaction count 109-A9 says {count_text} but {ngroups} transaction group(s) follow"
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    if ngroups > spec.max_transactions:
        raise ParseError(
            f"{ngroups} transaction groups; at most {spec.max_transactions} are allowed",
            offset=base + hlen,
        )
    return Transmission._trusted(header, segments, groups, leading, trailing, tuple(tolerated))


def _header_error(text: str, first: int, base: int) -> None:
    if not text:
        raise ParseError("empty input", offset=base)
    if text[0] == "\x02":
        raise ParseError(
            "STX framing before the header (use lenient mode to accept it)", offset=base
        )
    if first == len(text):
        if len(text) < _RESP_LEN:
            raise ParseError(
                f"too short for a header: {len(text)} bytes, a response header has "
                f"{_RESP_LEN} and a request header {_REQ_LEN}",
                offset=base + len(text),
            )
        stripped = text.rstrip("\r\n\x03")
        if len(stripped) in (_REQ_LEN, _RESP_LEN) or stripped.find(_SS) in (_REQ_LEN, _RESP_LEN):
            raise ParseError(
                "trailing framing after the message (CR/LF or ETX; use lenient mode)",
                offset=base + len(stripped),
            )
    raise ParseError(
        f"header must be {_REQ_LEN} (request) or {_RESP_LEN} (response) characters "
        f"before the first segment, found {first}",
        offset=base + first,
    )


def _diagnose(text: str, hlen: int, base: int) -> None:
    """Walk the body with offsets and raise a precise :class:`ParseError`."""
    pos = hlen
    for gi, chunk in enumerate(text[hlen:].split(_GS)):
        if gi:
            pos += 1  # the group separator
        if chunk and chunk[0] != _SS:
            raise ParseError(
                "expected a segment separator (0x1E) here"
                + (" after the header" if gi == 0 else " after the group separator"),
                offset=base + pos,
            )
        segpos = pos
        for sp in chunk.split(_SS)[1:]:
            segpos += 1  # the segment separator
            if not sp:
                raise ParseError("empty segment (two segment separators in a row, or a trailing one)", offset=base + segpos - 1)
            fparts = sp.split(_FS)
            if fparts[0]:
                raise ParseError(
                    "expected a field separator (0x1C) after the segment separator",
                    offset=base + segpos,
                )
            sid_field = fparts[1] if len(fparts) > 1 else ""
            if len(sid_field) != 4 or not sid_field.startswith("AM"):
                raise ParseError(
                    "a segment must start with its identification field AM and a 2-character id",
                    offset=base + segpos + 1,
                    field_id="AM",
                )
            sid = sid_field[2:]
            fpos = segpos + 1 + len(sid_field)
            for f in fparts[2:]:
                if len(f) < 2:
                    raise ParseError(
                        "empty field (two field separators in a row, or a trailing one)"
                        if not f
                        else f"field {f!r} is shorter than its 2-character id",
                        offset=base + fpos,
                        segment_id=sid,
                        field_id=f or None,
                    )
                fpos += 1 + len(f)
            segpos += len(sp)
        pos += len(chunk)
