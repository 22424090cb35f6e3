"""The field dictionary and the version tables, as data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ncpdp
from ncpdp import FIELDS
from ncpdp._fields import _TABLE

# shared/ stands beside the repository root (in CI too)
PRIMER = Path(__file__).resolve().parents[3] / "shared" / "docs" / "ncpdp-primer.md"

# Every field the primer names, with its number (and, where the primer says, its name).
PRIMER_FIELDS = {
    "A1": (101, "BIN Number"), "A2": (102, "Version/Release Number"),
    "A3": (103, "Transaction Code"), "A4": (104, "Processor Control Number"),
    "A9": (109, "Transaction Count"), "B2": (202, "Service Provider ID Qualifier"),
    "B1": (201, "Service Provider ID"), "D1": (401, "Date of Service"),
    "AK": (110, "Software Vendor/Certification ID"), "F1": (501, "Header Response Status"),
    "C1": (301, "Group ID"), "C2": (302, "Cardholder ID"), "C3": (303, "Person Code"),
    "C6": (306, "Patient Relationship Code"), "C4": (304, "Date of Birth"),
    "C5": (305, "Patient Gender Code"), "CA": (310, "Patient First Name"),
    "CB": (311, "Patient Last Name"), "CM": (322, None), "CN": (323, None),
    "CO": (324, None), "CP": (325, None),
    "EM": (455, "Prescription/Service Reference Number Qualifier"),
    "D2": (402, "Prescription/Service Reference Number"),
    "E1": (436, "Product/Service ID Qualifier"), "D7": (407, "Product/Service ID"),
    "E7": (442, "Quantity Dispensed"), "D3": (403, "Fill Number"), "D5": (405, "Days Supply"),
    "EZ": (466, "Prescriber ID Qualifier"), "DB": (411, "Prescriber ID"),
    "DR": (427, "Prescriber Last Name"), "CC": (312, None), "CD": (313, None),
    "D8": (408, None), "DE": (414, None), "DF": (415, None), "DJ": (419, None),
    "NX": (354, None), "DK": (420, None), "C8": (308, None), "2J": (364, None),
    "PM": (498, None), "D9": (409, None), "DC": (412, None), "DQ": (426, None),
    "DU": (430, None), "DN": (423, None),
    "AN": (112, "Transaction Response Status"), "F3": (503, "Authorization Number"),
    "FA": (510, "Reject Count"), "FB": (511, "Reject Code"),
    "4F": (546, "Reject Field Occurrence Indicator"), "5F": (547, "Approved Message Code Count"),
    "6F": (548, "Approved Message Code"), "FQ": (526, "Additional Message Information"),
    "UF": (130, None), "UH": (132, None), "UG": (131, None),
    "7F": (549, "Help Desk Phone Number Qualifier"), "8F": (550, "Help Desk Phone Number"),
    "F4": (504, "Message"), "9F": (551, "Preferred Product Count"),
    "AP": (552, "Preferred Product ID Qualifier"), "AR": (553, "Preferred Product ID"),
    "AU": (556, "Preferred Product Description"), "AM": (111, "Segment Identification"),
}  # fmt: skip


@pytest.mark.parametrize(("field_id", "expected"), sorted(PRIMER_FIELDS.items()))
def test_every_primer_field_is_present(field_id: str, expected: tuple[int, str | None]) -> None:
    number, name = expected
    fd = FIELDS[field_id]
    assert fd.id == field_id and fd.number == number
    if name is not None:
        assert fd.name == name


def test_primer_table_is_covered() -> None:
    """Every 'nnn-XX' reference in the primer is in the dictionary with that number,
    except the one the primer itself flags as the interface's mistake (422-E7)."""
    if not PRIMER.exists():
        pytest.skip("primer not available")
    refs = set(re.findall(r"\b(\d{3})-([0-9A-Z]{2})\b", PRIMER.read_text()))
    refs.discard(("422", "E7"))
    missing = {f"{n}-{i}" for n, i in refs if i not in FIELDS or FIELDS[i].number != int(n)}
    assert not missing


def test_quantity_dispensed_is_442_e7_not_422() -> None:
    """The primer reports the service interface naming 422-E7 in one place; the
    standard (and this dictionary) has 442-E7 Quantity Dispensed, 9(7)v999."""
    assert FIELDS["E7"].number == 442
    assert FIELDS["E7"].name == "Quantity Dispensed"
    assert FIELDS["E7"].format == "9(7)v999" and FIELDS["E7"].places == 3
    assert all(fd.number != 422 for fd in FIELDS.values())


