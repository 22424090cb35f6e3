"""NCPDP batch files (Batch Standard 1.1/1.2, and 15 as far as it is public).

A batch file wraps Telecommunication transmissions in fixed records, each between
STX (0x02) and ETX (0x03)::

    STX "00" header ETX                 one per file
    STX "G1" reference(10) transmission ETX    one per transmission
    STX "99" trailer ETX                one per file

The layouts below are data; their public sources, and what is not public (Batch 15),
are in ``docs/decisions/0011-ncpdp-f6-and-batch-files.md``. Line breaks between records are common in
real files and are kept; anything else between records is refused in strict mode and
kept and reported in lenient mode. Every byte is kept, so ``serialize(parse_batch(x))
== x`` for every accepted input.

:func:`iter_batch` reads the records one at a time from bytes, text, or an iterable
of byte chunks (``iter(lambda: f.read(1 << 16), b"")``), so a file of any size is
read in constant memory; :func:`parse_batch` collects them into a :class:`Batch`.
Both are sans-IO: the caller reads the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._errors import ModelError, ParseError
from ._json import from_jsonable, to_jsonable
from ._model import Transmission
from ._parser import _looks_like_batch_file, _parse_at, _valid_date

__all__ = [
    "BatchSlot",
    "BATCH_HEADER",
    "BATCH_TRAILER",
    "BATCH_VERSIONS",
    "BatchHeader",
    "BatchDetail",
    "BatchTrailer",
    "BatchRecord",
    "Batch",
    "iter_batch",
    "parse_batch",
    "is_batch",
    "record_to_jsonable",
    "record_from_jsonable",
]

_STX = "\x02"
_ETX = "\x03"
_BETWEEN = frozenset("\r\n")


def _check_record_text(text: object, what: str) -> None:
    """Record text is single-byte and holds no STX or ETX (they delimit records)."""
    if not isinstance(text, str):
        raise ModelError(f"batch {what} must be text")
    if _STX in text or _ETX in text:
        raise ModelError(f"batch {what} holds STX or ETX")
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        raise ModelError(f"batch {what} is not single-byte text") from None


class BatchSlot(NamedTuple):
    """One fixed-width field of a batch header or trailer record (0-based, counted
    from the record type, i.e. after STX)."""

    name: str
    attr: str
    start: int
    width: int


def _layout(*slots: tuple[str, str, int]) -> tuple[BatchSlot, ...]:
    out: list[BatchSlot] = []
    pos = 0
    for name, attr, width in slots:
        out.append(BatchSlot(name, attr, pos, width))
        pos += width
    return tuple(out)


#: Transmission header record of Batch 1.1 and 1.2 (73 characters between STX and ETX).
BATCH_HEADER = _layout(
    ("Segment Identification", "record_type", 2),  # "00"
    ("Transmission Type", "transmission_type", 1),  # T transaction, R response, E error
    ("Sender ID", "sender_id", 24),
    ("Batch Number", "batch_number", 7),
    ("Creation Date", "creation_date", 8),  # CCYYMMDD
    ("Creation Time", "creation_time", 4),  # HHMM
    ("File Type", "file_type", 1),  # P production, T test
    ("Version/Release Number", "version", 2),  # "11", "12"
    ("Receiver ID", "receiver_id", 24),
)
#: Transmission trailer record (54 characters between STX and ETX). The record count
#: counts every record of the file, header and trailer included.
BATCH_TRAILER = _layout(
    ("Segment Identification", "record_type", 2),  # "99"
    ("Batch Number", "batch_number", 7),
    ("Record Count", "record_count", 10),
    ("Message", "message", 35),
)
_HEADER_LEN = sum(s.width for s in BATCH_HEADER)
_TRAILER_LEN = sum(s.width for s in BATCH_TRAILER)
#: Batch versions read with the layouts above. "15" (Batch Standard 15, adopted with
#: Telecommunication F6) is not public: it is read with the 1.2 layout, unverified.
BATCH_VERSIONS = {"11": "Batch Standard 1.1", "12": "Batch Standard 1.2", "15": "Batch Standard 15"}


class _Fixed:
    """A fixed record kept as its exact text (from the record type to before ETX)."""

    __slots__ = ("_leading", "_offset", "_raw", "_tolerated")
    LAYOUT: tuple[BatchSlot, ...] = ()

    def __init__(
        self, raw: str, *, leading: str = "", offset: int = 0, tolerated: Iterable[str] = ()
    ) -> None:
        _check_record_text(raw, "record")
        _check_record_text(leading, "text before the record")
        self._raw = raw
        self._leading = leading
        self._offset = offset
        self._tolerated = tuple(tolerated)

    @property
    def raw(self) -> str:
        return self._raw

    @property
    def leading(self) -> str:
        """Text between the previous record's ETX and this record's STX (CR/LF)."""
        return self._leading

    @property
    def offset(self) -> int:
        """Byte offset of this record's STX in the file."""
        return self._offset

    @property
    def tolerated(self) -> tuple[str, ...]:
        return self._tolerated

    def slot(self, attr: str) -> str:
        for s in self.LAYOUT:
            if s.attr == attr:
                return self._raw[s.start : s.start + s.width]
        raise KeyError(attr)

    def items(self) -> tuple[tuple[BatchSlot, str], ...]:
        return tuple((s, self._raw[s.start : s.start + s.width]) for s in self.LAYOUT)

    def to_text(self) -> str:
        return self._leading + _STX + self._raw + _ETX

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Fixed)
        return self.to_text() == other.to_text()

    def __hash__(self) -> int:
        return hash(self.to_text())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._raw!r})"


