"""Typed read-only views of the fields the daemon needs.

Views read what is really in the segments, not the counts that announce them: a
510-FA that disagrees with the 511-FB codes present is ignored, and a paid status
that still carries reject codes is treated as rejected (``rejected`` is True).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ._codecs import decode_implied
from ._errors import CodecError, NcpdpError
from ._model import RequestHeader, ResponseHeader, Segment, TransactionGroup, Transmission

__all__ = [
    "QualifiedId",
    "PatientView",
    "RequestTransactionView",
    "RequestView",
    "RejectCode",
    "AdditionalMessage",
    "PreferredProduct",
    "ResponseTransactionView",
    "ResponseView",
    "request_view",
    "response_view",
]


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return v or None


def _int(value: str | None) -> int | None:
    v = _clean(value)
    if v is None or not v.isdigit() or not v.isascii():
        return None
    return int(v)


def _get(seg: Segment | None, field_id: str) -> str | None:
    return None if seg is None else _clean(seg.get(field_id))


def _firsts(seg: Segment | None) -> dict[str, str]:
    """Field id -> the first occurrence's raw value (one pass, for reading many)."""
    out: dict[str, str] = {}
    if seg is not None:
        for r in seg._raw:
            fid = r[:2]
            if fid not in out:
                out[fid] = r[2:]
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class QualifiedId:
    """An id with its qualifier: a patient id (331-CX/332-CY, repeating in F6) or a
    payer id (J7/J8, repeating in F6)."""

    qualifier: str | None
    id: str | None


def _pairs(seg: Segment | None, qualifier_id: str, value_id: str) -> tuple[QualifiedId, ...]:
    """Qualifier/value pairs in wire order; a pair starts at each qualifier, or when a
    value repeats without one."""
    if seg is None:
        return ()
    out: list[QualifiedId] = []
    q: str | None = None
    v: str | None = None
    started = False
    for r in seg._raw:
        fid = r[:2]
        if fid == qualifier_id:
            if started:
                out.append(QualifiedId(qualifier=q, id=v))
            q, v, started = _clean(r[2:]), None, True
        elif fid == value_id:
            if started and v is not None:
                out.append(QualifiedId(qualifier=q, id=v))
                q = None
            v, started = _clean(r[2:]), True
    if started:
        out.append(QualifiedId(qualifier=q, id=v))
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class PatientView:
    first_name: str | None
    last_name: str | None
    date_of_birth: str | None
    gender_code: str | None
    street: str | None
    city: str | None
    state: str | None
    zip: str | None
    #: 331-CX/332-CY pairs in order (F6 repeats them, counted by 9R-RR).
    ids: tuple[QualifiedId, ...] = ()
    #: F6 0C Patient Middle Name.
    middle_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTransactionView:
    index: int
    rx_number: str | None
    rx_number_qualifier: str | None
    product_id: str | None
    product_id_qualifier: str | None
    fill_number: int | None
    quantity: Decimal | None
    days_supply: int | None
    date_written: str | None
    prescriber_id: str | None
    prescriber_id_qualifier: str | None
    prescriber_last_name: str | None
    prescriber_first_name: str | None
    prescriber_phone: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestView:
    version: str
    transaction_code: str
    #: 101-A1 as sent: the 6-digit BIN (D.0, 5.1) or the 8-digit IIN (F6).
    bin: str
    pcn: str
    service_provider_id: str
    service_provider_id_qualifier: str
    date_of_service: str
    software_vendor_id: str
    group_id: str | None
    cardholder_id: str | None
    person_code: str | None
    patient_relationship_code: str | None
    patient: PatientView
    transactions: tuple[RequestTransactionView, ...]
    #: F6: the 8-digit IIN (the same value as ``bin``); ``None`` before F6.
    iin: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectCode:
    code: str
    occurrence: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AdditionalMessage:
    """One message of 526-FQ Additional Message Information: the 132-UH qualifier of
    its first piece, and its text. A piece whose 131-UG Continuity is ``+`` continues
    in the next 526-FQ: the pieces are joined as sent, with nothing added (payers cut
    a long message at 40 characters, mid-word), and the whole is trimmed."""

    qualifier: str | None
    text: str
    #: How many 526-FQ occurrences made it (1 when nothing was continued).
    pieces: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PreferredProduct:
    qualifier: str | None
    id: str | None
    description: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseTransactionView:
    index: int
    transaction_status: str | None
    authorization_number: str | None
    reject_codes: tuple[RejectCode, ...]
    approved_message_codes: tuple[str, ...]
    #: The messages' texts, continued pieces joined (see :class:`AdditionalMessage`).
    additional_messages: tuple[str, ...]
    help_desk_phone_qualifier: str | None
    help_desk_phone: str | None
    preferred_products: tuple[PreferredProduct, ...]
    #: Each message with its 132-UH qualifier, in wire order.
    additional_message_info: tuple[AdditionalMessage, ...] = ()

    @property
    def rejected(self) -> bool:
        """Rejected when 112-AN says so, or when reject codes are present at all."""
        return self.transaction_status == "R" or bool(self.reject_codes)

    @property
    def additional_message(self) -> str | None:
        """The messages joined with spaces (the payer's rejection message); continued
        pieces are joined first, as the standard says."""
        return " ".join(self.additional_messages) or None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseView:
    version: str
    transaction_code: str
    header_response_status: str
    service_provider_id: str
    service_provider_id_qualifier: str
    date_of_service: str
    message: str | None
    transactions: tuple[ResponseTransactionView, ...]
    #: Response Insurance (AM25) J7/J8 pairs in order (F6 repeats them, count KR).
    payer_ids: tuple[QualifiedId, ...] = ()

    @property
    def rejected(self) -> bool:
        """Rejected at header level (501-F1 = R) or in any transaction."""
        return self.header_response_status == "R" or any(t.rejected for t in self.transactions)


