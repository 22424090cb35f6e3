"""The ``idempotency_keys`` table: what each ``Idempotency-Key`` made (decision 0017)."""

from __future__ import annotations

from ._db import Database

__all__ = ["get", "insert"]


def get(db: Database, scope: str, key: str) -> tuple[str, str] | None:
    """(fingerprint, object_id) recorded for the key, or None."""
    row = db.conn.execute(
        "SELECT fingerprint, object_id FROM idempotency_keys WHERE scope = ? AND key = ?",
        [scope, key],
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def insert(db: Database, scope: str, key: str, fingerprint: str, object_id: str, now: str) -> None:
    db.conn.execute(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, object_id, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        [scope, key, fingerprint, object_id, now],
    )
