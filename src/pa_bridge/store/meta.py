"""The ``meta`` table: a few named values (the feed's floor, the backup mark, the
health probe)."""

from __future__ import annotations

from ._db import Database

__all__ = ["add", "delete", "get", "put", "take"]


def get(db: Database, key: str) -> str | None:
    row = db.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return None if row is None else str(row[0])


def put(db: Database, key: str, value: str) -> None:
    db.conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def add(db: Database, key: str, value: str) -> None:
    """``key`` set to ``value`` unless it has a value already (kept as it is)."""
    db.conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", [key, value]
    )


def delete(db: Database, key: str) -> None:
    db.conn.execute("DELETE FROM meta WHERE key = ?", [key])


def take(db: Database, key: str) -> str | None:
    """Delete ``key`` and return its value: one of several daemons doing this at once
    gets it (the others wait for its commit and find nothing)."""
    row = db.conn.execute("DELETE FROM meta WHERE key = ? RETURNING value", [key]).fetchone()
    return None if row is None else str(row[0])
