"""The ``meta`` table: a few named values (the feed's floor, the backup mark, the
health probe)."""

from __future__ import annotations

from sqlite_utils import Database

__all__ = ["delete", "get", "put"]


def get(db: Database, key: str) -> str | None:
    row = db.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return None if row is None else str(row[0])


def put(db: Database, key: str, value: str) -> None:
    db.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [key, value])


def delete(db: Database, key: str) -> None:
    db.conn.execute("DELETE FROM meta WHERE key = ?", [key])
