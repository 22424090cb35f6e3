"""Builders of synthetic NCPDP claims for the tests. Every person, prescriber and
pharmacy here is made up; no real identifier is used anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ncpdp
from ncpdp import RequestHeader, ResponseHeader, Segment, TransactionGroup, Transmission

# A synthetic patient whose name, date of birth and cardholder id the PHI tests
# search every log line for.
PATIENT_FIRST = "ZEBULONTEST"
PATIENT_LAST = "QUIXOTESYNTH"
PATIENT_DOB = "19610407"
CARDHOLDER_ID = "ZQX90817263"


@dataclass(frozen=True, kw_only=True)
class Rx:
    """One transaction of a request."""

    rx_number: str = "000001234567"
    rx_qualifier: str = "1"
    product_id: str = "00093505601"
    product_qualifier: str = "03"
    quantity: str = "30000"  # 30.000
    fill_number: str = "00"
    days_supply: str = "030"
    prescriber_id: str = "1999999984"
    prescriber_qualifier: str = "01"
    prescriber_last: str = "DRSYNTH"
    prescriber_first: str = "PAT"
    ingredient_cost: str = "1234{"  # +123.40
    gross_due: str = "1299E"  # +129.95
    extra_claim_fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Claim:
    version: str = "D0"
    code: str = "B1"
    bin: str = "610014"
    pcn: str = "SYNPCN"
    group_id: str = "SYNGRP01"
    cardholder_id: str = CARDHOLDER_ID
    person_code: str = "001"
    relationship: str = "1"
    first_name: str = PATIENT_FIRST
    last_name: str = PATIENT_LAST
    dob: str = PATIENT_DOB
    gender: str = "2"
    zip: str = "99999"
    provider_id: str = "1999999976"
    provider_qualifier: str = "01"
    date_of_service: str = "20261123"
    vendor: str = "SYNVENDOR1"
    rxs: tuple[Rx, ...] = field(default_factory=lambda: (Rx(),))
    #: Segments added to each transaction after the standard ones (an F6 claim's
    #: Intermediary segment AM19, a switch's private AM99, ...).
    extra_segments: tuple[Segment, ...] = ()

    def with_(self, **kw: object) -> Claim:
        return replace(self, **kw)  # type: ignore[arg-type]


def request(claim: Claim | None = None, **kw: object) -> Transmission:
    c = (claim or Claim()).with_(**kw) if kw else (claim or Claim())
    header = RequestHeader.build(
        bin=c.bin,
        version=c.version,
        transaction_code=c.code,
        pcn=c.pcn,
        transaction_count=len(c.rxs),
        service_provider_id_qualifier=c.provider_qualifier,
        service_provider_id=c.provider_id,
        date_of_service=c.date_of_service,
        software_vendor_id=c.vendor,
    )
    ins = Segment(
        "04",
        [
            ("C2", c.cardholder_id),
            ("C1", c.group_id),
            ("C3", c.person_code),
            ("C6", c.relationship),
        ],
    )
    pat = Segment(
        "01",
        [
            ("C4", c.dob),
            ("C5", c.gender),
            ("CA", c.first_name),
            ("CB", c.last_name),
            ("CP", c.zip),
        ],
    )
    groups = []
    for rx in c.rxs:
        claim_fields = [
            ("EM", rx.rx_qualifier),
            ("D2", rx.rx_number),
            ("E1", rx.product_qualifier),
            ("D7", rx.product_id),
            ("E7", rx.quantity),
            ("D3", rx.fill_number),
            ("D5", rx.days_supply),
            ("D6", "1"),
            ("D8", "0"),
            ("DE", "20261120"),
            ("DF", "05"),
            ("DJ", "1"),
            *rx.extra_claim_fields,
        ]
        segs = [Segment("07", claim_fields)]
        if c.code != "B2":
            segs.append(
                Segment(
                    "03",
                    [
                        ("EZ", rx.prescriber_qualifier),
                        ("DB", rx.prescriber_id),
                        ("DR", rx.prescriber_last),
                        ("2J", rx.prescriber_first),
                    ],
                )
            )
            segs.append(
                Segment(
                    "11",
                    [
                        ("D9", rx.ingredient_cost),
                        ("DC", "050{"),
                        ("DU", rx.gross_due),
                        ("DN", "01"),
                    ],
                )
            )
        segs.extend(c.extra_segments)
        groups.append(TransactionGroup(segs))
    trans = [ins, pat] if c.code != "B2" else [ins]
    return Transmission(header, trans, groups)


def request_bytes(claim: Claim | None = None, **kw: object) -> bytes:
    return ncpdp.serialize(request(claim, **kw))


def continued(text: str, width: int = 40) -> tuple[str, ...]:
    """``text`` cut into 526-FQ pieces of ``width`` characters, as payers cut a long
    message (mid-word): each piece but the last is sent with 131-UG ``+``."""
    return tuple(text[i : i + width] for i in range(0, len(text), width)) or ("",)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One transaction of a response."""

    status: str = "P"  # P paid, R rejected, D duplicate
    reject_codes: tuple[str, ...] = ()
    occurrences: tuple[str, ...] = ()
    approved_codes: tuple[str, ...] = ()
    #: Each message is one 526-FQ line, or a tuple of pieces (``continued(...)``) sent
    #: as several 526-FQ occurrences joined by 131-UG ``+``. Every occurrence has its
    #: own 132-UH qualifier (01, 02, ...).
    messages: tuple[str | tuple[str, ...], ...] = ()
    help_phone: str | None = None
    preferred: tuple[tuple[str, str, str], ...] = ()
    authorization: str | None = None
    pricing: bool = True


