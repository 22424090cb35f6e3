"""Typed convenience views: they read what is there, not what the counts announce."""

from __future__ import annotations

from decimal import Decimal

import pytest

import ncpdp
from tests import builders as b

from .samples import (
    LITERAL_51_REJECT,
    LITERAL_D0_B1,
    LITERAL_D0_E1,
    LITERAL_D0_HEADER_REJECT,
    LITERAL_D0_NO_GROUP_75,
    LITERAL_F6_B1,
    LITERAL_F6_REJECT,
    LITERAL_SWITCH,
)


def test_request_view() -> None:
    v = ncpdp.parse(LITERAL_D0_B1).as_request()
    assert (v.bin, v.pcn, v.version, v.transaction_code) == ("610014", "SYNPCN", "D0", "B1")
    assert (v.service_provider_id, v.service_provider_id_qualifier) == ("1999999976", "01")
    assert (v.group_id, v.cardholder_id, v.person_code) == ("SYNGRP01", "ZQX90817263", "001")
    assert v.patient.last_name == "QUIXOTESYNTH" and v.patient.date_of_birth == "19610407"
    tx = v.transactions[0]
    assert (tx.rx_number, tx.rx_number_qualifier) == ("000001234567", "1")
    assert (tx.product_id, tx.product_id_qualifier) == ("00093505601", "03")
    assert (tx.prescriber_id, tx.prescriber_id_qualifier) == ("1999999984", "01")
    assert tx.quantity == Decimal("30.000")  # 442-E7, three implied decimals
    assert (tx.fill_number, tx.days_supply) == (0, 30)


def test_request_view_of_four_transactions() -> None:
    rxs = tuple(b.Rx(rx_number=f"00000000000{i}", days_supply="090") for i in range(1, 5))
    v = ncpdp.parse(b.request_bytes(rxs=rxs)).as_request()
    assert [t.rx_number for t in v.transactions] == [f"00000000000{i}" for i in range(1, 5)]
    assert {t.days_supply for t in v.transactions} == {90}


def test_request_view_tolerates_bad_values() -> None:
    raw = b.request_bytes(rxs=(b.Rx(quantity="3O000", fill_number="²"),))
    t = ncpdp.parse(raw, strict=False)  # "²" is outside printable ASCII: strict refuses it
    tx = t.as_request().transactions[0]
    assert tx.quantity is None and tx.fill_number is None


def test_rejected_response_view() -> None:
    v = ncpdp.parse(LITERAL_51_REJECT).as_response()
    assert v.message == "SYNTHETIC PLAN MESSAGE" and v.header_response_status == "R"
    tx = v.transactions[0]
    assert tx.transaction_status == "R" and tx.rejected
    # 510-FA says 03 but two codes follow: the views read the codes.
    assert [(r.code, r.occurrence) for r in tx.reject_codes] == [("75", 1), ("76", 2)]
    assert tx.additional_message == "PRIOR AUTH REQUIRED"
    assert (tx.help_desk_phone_qualifier, tx.help_desk_phone) == ("03", "8005550100")


def test_paid_status_with_reject_codes_is_rejected() -> None:
    raw = b.response_bytes([b.Outcome(status="P", reject_codes=("MR",))])
    tx = ncpdp.parse(raw).as_response().transactions[0]
    assert tx.transaction_status == "P"
    assert tx.rejected and [r.code for r in tx.reject_codes] == ["MR"]


def test_paid_and_duplicate() -> None:
    v = ncpdp.parse(b.response_bytes([b.PAID, b.DUPLICATE])).as_response()
    assert [t.transaction_status for t in v.transactions] == ["P", "D"]
    assert not any(t.rejected for t in v.transactions)
    assert v.transactions[0].authorization_number == "SYNAUTH001"


def test_occurrence_indicators_pair_with_their_code() -> None:
    o = b.Outcome(status="R", reject_codes=("70", "M1", "75"), occurrences=("01", "02"))
    tx = ncpdp.parse(b.response_bytes([o])).as_response().transactions[0]
    assert [(r.code, r.occurrence) for r in tx.reject_codes] == [
        ("70", 1),
        ("M1", 2),
        ("75", None),
    ]


def test_approved_codes_and_messages() -> None:
    o = b.Outcome(status="P", approved_codes=("001", "005"), messages=("LINE ONE", "LINE TWO"))
    tx = ncpdp.parse(b.response_bytes([o])).as_response().transactions[0]
    assert tx.approved_message_codes == ("001", "005")
    assert tx.additional_messages == ("LINE ONE", "LINE TWO")


def test_preferred_products() -> None:
    o = b.Outcome(
        status="R",
        reject_codes=("MR",),
        preferred=(("03", "00093505602", "SYN PREF A"), ("03", "00093505603", "SYN PREF B")),
    )
    tx = ncpdp.parse(b.response_bytes([o])).as_response().transactions[0]
    assert [(p.qualifier, p.id, p.description) for p in tx.preferred_products] == [
        ("03", "00093505602", "SYN PREF A"),
        ("03", "00093505603", "SYN PREF B"),
    ]


