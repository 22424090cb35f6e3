"""Helpers the table modules share: rows as dicts, placeholders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._db import Database

__all__ = ["all_rows", "first_row", "marks", "of_pharmacies"]


def all_rows(db: Database, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Every row of ``sql`` as a dict keyed by column name."""
    cur = db.conn.execute(sql, params)
    cols = [c[0] for c in cur.description] if cur.description else []
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def first_row(db: Database, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
    rows = all_rows(db, sql, params)
    return rows[0] if rows else None


def marks(n: int) -> str:
    """``?,?,...`` for an IN list of ``n`` values."""
    return ",".join("?" * n)


def of_pharmacies(provider_ids: Sequence[str] | None, column: str = "provider_id") -> str:
    """`` AND <column> IN (?,...)`` for a pharmacy filter (``None``: no filter; an
    empty list matches nothing). ``column`` is ours, never the caller's input."""
    if provider_ids is None:
        return ""
    if not provider_ids:
        return " AND 1 = 0"
    return f" AND {column} IN ({marks(len(provider_ids))})"
