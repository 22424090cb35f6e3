"""Immutable, typed objects for one NCPDP transmission.

A segment keeps its fields as the raw ``<id><value>`` strings it was read from, in
order and with repetition, so that writing it back is a join. Field objects are made
on demand. Public constructors validate; the parser uses a private trusted path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Self, overload

from ._errors import ModelError
from ._versions import (
    REQUEST_HEADER,
    REQUEST_LAYOUTS,
    RESPONSE_HEADER,
    TRANSACTION_START,
    VERSIONS,
    HeaderSlot,
)

if TYPE_CHECKING:
    from ._views import RequestView, ResponseView

__all__ = [
    "only_transaction",
    "SEGMENT_SEPARATOR",
    "FIELD_SEPARATOR",
    "GROUP_SEPARATOR",
    "Field",
    "Segment",
    "TransactionGroup",
    "RequestHeader",
    "ResponseHeader",
    "Header",
    "Transmission",
    "segment_name",
]

#: The parser's mark for an F6 body whose transaction it has seen but not yet located
#: (compared by identity: no chunk of a body is this object).
UNSPLIT = "".join(["<not split>"])

SEGMENT_SEPARATOR = "\x1e"
FIELD_SEPARATOR = "\x1c"
GROUP_SEPARATOR = "\x1d"
_SEPARATORS = frozenset("\x1c\x1d\x1e")


def _check_text(value: str, what: str) -> None:
    if any(c in _SEPARATORS for c in value):
        raise ModelError(f"{what} contains an NCPDP separator character")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ModelError(f"{what} has a character outside the single-byte range") from None


def segment_name(segment_id: str, version: str = "D0") -> str | None:
    """``"07"`` -> ``"Claim"``; ``None`` for ids the version's table does not know."""
    spec = VERSIONS.get(version) or VERSIONS["D0"]
    entry = spec.segments.get(segment_id)
    return entry[0] if entry is not None else None


class Field(NamedTuple):
    """One field occurrence: its 2-character id (``"D2"``) and raw value."""

    id: str
    value: str

    @property
    def raw(self) -> str:
        return self.id + self.value


class Segment:
    """A segment: its id (``"07"`` for ``AM07``) and its fields in wire order.

    >>> s = Segment("07", [("EM", "1"), ("D2", "000000123456")])
    >>> s.get("D2")
    '000000123456'
    """

    __slots__ = ("_id", "_raw")
    _id: str
    _raw: tuple[str, ...]

    def __init__(self, id: str, fields: Iterable[Field | tuple[str, str]] = ()) -> None:
        if len(id) != 2:
            raise ModelError(f"segment id must be 2 characters, got {id!r}")
        _check_text(id, "segment id")
        raw: list[str] = []
        for fid, value in fields:
            if len(fid) != 2:
                raise ModelError(f"field id must be 2 characters, got {fid!r} in segment AM{id}")
            _check_text(fid, f"field id in segment AM{id}")
            _check_text(value, f"value of field {fid} in segment AM{id}")
            raw.append(fid + value)
        self._id = id
        self._raw = tuple(raw)

    @classmethod
    def _trusted(cls, id: str, raw: tuple[str, ...]) -> Segment:
        seg = cls.__new__(cls)
        seg._id = id
        seg._raw = raw
        return seg

    @classmethod
    def _from_wire(cls, text: str) -> Segment:
        """From a validated ``"\x1cAM07\x1cEM1..."`` (the segment minus its 0x1E)."""
        seg = cls.__new__(cls)
        seg._id = text[3:5]
        seg._raw = tuple(text[6:].split("\x1c")) if len(text) > 5 else ()
        return seg

    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> str | None:
        return segment_name(self._id)

    @property
    def raw_fields(self) -> tuple[str, ...]:
        """Each field as written: id then value, without its separator."""
        return self._raw

    @property
    def fields(self) -> tuple[Field, ...]:
        return tuple(Field(r[:2], r[2:]) for r in self._raw)

    def __iter__(self) -> Iterator[Field]:
        return (Field(r[:2], r[2:]) for r in self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, field_id: object) -> bool:
        return any(r[:2] == field_id for r in self._raw)

    def get(self, field_id: str, default: str | None = None) -> str | None:
        """The first occurrence's raw value, or ``default``."""
        for r in self._raw:
            if r[:2] == field_id:
                return r[2:]
        return default

    def get_all(self, field_id: str) -> tuple[str, ...]:
        """Every occurrence's raw value, in order."""
        return tuple(r[2:] for r in self._raw if r[:2] == field_id)

    def replace(self, field_id: str, value: str) -> Segment:
        """A copy with the first occurrence of ``field_id`` set to ``value`` (appended
        when absent)."""
        fields = list(self.fields)
        for i, f in enumerate(fields):
            if f.id == field_id:
                fields[i] = Field(field_id, value)
                break
        else:
            fields.append(Field(field_id, value))
        return Segment(self._id, fields)

    def to_text(self) -> str:
        if self._raw:
            return "\x1e\x1cAM" + self._id + "\x1c" + "\x1c".join(self._raw)
        return "\x1e\x1cAM" + self._id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Segment):
            return NotImplemented
        return self._id == other._id and self._raw == other._raw

    def __hash__(self) -> int:
        return hash((self._id, self._raw))

    def __repr__(self) -> str:
        return f"Segment({self._id!r}, {list(self.fields)!r})"


