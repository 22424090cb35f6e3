"""The console's read models and its one write (issue 16): the PAs the worklist looks
at, acknowledgements (kept in the audit trail), the claim behind a PA.

Acknowledgements are audit rows: ``action = 'pa.acknowledged'``, ``object_id`` the PA
id, ``actor`` who (the intake token's number, or ``console`` on loopback without
tokens), ``at`` when, and ``detail`` a JSON object ``{"attention": ..., "cursor": ...}``:
which worklist reason the pharmacist acknowledged and the PA's change cursor then
(decision 0014).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from . import audit
from ._db import Database
from ._rows import all_rows, first_row, marks, of_pharmacies, rows_in
from .crypto import unseal
from .exchanges import WorklistClaim
from .pas import PaRow

__all__ = [
    "ACK_ACTION",
    "Acknowledgement",
    "ConsoleClaim",
    "acknowledge",
    "acknowledgements",
    "claim",
    "claim_requests",
    "latest_acknowledgements",
    "pas_by_claim_keys",
    "pas_changed_since",
]

ACK_ACTION = "pa.acknowledged"


class Acknowledgement(TypedDict):
    at: str
    by: str
    attention: str | None
    cursor: str | None


class ConsoleClaim(WorklistClaim):
    """A stored claim without its metadata (PHI) or the payer's response."""

    transaction_code: str | None
    bin: str | None
    pcn: str | None
    group_id: str | None
    raw_purged_at: str | None


def pas_changed_since(
    db: Database, since_iso: str, limit: int, provider_ids: list[str] | None = None
) -> list[PaRow]:
    """PAs changed at or after ``since_iso``, most recently changed first (only these
    pharmacies' with ``provider_ids``)."""
    sql = (
        "SELECT * FROM pas WHERE updated_at >= ?"  # noqa: S608 - only placeholders
        f"{of_pharmacies(provider_ids)} ORDER BY updated_at DESC LIMIT ?"
    )
    return cast(list[PaRow], all_rows(db, sql, [since_iso, *(provider_ids or ()), limit]))


def claim_requests(db: Database, claim_ids: list[str]) -> dict[str, bytes | None]:
    """The stored request of each claim (None once purged), for Rx numbers and product ids."""
    sql = "SELECT id, request_raw FROM exchanges WHERE id IN ({marks})"
    return {
        row["id"]: unseal(db, row["request_raw"], "exchanges.request_raw", row["id"])
        for row in rows_in(db, sql, claim_ids)
    }


def pas_by_claim_keys(db: Database, keys: list[str]) -> dict[str, PaRow]:
    """The newest PA per claim key (a claim sent again has its own id but the same
    key: the service answers it with the first one's PA)."""
    sql = "SELECT * FROM pas WHERE claim_key IN ({marks}) ORDER BY created_at"
    # oldest first: the last row of a key, its newest PA, is the one kept
    return {row["claim_key"]: cast(PaRow, row) for row in rows_in(db, sql, keys)}


def _ack(row: dict[str, Any]) -> Acknowledgement:
    try:
        detail = json.loads(row["detail"] or "{}")
    except ValueError:
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    return {
        "at": row["at"],
        "by": row["actor"],
        "attention": detail.get("attention"),
        "cursor": detail.get("cursor"),
    }


def latest_acknowledgements(db: Database, ids: Mapping[str, str]) -> dict[str, Acknowledgement]:
    """The last acknowledgement of each PA that has one. ``ids``: every id a PA had
    (its id, and the provisional id it was renamed from) -> its id now, the key of
    the answer."""
    sql = (
        "SELECT id, object_id, at, actor, detail FROM audit WHERE object_id IN ({marks})"
        " AND action = ?"
    )
    found = sorted(rows_in(db, sql, list(ids), [ACK_ACTION]), key=lambda r: int(r["id"]))
    return {ids[row["object_id"]]: _ack(row) for row in found}  # the last one wins


def acknowledgements(db: Database, pa_ids: list[str]) -> list[Acknowledgement]:
    """Every acknowledgement of one PA (``pa_ids``: every id it had), oldest first."""
    rows = all_rows(
        db,
        f"SELECT object_id, at, actor, detail FROM audit WHERE object_id IN ({marks(len(pa_ids))})"  # noqa: S608 - only placeholders
        " AND action = ? ORDER BY id",
        [*pa_ids, ACK_ACTION],
    )
    return [_ack(r) for r in rows]


def acknowledge(
    db: Database,
    pa_id: str,
    who: str,
    attention: str | None,
    cursor: str,
    at: str,
    remote: str | None = None,
) -> Acknowledgement:
    """Record that ``who`` acknowledged the PA for ``attention`` (a write job)."""
    audit.add(
        db,
        who,
        ACK_ACTION,
        pa_id,
        json.dumps({"attention": attention, "cursor": cursor}),
        at=at,
        remote=remote,
    )
    return {"at": at, "by": who, "attention": attention, "cursor": cursor}


def claim(db: Database, claim_id: str) -> ConsoleClaim | None:
    """The stored claim behind a PA, without its metadata (PHI) or the payer's response."""
    row = first_row(
        db,
        "SELECT id, received_at, request_raw, answer_json, reject_codes, transaction_count,"
        " transaction_code, bin, pcn, group_id, raw_purged_at FROM exchanges"
        " WHERE id = ? AND kind = 'claim'",
        [claim_id],
    )
    if row is not None:
        row["request_raw"] = unseal(db, row["request_raw"], "exchanges.request_raw", row["id"])
    return cast(ConsoleClaim | None, row)