# The views' text fields as data: attribute -> field id, per segment.
_CLAIM_TEXTS = {
    "rx_number": "D2",
    "rx_number_qualifier": "EM",
    "product_id": "D7",
    "product_id_qualifier": "E1",
    "date_written": "DE",
}
_PRESCRIBER_TEXTS = {
    "prescriber_id": "DB",
    "prescriber_id_qualifier": "EZ",
    "prescriber_last_name": "DR",
    "prescriber_first_name": "2J",
    "prescriber_phone": "PM",
}
_INSURANCE_TEXTS = {
    "group_id": "C1",
    "cardholder_id": "C2",
    "person_code": "C3",
    "patient_relationship_code": "C6",
}
_PATIENT_TEXTS = {
    "first_name": "CA",
    "last_name": "CB",
    "date_of_birth": "C4",
    "gender_code": "C5",
    "street": "CM",
    "city": "CN",
    "state": "CO",
    "zip": "CP",
    "middle_name": "0C",
}


def _texts(values: dict[str, str], table: dict[str, str]) -> dict[str, Any]:
    """attribute -> the trimmed value of its field (None when absent or blank)."""
    return {attr: _clean(values.get(fid)) for attr, fid in table.items()}


def request_view(t: Transmission) -> RequestView:
    h = t.header
    if not isinstance(h, RequestHeader):
        raise NcpdpError("as_request() needs a request transmission; this is a response")
    pat_seg = t.segment("01")
    pat = _firsts(pat_seg)
    ins = _firsts(t.segment("04"))
    txs = []
    for i, g in enumerate(t.groups):
        claim = _firsts(g.segment("07"))
        pres = _firsts(g.segment("03"))
        qty_raw = _clean(claim.get("E7"))
        try:
            quantity = decode_implied(qty_raw, 3) if qty_raw is not None else None
        except CodecError:
            quantity = None
        txs.append(
            RequestTransactionView(
                index=i,
                fill_number=_int(claim.get("D3")),
                quantity=quantity,
                days_supply=_int(claim.get("D5")),
                **_texts(claim, _CLAIM_TEXTS),
                **_texts(pres, _PRESCRIBER_TEXTS),
            )
        )
    return RequestView(
        version=h.version,
        transaction_code=h.transaction_code,
        bin=h.bin,
        pcn=h.pcn,
        service_provider_id=h.service_provider_id,
        service_provider_id_qualifier=h.service_provider_id_qualifier,
        date_of_service=h.date_of_service,
        software_vendor_id=h.software_vendor_id,
        **_texts(ins, _INSURANCE_TEXTS),
        patient=PatientView(ids=_pairs(pat_seg, "CX", "CY"), **_texts(pat, _PATIENT_TEXTS)),
        transactions=tuple(txs),
        iin=h.bin if h.is_f6_layout else None,
    )


