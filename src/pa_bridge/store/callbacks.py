"""The ``callbacks`` and ``dead_letters`` tables: every callback body, once."""

from __future__ import annotations

from ._db import Database

__all__ = ["add_dead_letter", "count_dead_letters", "insert_once"]


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


def add_dead_letter(
    db: Database, received_at: str, reason: str, content_type: str, body: bytes
) -> None:
    db.conn.execute(
        "INSERT INTO dead_letters (received_at, reason, content_type, body) VALUES (?, ?, ?, ?)",
        [received_at, reason, content_type, body],
    )


def count_dead_letters(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0])
