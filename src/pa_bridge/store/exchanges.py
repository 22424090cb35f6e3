"""The ``exchanges`` table: every claim and reversal the dispensing system sent."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from ._db import Database
from ._rows import all_rows, first_row, of_pharmacies
from .crypto import seal, seal_text, unseal, unseal_text

__all__ = [
    "ClaimContent",
    "ExchangeRow",
    "NewExchange",
    "WorklistClaim",
    "answer_json",
    "claim_content",
    "get",
    "insert",
    "pa_eligible_claims_since",
    "record_answer",
]


class _FromRequest(TypedDict):
    """The columns every exchange has from its request."""

    id: str
    received_at: str
    actor: str | None
    kind: str  # 'claim' or 'reversal'
    version: str | None
    transaction_code: str | None
    bin: str | None
    pcn: str | None
    group_id: str | None
    provider_id: str | None
    date_of_service: str | None
    request_raw: bytes | None  # NULL once purged


class NewExchange(_FromRequest, total=False):
    """The columns an exchange is inserted with (the others stay NULL)."""

    transaction_count: int
    response_raw: bytes
    metadata_json: str
    transaction_status: str
    reject_codes: str
    pa_eligible: int
    claim_keys: str  # JSON list, one claim key per transaction


class ExchangeRow(_FromRequest):
    transaction_count: int | None
    response_raw: bytes | None
    metadata_json: str | None
    answer_json: str | None
    transaction_status: str | None
    reject_codes: str | None
    pa_eligible: int | None
    message_source: str | None
    raw_purged_at: str | None
    claim_keys: str | None  # JSON list, one per transaction (NULL before issue 16)


class ClaimContent(TypedDict):
    request_raw: bytes | None
    response_raw: bytes | None
    metadata_json: str | None


class WorklistClaim(TypedDict):
    id: str
    received_at: str
    request_raw: bytes | None
    answer_json: str | None
    reject_codes: str | None
    transaction_count: int | None


def insert(db: Database, row: NewExchange) -> None:
    """A plain prepared INSERT: the claim hot path (sqlite-utils' insert() inspects the
    table and builds its SQL on every call)."""
    cols = list(row)
    values: dict[str, Any] = dict(row)
    _seal_content(db, values)
    db.conn.execute(
        f"INSERT INTO exchanges ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608 - column names are ours
        [values[c] for c in cols],
    )


def _seal_content(db: Database, values: dict[str, Any]) -> None:
    """The claim's bytes and metadata (PHI) sealed for the store (decision 0033)."""
    row = values["id"]
    for col in ("request_raw", "response_raw"):
        if values.get(col) is not None:
            values[col] = seal(db, values[col], f"exchanges.{col}", row)
    if values.get("metadata_json") is not None:
        values["metadata_json"] = seal_text(
            db, values["metadata_json"], "exchanges.metadata_json", row
        )


def _open_content(db: Database, row: dict[str, Any] | None, key: str = "id") -> Any:
    """The stored claim's bytes and metadata opened in place (those of ``row`` present)."""
    if row is None:
        return None
    ident = row[key]
    for col in ("request_raw", "response_raw"):
        if col in row:
            row[col] = unseal(db, row[col], f"exchanges.{col}", ident)
    if "metadata_json" in row:
        row["metadata_json"] = unseal_text(
            db, row["metadata_json"], "exchanges.metadata_json", ident
        )
    return row


def record_answer(db: Database, claim_id: str, answer_json: str, message_source: str) -> None:
    db.conn.execute(
        "UPDATE exchanges SET answer_json = ?, message_source = ? WHERE id = ?",
        [answer_json, message_source, claim_id],
    )


def answer_json(db: Database, claim_id: str) -> str | None:
    """The answer recorded for a claim (None until it is, or for no such claim)."""
    row = db.conn.execute("SELECT answer_json FROM exchanges WHERE id = ?", [claim_id]).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def get(db: Database, exchange_id: str) -> ExchangeRow | None:
    return cast(
        ExchangeRow | None,
        _open_content(db, first_row(db, "SELECT * FROM exchanges WHERE id = ?", [exchange_id])),
    )


def claim_content(db: Database, exchange_id: str) -> ClaimContent | None:
    row = _open_content(
        db,
        first_row(
            db,
            "SELECT id, request_raw, response_raw, metadata_json FROM exchanges WHERE id = ?",
            [exchange_id],
        ),
    )
    if row is not None:
        del row["id"]
    return cast(ClaimContent | None, row)


def pa_eligible_claims_since(
    db: Database, start: str, limit: int, provider_ids: list[str] | None = None
) -> list[WorklistClaim]:
    """PA-eligible claims received at or after ``start``, newest first (only these
    pharmacies' with ``provider_ids``)."""
    sql = (
        "SELECT id, received_at, request_raw, answer_json, reject_codes, transaction_count"  # noqa: S608 - only placeholders
        " FROM exchanges WHERE kind = 'claim' AND pa_eligible = 1 AND received_at >= ?"
        f"{of_pharmacies(provider_ids)} ORDER BY received_at DESC LIMIT ?"
    )
    rows = all_rows(db, sql, [start, *(provider_ids or ()), limit])
    return cast(list[WorklistClaim], [_open_content(db, r) for r in rows])
