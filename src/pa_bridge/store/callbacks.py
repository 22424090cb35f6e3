"""The ``callbacks`` and ``dead_letters`` tables: every callback body, once."""

from __future__ import annotations

from typing import cast

from . import pas
from ._db import Database, is_postgres

__all__ = [
    "add_dead_letter",
    "count_dead_letters",
    "insert_once",
    "keep_and_read",
    "keep_and_read_many",
]


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


#: a callback to keep: dedupe key, received at, PA id, body
Keep = tuple[str, str, str, bytes]


def keep_and_read_many(
    db: Database, items: list[Keep]
) -> list[tuple[bool, pas.CallbackState | None]]:
    """:func:`keep_and_read` for several callbacks, in order; on PostgreSQL one
    statement for them all. A key given twice is kept for its first item only. Each
    state is the PA's as stored before this call (a PA named twice is read once: its
    second callback must merge with what the first one makes of it, the caller's
    business). Same condition as :func:`keep_and_read`: the feed position is held."""
    if not is_postgres(db) or len(items) == 1:
        return [keep_and_read(db, *item) for item in items]
    first: dict[str, int] = {}
    for i, (key, *_rest) in enumerate(items):
        first.setdefault(key, i)
    rows = [(i, *item) for i, item in enumerate(items) if first[item[0]] == i]
    values = ", ".join(["(CAST(? AS INTEGER), ?, ?, ?, CAST(? AS BYTEA))"] * len(rows))
    sql = (
        f"WITH v (n, dedupe_key, received_at, pa_id, body) AS (VALUES {values}),"  # noqa: S608 - placeholders only
        " kept AS (INSERT INTO callbacks (dedupe_key, received_at, pa_id, body)"
        " SELECT dedupe_key, received_at, pa_id, body FROM v ORDER BY n"
        " ON CONFLICT (dedupe_key) DO NOTHING RETURNING dedupe_key)"
        " SELECT v.n, v.dedupe_key IN (SELECT dedupe_key FROM kept), p.id IS NOT NULL,"
        " p.workflow_status, p.plan_outcome, p.status_time, p.events_json, p.deleted,"
        " p.fax_failed, p.links_json, p.urls_json, p.details_json"
        " FROM v LEFT JOIN pas AS p ON p.id = v.pa_id"
    )
    params = [x for row in rows for x in row]
    found: dict[int, tuple[bool, pas.CallbackState | None]] = {}
    by_pa: dict[str, pas.CallbackState | None] = {}
    for r in db.conn.execute(sql, params).fetchall():
        state = None
        if r[2]:
            state = cast(pas.CallbackState, dict(zip(pas.STATE_COLS, r[3:], strict=True)))
        found[int(r[0])] = (bool(r[1]), state)
        by_pa[items[int(r[0])][2]] = state
    return [
        found[i] if first[item[0]] == i else (False, by_pa[item[2]]) for i, item in enumerate(items)
    ]


def add_dead_letter(
    db: Database, received_at: str, reason: str, content_type: str, body: bytes
) -> None:
    db.conn.execute(
        "INSERT INTO dead_letters (received_at, reason, content_type, body) VALUES (?, ?, ?, ?)",
        [received_at, reason, content_type, body],
    )


def count_dead_letters(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0])