class TransactionGroup:
    """The segments of one transaction, in wire order."""

    __slots__ = ("_segments",)
    _segments: tuple[Segment, ...]

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        segs = tuple(segments)
        for s in segs:
            if not isinstance(s, Segment):
                raise ModelError("a transaction group holds Segment objects only")
        self._segments = segs

    @classmethod
    def _trusted(cls, segments: tuple[Segment, ...]) -> TransactionGroup:
        g = cls.__new__(cls)
        g._segments = segments
        return g

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._segments

    def segment(self, segment_id: str) -> Segment | None:
        for s in self._segments:
            if s._id == segment_id:
                return s
        return None

    def __iter__(self) -> Iterator[Segment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    def to_text(self) -> str:
        return "\x1d" + "".join(s.to_text() for s in self._segments)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransactionGroup):
            return NotImplemented
        return self._segments == other._segments

    def __hash__(self) -> int:
        return hash(self._segments)

    def __repr__(self) -> str:
        return f"TransactionGroup({list(self._segments)!r})"


class _FixedHeader:
    """A fixed-width header kept as its exact characters; fields are slices.

    ``LAYOUTS`` maps each allowed length to its layout (a request header is 56
    characters in D.0 and 5.1, 58 in F6); ``LAYOUT``/``LENGTH`` name the D.0 one.
    """

    __slots__ = ("_raw",)
    _raw: str
    LAYOUT: ClassVar[tuple[HeaderSlot, ...]] = ()
    LENGTH: ClassVar[int] = 0
    LAYOUTS: ClassVar[dict[int, tuple[HeaderSlot, ...]]] = {}

    def __init__(self, raw: str) -> None:
        if not isinstance(raw, str) or len(raw) not in self.LAYOUTS:
            lengths = " or ".join(str(n) for n in self.LAYOUTS)
            got = len(raw) if isinstance(raw, str) else type(raw).__name__
            raise ModelError(f"{type(self).__name__} must be {lengths} characters, got {got}")
        _check_text(raw, "header")
        self._raw = raw

    @property
    def layout(self) -> tuple[HeaderSlot, ...]:
        """This header's slots (the F6 request layout for a 58-character header)."""
        return self.LAYOUTS[len(self._raw)]

    @classmethod
    def layout_for(cls, version: str) -> tuple[HeaderSlot, ...]:
        """The layout a header of ``version`` uses (D.0's for unknown versions)."""
        spec = VERSIONS.get(version)
        if spec is None:
            return cls.LAYOUT
        return spec.request_header if cls is RequestHeader else spec.response_header

    @classmethod
    def _trusted(cls, raw: str) -> Self:
        h = cls.__new__(cls)
        h._raw = raw
        return h

    @property
    def raw(self) -> str:
        return self._raw

    def slot(self, field_id: str) -> str:
        """The raw (padded) value of the header field ``field_id``."""
        raw = self._raw
        spans = _SLOT_SPANS.get((type(self), len(raw)))
        if spans is None:  # a subclass: read its own layout
            for s in self.LAYOUTS[len(raw)]:
                if s.field_id == field_id:
                    return raw[s.start : s.start + s.width]
            raise KeyError(field_id)
        start, end = spans[field_id]
        return raw[start:end]

    def with_slot(self, field_id: str, value: str) -> Self:
        """The same header with field ``field_id`` set to ``value`` (padded with spaces
        to the slot's width; longer is a :class:`ModelError`)."""
        for s in self.LAYOUTS[len(self._raw)]:
            if s.field_id == field_id:
                if len(value) > s.width:
                    raise ModelError(f"header field {field_id} ({s.name}) is longer than {s.width}")
                raw = self._raw
                return type(self)(raw[: s.start] + value.ljust(s.width) + raw[s.start + s.width :])
        raise KeyError(field_id)

    def items(self) -> tuple[tuple[HeaderSlot, str], ...]:
        return tuple((s, self._raw[s.start : s.start + s.width]) for s in self.layout)

    @classmethod
    def _from_values(cls, values: dict[str, str]) -> str:
        parts: list[str] = []
        for s in cls.layout_for(values.get("version", "")):
            v = values.get(s.attr, values.get(s.field_id, ""))
            if len(v) > s.width:
                raise ModelError(f"header field {s.field_id} ({s.name}) is longer than {s.width}")
            parts.append(v.ljust(s.width))
        return "".join(parts)

    @property
    def version(self) -> str:
        return self.slot("A2")

    @property
    def transaction_code(self) -> str:
        return self.slot("A3")

    @property
    def transaction_count(self) -> str:
        return self.slot("A9")

    @property
    def service_provider_id_qualifier(self) -> str:
        return self.slot("B2").strip()

    @property
    def service_provider_id(self) -> str:
        return self.slot("B1").strip()

    @property
    def date_of_service(self) -> str:
        return self.slot("D1")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _FixedHeader)
        return self._raw == other._raw

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._raw))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._raw!r})"


