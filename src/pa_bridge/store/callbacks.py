"""The ``callbacks`` and ``dead_letters`` tables: every callback body, once."""

from __future__ import annotations

from typing import cast

from . import pas
from ._db import Database, is_postgres

__all__ = ["add_dead_letter", "count_dead_letters", "insert_once", "keep_and_read"]


def insert_once(db: Database, dedupe_key: str, received_at: str, pa_id: str, body: bytes) -> bool:
    """Keep the body; False when a callback with the same key is kept already (on
    PostgreSQL also when another daemon's transaction keeps it at this moment: this
    insert waits for that one and then does nothing)."""
    cur = db.conn.execute(
        "INSERT INTO callbacks (dedupe_key, received_at, pa_id, body) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (dedupe_key) DO NOTHING",
        (dedupe_key, received_at, pa_id, body),
    )
    return cur.rowcount != 0


#: kept or not, whether the PA exists, then its state in :data:`pas.STATE_COLS`' order
_KEEP_AND_READ = (
    "WITH kept AS (INSERT INTO callbacks (dedupe_key, received_at, pa_id, body)"
    " VALUES (?, ?, ?, ?) ON CONFLICT (dedupe_key) DO NOTHING RETURNING 1)"
    " SELECT (SELECT count(*) FROM kept), p.id IS NOT NULL, p.workflow_status,"
    " p.plan_outcome, p.status_time, p.events_json, p.deleted, p.fax_failed, p.links_json,"
    " p.urls_json, p.details_json FROM (SELECT 1) AS one LEFT JOIN pas AS p ON p.id = ?"
)


def keep_and_read(
    db: Database, dedupe_key: str, received_at: str, pa_id: str, body: bytes
) -> tuple[bool, pas.CallbackState | None]:
    """:func:`insert_once`, and the PA's state to merge the callback with
    (:func:`pas.callback_state`). On PostgreSQL one statement, one round trip.

    Call it after the job took its feed position (``store.next_seq``): the counter row
    is then held, no other daemon's PA change can commit before this transaction does,
    and the statement's snapshot (taken when it starts) has every change to the PA."""
    if not is_postgres(db):
        stored = insert_once(db, dedupe_key, received_at, pa_id, body)
        return stored, pas.callback_state(db, pa_id)
    row = db.conn.execute(_KEEP_AND_READ, (dedupe_key, received_at, pa_id, body, pa_id)).fetchone()
    state = None
    if row[1]:
        state = cast(pas.CallbackState, dict(zip(pas.STATE_COLS, row[2:], strict=True)))
    return bool(row[0]), state


def add_dead_letter(
    db: Database, received_at: str, reason: str, content_type: str, body: bytes
) -> None:
    db.conn.execute(
        "INSERT INTO dead_letters (received_at, reason, content_type, body) VALUES (?, ?, ?, ?)",
        [received_at, reason, content_type, body],
    )


def count_dead_letters(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0])