def _pieces(message: str | tuple[str, ...]) -> tuple[str, ...]:
    return (message,) if isinstance(message, str) else message


def response(
    outcomes: Sequence[Outcome] = (Outcome(),),
    *,
    version: str = "D0",
    code: str = "B1",
    provider_id: str = "1999999976",
    date_of_service: str = "20261123",
    message: str | None = None,
) -> Transmission:
    header_status = "R" if all(o.status == "R" for o in outcomes) else "A"
    header = ResponseHeader.build(
        version=version,
        transaction_code=code,
        transaction_count=len(outcomes),
        header_response_status=header_status,
        service_provider_id=provider_id,
        date_of_service=date_of_service,
    )
    trans = []
    if message is not None:
        trans.append(Segment("20", [("F4", message)]))
    groups = []
    for o in outcomes:
        st: list[tuple[str, str]] = [("AN", o.status)]
        if o.authorization:
            st.append(("F3", o.authorization))
        if o.reject_codes:
            st.append(("FA", str(len(o.reject_codes)).zfill(2)))
            for i, code_ in enumerate(o.reject_codes):
                st.append(("FB", code_))
                if i < len(o.occurrences):
                    st.append(("4F", o.occurrences[i]))
        if o.approved_codes:
            st.append(("5F", str(len(o.approved_codes))))
            st.extend(("6F", a) for a in o.approved_codes)
        if o.messages:
            pieces = [
                (p, j + 1 < len(m)) for m in map(_pieces, o.messages) for j, p in enumerate(m)
            ]
            st.append(("UF", str(len(pieces)).zfill(2)))
            for i, (piece, more) in enumerate(pieces):
                st.append(("UH", str(i + 1).zfill(2)))
                st.append(("FQ", piece))
                if more:  # 131-UG: this text continues in the next 526-FQ
                    st.append(("UG", "+"))
        if o.help_phone:
            st.extend([("7F", "03"), ("8F", o.help_phone)])
        segs = [Segment("21", st)]
        if o.preferred:
            rc: list[tuple[str, str]] = [("9F", str(len(o.preferred)))]
            for q, pid, desc in o.preferred:
                rc.extend([("AP", q), ("AR", pid), ("AU", desc)])
            segs.append(Segment("22", rc))
        if o.pricing and o.status in ("P", "D"):
            segs.append(Segment("23", [("F5", "1000{"), ("F6", "1200{"), ("F9", "250E")]))
        groups.append(TransactionGroup(segs))
    return Transmission(header, trans, groups)


def response_bytes(outcomes: Sequence[Outcome] = (Outcome(),), **kw: object) -> bytes:
    return ncpdp.serialize(response(outcomes, **kw))  # type: ignore[arg-type]


