"""The ``idempotency_keys`` table: what each ``Idempotency-Key`` made (decision 0017)."""

from __future__ import annotations

from typing import NamedTuple

from ._db import Database

__all__ = ["KeyRow", "get", "insert"]


class KeyRow(NamedTuple):
    """What a key was used for: the path's scope, the request's fingerprint, what it
    made, and the status it was answered with (None: not recorded)."""

    scope: str
    fingerprint: str
    object_id: str
    status: int | None


def get(db: Database, key: str) -> KeyRow | None:
    """The key's record, on whichever path it was used (the first, should an older
    version have recorded it on two), or None."""
    row = db.conn.execute(
        "SELECT scope, fingerprint, object_id, status FROM idempotency_keys WHERE key = ?"
        " ORDER BY created_at LIMIT 1",
        [key],
    ).fetchone()
    if row is None:
        return None
    return KeyRow(str(row[0]), str(row[1]), str(row[2]), None if row[3] is None else int(row[3]))


def insert(
    db: Database,
    scope: str,
    key: str,
    fingerprint: str,
    object_id: str,
    now: str,
    status: int | None = None,
) -> None:
    db.conn.execute(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, object_id, created_at, status)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [scope, key, fingerprint, object_id, now, status],
    )
