"""Per-version tables. D.0 and 5.1 differ only in data, so a new version (F6) is a
new :class:`VersionSpec` entry here, not new parsing code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["HeaderSlot", "VersionSpec", "VERSIONS", "REQUEST_HEADER", "RESPONSE_HEADER"]

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

#: Response header, 31 characters, identical in D.0 and 5.1 (primer, "Response header").
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
    "29": ("Response Patient", "transmission"),
    "21": ("Response Status", "transaction"),
    "22": ("Response Claim", "transaction"),
    "23": ("Response Pricing", "transaction"),
    "24": ("Response DUR/PPS", "transaction"),
    "26": ("Response Prior Authorization", "transaction"),
    "28": ("Response COB", "transaction"),
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
}
