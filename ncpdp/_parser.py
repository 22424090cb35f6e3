"""Reading a transmission.

Two passes by design: a fast path, one C-level match of the grammar (a regex table
below, possessive so linear) followed by ``str.split`` on the group separators, and,
only when the match fails, a slow scanner that walks the input with offsets to say
exactly where and what. Well-formed input never pays for the diagnostics. Segment
and field objects are built from the validated text on first access, and a parsed
transmission serializes back to the very text it was read from.

Decisions (see also the tests in ``tests/ncpdp``):

* strict (default): the input is exactly header + segments + groups, every byte of
  it printable ASCII (0x20-0x7E) apart from the separators; no field has the id
  ``AM`` after the first field of a segment (that is a missing segment separator);
  101-A1 is all digits and 401-D1 a calendar date. Transaction count 109-A9 must be
  1-4 (1 in F6) and equal the number of groups, with two exceptions that carry no
  group at all: an eligibility request (E1, 109-A9 = 1) and a response rejected at
  header level (501-F1 = ``R``). Strict mode raises at the first problem it meets;
  lenient mode lists every problem it tolerated in ``Transmission.tolerated``.
* lenient: also accepts line breaks (CR/LF) and STX (0x02) before the header, ETX
  (0x03) after, trailing CR/LF, a trailing separator, a 109-A9 that disagrees with
  the groups, a response without a group that is not rejected at header level, bytes
  outside printable ASCII, a field ``AM`` inside a segment, an F6-only field inside a
  D.0 or 5.1 segment, a second transaction in F6, and header slots of the wrong
  format; what was tolerated is listed in ``Transmission.tolerated`` (with its offset;
  the first ``TOLERATED_LIMIT`` problems, then one line that counts the rest, so the
  list stays small and the work linear on any input) and framing is kept in
  ``leading``/``trailing`` so the bytes still round-trip.
* F6 (``F6`` in 102-A2, 58-character request header) has no group separators: its
  one transaction starts at the first transaction-level segment of the version's
  table (none for an E1 request). A group separator in F6 is refused in strict mode,
  and so is a second Claim (AM07) or Response Status (AM21) segment: F6 carries one
  transaction. Lenient mode reads each one as the start of another transaction.
* D.0 and 5.1: a field id that only F6 defines, inside a segment the version knows,
  is refused in strict mode (a private segment such as ``AM99`` may carry anything).
* never errors: unknown segment ids (``AMXX``, ``AM99``), unknown or punctuation
  field ids (``&B``), all-space values, text glued after the last field, counts inside
  segments (510-FA vs the 511-FB codes) that disagree with what follows: those are
  data, kept as they are, and the views read what is really there.
* an NCPDP batch record (STX ``G1`` ...) or batch file (a Batch 1.x header record:
  STX, ``00``, a transmission type letter, 24 characters of sender id, then the batch
  number, creation date and time in digits) given here is refused with an error that
  says so: :func:`ncpdp.parse_batch` reads those. The layout is what tells them apart
  from a framed claim, whose BIN may well start with ``00`` or ``99`` (004336,
  003858, 999999).
* offsets count from the start of ``data``; :func:`_parse_at` counts them from a
  further base (a transmission inside a batch file: from the start of the file).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from itertools import pairwise
from typing import NoReturn

from ._errors import ParseError
from ._fields import F6_FIELD_IDS, FIELDS
from ._model import (
    UNSPLIT,
    RequestHeader,
    ResponseHeader,
    Transmission,
)
from ._versions import (
    REQUEST_HEADER,
    REQUEST_HEADER_F6,
    RESPONSE_HEADER,
    TRANSACTION_START,
    VERSIONS,
    HeaderSlot,
    VersionSpec,
)

__all__ = ["parse", "TOLERATED_LIMIT"]

#: Lenient parsing lists at most this many problems in ``Transmission.tolerated``; one
#: more line then says how many more it tolerated.
TOLERATED_LIMIT = 100

_SS = "\x1e"
_FS = "\x1c"
_GS = "\x1d"
_REQ_LEN = RequestHeader.LENGTH
_REQ_F6_LEN = sum(s.width for s in REQUEST_HEADER_F6)
_RESP_LEN = ResponseHeader.LENGTH
_TRAILING_JUNK = "\r\n\x03\x1c\x1d\x1e"
_STRICT_TAIL = ("\r", "\n", "\x03")
_BREAKS = (_SS, _GS)
_DIGITS = frozenset("0123456789")
_LINE_BREAKS = "\r\n"

# The grammar as data. One C-level regex match validates a whole transmission; the
# splits that follow can then trust their input. Possessive quantifiers: no
# backtracking, so the match is linear in the input. Strict mode allows printable
# ASCII only and no field id "AM" after a segment's first field; lenient mode any
# byte but the separators (and reports the rest after the match).
_PRINTABLE = "[\x20-\x7e]"
_NOT_SEP = "[^\x1c-\x1e]"


def _header_pattern(layout: tuple[HeaderSlot, ...], strict: bool) -> str:
    """Strict: 101-A1 and 401-D1 digits, the other slots printable; lenient: any byte
    but the separators (lenient mode reports the rest after the match)."""
    if not strict:
        return f"{_NOT_SEP}{{{sum(s.width for s in layout)}}}"
    return "".join(
        f"[0-9]{{{s.width}}}" if s.field_id in ("A1", "D1") else f"{_PRINTABLE}{{{s.width}}}"
        for s in layout
    )


def _grammar(hlen: int, strict: bool) -> re.Pattern[str]:
    ch = _PRINTABLE if strict else _NOT_SEP
    field = f"\x1c(?!AM){ch}{{2,}}+" if strict else f"\x1c{ch}{{2,}}+"
    segment = f"\x1e\x1cAM{ch}{{2}}(?:{field})*+"  # 0x1E, AMnn, fields
    groups = (
        f"(?:\x1d(?:{segment})++)*+"  # each group holds a segment
        if strict
        else f"(?:\x1d(?:{segment})*+)*+"  # empty groups tolerated
    )
    layout = {
        _REQ_LEN: REQUEST_HEADER,
        _REQ_F6_LEN: REQUEST_HEADER_F6,
        _RESP_LEN: ResponseHeader.LAYOUT,
    }[hlen]
    return re.compile(_header_pattern(layout, strict) + f"(?:{segment})*+" + groups)


_GRAMMAR: dict[tuple[int, bool], re.Pattern[str]] = {
    (hlen, strict): _grammar(hlen, strict)
    for hlen in (_REQ_LEN, _REQ_F6_LEN, _RESP_LEN)
    for strict in (True, False)
}
_LAYOUTS = {_REQ_LEN: REQUEST_HEADER, _REQ_F6_LEN: REQUEST_HEADER_F6, _RESP_LEN: RESPONSE_HEADER}


def _field_without(ids: frozenset[str]) -> str:
    """A strict field whose id is neither ``AM`` nor one of ``ids``, as one class test
    for the ids that start with a character none of them starts with (the common
    case: 402-D2, 442-E7, 302-C2 ...) and one short test per other first character."""
    by_first: dict[str, set[str]] = {"A": {"M"}}
    for i in ids:
        by_first.setdefault(i[0], set()).add(i[1])
    safe = "".join(re.escape(chr(c)) for c in range(0x20, 0x7F) if chr(c) not in by_first)
    common = "AF4789"  # the response's 112-AN, 511-FB ..., 546-4F, 549-7F, 550-8F, 551-9F
    order = sorted(by_first, key=lambda c: (common.find(c) % 99, c))
    alternatives = [f"[{safe}]{_PRINTABLE}"] + [
        re.escape(c)
        + "[^"
        + "".join(re.escape(x) for x in sorted(by_first[c]))
        + "\x00-\x1f\x7f-\U0010ffff]"
        for c in order
    ]
    return "\x1c(?:" + "|".join(alternatives) + f"){_PRINTABLE}*+"


def _fast_grammar(hlen: int, code: str) -> re.Pattern[str]:
    """The strict grammar with one version's rules in it, for the fast path only (a
    miss sends the input to the full path, which decides): in D.0 and 5.1 no field id
    that only F6 defines; in F6 no group separator and one Claim (AM07) or Response
    Status (AM21) segment at most."""
    spec = VERSIONS[code]
    if code in _FOREIGN_CODES:
        field = _field_without(F6_FIELD_IDS)
    else:
        field = f"\x1c(?!AM){_PRINTABLE}{{2,}}+"
    segment = f"\x1e\x1cAM{_PRINTABLE}{{2}}(?:{field})*+"
    if spec.group_separator:
        body = f"(?:{segment})*+(?:\x1d(?:{segment})++)*+"
    else:
        one = "21" if hlen == _RESP_LEN else "07"
        other = f"\x1e\x1cAM(?!{one}){_PRINTABLE}{{2}}(?:{field})*+"
        body = f"(?:{other})*+(?:\x1e\x1cAM{one}(?:{field})*+(?:{other})*+)?+"
    return re.compile(_header_pattern(_LAYOUTS[hlen], True) + body)


#: The versions that have no F6-only field.
_FOREIGN_CODES = ("D0", "51")
_NON_PRINTABLE = re.compile("[^\x20-\x7e\x1c-\x1e]")
_AM_INSIDE = re.compile("(?<!\x1e)\x1cAM")
_new = object.__new__


def _span(layout: tuple[HeaderSlot, ...], field_id: str) -> tuple[int, int]:
    for s in layout:
        if s.field_id == field_id:
            return s.start, s.start + s.width
    return 0, 0


# Where the header slots the parser checks stand, by header length: 101-A1 (none in
# a response) and 401-D1.
_CHECKED: dict[int, tuple[int, int, int, int]] = {
    _REQ_LEN: (*_span(REQUEST_HEADER, "A1"), *_span(REQUEST_HEADER, "D1")),
    _REQ_F6_LEN: (*_span(REQUEST_HEADER_F6, "A1"), *_span(REQUEST_HEADER_F6, "D1")),
    _RESP_LEN: (0, 0, *_span(ResponseHeader.LAYOUT, "D1")),
}
_DATE_AT = {hlen: d0 for hlen, (_, _, d0, _) in _CHECKED.items()}
_REQ_LEN_OF = {code: sum(s.width for s in spec.request_header) for code, spec in VERSIONS.items()}
_DATES: dict[str, bool] = {}


def _valid_date(value: str) -> bool:
    """CCYYMMDD and a real calendar date; memoized (claims share few dates)."""
    ok = _DATES.get(value)
    if ok is None:
        ok = len(value) == 8 and value.isdigit() and value.isascii()
        if ok:
            try:
                _dt.date(int(value[:4]), int(value[4:6]), int(value[6:]))
            except ValueError:
                ok = False
        if len(_DATES) >= 4096:
            _DATES.clear()
        _DATES[value] = ok
    return ok


class _Tolerated:
    """What lenient parsing tolerated: the first :data:`TOLERATED_LIMIT` notes, and a
    count of the rest (each scanner stops formatting notes once the list is full)."""

    __slots__ = ("more", "notes")

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.more = 0

    @property
    def full(self) -> bool:
        return len(self.notes) >= TOLERATED_LIMIT

    def append(self, note: str) -> None:
        if len(self.notes) < TOLERATED_LIMIT:
            self.notes.append(note)
        else:
            self.more += 1

    def result(self) -> tuple[str, ...]:
        if not self.more:
            return tuple(self.notes)
        return (
            *self.notes,
            f"... and {self.more} more problems of the same kinds, not listed "
            f"(the first {TOLERATED_LIMIT} are)",
        )


def _decode(data: bytes | bytearray | memoryview | str, base: int = 0) -> str:
    if isinstance(data, str):
        if not data.isascii():
            for i, ch in enumerate(data):
                if ord(ch) > 0xFF:
                    raise ParseError("character outside the single-byte range", offset=base + i)
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data).decode("latin-1")
    raise TypeError(f"parse() takes bytes or str, not {type(data).__name__}")


# A Batch 1.x header record by its fixed layout (decision 0011): STX, record type "00",
# the transmission type (a letter: T, R or E), the 24-character sender id, then the
# batch number (7), creation date (8) and time (4), all digits. A framed claim never
# matches: the character after "00" is a digit of its BIN (004336, 003858), or the
# version/transaction code follows within those 47 characters.
_BATCH_HEADER = re.compile("\x0200[A-Z][^\x02\x03]{24}[0-9]{19}")
# A trailer record: STX, "99", the batch number (7) and the record count (10), digits.
# A claim of BIN 99xxxx has its transaction code (B1, B2, ...) among those 17.
_BATCH_TRAILER = re.compile("\x0299[0-9]{17}")


def _looks_like_batch_file(text: str) -> bool:
    """Whether ``text`` (after any leading line breaks) starts with a batch header or
    trailer record, by their layouts."""
    start = text.lstrip(_LINE_BREAKS)[:48]
    return bool(_BATCH_HEADER.match(start) or _BATCH_TRAILER.match(start))


def _batch_record_error(text: str, base: int) -> None:
    """Refuse a batch record or file given where a bare transmission is expected."""
    if text[1:3] == "G1":
        raise ParseError(
            "this is an NCPDP batch detail record (STX, 'G1', a 10-character reference, "
            "the transmission, ETX), not a bare transmission: read it with "
            "ncpdp.parse_batch() or `pa-bridge claim parse`, or pass the transmission "
            "that starts at byte 13",
            offset=base,
        )
    if _BATCH_HEADER.match(text) or _BATCH_TRAILER.match(text):
        raise ParseError(
            "this is an NCPDP batch file (STX and a Batch 1.x header or trailer record), "
            "not a bare transmission: read it with ncpdp.parse_batch() or `pa-bridge "
            "claim parse`",
            offset=base,
        )


def parse(data: bytes | bytearray | memoryview | str, *, strict: bool = True) -> Transmission:
    """Parse one NCPDP request or response (auto-detected: a 31-character header is a
    response; 56 characters a D.0/5.1 request; 58 an F6 request).

    ``bytes`` are read as single-byte text (every byte maps to one character), so any
    input round-trips: ``serialize(parse(x)) == x``. Raises :class:`ParseError`: in
    strict mode at the first problem found; lenient mode lists what it tolerated in
    ``Transmission.tolerated``.
    """
    if strict:  # well-formed input takes the fast path; anything else the full one
        kind = type(data)
        fast = (
            _fast(data.decode("latin-1"))  # type: ignore[union-attr]
            if kind is bytes
            else _fast(data)  # type: ignore[arg-type]
            if kind is str
            else None
        )
        if fast is not None:
            return fast
    return _parse_full(data, strict)


def _parse_at(data: str, strict: bool, offset: int) -> Transmission:
    """:func:`parse` of a transmission that stands at ``offset`` in a larger input (a
    batch file): every offset it reports, raised or tolerated, counts from there."""
    if strict:
        fast = _fast(data)
        if fast is not None:
            return fast
    return _parse_full(data, strict, offset)


def _parse_full(
    data: bytes | bytearray | memoryview | str, strict: bool, offset: int = 0
) -> Transmission:
    """The full path: every input the fast path passed on, with the diagnostics."""
    full = text = data.decode("latin-1") if type(data) is bytes else _decode(data, offset)

    leading = trailing = ""
    tolerated = _Tolerated()
    first = text[:1]
    if first in _LINE_BREAKS and first:
        lead = len(text) - len(text.lstrip(_LINE_BREAKS))
        if text[lead : lead + 1] == "\x02":
            _batch_record_error(text[lead:], offset + lead)
        if strict:
            raise ParseError(
                "line break (CR/LF) before the header (lenient mode accepts it)", offset=offset
            )
        leading = text[:lead]
        text = text[lead:]
        tolerated.append("line break before the header")
    if strict:
        if text[:1] == "\x02" or text[-1:] in _STRICT_TAIL:
            if text[:1] == "\x02":
                _batch_record_error(text, offset)
                raise ParseError(
                    "STX framing before the header (lenient mode accepts it)", offset=offset
                )
            raise ParseError(
                "trailing framing after the message (CR/LF or ETX; lenient mode accepts it)",
                offset=offset + len(text.rstrip("\r\n\x03")),
            )
    else:
        if text[:1] == "\x02":
            _batch_record_error(text, offset + len(leading))
            leading += "\x02"
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
    base = offset + len(leading)

    plan = _detect(text)
    if plan is None:
        _header_error(text, base)
    hlen, match, header_class, version_at, count_at, _, _ = plan
    if not strict:
        match = _GRAMMAR[hlen, False].fullmatch
    header = _new(header_class)

    if match(text) is None:  # the slow path: say exactly where and what
        if any(c in text[:hlen] for c in "\x1c\x1d\x1e"):
            _header_error(text, base)
        _check_header(text, hlen, base, strict, tolerated)
        _diagnose(text, hlen, base, strict)
        raise ParseError("malformed transmission", offset=base + hlen)

    version = text[version_at : version_at + 2]
    spec = VERSIONS.get(version)
    if spec is None or (hlen != _RESP_LEN and hlen != _REQ_LEN_OF[version]):
        _version_error(version, spec, hlen, base + version_at)

    if strict:  # the grammar checked the digits of 101-A1 and 401-D1; the calendar is left
        dos = text[_DATE_AT[hlen] : _DATE_AT[hlen] + 8]
        if not (_DATES.get(dos) or _valid_date(dos)):
            _check_header(text, hlen, base, strict, tolerated)
    else:
        i0, i1, d0, d1 = _CHECKED[hlen]
        dos = text[d0:d1]
        iss = text[i0:i1]
        if not ((iss.isdigit() or i0 == i1) and iss.isascii() and _valid_date(dos)):
            _check_header(text, hlen, base, strict, tolerated)
        _lenient_checks(text, hlen, base, tolerated)
    if version in _FOREIGN and _FOREIGN[version].search(text, hlen) is not None:
        _foreign_fields(text, hlen, base, spec, strict, tolerated)

    header._raw = text[:hlen]
    body = text[hlen:]
    grouped = True
    ours = False  # whether the transactions were told apart by us (F6), not by 0x1D
    if spec.group_separator:
        chunks = body.split(_GS)  # segments are split on first access
    elif _GS not in body:
        grouped = False
        chunks = _ungrouped(text, body, hlen, _TX_IDS[version], _TX_START[version])
        if len(chunks) > 1:
            chunks = _one_transaction(chunks, body, hlen, base, strict, tolerated)
            ours = len(chunks) > 2
    else:
        at = base + hlen + body.index(_GS)
        problem = (
            f"group separator (0x1D) at byte offset {at}: {spec.code} transmissions have "
            "none (one transaction follows the transmission-level segments)"
        )
        if strict:
            raise ParseError(problem, offset=at)
        tolerated.append(problem)
        chunks = body.split(_GS)
    ngroups = len(chunks) - 1
    if not (
        strict and 0 < ngroups <= spec.max_transactions and text[count_at] == "0123456789"[ngroups]
    ):  # 109-A9 is one digit, so max_transactions <= 9
        _check_count(
            text, chunks, count_at, hlen, base, spec.max_transactions, strict, tolerated, ours
        )

    t: Transmission = _new(Transmission)
    t._header = header
    t._grouped = grouped
    t._leading = leading
    t._trailing = trailing
    t._tolerated = tolerated.result()
    t._text = full
    t._wire = chunks
    t._request_view = t._response_view = None
    return t


def _one_transaction(
    chunks: list[str], body: str, hlen: int, base: int, strict: bool, tolerated: _Tolerated
) -> list[str]:
    """F6 carries one transaction: a second Claim (AM07) or Response Status (AM21)
    segment starts another one. Strict mode refuses it; lenient mode reads each as the
    start of a further transaction and reports it."""
    sid = "21" if hlen == _RESP_LEN else "07"
    mark = "\x1e\x1cAM" + sid
    first = body.find(mark)
    if first < 0:
        return chunks
    starts: list[int] = []
    at = body.find(mark, first + 1)
    while at >= 0:
        starts.append(at)
        at = body.find(mark, at + 1)
    if not starts:
        return chunks
    if strict:
        raise ParseError(
            f"an F6 transmission carries one transaction; segment AM{sid} here starts a "
            "second one (lenient mode reads it as another transaction and reports it)",
            offset=base + hlen + starts[0],
            segment_id=sid,
        )
    for n, at in enumerate(starts, start=2):
        tolerated.append(
            f"an F6 transmission carries one transaction; segment AM{sid} starts a second "
            f"one, read as transaction {n} (at byte offset {base + hlen + at})"
        )
    if chunks[-1] is UNSPLIT:  # where the first transaction starts: as _materialize finds it
        m = _TX_START["F6"](body)
        chunks = [body] if m is None else [body[: m.start()], body[m.start() :]]
    cuts = [len(chunks[0]), *starts, len(body)]
    return [chunks[0], *(body[a:b] for a, b in pairwise(cuts))]


_TX_IDS: dict[str, frozenset[str]] = {c: v.transaction_segments for c, v in VERSIONS.items()}
_TX_START = TRANSACTION_START
_DIGIT = "0123456789"


def _ids_pattern(ids: frozenset[str]) -> str:
    """``(?:R[KLMRS]|0[CDEF]|...)``: field ids as one class test per first character."""
    by_first: dict[str, list[str]] = {}
    for i in sorted(ids):
        by_first.setdefault(i[0], []).append(i[1])
    return (
        "(?:"
        + "|".join(
            re.escape(first) + "[" + "".join(re.escape(c) for c in seconds) + "]"
            for first, seconds in by_first.items()
        )
        + ")"
    )


#: By version: a search for a field id the version does not have (F6-only fields, in
#: D.0 and 5.1). A hit is looked at closely: only inside a segment the version knows
#: is it a problem.
_FOREIGN: dict[str, re.Pattern[str]] = {
    code: re.compile("\x1c" + _ids_pattern(F6_FIELD_IDS)) for code in _FOREIGN_CODES
}
_SEGMENT_OR_FOREIGN = re.compile(
    "\x1e\x1cAM([^\x1c-\x1e]{2})|\x1c(" + _ids_pattern(F6_FIELD_IDS) + ")"
)
_VERSION_NAMES = {"D0": "D.0", "51": "5.1", "F6": "F6"}


def _foreign_fields(
    text: str, hlen: int, base: int, spec: VersionSpec, strict: bool, tolerated: _Tolerated
) -> None:
    """F6-only fields inside the segments a D.0 or 5.1 message's version knows: strict
    mode refuses the first, lenient mode lists them. One pass, the segment read as it
    goes (a private segment such as AM99 may carry any id)."""
    known = spec.segments
    sid = ""
    for m in _SEGMENT_OR_FOREIGN.finditer(text, hlen):
        if m.group(1) is not None:
            sid = m.group(1)
            continue
        if sid not in known:
            continue
        fid = m.group(2)
        problem = (
            f"field {fid} ({FIELDS[fid].name}) is an F6 field, not a field of "
            f"{_VERSION_NAMES[spec.code]}"
        )
        if strict:
            raise ParseError(
                f"{problem} (lenient mode accepts it and reports it)",
                offset=base + m.start(),
                segment_id=sid,
                field_id=fid,
            )
        if tolerated.full:
            tolerated.more += 1
        else:
            tolerated.append(f"{problem}, in segment AM{sid} (at byte offset {base + m.start()})")


_Match = Callable[[str], re.Match[str] | None]
_Entry = tuple[int, bool, frozenset[str], _Match, _Match]
_Plan = tuple[
    int,
    Callable[[str], re.Match[str] | None],
    type[RequestHeader] | type[ResponseHeader],
    int,
    int,
    dict[str, _Entry],
    int,
]


def _plan(
    hlen: int, header: type[RequestHeader] | type[ResponseHeader], version_at: int, count_at: int
) -> _Plan:
    """What the fast path needs for one header length: the strict grammar, the header
    class, where 102-A2 and 109-A9 stand, the versions that use this header length (each
    with its transaction limit, whether it has group separators, its transaction-level
    segment ids and the search for its first one, and its own strict grammar with the
    version's rules), and where 401-D1 stands."""
    specs: dict[str, _Entry] = {
        code: (
            spec.max_transactions,
            spec.group_separator,
            _TX_IDS[code],
            _TX_START[code],
            _fast_grammar(hlen, code).fullmatch,
        )
        for code, spec in VERSIONS.items()
        if hlen == _RESP_LEN or _REQ_LEN_OF[code] == hlen
    }
    return hlen, _GRAMMAR[hlen, True].fullmatch, header, version_at, count_at, specs, _DATE_AT[hlen]


_PLAN_RESP = _plan(_RESP_LEN, ResponseHeader, 0, 4)
_PLAN_REQ = _plan(_REQ_LEN, RequestHeader, 6, 20)
_PLAN_F6 = _plan(_REQ_F6_LEN, RequestHeader, 0, 22)


def _detect(text: str) -> _Plan | None:
    """The header's length and what goes with it: the header ends where the first
    segment or group separator stands (a response with no transaction group may be its
    header alone)."""
    n = len(text)
    if text[_RESP_LEN : _RESP_LEN + 1] in _BREAKS or n == _RESP_LEN:
        return _PLAN_RESP
    if text[_REQ_LEN : _REQ_LEN + 1] in _BREAKS or n == _REQ_LEN:
        return _PLAN_REQ
    if text[_REQ_F6_LEN : _REQ_F6_LEN + 1] in _BREAKS or n == _REQ_F6_LEN:
        return _PLAN_F6
    return None


def _ungrouped(
    text: str,
    body: str,
    hlen: int,
    tx_ids: frozenset[str],
    tx_start: Callable[[str], re.Match[str] | None],
) -> list[str]:
    """A version without group separators (F6): the transmission-level part and the
    one transaction, or ``[body]`` when there is no transaction (an eligibility request,
    or none found). Where a Claim or Response Status segment shows there is one, where
    it starts is left to the first access to the segments (``UNSPLIT``)."""
    if hlen == _RESP_LEN and body[4:6] in tx_ids:  # starts with its transaction
        return ["", body]
    if hlen != _RESP_LEN and text[2:4] == "E1":
        return [body]
    if "\x1e\x1cAM07" in body or "\x1e\x1cAM21" in body:
        return [body, UNSPLIT]
    tx = tx_start(body)
    if tx is None:
        return [body]
    at = tx.start()
    return [body[:at], body[at:]]


def _fast(text: str) -> Transmission | None:
    """Strict parsing of well-formed input, or ``None`` for anything the full path must
    look at (which then accepts it or says exactly what is wrong). Accepts exactly what
    the full path accepts in strict mode, and builds the same objects."""
    plan = (  # _detect's answer, its common cases inline: this runs on every claim
        _PLAN_RESP
        if text[_RESP_LEN : _RESP_LEN + 1] in _BREAKS
        else _PLAN_REQ
        if text[_REQ_LEN : _REQ_LEN + 1] in _BREAKS
        else _PLAN_F6
        if text[_REQ_F6_LEN : _REQ_F6_LEN + 1] in _BREAKS
        else _detect(text)
    )
    if plan is None:
        return None
    hlen, _, header_class, version_at, count_at, specs, d0 = plan
    entry = specs.get(text[version_at : version_at + 2])
    if entry is None:
        return None
    max_tx, grouped, tx_ids, tx_start, match = entry
    if match(text) is None:  # the version's grammar
        return None
    dos = text[d0 : d0 + 8]
    if not (_DATES.get(dos) or _valid_date(dos)):
        return None
    body = text[hlen:]
    chunks: list[str]
    if grouped:
        chunks = body.split(_GS)
        ngroups = len(chunks) - 1
        if not (0 < ngroups <= max_tx and text[count_at] == _DIGIT[ngroups]):
            return None
    else:  # one transaction, no group separator (its grammar has none) (F6)
        if text[count_at] != "1":
            return None
        if hlen == _RESP_LEN and body[4:6] in tx_ids:  # the usual response, inline
            chunks = ["", body]
        else:
            chunks = _ungrouped(text, body, hlen, tx_ids, tx_start)
        if len(chunks) == 1:
            return None  # no transaction: the count check's exceptions, on the full path
    header = _new(header_class)
    header._raw = text[:hlen]
    t: Transmission = _new(Transmission)
    t._header = header
    t._grouped = grouped
    t._leading = ""
    t._trailing = ""
    t._tolerated = ()
    t._text = text
    t._wire = chunks
    # the views' slots stay unset until first asked for (as_request, as_response)
    return t


def _version_error(version: str, spec: VersionSpec | None, hlen: int, offset: int) -> NoReturn:
    if spec is None:
        raise ParseError(
            f"unknown version/release {version!r} (known: {', '.join(VERSIONS)})",
            offset=offset,
            field_id="A2",
        )
    want = sum(s.width for s in spec.request_header)
    raise ParseError(
        f"version {spec.code} has a {want}-character request header, this one has {hlen}",
        offset=offset,
        field_id="A2",
    )


def _slot_at(layout: tuple[HeaderSlot, ...], col: int) -> HeaderSlot:
    return next(s for s in layout if s.start <= col < s.start + s.width)


def _check_header(text: str, hlen: int, base: int, strict: bool, tolerated: _Tolerated) -> None:
    """The header's slots: printable ASCII, 101-A1 digits, 401-D1 a calendar date."""
    if hlen == _RESP_LEN:
        layout = ResponseHeader.LAYOUT
    else:
        layout = REQUEST_HEADER_F6 if hlen == _REQ_F6_LEN else REQUEST_HEADER
    problems: list[tuple[str, int, str]] = []
    for i, ch in enumerate(text[:hlen]):
        if not " " <= ch <= "~":
            slot = _slot_at(layout, i)
            problems.append(
                (
                    f"byte 0x{ord(ch):02X} outside printable ASCII in header field "
                    f"{slot.field_id} ({slot.name})",
                    i,
                    slot.field_id,
                )
            )
    for slot in layout:
        value = text[slot.start : slot.start + slot.width]
        if slot.field_id == "A1" and not (value.isdigit() and value.isascii()):
            problems.append(
                (
                    f"header field A1 ({slot.name}) must be {slot.width} digits, got {value!r}",
                    slot.start,
                    "A1",
                )
            )
        elif slot.field_id == "D1" and not _valid_date(value):
            problems.append(
                (
                    f"header field D1 (Date of Service) must be a CCYYMMDD calendar date, "
                    f"got {value!r}",
                    slot.start,
                    "D1",
                )
            )
    for reason, col, fid in problems:
        if strict:
            raise ParseError(reason, offset=base + col, field_id=fid)
        tolerated.append(f"{reason} (at byte offset {base + col})")


def _where(text: str, pos: int) -> tuple[str | None, str | None]:
    """The segment and field ids around ``pos`` in a validated body."""
    seg = text.rfind(_SS, 0, pos + 1)
    fld = text.rfind(_FS, 0, pos + 1)
    if seg < 0:
        return None, None
    return text[seg + 4 : seg + 6], (text[fld + 1 : fld + 3] if fld > seg + 1 else "AM")


def _lenient_checks(text: str, hlen: int, base: int, tolerated: _Tolerated) -> None:
    """What strict mode refuses inside the body; lenient mode reports each one, up to
    the list's limit, then counts the rest (at C speed: linear in any input)."""
    for pattern, back in ((_NON_PRINTABLE, 0), (_AM_INSIDE, 1)):
        for m in pattern.finditer(text, hlen):
            if tolerated.full:
                tolerated.more += 1 + len(pattern.findall(text, m.end()))
                break
            at = m.start()
            sid, fid = _where(text, at - back)
            if back:
                tolerated.append(
                    f"field id AM inside segment AM{sid}: a segment separator (0x1E) is "
                    f"missing (at byte offset {base + at})"
                )
            else:
                tolerated.append(
                    f"byte 0x{ord(m.group()):02X} outside printable ASCII in segment "
                    f"AM{sid}, field {fid} (at byte offset {base + at})"
                )


def _check_count(
    text: str,
    chunks: list[str],
    count_at: int,
    hlen: int,
    base: int,
    max_tx: int,
    strict: bool,
    tolerated: _Tolerated,
    ours: bool = False,
) -> None:
    """109-A9 against the groups that follow; lenient mode notes what it tolerates.
    ``ours``: the transactions were told apart by their segments (F6 in lenient mode,
    which reported each extra one), not by group separators: no limit applies.

    No group at all is standard in two cases: an eligibility request (E1, with
    109-A9 = 1) and a response rejected at header level (501-F1 = R).
    """
    ngroups = len(chunks) - 1
    response = hlen == _RESP_LEN
    if not strict and ngroups and not all(chunks[1:]):
        tolerated.append("empty transaction group (a group separator with no segment)")
    count_text = text[count_at]
    code_at = 8 if count_at == 20 else 2  # D.0/5.1 request header vs F6
    eligibility = not response and text[code_at : code_at + 2] == "E1"
    if count_text not in _DIGITS or not 1 <= int(count_text) <= max_tx:
        problem = f"transaction count 109-A9 must be 1 to {max_tx}, got {count_text!r}"
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    elif ngroups == 0 and response:
        status = text[5]
        if status != "R":
            problem = (
                "a response with no transaction group must be rejected at header level "
                f"(501-F1 = 'R'), this one says {status!r}"
            )
            if strict:
                raise ParseError(problem, offset=base + 5, field_id="F1")
            tolerated.append(problem)
    elif int(count_text) != ngroups and not (ngroups == 0 and eligibility and count_text == "1"):
        problem = (
            f"transaction count 109-A9 says {count_text} but {ngroups} transaction group(s) follow"
        )
        if strict:
            raise ParseError(problem, offset=base + count_at, field_id="A9")
        tolerated.append(problem)
    if ngroups > max_tx and not ours:
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
    """Explain why no 31-, 56- or 58-character header is found."""
    if not text:
        raise ParseError("empty input", offset=base)
    if text[0] == "\x02":
        raise ParseError("STX framing before the header (lenient mode accepts it)", offset=base)
    for i, ch in enumerate(text[: _REQ_F6_LEN + 1]):
        if ch == _FS and i not in (_RESP_LEN, _REQ_LEN, _REQ_F6_LEN):
            raise ParseError(
                f"field separator (0x1C) inside the fixed-width header at column {i + 1}",
                offset=base + i,
            )
        if ch in _BREAKS or ch == _FS:
            raise ParseError(
                f"header must be {_REQ_LEN} (request), {_REQ_F6_LEN} (F6 request) or "
                f"{_RESP_LEN} (response) characters before the first segment, found {i}",
                offset=base + i,
            )
    if len(text) < _RESP_LEN:
        raise ParseError(
            f"too short for a header: {len(text)} bytes, a response header has "
            f"{_RESP_LEN} and a request header {_REQ_LEN} ({_REQ_F6_LEN} in F6)",
            offset=base + len(text),
        )
    if len(text) <= _REQ_F6_LEN:
        raise ParseError(
            f"{len(text)} bytes and no segment: a response header has {_RESP_LEN} "
            f"and a request header {_REQ_LEN} ({_REQ_F6_LEN} in F6)",
            offset=base + len(text),
        )
    raise ParseError(
        f"no segment or group separator after a {_REQ_LEN}- or {_REQ_F6_LEN}-character "
        f"request header or a {_RESP_LEN}-character response header",
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
            if strict:
                _check_printable(sid_field, segpos + 1, base, sid, "AM")
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
                if strict and f[:2] == "AM":
                    raise ParseError(
                        f"field id AM (segment identification) after field {prev} of segment "
                        f"AM{sid}: a segment separator (0x1E) is missing before it (lenient "
                        "mode accepts it and reports it)",
                        offset=base + fpos,
                        segment_id=sid,
                        field_id="AM",
                    )
                if strict:
                    _check_printable(f, fpos + 1, base, sid, f[:2])
                prev = f[:2]
                fpos += 1 + len(f)
            segpos += len(sp)
        pos += len(chunk)


def _check_printable(part: str, pos: int, base: int, sid: str, fid: str) -> None:
    """Strict mode: a byte outside printable ASCII inside a field is refused."""
    m = _NON_PRINTABLE.search(part)
    if m is not None:
        raise ParseError(
            f"byte 0x{ord(m.group()):02X} outside printable ASCII in field {fid} (lenient "
            "mode keeps it and reports it)",
            offset=base + pos + m.start(),
            segment_id=sid,
            field_id=fid,
        )