PAID = Outcome(status="P", authorization="SYNAUTH001")
REJECT_75 = Outcome(
    status="R",
    reject_codes=("75",),
    occurrences=("01",),
    messages=("PRIOR AUTHORIZATION REQUIRED", "CALL HELP DESK"),
    help_phone="8005550100",
    preferred=(("03", "00093505602", "SYNTHETIC PREFERRED 10MG"),),
)
REJECT_MR = Outcome(status="R", reject_codes=("MR",), messages=("PRODUCT NOT ON FORMULARY",))
REJECT_TWO = Outcome(
    status="R",
    reject_codes=("76", "79"),
    occurrences=("01", "02"),
    messages=("PLAN LIMITATIONS EXCEEDED",),
)
DUPLICATE = Outcome(status="D", authorization="SYNAUTH001")

# --- the shapes of public sample claims of other NCPDP projects (issue 25) ------------

#: F6's Intermediary segment (AM19) in the transaction, as public F6 samples carry it.
INTERMEDIARY = Segment("19", [("8G", "1"), ("8H", "01"), ("8K", "QQ"), ("8M", "SYNINTERMED1")])
#: A switch's private segment in a response (public samples of switch software).
SWITCH_SEGMENT = Segment("99", [("&B", "SW000123"), ("#A", "0001")])
#: A payer's long reject text, cut every 40 characters (mid-word: "SE" + "PARATELY").
SWITCH_REJECT_TEXT = (
    "NCPDP REJECT: TRANSACTION CODE (103-A3) IS INVALID. SUBMIT CLAIM AND REVERSAL SEPARATELY"
)


def with_segment(t: Transmission, segment: Segment, group: int = 0) -> Transmission:
    """``t`` with ``segment`` added at the end of transaction ``group``."""
    groups = list(t.groups)
    groups[group] = TransactionGroup([*groups[group].segments, segment])
    return Transmission(t.header, t.segments, groups)


def switch_reject() -> bytes:
    """A switch's reject: 1S (M/I transaction code), the payer's message cut into
    40-character 526-FQ pieces continued by 131-UG, the help desk, and the switch's own
    segment after the status."""
    outcome = Outcome(
        status="R",
        reject_codes=("1S",),
        occurrences=("01",),
        messages=(continued(SWITCH_REJECT_TEXT),),
        help_phone="8005550100",
    )
    return bytes(with_segment(response([outcome]), SWITCH_SEGMENT))


def f6_claim_with_intermediary(**kw: object) -> bytes:
    """An F6 B1 with the 8-digit IIN and the Intermediary segment after its pricing."""
    claim = Claim(version="F6", bin="00880151", extra_segments=(INTERMEDIARY,))
    return request_bytes(claim, **kw)


# --- NCPDP batch files (Batch 1.2) ---------------------------------------------------


def batch_header(
    *,
    batch_number: str = "0000042",
    version: str = "12",
    sender: str = "SYNSENDER01",
    receiver: str = "SYNRECEIVER01",
    date: str = "20261123",
    time: str = "1632",
    transmission_type: str = "T",
    file_type: str = "T",
) -> bytes:
    raw = (
        "00" + transmission_type + sender.ljust(24) + batch_number + date + time + file_type
        + version + receiver.ljust(24)
    )  # fmt: skip
    assert len(raw) == 73
    return b"\x02" + raw.encode("latin-1") + b"\x03"


def batch_detail(transmission: bytes, reference: str) -> bytes:
    return b"\x02G1" + reference.ljust(10).encode("latin-1") + transmission + b"\x03"


def batch_trailer(count: int, *, batch_number: str = "0000042", message: str = "") -> bytes:
    raw = "99" + batch_number + str(count).zfill(10) + message.ljust(35)
    return b"\x02" + raw.encode("latin-1") + b"\x03"


def batch_bytes(
    transmissions: Sequence[bytes],
    *,
    between: bytes = b"",
    count: int | None = None,
    **header: str,
) -> bytes:
    """A whole batch file: header, one detail record per transmission, trailer."""
    records = [batch_header(**header)]
    records += [batch_detail(t, f"SYNREF{i:04d}") for i, t in enumerate(transmissions, 1)]
    number = header.get("batch_number", "0000042")
    records.append(
        batch_trailer(len(transmissions) + 2 if count is None else count, batch_number=number)
    )
    return between.join(records)


def exchange_json(request: bytes, response: bytes, **extra: Any) -> dict[str, Any]:
    """The body of ``POST /v1/claims`` for an exchange: raw NCPDP in JSON strings, one
    character per byte (the separators escaped by JSON), and ``extra`` fields."""
    return {"request": request.decode("latin-1"), "response": response.decode("latin-1"), **extra}