class BatchHeader(_Fixed):
    """The ``00`` transmission header record."""

    __slots__ = ()
    LAYOUT = BATCH_HEADER

    @property
    def batch_number(self) -> str:
        return self.slot("batch_number")

    @property
    def version(self) -> str:
        return self.slot("version")

    @property
    def sender_id(self) -> str:
        return self.slot("sender_id").strip()

    @property
    def receiver_id(self) -> str:
        return self.slot("receiver_id").strip()

    @property
    def creation_date(self) -> str:
        return self.slot("creation_date")


class BatchTrailer(_Fixed):
    """The ``99`` transmission trailer record; ``trailing`` is what follows its ETX."""

    __slots__ = ("_trailing",)
    LAYOUT = BATCH_TRAILER

    def __init__(
        self,
        raw: str,
        *,
        leading: str = "",
        offset: int = 0,
        tolerated: Iterable[str] = (),
        trailing: str = "",
    ) -> None:
        super().__init__(raw, leading=leading, offset=offset, tolerated=tolerated)
        _check_record_text(trailing, "text after the trailer")
        self._trailing = trailing

    @property
    def trailing(self) -> str:
        return self._trailing

    @property
    def batch_number(self) -> str:
        return self.slot("batch_number")

    @property
    def record_count(self) -> int | None:
        v = self.slot("record_count")
        return int(v) if v.isdigit() and v.isascii() else None

    @property
    def message(self) -> str:
        return self.slot("message").rstrip()

    def to_text(self) -> str:
        return super().to_text() + self._trailing


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchDetail:
    """One ``G1`` detail record: its 10-character reference and the transmission.

    ``transmission`` is ``None`` only in lenient mode, when the transmission does not
    parse even leniently; ``error`` then says why and ``raw`` keeps its text.
    """

    index: int
    offset: int
    reference: str
    raw: str
    transmission: Transmission | None
    error: ParseError | None = None
    leading: str = ""
    tolerated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.reference, str) or len(self.reference) != 10:
            raise ModelError("a detail record's reference has exactly 10 characters")
        for text, what in (
            (self.reference, "reference"),
            (self.raw, "transmission"),
            (self.leading, "text before the record"),
        ):
            _check_record_text(text, what)

    def to_text(self) -> str:
        return self.leading + _STX + "G1" + self.reference + self.raw + _ETX


BatchRecord = BatchHeader | BatchDetail | BatchTrailer


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """A whole batch file: header, detail records, trailer. ``bytes(batch)`` is the
    file it was read from."""

    header: BatchHeader
    details: tuple[BatchDetail, ...]
    trailer: BatchTrailer

    @property
    def transmissions(self) -> tuple[Transmission | None, ...]:
        return tuple(d.transmission for d in self.details)

    @property
    def tolerated(self) -> tuple[str, ...]:
        out = list(self.header.tolerated)
        for d in self.details:
            out.extend(d.tolerated)
        out.extend(self.trailer.tolerated)
        return tuple(out)

    def to_text(self) -> str:
        return (
            self.header.to_text()
            + "".join(d.to_text() for d in self.details)
            + self.trailer.to_text()
        )

    def __bytes__(self) -> bytes:
        return self.to_text().encode("latin-1")