_PREFERRED_KEYS = {"AP": "qualifier", "AR": "id", "AU": "description"}


def _messages(raw: tuple[str, ...]) -> tuple[AdditionalMessage, ...]:
    """526-FQ occurrences as messages: 132-UH before a piece is its qualifier; 131-UG
    ``+`` after a piece continues it in the next 526-FQ."""
    out: list[AdditionalMessage] = []
    pieces: list[str] = []
    qualifier: str | None = None
    pending: str | None = None  # the 132-UH read for the next 526-FQ
    continues = False

    def close() -> None:
        text = "".join(pieces).strip()
        if text:
            out.append(AdditionalMessage(qualifier=qualifier, text=text, pieces=len(pieces)))

    for r in raw:
        fid = r[:2]
        if fid == "UH":
            pending = _clean(r[2:])
        elif fid == "FQ":
            if not (continues and pieces):
                if pieces:
                    close()
                pieces, qualifier = [], pending
            pieces.append(r[2:])
            pending, continues = None, False
        elif fid == "UG" and pieces:
            continues = r[2:].strip() == "+"
    if pieces:
        close()
    return tuple(out)


def _status_view(i: int, g: TransactionGroup) -> ResponseTransactionView:
    st = g.segment("21")
    rc = g.segment("22")
    rejects: list[RejectCode] = []
    approved: list[str] = []
    messages: tuple[AdditionalMessage, ...] = ()
    status: dict[str, str] = {}
    if st is not None:
        messages = _messages(st._raw)
        for r in st._raw:
            fid = r[:2]
            if fid == "FB":
                rejects.append(RejectCode(code=r[2:].strip()))
            elif fid == "4F" and rejects and rejects[-1].occurrence is None:
                rejects[-1] = RejectCode(code=rejects[-1].code, occurrence=_int(r[2:]))
            elif fid == "6F":
                approved.append(r[2:].strip())
            elif fid not in status:
                status[fid] = r[2:]
    products: list[PreferredProduct] = []
    if rc is not None:
        cur: dict[str, str | None] | None = None
        for r in rc._raw:
            fid = r[:2]
            key = _PREFERRED_KEYS.get(fid)
            if key is None:
                continue
            # A new product starts at each 552-AP, or when a field of the current one
            # repeats (payers that omit the qualifier).
            if (
                cur is None
                or cur[key] is not None
                or (fid == "AP" and any(v is not None for v in cur.values()))
            ):
                if cur is not None:
                    products.append(PreferredProduct(**cur))
                cur = {"qualifier": None, "id": None, "description": None}
            cur[key] = _clean(r[2:])
        if cur is not None:
            products.append(PreferredProduct(**cur))
    return ResponseTransactionView(
        index=i,
        transaction_status=_clean(status.get("AN")),
        authorization_number=_clean(status.get("F3")),
        reject_codes=tuple(rejects),
        approved_message_codes=tuple(approved),
        additional_messages=tuple(m.text for m in messages),
        additional_message_info=messages,
        help_desk_phone_qualifier=_clean(status.get("7F")),
        help_desk_phone=_clean(status.get("8F")),
        preferred_products=tuple(products),
    )


def response_view(t: Transmission) -> ResponseView:
    h = t.header
    if not isinstance(h, ResponseHeader):
        raise NcpdpError("as_response() needs a response transmission; this is a request")
    msg = t.segment("20")
    txs = tuple(_status_view(i, g) for i, g in enumerate(t.groups))
    if not txs and t.segment("21") is not None:
        # A Response Status segment sent without its group (lenient mode): read it
        # rather than drop it, so that a reject never turns into an accept.
        txs = (_status_view(0, TransactionGroup._trusted(t.segments)),)
    return ResponseView(
        version=h.version,
        transaction_code=h.transaction_code,
        header_response_status=h.header_response_status,
        service_provider_id=h.service_provider_id,
        service_provider_id_qualifier=h.service_provider_id_qualifier,
        date_of_service=h.date_of_service,
        message=_get(msg, "F4"),
        transactions=txs,
        payer_ids=_pairs(t.segment("25"), "J7", "J8"),
    )
