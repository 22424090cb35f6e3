"""The ``audit`` table: who did what to which object (no PHI in ``detail``)."""

from __future__ import annotations

from ._db import Database
from .engine import now_iso

__all__ = ["add"]


def add(
    db: Database,
    actor: str,
    action: str,
    object_id: str | None,
    detail: str | None = None,
    *,
    at: str | None = None,
) -> None:
    db.conn.execute(
        "INSERT INTO audit (at, actor, action, object_id, detail) VALUES (?, ?, ?, ?, ?)",
        [at or now_iso(), actor, action, object_id, detail],
    )