def is_batch(data: bytes | str) -> bool:
    """Whether ``data`` starts like a batch file, after any line breaks: by the fixed
    layout of a Batch 1.x header record (STX, ``00``, a transmission type letter, the
    24-character sender id, then the batch number, creation date and time in digits),
    or of a trailer record. A claim framed STX ... ETX is not one, whatever its BIN
    (``004336``, ``999999``). Give it the first 128 bytes or more."""
    head = data[:4096]
    text = head.decode("latin-1") if isinstance(head, (bytes, bytearray)) else head
    return _looks_like_batch_file(text)


def _chunks(data: bytes | bytearray | str | Iterable[bytes]) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, (bytes, bytearray)):
        yield bytes(data).decode("latin-1")
    else:
        for chunk in data:
            if not isinstance(chunk, (bytes, bytearray)):
                raise TypeError(f"batch chunks must be bytes, not {type(chunk).__name__}")
            yield bytes(chunk).decode("latin-1")


def _problem(strict: bool, notes: list[str], reason: str, offset: int) -> None:
    if strict:
        raise ParseError(reason, offset=offset)
    notes.append(f"{reason} (at byte offset {offset})")


def _check_leading(leading: str, offset: int, strict: bool, notes: list[str]) -> None:
    if leading and not set(leading) <= _BETWEEN:
        _problem(
            strict,
            notes,
            "text between batch records other than line breaks "
            f"({leading[:20]!r}; lenient mode keeps it)",
            offset - len(leading),
        )


def iter_batch(
    data: bytes | bytearray | str | Iterable[bytes], *, strict: bool = True
) -> Iterator[BatchRecord]:
    """Yield the records of a batch file one at a time: the :class:`BatchHeader`, each
    :class:`BatchDetail`, then the :class:`BatchTrailer` (after which the counts are
    checked). Raises :class:`ParseError` with the byte offset in the file.

    Strict mode refuses a transmission strict :func:`parse` refuses, a trailer whose
    batch number or record count disagrees, and text between records other than line
    breaks. Lenient mode parses each transmission leniently, keeps one that does not
    parse at all as raw text with its ``error``, and lists what it tolerated on each
    record. Both modes refuse what leaves no record structure: a missing header or
    trailer, a record without ETX, records after the trailer.
    """
    buf = ""
    at = 0  # index in buf
    base = 0  # file offset of buf[0]
    header: BatchHeader | None = None
    trailer: BatchTrailer | None = None
    details = 0
    for chunk in _chunks(data):
        buf = buf[at:] + chunk
        base += at
        at = 0
        while True:
            stx = buf.find(_STX, at)
            if stx < 0:
                break
            etx = buf.find(_ETX, stx + 1)
            if etx < 0:
                break
            leading = buf[at:stx]
            body = buf[stx + 1 : etx]
            offset = base + stx
            at = etx + 1
            if trailer is not None:
                raise ParseError("a record after the batch trailer", offset=offset)
            inner = body.find(_STX)
            if inner >= 0:
                raise ParseError(
                    "STX inside a batch record (the record before it has no ETX)",
                    offset=offset + 1 + inner,
                )
            if _ETX in leading:
                raise ParseError(
                    "ETX between batch records without its STX",
                    offset=offset - len(leading) + leading.index(_ETX),
                )
            notes: list[str] = []
            _check_leading(leading, offset, strict, notes)
            kind = body[:2]
            if header is None:
                if kind != "00":
                    raise ParseError(
                        f"a batch file starts with its '00' header record, found {kind!r}",
                        offset=offset,
                    )
                header = _header(body, leading, offset, strict, notes)
                yield header
            elif kind == "G1":
                yield _detail(details, body, leading, offset, strict, notes)
                details += 1
            elif kind == "99":
                trailer = _trailer(body, leading, offset, header, details, strict, notes)
            else:
                raise ParseError(
                    f"batch record type {kind!r}: expected 'G1' (detail) or '99' (trailer)",
                    offset=offset,
                )
    rest = buf[at:]
    end = base + len(buf)
    if _STX in rest:
        raise ParseError(
            "a batch record without its ETX (0x03) at the end of the file",
            offset=base + at + rest.index(_STX),
        )
    if header is None:
        raise ParseError("no batch header record (STX '00' ... ETX)", offset=base + at)
    if trailer is None:
        raise ParseError("no batch trailer record (STX '99' ... ETX) at the end", offset=end)
    if _ETX in rest:
        raise ParseError(
            "ETX after the batch trailer without its STX", offset=base + at + rest.index(_ETX)
        )
    if rest:
        notes = list(trailer.tolerated)
        if not set(rest) <= _BETWEEN:
            _problem(strict, notes, "text after the batch trailer", base + at)
        trailer = BatchTrailer(
            trailer.raw,
            leading=trailer.leading,
            offset=trailer.offset,
            tolerated=notes,
            trailing=rest,
        )
    yield trailer


