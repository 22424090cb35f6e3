"""The ``idempotency_keys`` table: what each ``Idempotency-Key`` made (decision 0017)."""

from __future__ import annotations

from typing import NamedTuple

from ._db import Database

__all__ = ["KeyRow", "get", "insert"]


class KeyRow(NamedTuple):
    """What a key was used for: the path's scope, the request's fingerprint, what it
    made, and whether it was made then (None: not recorded)."""

    scope: str
    fingerprint: str
    object_id: str
    created: bool | None


def get(db: Database, key: str) -> KeyRow | None:
    """The key's record, on whichever path it was used (the first, should an older
    version have recorded it on two), or None."""
    row = db.conn.execute(
        "SELECT scope, fingerprint, object_id, created FROM idempotency_keys WHERE key = ?"
        " ORDER BY created_at LIMIT 1",
        [key],
    ).fetchone()
    if row is None:
        return None
    return KeyRow(str(row[0]), str(row[1]), str(row[2]), None if row[3] is None else bool(row[3]))


def insert(
    db: Database,
    scope: str,
    key: str,
    fingerprint: str,
    object_id: str,
    now: str,
    created: bool | None = None,
) -> None:
    db.conn.execute(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, object_id, created_at, created)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [scope, key, fingerprint, object_id, now, None if created is None else int(created)],
    )