class RequestHeader(_FixedHeader):
    """The request header: 56 characters in D.0 and 5.1, 58 in F6 (whose 101-A1 is
    the 8-character IIN, after the version and transaction code)."""

    __slots__ = ()
    LAYOUT = REQUEST_HEADER
    LENGTH = 56
    LAYOUTS = REQUEST_LAYOUTS

    @classmethod
    def build(
        cls,
        *,
        bin: str,
        version: str = "D0",
        transaction_code: str = "B1",
        pcn: str = "",
        transaction_count: int = 1,
        service_provider_id_qualifier: str = "01",
        service_provider_id: str,
        date_of_service: str,
        software_vendor_id: str = "",
    ) -> RequestHeader:
        return cls(
            cls._from_values(
                {
                    "bin": bin,
                    "version": version,
                    "transaction_code": transaction_code,
                    "pcn": pcn,
                    "transaction_count": str(transaction_count),
                    "service_provider_id_qualifier": service_provider_id_qualifier,
                    "service_provider_id": service_provider_id,
                    "date_of_service": date_of_service,
                    "software_vendor_id": software_vendor_id,
                }
            )
        )

    @property
    def bin(self) -> str:
        """101-A1: the 6-character BIN (D.0, 5.1) or the 8-character IIN (F6)."""
        return self.slot("A1").strip()

    @property
    def is_f6_layout(self) -> bool:
        return len(self._raw) == 58

    @property
    def pcn(self) -> str:
        return self.slot("A4").strip()

    @property
    def software_vendor_id(self) -> str:
        return self.slot("AK").strip()


class ResponseHeader(_FixedHeader):
    """The 31-character response header."""

    __slots__ = ()
    LAYOUT = RESPONSE_HEADER
    LENGTH = 31
    LAYOUTS: ClassVar[dict[int, tuple[HeaderSlot, ...]]] = {31: RESPONSE_HEADER}

    @classmethod
    def build(
        cls,
        *,
        version: str = "D0",
        transaction_code: str = "B1",
        transaction_count: int = 1,
        header_response_status: str = "A",
        service_provider_id_qualifier: str = "01",
        service_provider_id: str,
        date_of_service: str,
    ) -> ResponseHeader:
        return cls(
            cls._from_values(
                {
                    "version": version,
                    "transaction_code": transaction_code,
                    "transaction_count": str(transaction_count),
                    "header_response_status": header_response_status,
                    "service_provider_id_qualifier": service_provider_id_qualifier,
                    "service_provider_id": service_provider_id,
                    "date_of_service": date_of_service,
                }
            )
        )

    @property
    def header_response_status(self) -> str:
        return self.slot("F1")