def test_preferred_products_without_qualifier() -> None:
    seg = ncpdp.Segment("22", [("9F", "2"), ("AR", "1"), ("AU", "A"), ("AR", "2")])
    header = ncpdp.ResponseHeader.build(service_provider_id="1", date_of_service="20261123")
    t = ncpdp.Transmission(
        header, [], [ncpdp.TransactionGroup([ncpdp.Segment("21", [("AN", "R")]), seg])]
    )
    tx = ncpdp.parse(ncpdp.serialize(t)).as_response().transactions[0]
    assert [(p.id, p.description) for p in tx.preferred_products] == [("1", "A"), ("2", None)]


def test_switch_response_views() -> None:
    v = ncpdp.parse(LITERAL_SWITCH).as_response()
    assert v.service_provider_id == ""  # all spaces
    assert v.transactions[0].transaction_status == "P"
    assert not v.transactions[0].rejected


def test_view_kind_mismatch_is_an_ncpdp_error() -> None:
    import pytest

    with pytest.raises(ncpdp.NcpdpError):
        ncpdp.parse(LITERAL_D0_B1).as_response()
    with pytest.raises(ncpdp.NcpdpError):
        ncpdp.parse(LITERAL_51_REJECT).as_request()


def test_no_pa_policy_in_the_protocol_library() -> None:
    """Which reject codes offer a PA is the product's policy (pa_bridge.policy)."""
    assert not hasattr(ncpdp, "PA_REJECT_CODES") and not hasattr(ncpdp, "OUTCOMES_FIRST_CODES")
    assert not hasattr(ncpdp.ResponseTransactionView, "pa_eligible")


# --- issue 17: what real claims showed, and F6 ------------------------------------


def test_a_status_sent_without_its_group_is_read_never_dropped() -> None:
    """A payer's 75 given at transmission level used to come out accepted."""
    t = ncpdp.parse(LITERAL_D0_NO_GROUP_75, strict=False)
    assert t.groups == ()
    v = t.as_response()
    assert v.header_response_status == "A"  # what the header claims
    (tx,) = v.transactions
    assert tx.rejected and [r.code for r in tx.reject_codes] == ["75"]
    assert v.rejected


def test_a_header_level_reject_without_group_is_rejected() -> None:
    v = ncpdp.parse(LITERAL_D0_HEADER_REJECT).as_response()
    assert v.transactions == () and v.rejected and v.message == "SYNTHETIC HOST DOWN"


def test_eligibility_request_view_has_no_transactions() -> None:
    v = ncpdp.parse(LITERAL_D0_E1).as_request()
    assert v.transaction_code == "E1" and v.transactions == ()
    assert v.cardholder_id == "ZQX90817263" and v.iin is None


def test_f6_request_view() -> None:
    v = ncpdp.parse(LITERAL_F6_B1).as_request()
    assert (v.version, v.bin, v.iin, v.pcn) == ("F6", "61001400", "61001400", "SYNPCN")
    assert v.date_of_service == "20261123" and v.software_vendor_id == "SYNVEND001"
    assert [(i.qualifier, i.id) for i in v.patient.ids] == [
        ("01", "SYNPAT0001"),
        ("99", "SYNPAT0002"),
    ]
    assert v.patient.middle_name == "Q"
    (tx,) = v.transactions
    assert (tx.rx_number, tx.quantity, tx.prescriber_id) == (
        "000001234567",
        Decimal("30.000"),
        "1999999984",
    )


def test_f6_response_view() -> None:
    v = ncpdp.parse(LITERAL_F6_REJECT).as_response()
    assert v.version == "F6" and v.header_response_status == "R"
    assert [(p.qualifier, p.id) for p in v.payer_ids] == [("01", "SYNPAYER1"), ("02", "SYNPAYER2")]
    (tx,) = v.transactions
    assert tx.rejected and [r.code for r in tx.reject_codes] == ["75"]
    assert tx.help_desk_phone == "8005550100"
    assert [p.id for p in tx.preferred_products] == ["00093505602"]


def test_d0_request_view_has_no_iin() -> None:
    v = ncpdp.parse(LITERAL_D0_B1).as_request()
    assert v.iin is None and v.bin == "610014"
    assert v.patient.ids == () and v.patient.middle_name is None


def test_views_are_built_once() -> None:
    """A transmission never changes, so its view is built on first use and kept (the
    daemon reads a claim's views several times on the hot path)."""
    req = ncpdp.parse(LITERAL_D0_B1)
    resp = ncpdp.parse(LITERAL_51_REJECT)
    assert req.as_request() is req.as_request()
    assert resp.as_response() is resp.as_response()
    with pytest.raises(ncpdp.NcpdpError):
        req.as_response()
    with pytest.raises(ncpdp.NcpdpError):
        resp.as_request()