def _length_ok(
    what: str, body: str, want: int, offset: int, strict: bool, notes: list[str]
) -> bool:
    """Whether a record has its fixed length; if not, a problem (raised when strict)."""
    if len(body) == want:
        return True
    _problem(
        strict,
        notes,
        f"{what} must be {want} characters between STX and ETX, got {len(body)}",
        offset + 1,
    )
    return False


def _header(body: str, leading: str, offset: int, strict: bool, notes: list[str]) -> BatchHeader:
    h = BatchHeader(body, leading=leading, offset=offset)
    if _length_ok("batch header record", body, _HEADER_LEN, offset, strict, notes):
        version = h.version
        if version not in BATCH_VERSIONS:
            _problem(
                strict,
                notes,
                f"batch version/release {version!r} (known: {', '.join(BATCH_VERSIONS)})",
                offset + 1 + BATCH_HEADER[7].start,
            )
        if not h.batch_number.isdigit() or not h.batch_number.isascii():
            _problem(
                strict,
                notes,
                f"batch number must be 7 digits, got {h.batch_number!r}",
                offset + 1 + BATCH_HEADER[3].start,
            )
        if not _valid_date(h.creation_date):
            _problem(
                strict,
                notes,
                f"batch creation date must be a CCYYMMDD calendar date, got {h.creation_date!r}",
                offset + 1 + BATCH_HEADER[4].start,
            )
    return BatchHeader(body, leading=leading, offset=offset, tolerated=notes)


def _detail(
    index: int, body: str, leading: str, offset: int, strict: bool, notes: list[str]
) -> BatchDetail:
    if len(body) < 12:
        raise ParseError(
            "a batch detail record is 'G1', a 10-character reference and a transmission; "
            f"this one has {len(body)} characters",
            offset=offset,
        )
    reference = body[2:12]
    raw = body[12:]
    at = offset + 13  # STX, G1 and the reference
    t: Transmission | None
    error: ParseError | None = None
    try:  # every offset it reports counts from the start of the file
        t = _parse_at(raw, strict, at)
    except ParseError as e:
        where = f"batch detail record {index + 1} (reference {reference.strip()!r})"
        if strict:
            raise ParseError(
                f"{where}: {e.reason}",
                offset=e.offset,
                segment_id=e.segment_id,
                field_id=e.field_id,
            ) from None
        notes.append(f"{where} does not parse: {e.reason} (at byte offset {e.offset})")
        t, error = None, e
    else:
        notes.extend(f"batch detail record {index + 1}: {x}" for x in t.tolerated)
    return BatchDetail(
        index=index,
        offset=offset,
        reference=reference,
        raw=raw,
        transmission=t,
        error=error,
        leading=leading,
        tolerated=tuple(notes),
    )


def _trailer(
    body: str,
    leading: str,
    offset: int,
    header: BatchHeader,
    details: int,
    strict: bool,
    notes: list[str],
) -> BatchTrailer:
    t = BatchTrailer(body, leading=leading, offset=offset)
    if _length_ok("batch trailer record", body, _TRAILER_LEN, offset, strict, notes):
        if t.batch_number != header.batch_number:
            _problem(
                strict,
                notes,
                f"trailer batch number {t.batch_number!r} differs from the header's "
                f"{header.batch_number!r}",
                offset + 1 + BATCH_TRAILER[1].start,
            )
        count = t.record_count
        if count != details + 2:
            _problem(
                strict,
                notes,
                f"trailer record count says {t.slot('record_count')!r} but the file has "
                f"{details + 2} records (header, {details} detail(s), trailer)",
                offset + 1 + BATCH_TRAILER[2].start,
            )
    return BatchTrailer(body, leading=leading, offset=offset, tolerated=notes)


