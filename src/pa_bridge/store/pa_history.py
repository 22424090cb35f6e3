"""The ``pa_history`` table: every submit, callback and reversal note of a PA, in
arrival order."""

from __future__ import annotations

from typing import TypedDict, cast

from ._db import Database
from ._rows import all_rows

__all__ = ["HistoryRow", "add", "for_pa", "latest"]


class HistoryRow(TypedDict):
    id: int
    pa_id: str
    received_at: str
    source: str  # submit, callback, reversal
    workflow_status: str | None
    plan_outcome: str | None
    event_time: str | None
    events_json: str | None
    note: str | None


def add(
    db: Database,
    pa_id: str,
    received_at: str,
    source: str,
    *,
    workflow_status: str | None = None,
    plan_outcome: str | None = None,
    event_time: str | None = None,
    events_json: str | None = None,
    note: str | None = None,
) -> None:
    db.conn.execute(
        "INSERT INTO pa_history (pa_id, received_at, source, workflow_status, plan_outcome,"
        " event_time, events_json, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (pa_id, received_at, source, workflow_status, plan_outcome, event_time, events_json,
         note),
    )  # fmt: skip


def for_pa(db: Database, pa_id: str) -> list[HistoryRow]:
    return cast(
        list[HistoryRow],
        all_rows(db, "SELECT * FROM pa_history WHERE pa_id = ? ORDER BY id", [pa_id]),
    )


def latest(db: Database, pa_id: str) -> HistoryRow | None:
    """The PA's newest history entry, or None."""
    rows = all_rows(
        db, "SELECT * FROM pa_history WHERE pa_id = ? ORDER BY id DESC LIMIT 1", [pa_id]
    )
    return cast(HistoryRow, rows[0]) if rows else None
