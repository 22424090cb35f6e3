"""The mapping from an NCPDP claim exchange to the interfaces' variables, and the
payer-sheet rules checked before a claim is sent. Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

import ncpdp

from ._contract import OPTIONAL_CLAIM_VARIABLES, ClaimMetadata

__all__ = [
    "ETX",
    "STX",
    "claim_metadata",
    "claim_minimum_missing",
    "frame_claim",
    "is_framed",
    "outcome_variables",
    "patient_age",
]


def _s(value: str | None) -> str:
    return (value or "").strip()


def claim_metadata(
    request: ncpdp.Transmission,
    response: ncpdp.Transmission | None,
    dispensing: Mapping[str, str] | None,
    index: int = 0,
) -> ClaimMetadata:
    """The metadata variables for transaction ``index`` of a claim exchange.

    From the claim: physician npi (411-DB when 466-EZ is 01), dea (411-DB when 466-EZ
    is 12), last name 427-DR, first name 364-2J, phone 498-PM. From the response:
    rejection code(s) 511-FB (comma-separated), message 526-FQ, help desk 550-8F, the
    first preferred product 552-AP/553-AR/556-AU. Non-empty values of the dispensing
    system's ``dispensing`` mapping win over claim-derived ones; unknown keys there
    are ignored.
    """
    values: dict[str, str] = {}
    req = request.as_request()
    if 0 <= index < len(req.transactions):
        tx = req.transactions[index]
        qualifier = _s(tx.prescriber_id_qualifier)
        if tx.prescriber_id:
            if qualifier == "01":
                values["physician_npi"] = tx.prescriber_id
            elif qualifier == "12":
                values["physician_dea"] = tx.prescriber_id
        values["physician_lname"] = _s(tx.prescriber_last_name)
        values["physician_fname"] = _s(tx.prescriber_first_name)
        values["physician_phone"] = _s(tx.prescriber_phone)
    if response is not None:
        resp = response.as_response()
        if 0 <= index < len(resp.transactions):
            rtx = resp.transactions[index]
            values["rejection_code"] = ",".join(r.code for r in rtx.reject_codes if r.code)
            values["rejection_msg"] = _s(rtx.additional_message)
            values["help_phone"] = _s(rtx.help_desk_phone)
            if rtx.preferred_products:
                p = rtx.preferred_products[0]
                values["preferred_product_id_qualifier"] = _s(p.qualifier)
                values["preferred_product_id"] = _s(p.id)
                values["preferred_product_description"] = _s(p.description)
    for key, value in (dispensing or {}).items():
        if key in OPTIONAL_CLAIM_VARIABLES and str(value).strip():
            values[key] = str(value).strip()
    return ClaimMetadata(**{k: v for k, v in values.items() if v})


# (field label, getter) for the payer-sheet minimum the interface reads.
_B1_HEADER_MINIMUM = (
    ("101-A1 BIN Number", "bin"),
    ("102-A2 Version/Release Number", "version"),
    ("103-A3 Transaction Code", "transaction_code"),
    ("201-B1 Service Provider ID", "service_provider_id"),
    ("401-D1 Date of Service", "date_of_service"),
)


def claim_minimum_missing(
    transmission: ncpdp.Transmission, metadata: ClaimMetadata | None = None
) -> list[str]:
    """The payer-sheet fields the claim interface reads that this claim lacks.

    B1: BIN (or ``bin_number``), version, transaction code, service provider id, date
    of service, cardholder id, patient first and last name, date of birth, and per
    transaction product id, Rx number, quantity, days supply and prescriber id (unless
    ``physician_npi`` or ``physician_dea`` is given). B2: BIN, provider, date of service,
    and per transaction Rx number and product id. Labels name the field, e.g.
    ``"302-C2 Cardholder ID"``; a field of the second transaction says so.
    """
    md = metadata or ClaimMetadata()
    req = transmission.as_request()
    missing: list[str] = []
    code = req.transaction_code.strip()

    def need(label: str, value: str | None, override: str = "") -> None:
        if not _s(value) and not override.strip():
            missing.append(label)

    need("101-A1 BIN Number", req.bin, md.bin_number)
    need("201-B1 Service Provider ID", req.service_provider_id)
    need("401-D1 Date of Service", req.date_of_service)
    if code == "B2":
        for tx in req.transactions:
            suffix = f" (transaction {tx.index + 1})" if tx.index else ""
            need("402-D2 Prescription/Service Reference Number" + suffix, tx.rx_number)
            need("407-D7 Product/Service ID" + suffix, tx.product_id)
        if not req.transactions:
            missing.append("402-D2 Prescription/Service Reference Number")
        return missing
    need("102-A2 Version/Release Number", req.version)
    need("103-A3 Transaction Code", req.transaction_code)
    need("302-C2 Cardholder ID", req.cardholder_id)
    need("310-CA Patient First Name", req.patient.first_name)
    need("311-CB Patient Last Name", req.patient.last_name)
    need("304-C4 Date of Birth", req.patient.date_of_birth)
    prescriber_override = md.physician_npi or md.physician_dea
    for tx in req.transactions:
        suffix = f" (transaction {tx.index + 1})" if tx.index else ""
        need("407-D7 Product/Service ID" + suffix, tx.product_id)
        need("402-D2 Prescription/Service Reference Number" + suffix, tx.rx_number)
        need("442-E7 Quantity Dispensed" + suffix, None if tx.quantity is None else "x")
        need("405-D5 Days Supply" + suffix, None if tx.days_supply is None else "x")
        need("411-DB Prescriber ID" + suffix, tx.prescriber_id, prescriber_override)
    if not req.transactions:
        missing.append("407-D7 Product/Service ID")
    return missing


STX = "\x02"
ETX = "\x03"


def frame_claim(claim: str, framing: str = "stx_etx") -> str:
    """The claim as it goes on the wire: STX (0x02) before the header and ETX (0x03)
    after the last byte (``stx_etx``: every reference claim is framed so), or bare
    (``none``). Framing the claim already had, and CR/LF before or after it (as some
    switches and dispensing systems send claims), are dropped first."""
    core = claim.strip("\r\n")
    if core.startswith(STX):
        core = core[1:]
    if core.endswith(ETX):
        core = core[:-1]
    return f"{STX}{core}{ETX}" if framing == "stx_etx" else core


def is_framed(claim: str) -> bool:
    """Whether the claim came framed STX ... ETX (CR/LF before the STX or after the
    ETX allowed)."""
    core = claim.strip("\r\n")
    return core.startswith(STX) and core.endswith(ETX)


def patient_age(date_of_birth: str | None, date_of_service: str | None) -> str:
    """Whole years between two CCYYMMDD dates, or "" when either is unreadable."""
    try:
        dob = ncpdp.decode_date(_s(date_of_birth))
        dos = ncpdp.decode_date(_s(date_of_service))
    except (ncpdp.NcpdpError, ValueError):
        return ""
    if not isinstance(dob, date) or not isinstance(dos, date) or dos < dob:
        return ""
    years = dos.year - dob.year - ((dos.month, dos.day) < (dob.month, dob.day))
    return str(years)


_age = patient_age  # outcome_variables() has a parameter of the same name


def outcome_variables(
    request: ncpdp.Transmission,
    response: ncpdp.Transmission,
    index: int = 0,
    *,
    api_key: str,
    patient_age: str = "",
    prescriber_fax: str = "",
    views: tuple[ncpdp.RequestView, ncpdp.ResponseView] | None = None,
) -> dict[str, str]:
    """Every outcomes variable for transaction ``index``, mapped by meaning.

    The interface document pairs ``service_provider_id`` with 202-B2 and its qualifier
    with 201-B1; in the standard 201-B1 is the id and 202-B2 the qualifier, and that is
    what we send (tests/test_client.py keeps a test of it). It also names 422-E7 for
    quantity dispensed; the standard's field is 442-E7, sent as a decimal with its three
    implied places made explicit ("30.000"), so it cannot be misread as 30000 units.
    Several approval or rejection codes are sent comma-separated. ``patient_age`` is
    computed from 304-C4 and the date of service when not given. Every variable is
    present (the interface marks them all required); unknown values are "".
    ``views``: the two transmissions' views when the caller already has them.
    """
    req, resp = views if views is not None else (request.as_request(), response.as_response())
    tx = req.transactions[index] if 0 <= index < len(req.transactions) else None
    rtx = resp.transactions[index] if 0 <= index < len(resp.transactions) else None
    claim_seg = request.groups[index].segment("07") if 0 <= index < len(request.groups) else None
    age = patient_age or _age(req.patient.date_of_birth, req.date_of_service)
    quantity = ""
    if tx is not None and tx.quantity is not None:
        quantity = str(tx.quantity)
    elif claim_seg is not None:
        quantity = _s(claim_seg.get("E7"))
    return {
        "api_key": api_key,
        "bin": _s(req.bin),
        "pcn": _s(req.pcn),
        "group_id": _s(req.group_id),
        "approval_code": ",".join(rtx.approved_message_codes) if rtx else "",
        "rejection_code": ",".join(r.code for r in rtx.reject_codes) if rtx else "",
        "rejection_message": _s(rtx.additional_message) if rtx else "",
        "prescription_reference_number": _s(tx.rx_number) if tx else "",
        "prescription_reference_number_qualifier": _s(tx.rx_number_qualifier) if tx else "",
        "product_service_id": _s(tx.product_id) if tx else "",
        "product_service_id_qualifier": _s(tx.product_id_qualifier) if tx else "",
        # By meaning: 201-B1 is the id, 202-B2 its qualifier (the doc swaps them).
        "service_provider_id": _s(req.service_provider_id),
        "service_provider_id_qualifier": _s(req.service_provider_id_qualifier),
        "cardholder_id": _s(req.cardholder_id),
        "person_code": _s(req.person_code),
        "prescriber_id": _s(tx.prescriber_id) if tx else "",
        "prescriber_id_qualifier": _s(tx.prescriber_id_qualifier) if tx else "",
        "days_supply": _s(claim_seg.get("D5")) if claim_seg else "",
        "fill_number": _s(claim_seg.get("D3")) if claim_seg else "",
        # 442-E7 (the doc says 422-E7).
        "quantity_dispensed": quantity,
        "transaction_response_status": _s(rtx.transaction_status) if rtx else "",
        "patient_age": age,
        "prescriber_fax": prescriber_fax,
    }
