"""Per-version tables. D.0, 5.1 and F6 differ only in data: the header layouts, the
segment table, how many transactions a transmission may carry and whether they are
separated by group separators. A new version is a new :class:`VersionSpec` entry here,
not new parsing code.

F6 facts and their sources: ``docs/decisions/0011-ncpdp-f6-and-batch-files.md``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "HeaderSlot",
    "VersionSpec",
    "VERSIONS",
    "REQUEST_HEADER",
    "REQUEST_HEADER_F6",
    "RESPONSE_HEADER",
    "REQUEST_LAYOUTS",
]

Level = Literal["transmission", "transaction"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderSlot:
    """One fixed-width header field: 0-based ``start``, ``width``, and its field id."""

    field_id: str
    number: int
    name: str
    attr: str
    start: int
    width: int


def _layout(*slots: tuple[str, int, str, str, int]) -> tuple[HeaderSlot, ...]:
    out: list[HeaderSlot] = []
    pos = 0
    for field_id, number, name, attr, width in slots:
        out.append(
            HeaderSlot(
                field_id=field_id, number=number, name=name, attr=attr, start=pos, width=width
            )
        )
        pos += width
    return tuple(out)


#: Request header, 56 characters, identical in D.0 and 5.1 (primer, "Request header").
REQUEST_HEADER = _layout(
    ("A1", 101, "BIN Number", "bin", 6),
    ("A2", 102, "Version/Release Number", "version", 2),
    ("A3", 103, "Transaction Code", "transaction_code", 2),
    ("A4", 104, "Processor Control Number", "pcn", 10),
    ("A9", 109, "Transaction Count", "transaction_count", 1),
    ("B2", 202, "Service Provider ID Qualifier", "service_provider_id_qualifier", 2),
    ("B1", 201, "Service Provider ID", "service_provider_id", 15),
    ("D1", 401, "Date of Service", "date_of_service", 8),
    ("AK", 110, "Software Vendor/Certification ID", "software_vendor_id", 10),
)

#: F6 request header, 58 characters: the version and transaction code come first and
#: the 8-character IIN (101-A1, "BIN" before F6) follows them (decision 0011).
REQUEST_HEADER_F6 = _layout(
    ("A2", 102, "Version/Release Number", "version", 2),
    ("A3", 103, "Transaction Code", "transaction_code", 2),
    ("A1", 101, "IIN", "bin", 8),
    ("A4", 104, "Processor Control Number", "pcn", 10),
    ("A9", 109, "Transaction Count", "transaction_count", 1),
    ("B2", 202, "Service Provider ID Qualifier", "service_provider_id_qualifier", 2),
    ("B1", 201, "Service Provider ID", "service_provider_id", 15),
    ("D1", 401, "Date of Service", "date_of_service", 8),
    ("AK", 110, "Software Vendor/Certification ID", "software_vendor_id", 10),
)

#: Response header, 31 characters, identical in D.0, 5.1 and F6 (primer, "Response
#: header"; decision 0011).
RESPONSE_HEADER = _layout(
    ("A2", 102, "Version/Release Number", "version", 2),
    ("A3", 103, "Transaction Code", "transaction_code", 2),
    ("A9", 109, "Transaction Count", "transaction_count", 1),
    ("F1", 501, "Header Response Status", "header_response_status", 1),
    ("B2", 202, "Service Provider ID Qualifier", "service_provider_id_qualifier", 2),
    ("B1", 201, "Service Provider ID", "service_provider_id", 15),
    ("D1", 401, "Date of Service", "date_of_service", 8),
)

REQUEST_HEADER_LEN = sum(s.width for s in REQUEST_HEADER)
RESPONSE_HEADER_LEN = sum(s.width for s in RESPONSE_HEADER)
#: Request header layouts by length: the length tells them apart on the wire.
REQUEST_LAYOUTS: dict[int, tuple[HeaderSlot, ...]] = {
    sum(s.width for s in layout): layout for layout in (REQUEST_HEADER, REQUEST_HEADER_F6)
}

_COMMON_SEGMENTS: dict[str, tuple[str, Level]] = {
    # request
    "01": ("Patient", "transmission"),
    "04": ("Insurance", "transmission"),
    "07": ("Claim", "transaction"),
    "02": ("Pharmacy Provider", "transaction"),
    "03": ("Prescriber", "transaction"),
    "05": ("COB/Other Payments", "transaction"),
    "06": ("Workers' Compensation", "transaction"),
    "08": ("DUR/PPS", "transaction"),
    "09": ("Coupon", "transaction"),
    "10": ("Compound", "transaction"),
    "11": ("Pricing", "transaction"),
    "12": ("Prior Authorization", "transaction"),
    "13": ("Clinical", "transaction"),
    "14": ("Additional Documentation", "transaction"),
    "15": ("Facility", "transaction"),
    "16": ("Narrative", "transaction"),
    # response
    "20": ("Response Message", "transmission"),
    "25": ("Response Insurance", "transmission"),
    "27": ("Response Insurance Additional Information", "transmission"),
    "29": ("Response Patient", "transmission"),
    "21": ("Response Status", "transaction"),
    "22": ("Response Claim", "transaction"),
    "23": ("Response Pricing", "transaction"),
    "24": ("Response DUR/PPS", "transaction"),
    "26": ("Response Prior Authorization", "transaction"),
    "28": ("Response COB", "transaction"),
}

#: F6 adds these (NCPDPSerDe's schema; decision 0011). AM37 is read with the
#: eligibility transaction's transmission-level segments there; the others sit in the
#: transaction.
_F6_SEGMENTS: dict[str, tuple[str, Level]] = {
    **_COMMON_SEGMENTS,
    "19": ("Intermediary", "transaction"),
    "37": ("Last Known 4Rx", "transmission"),
    "38": ("N Transaction Payer Identification", "transaction"),
    "36": ("Response Intermediary", "transaction"),
    "39": ("Response Other Related Benefit Detail", "transaction"),
    "40": ("Response Provider", "transaction"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionSpec:
    """What distinguishes one version of the Telecommunication Standard from another."""

    code: str
    name: str
    request_header: tuple[HeaderSlot, ...]
    response_header: tuple[HeaderSlot, ...]
    segments: dict[str, tuple[str, Level]]
    max_transactions: int = 4
    #: D.0 and 5.1 start each transaction with a group separator (0x1D). F6 has none:
    #: its one transaction starts at the first transaction-level segment.
    group_separator: bool = True
    #: Width of 101-A1 in the request header (BIN 6, IIN 8).
    issuer_width: int = 6

    @property
    def transaction_segments(self) -> frozenset[str]:
        """Ids of the segments that belong to a transaction, not the transmission."""
        return frozenset(k for k, (_, level) in self.segments.items() if level == "transaction")


VERSIONS: dict[str, VersionSpec] = {
    "D0": VersionSpec(
        code="D0",
        name="Telecommunication Standard D.0",
        request_header=REQUEST_HEADER,
        response_header=RESPONSE_HEADER,
        segments=_COMMON_SEGMENTS,
    ),
    "51": VersionSpec(
        code="51",
        name="Telecommunication Standard 5.1",
        request_header=REQUEST_HEADER,
        response_header=RESPONSE_HEADER,
        segments=_COMMON_SEGMENTS,
    ),
    "F6": VersionSpec(
        code="F6",
        name="Telecommunication Standard F6",
        request_header=REQUEST_HEADER_F6,
        response_header=RESPONSE_HEADER,
        segments=_F6_SEGMENTS,
        max_transactions=1,
        group_separator=False,
        issuer_width=8,
    ),
}


def _transaction_start(tx_ids: frozenset[str]) -> Callable[[str], re.Match[str] | None]:
    """A search for the first transaction-level segment (versions without group
    separators). The ids are written ``0[2-9]|1[0-69]|...``: a class test per segment."""
    by_first: dict[str, list[str]] = {}
    for i in sorted(tx_ids):
        by_first.setdefault(i[0], []).append(i[1])
    ids = "|".join(
        re.escape(first) + "[" + "".join(re.escape(c) for c in seconds) + "]"
        for first, seconds in by_first.items()
    )
    return re.compile(f"\x1e\x1cAM(?:{ids})(?=[\x1c\x1e]|\\Z)").search


#: By version: where in a transmission body its first transaction-level segment starts.
TRANSACTION_START = {
    code: _transaction_start(spec.transaction_segments) for code, spec in VERSIONS.items()
}
