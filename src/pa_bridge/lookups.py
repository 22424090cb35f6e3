"""The integrator's look-ups (issue 16): a claim's PAs, the feed's newest change.

A claim's PAs, per transaction: the PA submitted from that transaction, else the live
(not deleted) PA of another exchange with the same claim key (BIN, PCN, group, Rx
number, fill number, provider): a re-sent exchange shows the PA of its claim, and
submitting it answers that PA (decision 0017).
"""

from __future__ import annotations

import json
from typing import Any

from .store import Database, Store

__all__ = [
    "claim_keys_of",
    "newest_change",
    "pas_for_claim",
    "reversal_outcome",
    "reversal_pas",
    "set_pa_drug",
]


def set_pa_drug(db: Database, pa_id: str, rx_number: str | None, product_id: str | None) -> None:
    """The PA's Rx number and product id, from the claim it was submitted for."""
    db.execute(
        "UPDATE pas SET rx_number = coalesce(rx_number, ?), product_id = coalesce(product_id, ?)"
        " WHERE id = ?",
        [rx_number, product_id, pa_id],
    )


def claim_keys_of(exchange: dict[str, Any]) -> list[str]:
    """The claim keys stored with an exchange, one per transaction ([] for exchanges
    stored before they were kept)."""
    try:
        keys = json.loads(exchange.get("claim_keys") or "[]")
    except ValueError:
        return []
    return [str(k) for k in keys] if isinstance(keys, list) else []


def pas_for_claim(store: Store, claim_id: str, keys: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """(transaction index in this claim, PA row) for each transaction that has one."""
    own = store.query(
        "SELECT * FROM pas WHERE claim_id = ? ORDER BY transaction_index, created_at", [claim_id]
    )
    out: dict[int, dict[str, Any]] = {}
    for row in own:
        out.setdefault(int(row["transaction_index"] or 0), row)
    for i, key in enumerate(keys):
        if i in out or not key:
            continue
        rows = store.query(
            "SELECT * FROM pas WHERE claim_key = ? AND deleted = 0 AND claim_id IS NOT NULL"
            " ORDER BY created_at LIMIT 1",
            [key],
        )
        if rows:
            out[i] = rows[0]
    return sorted(out.items(), key=lambda item: item[0])


def newest_change(store: Store) -> int:
    """The newest cursor the feed can have handed out: the last change, or the floor a
    restore set (decision 0009), whichever is later."""
    row = store.query(
        "SELECT coalesce(max(change_seq), 0) AS seq, coalesce((SELECT CAST(value AS INTEGER)"
        " FROM meta WHERE key = 'feed.seq_floor'), 0) AS floor FROM pas"
    )[0]
    return max(int(row["seq"]), int(row["floor"]))


def reversal_pas(store: Store, keys: list[str], *, live_only: bool = True) -> list[dict[str, Any]]:
    """The PAs we hold for the claims a B2 reverses (by claim key): the ones the
    service deletes. ``live_only``: not deleted already."""
    out: list[dict[str, Any]] = []
    for key in dict.fromkeys(keys):
        rows = store.query(
            "SELECT id, workflow_status, deleted FROM pas WHERE claim_key = ?"
            " AND claim_id IS NOT NULL AND (deleted = 0 OR ?) ORDER BY created_at",
            [key, 0 if live_only else 1],
        )
        out.extend(
            {
                "pa_id": r["id"],
                "workflow_status": r["workflow_status"],
                "deleted": bool(r["deleted"]),
            }
            for r in rows
        )
    return out


def reversal_outcome(status: str, pas: list[dict[str, Any]]) -> dict[str, Any]:
    """What a reversal's answer says happened: ``pa_found``, ``pas`` (each PA the
    service deletes; ``deleted`` turns true when its DELETE event has arrived) and a
    plain ``message``."""
    names = ", ".join(p["pa_id"] for p in pas)
    if status == "delivered":
        message = (
            f"The PA service took the reversal and deletes PA {names}; its DELETE event"
            " follows by callback."
            if pas
            else "The PA service took the reversal; pa-bridge knows no PA for this claim."
        )
    elif status == "failed":
        message = "The PA service refused the reversal; nothing was deleted."
    else:
        message = "The reversal is queued and retried until the PA service takes it" + (
            f"; it then deletes PA {names}." if pas else "."
        )
    return {"pa_found": bool(pas), "pas": pas, "message": message}
