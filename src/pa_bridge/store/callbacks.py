"""The ``callbacks`` and ``dead_letters`` tables: every callback body, once."""

from __future__ import annotations

from . import pas
from ._db import Database, is_postgres
from .crypto import seal

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
        (dedupe_key, received_at, pa_id, seal(db, body, "callbacks.body", dedupe_key)),
    )
    return cur.rowcount != 0


def keep_and_read(
    db: Database, dedupe_key: str, received_at: str, pa_id: str, body: bytes
) -> tuple[bool, pas.CallbackState | None]:
    """:func:`insert_once`, and the PA's state to merge the callback with
    (:func:`pas.callback_state`). On PostgreSQL one statement, one round trip
    (:func:`keep_and_read_many` for one callback).

    Call it after the job took its feed position (``store.next_seq``): the counter row
    is then held, no other daemon's PA change can commit before this transaction does,
    and the statement's snapshot (taken when it starts) has every change to the PA."""
    if is_postgres(db):
        return keep_and_read_many(db, [(dedupe_key, received_at, pa_id, body)])[0]
    stored = insert_once(db, dedupe_key, received_at, pa_id, body)
    return stored, pas.callback_state(db, pa_id)


#: a callback to keep: dedupe key, received at, PA id, body
Keep = tuple[str, str, str, bytes]

#: the PA's state as the keep-and-read statement selects it, in :data:`pas.STATE_COLS`' order
_PA_STATE = ", ".join(f"p.{c}" for c in pas.STATE_COLS)


def keep_and_read_many(
    db: Database, items: list[Keep]
) -> list[tuple[bool, pas.CallbackState | None]]:
    """:func:`keep_and_read` for several callbacks, in order; on PostgreSQL one
    statement for them all. A key given twice is kept for its first item only. Each
    state is the PA's as stored before this call (a PA named twice is read once: its
    second callback must merge with what the first one makes of it, the caller's
    business). Same condition as :func:`keep_and_read`: the feed position is held."""
    if not is_postgres(db):
        return [keep_and_read(db, *item) for item in items]
    first: dict[str, int] = {}
    for i, (key, *_rest) in enumerate(items):
        first.setdefault(key, i)
    rows = [
        (i, key, at, pa, seal(db, body, "callbacks.body", key))
        for i, (key, at, pa, body) in enumerate(items)
        if first[key] == i
    ]
    values = ", ".join(["(CAST(? AS INTEGER), ?, ?, ?, CAST(? AS BYTEA))"] * len(rows))
    sql = (
        f"WITH v (n, dedupe_key, received_at, pa_id, body) AS (VALUES {values}),"  # noqa: S608 - placeholders and our column names only
        " kept AS (INSERT INTO callbacks (dedupe_key, received_at, pa_id, body)"
        " SELECT dedupe_key, received_at, pa_id, body FROM v ORDER BY n"
        " ON CONFLICT (dedupe_key) DO NOTHING RETURNING dedupe_key)"
        " SELECT v.n, v.dedupe_key IN (SELECT dedupe_key FROM kept), p.id IS NOT NULL,"
        f" {_PA_STATE} FROM v LEFT JOIN pas AS p ON p.id = v.pa_id"
    )
    params = [x for row in rows for x in row]
    found: dict[int, tuple[bool, pas.CallbackState | None]] = {}
    by_pa: dict[str, pas.CallbackState | None] = {}
    for r in db.conn.execute(sql, params).fetchall():
        state = pas.state_of(r[3:]) if r[2] else None
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
        [received_at, reason, content_type, seal(db, body, "dead_letters.body", "-")],
    )


def count_dead_letters(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0])