def test_service_provider_id_is_201_b1_and_qualifier_202_b2() -> None:
    """The interface pairs the id with 202-B2; the standard (and the header layout
    here) has 201-B1 the id and 202-B2 its qualifier. Mapped by meaning."""
    assert FIELDS["B1"].number == 201 and FIELDS["B1"].name == "Service Provider ID"
    assert FIELDS["B2"].number == 202
    header = ncpdp.RequestHeader.build(
        bin="610014", service_provider_id="1999999976", date_of_service="20261123",
        service_provider_id_qualifier="01",
    )  # fmt: skip
    assert header.slot("B1").strip() == "1999999976" == header.service_provider_id
    assert header.slot("B2") == "01" == header.service_provider_id_qualifier


def test_no_duplicate_ids_and_well_formed_entries() -> None:
    ids = [row[0] for row in _TABLE]
    assert len(ids) == len(set(ids))
    for fd in FIELDS.values():
        assert len(fd.id) == 2 and fd.name
        if fd.since is None:
            assert fd.number is not None and 100 <= fd.number <= 999
        else:  # F6-only fields: the public sources give no number
            assert fd.since == "F6" and fd.number is None
        assert fd.codec in ("text", "number", "date", "implied", "overpunch")


def test_verified_numbers_of_less_common_fields() -> None:
    assert (FIELDS["SE"].number, FIELDS["ER"].number) == (458, 459)
    assert FIELDS["4E"].number == 470
    assert (FIELDS["A7"].number, FIELDS["MA"].number) == (993, 987)
    # RE is the compound segment's 488-RE Compound Product ID Qualifier, not 458
    assert FIELDS["RE"].number == 488


def test_formats_map_to_codecs() -> None:
    assert FIELDS["D9"].codec == "overpunch" and FIELDS["D9"].places == 2
    assert FIELDS["C4"].codec == "date"
    assert FIELDS["D5"].codec == "number"
    assert FIELDS["CA"].codec == "text"
    assert ncpdp.field_name("D2") == "Prescription/Service Reference Number"
    assert ncpdp.field_name("&B") is None


def test_versions_are_data() -> None:
    assert set(ncpdp.VERSIONS) == {"D0", "51", "F6"}
    for code in ("D0", "51"):
        spec = ncpdp.VERSIONS[code]
        assert sum(s.width for s in spec.request_header) == 56
        assert sum(s.width for s in spec.response_header) == 31
        assert spec.max_transactions == 4 and spec.group_separator
        assert spec.segments["07"] == ("Claim", "transaction")
    f6 = ncpdp.VERSIONS["F6"]
    assert sum(s.width for s in f6.request_header) == 58
    assert sum(s.width for s in f6.response_header) == 31
    assert (f6.max_transactions, f6.group_separator, f6.issuer_width) == (1, False, 8)
    assert [s.field_id for s in f6.request_header][:3] == ["A2", "A3", "A1"]
    assert f6.segments["19"] == ("Intermediary", "transaction")
    assert {"19", "37", "38", "36", "39", "40"} <= set(f6.segments)
    assert ncpdp.segment_name("21") == "Response Status"
    assert ncpdp.segment_name("XX") is None
    assert ncpdp.segment_name("39", "F6") == "Response Other Related Benefit Detail"
    assert ncpdp.segment_name("39") is None  # not a D.0 segment


def test_the_dictionary_names_the_f6_fields() -> None:
    from ncpdp._fields import F6_FIELD_IDS

    assert len(F6_FIELD_IDS) > 150
    assert FIELDS["RR"].name == "Patient ID Count" and FIELDS["RR"].codec == "number"
    assert FIELDS["KR"].name == "Payer ID Count" and FIELDS["KR"].since == "F6"
    assert FIELDS["8M"].name == "Intermediary ID"
    assert FIELDS["K9"].codec == "date" and FIELDS["0C"].codec == "text"
    assert ncpdp.decode_value("KD", "20261123") == "2026-11-23"
    assert ncpdp.field_name("ZV") == "Data Source of Invalid Provider Determination"
    assert FIELDS["C2"].since is None  # D.0 fields keep their numbers
