"""Helpers the table modules share: rows as dicts, placeholders."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ._db import Database

__all__ = ["all_rows", "first_row", "marks", "of_pharmacies", "rows_in"]

#: values bound in one IN list at most (SQLite allows far more; this keeps statements small)
IN_BATCH = 500


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


def rows_in(
    db: Database, sql: str, values: Sequence[Any], after: Sequence[Any] = ()
) -> Iterator[dict[str, Any]]:
    """The rows of ``sql`` for every one of ``values``, asked ``IN_BATCH`` at a time:
    ``{marks}`` in ``sql`` is where the IN list's placeholders go; ``after`` are the
    parameters that follow the list."""
    for i in range(0, len(values), IN_BATCH):
        part = values[i : i + IN_BATCH]
        yield from all_rows(db, sql.format(marks=marks(len(part))), [*part, *after])


def of_pharmacies(provider_ids: Sequence[str] | None, column: str = "provider_id") -> str:
    """`` AND <column> IN (?,...)`` for a pharmacy filter (``None``: no filter; an
    empty list matches nothing). ``column`` is ours, never the caller's input."""
    if provider_ids is None:
        return ""
    if not provider_ids:
        return " AND 1 = 0"
    return f" AND {column} IN ({marks(len(provider_ids))})"
