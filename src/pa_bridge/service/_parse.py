"""Reading the raw NCPDP a request body carries."""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError

import ncpdp

from ..store.exchanges import NewExchange
from .decisions import parse_error_text

__all__ = ["invalid", "new_exchange", "parse_transmission"]


def invalid(code: str, message: str, detail: Any = None) -> PydanticCustomError:
    """A body's field that is not what it should be, said the way a pydantic validator
    says it; :func:`.bodies.read` turns it into an ``InvalidRequest`` with its code."""
    return PydanticCustomError(code, "{message}", {"message": message, "detail": detail})


def parse_transmission(raw: Any, what: str, *, want: str) -> tuple[ncpdp.Transmission, bytes]:
    """The transmission in body field ``what`` and its bytes (a body's validator: an
    :func:`invalid` error else)."""
    if not isinstance(raw, str) or not raw:
        raise invalid("invalid_body", f"'{what}' must be a non-empty string of raw NCPDP")
    try:
        t = ncpdp.parse(raw, strict=False)
    except ncpdp.ParseError as e:
        raise invalid(
            "malformed_claim",
            f"the {what} is not a well-formed NCPDP {want}: {parse_error_text(e)}",
            {"part": what, "offset": e.offset, "segment_id": e.segment_id, "field_id": e.field_id},
        ) from None
    if t.kind != want:
        raise invalid(
            "malformed_claim",
            f"the {what} is an NCPDP {t.kind}, expected a {want}",
            {"part": what},
        )
    return t, bytes(t)


def new_exchange(
    exchange_id: str, kind: str, actor: str, rv: ncpdp.RequestView, raw: bytes, received_at: str
) -> NewExchange:
    """The columns every stored exchange has, from its request."""
    return {
        "id": exchange_id,
        "received_at": received_at,
        "actor": actor,
        "kind": kind,
        "version": rv.version,
        "transaction_code": rv.transaction_code,
        "bin": rv.bin,
        "pcn": rv.pcn,
        "group_id": rv.group_id,
        "provider_id": rv.service_provider_id,
        "date_of_service": rv.date_of_service,
        "request_raw": raw,
    }
