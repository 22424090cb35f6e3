"""The console's own SQL (issue 16): the PAs the worklist looks at, acknowledgements
(kept in the audit trail), and the claim behind a PA. Reads and the one write, in one
place, so the move of SQL into a store package can take this module whole.

Acknowledgements are audit rows: ``action = 'pa.acknowledged'``, ``object_id`` the PA
id, ``actor`` who (the intake token's number, or ``console`` on loopback without
tokens), ``at`` when, and ``detail`` a JSON object ``{"attention": ..., "cursor": ...}``:
which worklist reason the pharmacist acknowledged and the PA's change cursor then
(decision 0014).
"""

from __future__ import annotations

import json
from typing import Any

from .store import Database, Store, now_iso

__all__ = [
    "ACK_ACTION",
    "acknowledge",
    "acknowledgements",
    "latest_acknowledgements",
    "pas_changed_since",
    "claim_requests",
    "pas_by_claim_keys",
    "claim_row",
]

ACK_ACTION = "pa.acknowledged"

#: The columns of ``pas`` the console reads (never the raw callback bodies).
_PA_COLUMNS = (
    "id, claim_id, transaction_index, claim_key, urls_json, links_json, workflow_status,"
    " plan_outcome, status_time, deleted, fax_failed, events_json, matched, created_at,"
    " updated_at, change_seq, details_json"
)


def pas_changed_since(store: Store, since_iso: str, limit: int) -> list[dict[str, Any]]:
    """PAs changed at or after ``since_iso``, most recently changed first."""
    return store.query(
        f"SELECT {_PA_COLUMNS} FROM pas WHERE updated_at >= ?"  # noqa: S608 - our columns
        " ORDER BY updated_at DESC LIMIT ?",
        [since_iso, limit],
    )


def claim_requests(store: Store, claim_ids: list[str]) -> dict[str, bytes | None]:
    """The stored request of each claim (None once purged), for Rx numbers and product ids."""
    out: dict[str, bytes | None] = {}
    for i in range(0, len(claim_ids), 500):
        part = claim_ids[i : i + 500]
        marks = ",".join("?" for _ in part)
        for row in store.query(
            f"SELECT id, request_raw FROM exchanges WHERE id IN ({marks})",  # noqa: S608 - placeholders
            part,
        ):
            out[row["id"]] = row["request_raw"]
    return out


def pas_by_claim_keys(store: Store, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The newest PA per claim key (a claim sent again has its own id but the same
    key: the service answers it with the first one's PA)."""
    if not keys:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(keys), 500):
        part = keys[i : i + 500]
        marks = ",".join("?" for _ in part)
        for row in store.query(
            f"SELECT {_PA_COLUMNS} FROM pas WHERE claim_key IN ({marks})"  # noqa: S608 - placeholders
            " ORDER BY created_at",
            part,
        ):
            out[row["claim_key"]] = row
    return out


def latest_acknowledgements(store: Store, pa_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The last acknowledgement of each PA that has one: ``{at, by, attention, cursor}``."""
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(pa_ids), 500):
        part = pa_ids[i : i + 500]
        marks = ",".join("?" for _ in part)
        for row in store.query(
            f"SELECT object_id, at, actor, detail FROM audit WHERE object_id IN ({marks})"  # noqa: S608 - placeholders
            " AND action = ? ORDER BY id",
            [*part, ACK_ACTION],
        ):
            out[row["object_id"]] = _ack(row)
    return out


def acknowledgements(store: Store, pa_id: str) -> list[dict[str, Any]]:
    """Every acknowledgement of one PA, oldest first."""
    rows = store.query(
        "SELECT object_id, at, actor, detail FROM audit WHERE object_id = ? AND action = ?"
        " ORDER BY id",
        [pa_id, ACK_ACTION],
    )
    return [_ack(r) for r in rows]


def _ack(row: dict[str, Any]) -> dict[str, Any]:
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


def acknowledge(
    store: Store, pa_id: str, who: str, attention: str | None, cursor: str, now: float
) -> dict[str, Any]:
    """Record that ``who`` acknowledged the PA for ``attention``; the audit row as read back."""
    at = now_iso(now)
    detail = json.dumps({"attention": attention, "cursor": cursor})

    def job(db: Database) -> None:
        db.execute(
            "INSERT INTO audit (at, actor, action, object_id, detail) VALUES (?, ?, ?, ?, ?)",
            [at, who, ACK_ACTION, pa_id, detail],
        )

    store.write(job)
    return {"at": at, "by": who, "attention": attention, "cursor": cursor}


def claim_row(store: Store, claim_id: str) -> dict[str, Any] | None:
    """The stored claim behind a PA, without its metadata (PHI) or the payer's response."""
    rows = store.query(
        "SELECT id, received_at, request_raw, answer_json, reject_codes, transaction_count,"
        " transaction_code, bin, pcn, group_id, raw_purged_at FROM exchanges"
        " WHERE id = ? AND kind = 'claim'",
        [claim_id],
    )
    return rows[0] if rows else None