def parse_batch(data: bytes | bytearray | str | Iterable[bytes], *, strict: bool = True) -> Batch:
    """Read a whole batch file (see :func:`iter_batch`); ``bytes(result) == data``."""
    header: BatchHeader | None = None
    details: list[BatchDetail] = []
    trailer: BatchTrailer | None = None
    for record in iter_batch(data, strict=strict):
        if isinstance(record, BatchHeader):
            header = record
        elif isinstance(record, BatchDetail):
            details.append(record)
        else:
            trailer = record
    assert header is not None and trailer is not None  # iter_batch raises otherwise
    return Batch(header=header, details=tuple(details), trailer=trailer)


def record_to_jsonable(record: BatchRecord) -> dict[str, Any]:
    """One batch record as a JSON-ready document (``pa-bridge claim parse`` prints one
    per record): the header and trailer slots, or the detail's reference and its
    transmission as :func:`ncpdp.to_jsonable` describes it."""
    out: dict[str, Any]
    if isinstance(record, BatchDetail):
        out = {
            "record": "detail",
            "index": record.index,
            "offset": record.offset,
            "reference": record.reference,
        }
        if record.transmission is not None:
            out["transmission"] = to_jsonable(record.transmission)
        else:
            out["raw"] = record.raw
            out["error"] = str(record.error)
    else:
        out = {
            "record": "header" if isinstance(record, BatchHeader) else "trailer",
            "offset": record.offset,
            "fields": [
                {"name": slot.name, "key": slot.attr, "value": value}
                for slot, value in record.items()
            ],
        }
        if len(record.raw) != sum(slot.width for slot in record.LAYOUT):
            out["raw"] = record.raw  # a record of the wrong length (lenient): kept whole
        if isinstance(record, BatchHeader):
            out["batch_version"] = BATCH_VERSIONS.get(record.version)
    if record.leading:
        out["leading"] = record.leading
    if isinstance(record, BatchTrailer) and record.trailing:
        out["trailing"] = record.trailing
    if record.tolerated:
        out["tolerated"] = list(record.tolerated)
    return out


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise ModelError(f"batch record {key!r} must be a string")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ModelError(f"batch record {key!r} is not single-byte text") from None
    return value


def record_from_jsonable(doc: Any) -> BatchRecord:
    """Rebuild a record from :func:`record_to_jsonable`'s shape (raw values only), so
    that ``"".join(r.to_text() ...)`` gives the batch file back. Raises
    :class:`ModelError` for anything else."""
    if not isinstance(doc, dict) or doc.get("record") not in ("header", "detail", "trailer"):
        raise ModelError("a batch record document has 'record': header, detail or trailer")
    leading = _text(doc, "leading")
    if doc["record"] == "detail":
        reference = _text(doc, "reference")
        if len(reference) != 10:
            raise ModelError("a detail record's 'reference' has exactly 10 characters")
        if "transmission" in doc:
            t = from_jsonable(doc["transmission"])
            raw = t.to_text()
        else:
            t, raw = None, _text(doc, "raw")
        if any(c in raw for c in (_STX, _ETX)) or any(c in leading for c in (_STX, _ETX)):
            raise ModelError("a detail record's text holds STX or ETX")
        index = doc.get("index", 0)
        return BatchDetail(
            index=index if isinstance(index, int) else 0,
            offset=0,
            reference=reference,
            raw=raw,
            transmission=t,
            leading=leading,
        )
    fields = doc.get("fields")
    if "raw" in doc:
        raw = _text(doc, "raw")
    elif not isinstance(fields, list) or not all(
        isinstance(f, dict) and isinstance(f.get("value"), str) for f in fields
    ):
        raise ModelError("a header or trailer record needs 'fields' with string values")
    else:
        raw = "".join(f["value"] for f in fields)
    if any(c in raw for c in (_STX, _ETX)) or any(c in leading for c in (_STX, _ETX)):
        raise ModelError("a batch record holds STX or ETX")
    _text({"raw": raw}, "raw")
    if doc["record"] == "header":
        return BatchHeader(raw, leading=leading)
    trailing = _text(doc, "trailing")
    if any(c in trailing for c in (_STX, _ETX)):
        raise ModelError("text after the trailer holds STX or ETX")
    return BatchTrailer(raw, leading=leading, trailing=trailing)