Header = RequestHeader | ResponseHeader

#: (header class, header length) -> field id -> (start, end): where each slot is.
_SLOT_SPANS: dict[tuple[type[_FixedHeader], int], dict[str, tuple[int, int]]] = {
    (cls, length): {s.field_id: (s.start, s.start + s.width) for s in layout}
    for cls in (RequestHeader, ResponseHeader)
    for length, layout in cls.LAYOUTS.items()
}


class Transmission:
    """A whole request or response: header, transmission-level segments, and 1-4
    transaction groups. ``leading``/``trailing`` hold framing that lenient parsing
    tolerated (STX, ETX, CR/LF, a trailing separator); ``tolerated`` says what.

    ``group_separators`` says whether the groups are written with a group separator
    (0x1D) before each: yes in D.0 and 5.1, no in F6, whose one transaction follows
    the transmission-level segments directly. ``None`` takes the version's rule. An F6
    transmission with more than one transaction (lenient parsing reads a second Claim
    segment as a second transaction) writes them one after the other; strict parsing
    refuses what it writes.

    A parsed transmission keeps its validated wire text: its segment objects are
    built on first access, and writing it back returns the text it was read from.
    """

    __slots__ = (
        "_grouped",
        "_groups",
        "_header",
        "_leading",
        "_request_view",
        "_response_view",
        "_segments",
        "_text",
        "_tolerated",
        "_trailing",
        "_wire",
    )
    _header: Header
    _grouped: bool
    _segments: tuple[Segment, ...]
    _groups: tuple[TransactionGroup, ...]
    _leading: str
    _trailing: str
    _tolerated: tuple[str, ...]
    _text: str | None
    _wire: list[str] | None
    #: The typed view, built on first use (the transmission never changes).
    _request_view: RequestView | None
    _response_view: ResponseView | None

    def __init__(
        self,
        header: Header,
        segments: Iterable[Segment] = (),
        groups: Iterable[TransactionGroup] = (),
        *,
        leading: str = "",
        trailing: str = "",
        tolerated: Iterable[str] = (),
        group_separators: bool | None = None,
    ) -> None:
        if not isinstance(header, (RequestHeader, ResponseHeader)):
            raise ModelError("header must be a RequestHeader or a ResponseHeader")
        segs = tuple(segments)
        grps = tuple(groups)
        if any(not isinstance(s, Segment) for s in segs):
            raise ModelError("segments must be Segment objects")
        if any(not isinstance(g, TransactionGroup) for g in grps):
            raise ModelError("groups must be TransactionGroup objects")
        for text, what in ((leading, "leading"), (trailing, "trailing")):
            if not isinstance(text, str):
                raise ModelError(f"{what} framing must be text")
            try:
                text.encode("latin-1")
            except UnicodeEncodeError:
                raise ModelError(f"{what} framing is not single-byte text") from None
        if group_separators is None:
            spec = VERSIONS.get(header.version)
            group_separators = spec.group_separator if spec is not None else True
        self._header = header
        self._grouped = bool(group_separators)
        self._segments = segs
        self._groups = grps
        self._leading = leading
        self._trailing = trailing
        self._tolerated = tuple(tolerated)
        self._text = None
        self._wire = None
        self._request_view = self._response_view = None

    @classmethod
    def _trusted(
        cls,
        header: Header,
        segments: tuple[Segment, ...],
        groups: tuple[TransactionGroup, ...],
        leading: str,
        trailing: str,
        tolerated: tuple[str, ...],
        grouped: bool = True,
    ) -> Transmission:
        t = cls.__new__(cls)
        t._header = header
        t._grouped = grouped
        t._segments = segments
        t._groups = groups
        t._leading = leading
        t._trailing = trailing
        t._tolerated = tolerated
        t._text = None
        t._wire = None
        t._request_view = t._response_view = None
        return t

    def _materialize(self) -> None:
        wire = self._wire
        if wire is None:
            return
        if wire[-1] is UNSPLIT:  # F6: find where its one transaction starts
            body = wire[0]
            m = TRANSACTION_START[self._header.version](body)
            wire = [body] if m is None else [body[: m.start()], body[m.start() :]]
        make = Segment._from_wire
        chunks = [chunk.split("\x1e")[1:] for chunk in wire]
        self._segments = tuple(map(make, chunks[0]))
        self._groups = tuple(
            TransactionGroup._trusted(tuple(map(make, chunk))) for chunk in chunks[1:]
        )
        self._wire = None

    @property
    def header(self) -> Header:
        return self._header

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Transmission-level segments (before the first group separator)."""
        if self._wire is not None:
            self._materialize()
        return self._segments

    @property
    def groups(self) -> tuple[TransactionGroup, ...]:
        if self._wire is not None:
            self._materialize()
        return self._groups

    @property
    def group_separators(self) -> bool:
        """Whether the groups are written after group separators (not in F6)."""
        return self._grouped

    @property
    def leading(self) -> str:
        return self._leading

    @property
    def trailing(self) -> str:
        return self._trailing

    @property
    def tolerated(self) -> tuple[str, ...]:
        return self._tolerated

    @property
    def is_request(self) -> bool:
        return isinstance(self._header, RequestHeader)

    @property
    def is_response(self) -> bool:
        return isinstance(self._header, ResponseHeader)

    @property
    def kind(self) -> str:
        return "request" if self.is_request else "response"

    @property
    def version(self) -> str:
        return self._header.version

    @property
    def transaction_code(self) -> str:
        return self._header.transaction_code

    def segment(self, segment_id: str) -> Segment | None:
        """The first transmission-level segment with this id."""
        for s in self.segments:
            if s._id == segment_id:
                return s
        return None

    @overload
    def find(self, segment_id: str, field_id: str) -> str | None: ...
    @overload
    def find(self, segment_id: str, field_id: str, group: int) -> str | None: ...
    def find(self, segment_id: str, field_id: str, group: int | None = None) -> str | None:
        """First raw value of ``field_id`` in segment ``segment_id``: at transmission
        level when ``group`` is None, else in that 0-based transaction group."""
        seg = self.segment(segment_id) if group is None else self.groups[group].segment(segment_id)
        return None if seg is None else seg.get(field_id)

    def canonical(self) -> Transmission:
        """The same transmission without tolerated framing."""
        return Transmission._trusted(
            self._header, self.segments, self.groups, "", "", (), self._grouped
        )

    def to_text(self) -> str:
        text = self._text
        if text is None:
            text = self._text = (
                self._leading
                + self._header._raw
                + "".join(s.to_text() for s in self.segments)
                + "".join(g.to_text() if self._grouped else g.to_text()[1:] for g in self.groups)
                + self._trailing
            )
        return text

    def __bytes__(self) -> bytes:
        return self.to_text().encode("latin-1")

    def as_request(self) -> RequestView:
        """The request's typed view (built once: the transmission never changes)."""
        view: RequestView | None = getattr(self, "_request_view", None)  # None: not built yet
        if view is None:
            from ._views import request_view

            view = self._request_view = request_view(self)
        return view

    def as_response(self) -> ResponseView:
        """The response's typed view (built once: the transmission never changes)."""
        view: ResponseView | None = getattr(self, "_response_view", None)  # None: not built yet
        if view is None:
            from ._views import response_view

            view = self._response_view = response_view(self)
        return view

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Transmission):
            return NotImplemented
        return self.to_text() == other.to_text()

    def __hash__(self) -> int:
        return hash(self.to_text())

    def __repr__(self) -> str:
        return (
            f"Transmission({self.kind}, version={self.version!r}, "
            f"code={self.transaction_code!r}, segments={len(self.segments)}, "
            f"groups={len(self.groups)})"
        )


def only_transaction(t: Transmission, index: int) -> Transmission:
    """``t`` with only its transaction ``index`` (0-based): the same header with 109-A9
    (Transaction Count) set to 1, the same transmission-level segments, that one
    transaction group, and no tolerated framing. Raises ``IndexError`` when ``t`` has
    no transaction ``index``.

    Several transactions of one transmission are sent on alone when each needs its
    own request (one PA a prescription); what is written back parses to the same
    segments and group, and says it carries one transaction.
    """
    groups = t.groups
    if not 0 <= index < len(groups):
        raise IndexError(f"transaction {index} of a transmission with {len(groups)}")
    return Transmission._trusted(
        t.header.with_slot("A9", "1"),
        t.segments,
        (groups[index],),
        "",
        "",
        (),
        t.group_separators,
    )
