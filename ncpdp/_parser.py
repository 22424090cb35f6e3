"""Reading a transmission.

Two passes by design: a fast path, one C-level match of the grammar (a regex table
below, possessive so linear) followed by ``str.split`` on the group separators, and,
only when the match fails, a slow scanner that walks the input with offsets to say
exactly where and what. Well-formed input never pays for the diagnostics. Segment
and field objects are built from the validated text on first access, and a parsed
transmission serializes back to the very text it was read from.

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

import re
from typing import NoReturn

from ._errors import ParseError
from ._model import (
    RequestHeader,
    ResponseHeader,
    Transmission,
)
from ._versions import VERSIONS

__all__ = ["parse"]

_SS = "\x1e"
_FS = "\x1c"
_GS = "\x1d"
_REQ_LEN = RequestHeader.LENGTH
_RESP_LEN = ResponseHeader.LENGTH
_TRAILING_JUNK = "\r\n\x03\x1c\x1d\x1e"
_STRICT_TAIL = ("\r", "\n", "\x03")
_BREAKS = (_SS, _GS)
_DIGITS = frozenset("0123456789")

# The grammar as data. One C-level regex match validates a whole transmission; the
# splits that follow can then trust their input. Possessive quantifiers: no
# backtracking, so the match is linear in the input.
_NOT_SEP = "[^\x1c-\x1e]"
_FIELD = f"\x1c{_NOT_SEP}{{2,}}+"  # 0x1C, 2-character id, value
_SEGMENT = f"\x1e\x1cAM{_NOT_SEP}{{2}}(?:{_FIELD})*+"  # 0x1E, AMnn, fields
_GROUPS_STRICT = f"(?:\x1d(?:{_SEGMENT})++)*+"  # each group holds a segment
_GROUPS_LENIENT = f"(?:\x1d(?:{_SEGMENT})*+)*+"  # empty groups tolerated
_GRAMMAR: dict[tuple[int, bool], re.Pattern[str]] = {
    (hlen, strict): re.compile(
        f"{_NOT_SEP}{{{hlen}}}(?:{_SEGMENT})*+" + (_GROUPS_STRICT if strict else _GROUPS_LENIENT)
    )
    for hlen in (RequestHeader.LENGTH, ResponseHeader.LENGTH)
    for strict in (True, False)
}
_REQ_STRICT = _GRAMMAR[_REQ_LEN, True].fullmatch
_RESP_STRICT = _GRAMMAR[_RESP_LEN, True].fullmatch
_new = object.__new__


def _decode(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        if not data.isascii():
            for i, ch in enumerate(data):
                if ord(ch) > 0xFF:
                    raise ParseError("character outside the single-byte range", offset=i)
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data).decode("latin-1")
    raise TypeError(f"parse() takes bytes or str, not {type(data).__name__}")


def parse(data: bytes | bytearray | memoryview | str, *, strict: bool = True) -> Transmission:
    """Parse one NCPDP request or response (auto-detected by header length).

    ``bytes`` are read as single-byte text (every byte maps to one character), so any
    input round-trips: ``serialize(parse(x)) == x``. Raises :class:`ParseError`.
    """
    full = text = data.decode("latin-1") if type(data) is bytes else _decode(data)

    leading = trailing = ""
    tolerated: list[str] = []
    if strict:
        if text[:1] == "\x02" or text[-1:] in _STRICT_TAIL:
            if text[:1] == "\x02":
                raise ParseError(
                    "STX framing before the header (lenient mode accepts it)", offset=0
                )
            raise ParseError(
                "trailing framing after the message (CR/LF or ETX; lenient mode accepts it)",
                offset=len(text.rstrip("\r\n\x03")),
            )
    else:
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
    base = len(leading)

    # Auto-detect: the header ends where the first segment or group separator stands
    # (a response with no transaction group may be its header alone).
    n = len(text)
    header: RequestHeader | ResponseHeader
    if text[_RESP_LEN : _RESP_LEN + 1] in _BREAKS or n == _RESP_LEN:
        hlen = _RESP_LEN
        match = _RESP_STRICT if strict else _GRAMMAR[_RESP_LEN, False].fullmatch
        header = _new(ResponseHeader)
        version_at = 0
        count_at = 4
    elif text[_REQ_LEN : _REQ_LEN + 1] in _BREAKS or n == _REQ_LEN:
        hlen = _REQ_LEN
        match = _REQ_STRICT if strict else _GRAMMAR[_REQ_LEN, False].fullmatch
        header = _new(RequestHeader)
        version_at = 6
        count_at = 20
    else:
        _header_error(text, base)

    if match(text) is None:  # the slow path: say exactly where and what
        if any(c in text[:hlen] for c in "\x1c\x1d\x1e"):
            _header_error(text, base)
        _diagnose(text, hlen, base, strict)
        raise ParseError("malformed transmission", offset=base + hlen)

    version = text[version_at : version_at + 2]
    spec = VERSIONS.get(version)
    if spec is None:
        raise ParseError(
            f"unknown version/release {version!r} (known: {', '.join(VERSIONS)})",
            offset=base + version_at,
            field_id="A2",
        )

    header._raw = text[:hlen]
    chunks = text[hlen:].split(_GS)  # segments are split on first access
    ngroups = len(chunks) - 1
    if not (
        strict and 0 < ngroups <= spec.max_transactions and text[count_at] == "0123456789"[ngroups]
    ):  # 109-A9 is one digit, so max_transactions <= 9
        _check_count(text, chunks, count_at, hlen, base, spec.max_transactions, strict, tolerated)

    t: Transmission = _new(Transmission)
    t._header = header
    t._leading = leading
    t._trailing = trailing
    t._tolerated = tuple(tolerated) if tolerated else ()
    t._text = full
    t._wire = chunks
    return t


def _check_count(
    text: str,
    chunks: list[str],
    count_at: int,
    hlen: int,
    base: int,
    max_tx: int,
    strict: bool,
    tolerated: list[str],
) -> None:
    """109-A9 against the groups that follow; lenient mode notes what it tolerates."""
    ngroups = len(chunks) - 1
    if not strict and ngroups and not all(chunks[1:]):
        tolerated.append("empty transaction group (a group separator with no segment)")
    count_text = text[count_at]
    if count_text not in _DIGITS or not 1 <= int(count_text) <= max_tx:
        problem = f"transaction count 109-A9 must be 1 to {max_tx}, got {count_text!r}"
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    elif int(count_text) != ngroups and not (ngroups == 0 and hlen == _RESP_LEN):
        problem = (
            f"transaction count 109-A9 says {count_text} but {ngroups} transaction group(s) follow"
        )
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    if ngroups > max_tx:
        raise ParseError(
            f"{ngroups} transaction groups; at most {max_tx} are allowed",
            offset=base + hlen + _nth(text[hlen:], _GS, max_tx),
        )


def _nth(text: str, sep: str, n: int) -> int:
    """Offset of the ``n``-th (0-based) occurrence of ``sep`` in ``text``."""
    pos = -1
    for _ in range(n + 1):
        pos = text.find(sep, pos + 1)
    return pos


def _header_error(text: str, base: int) -> NoReturn:
    """Explain why no 31- or 56-character header is found."""
    if not text:
        raise ParseError("empty input", offset=base)
    if text[0] == "\x02":
        raise ParseError("STX framing before the header (lenient mode accepts it)", offset=base)
    for i, ch in enumerate(text[: _REQ_LEN + 1]):
        if ch == _FS and i not in (_RESP_LEN, _REQ_LEN):
            raise ParseError(
                f"field separator (0x1C) inside the fixed-width header at column {i + 1}",
                offset=base + i,
            )
        if ch in _BREAKS or ch == _FS:
            raise ParseError(
                f"header must be {_REQ_LEN} (request) or {_RESP_LEN} (response) "
                f"characters before the first segment, found {i}",
                offset=base + i,
            )
    if len(text) < _RESP_LEN:
        raise ParseError(
            f"too short for a header: {len(text)} bytes, a response header has "
            f"{_RESP_LEN} and a request header {_REQ_LEN}",
            offset=base + len(text),
        )
    if len(text) <= _REQ_LEN:
        raise ParseError(
            f"{len(text)} bytes and no segment: a response header has {_RESP_LEN} "
            f"and a request header {_REQ_LEN}",
            offset=base + len(text),
        )
    raise ParseError(
        f"no segment or group separator after a {_REQ_LEN}-character request header "
        f"or a {_RESP_LEN}-character response header",
        offset=base + _REQ_LEN,
    )


def _diagnose(text: str, hlen: int, base: int, strict: bool) -> None:
    """Walk the body with offsets and raise a precise :class:`ParseError`.

    Mirrors :func:`_split` rule by rule; a test checks that whenever the fast path
    refuses an input, this function names the place.
    """
    pos = hlen
    last = len(text) - 1
    for gi, chunk in enumerate(text[hlen:].split(_GS)):
        if gi:
            pos += 1  # the group separator
            if not chunk and strict:
                raise ParseError(
                    "empty transaction group (a group separator with no segment after it"
                    + ("; lenient mode accepts it)" if pos - 1 == last else ")"),
                    offset=base + pos - 1,
                )
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
                raise ParseError(
                    "empty segment (a segment separator with no segment after it"
                    + ("; lenient mode accepts a trailing one)" if segpos - 1 == last else ")"),
                    offset=base + segpos - 1,
                )
            fparts = sp.split(_FS)
            if fparts[0]:
                raise ParseError(
                    "expected a field separator (0x1C) after the segment separator",
                    offset=base + segpos,
                )
            sid_field = fparts[1]
            if len(sid_field) != 4 or not sid_field.startswith("AM"):
                raise ParseError(
                    "a segment must start with its identification field AM and a "
                    f"2-character segment id, found {sid_field[:8]!r}",
                    offset=base + segpos + 1,
                    segment_id=sid_field[2:4] if sid_field.startswith("AM") else None,
                    field_id="AM",
                )
            sid = sid_field[2:]
            prev = "AM"
            fpos = segpos + 1 + len(sid_field)
            for f in fparts[2:]:
                if len(f) < 2:
                    if not f:
                        reason = (
                            f"empty field after field {prev} (a field separator with no "
                            "field id after it"
                            + ("; lenient mode accepts a trailing one)" if fpos == last else ")")
                        )
                    else:
                        reason = (
                            f"field {f!r} after field {prev} is shorter than its 2-character id"
                        )
                    raise ParseError(reason, offset=base + fpos, segment_id=sid, field_id=prev)
                prev = f[:2]
                fpos += 1 + len(f)
            segpos += len(sp)
        pos += len(chunk)
