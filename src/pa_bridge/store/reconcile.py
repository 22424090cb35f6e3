"""Reconciliation's statements (issue 28, decision 0031): which PAs a pass reads back
from the service, a PA the service no longer returns (``pas.gone_at``), and the pass's
bookkeeping in ``meta``.

``meta`` keys: ``reconcile.last_started`` (epoch seconds of the fleet's last pass,
what makes the next one due), ``reconcile.last_pass`` (JSON summary of the last
complete pass, what ``/healthz`` and ``doctor`` say), ``reconcile.request.<id>`` (a
``pa-bridge reconcile`` asked the serving daemon for a pass) and
``reconcile.result.<id>`` (its answer).
"""

from __future__ import annotations

from typing import TypedDict, cast

from ._db import Database
from ._rows import all_rows

__all__ = [
    "Candidate",
    "DETERMINED",
    "FINAL_STATUSES",
    "REQUEST_PREFIX",
    "RESULT_PREFIX",
    "candidates",
    "clear_gone",
    "mark_gone",
    "one",
    "requests",
]

#: statuses after which the service sends nothing more about the PA
FINAL_STATUSES = ("Archived", "Provider Cancel", "Expired", "Failure")
#: outcomes that are the plan's determination (or a cancellation)
DETERMINED = ("Favorable", "Unfavorable", "N/A", "Cancelled")

REQUEST_PREFIX = "reconcile.request."
RESULT_PREFIX = "reconcile.result."


class Candidate(TypedDict):
    id: str
    provider_id: str | None
    urls_json: str | None
    links_json: str | None
    gone_at: str | None
    deleted: int


_FINAL = ", ".join(f"'{s}'" for s in FINAL_STATUSES)
_DETERMINED = ", ".join(f"'{s}'" for s in DETERMINED)

#: open: no DELETE, still returned, not in a final status, no determination yet
_OPEN = (
    f"(deleted = 0 AND gone_at IS NULL AND coalesce(workflow_status, '') NOT IN ({_FINAL})"
    f" AND coalesce(plan_outcome, '') NOT IN ({_DETERMINED}))"
)


def candidates(
    db: Database, *, after_id: str, changed_since: str, last_day: str, limit: int
) -> list[Candidate]:
    """The PAs a pass reads, by id after ``after_id`` (a page of ``limit``): every open
    PA; every PA changed at or after ``changed_since`` whatever its state (a final
    status can still change: an appeal, a deletion), except one deleted already (the
    service revokes every access to a deleted PA: it cannot be read, and is not news);
    and every approval ending on or before ``last_day`` that has no renewal yet (its
    renewals and its period are read back). One PA whatever its state: :func:`one`."""
    sql = (
        "SELECT id, provider_id, urls_json, links_json, gone_at, deleted FROM pas"  # noqa: S608 - our conditions
        f" WHERE id > ? AND ({_OPEN} OR (updated_at >= ? AND deleted = 0)"
        " OR (expires_at IS NOT NULL AND expires_at <= ?"
        " AND renewed_by IS NULL AND deleted = 0 AND gone_at IS NULL)) ORDER BY id LIMIT ?"
    )
    return cast(list[Candidate], all_rows(db, sql, [after_id, changed_since, last_day, limit]))


def one(db: Database, pa_id: str) -> Candidate | None:
    """The PA ``pa-bridge reconcile --pa ID`` reads, whatever its state."""
    rows = all_rows(
        db,
        "SELECT id, provider_id, urls_json, links_json, gone_at, deleted FROM pas WHERE id = ?",
        [pa_id],
    )
    return cast(Candidate, rows[0]) if rows else None


def mark_gone(db: Database, pa_id: str, *, at: str, seq: int) -> bool:
    """The service no longer returns the PA (no token left: effectively deleted). A
    feed change; False when it was marked already. News for the pharmacist like a
    DELETE event (``news_seq``, decision 0014), unless a DELETE event came already (a
    deleted PA losing its tokens changes nothing they see)."""
    cur = db.conn.execute(
        "UPDATE pas SET gone_at = ?, updated_at = ?, change_seq = ?,"
        " news_seq = CASE WHEN deleted = 0 THEN ? ELSE news_seq END WHERE id = ?"
        " AND gone_at IS NULL",
        [at, at, seq, seq, pa_id],
    )
    return cur.rowcount == 1


def clear_gone(db: Database, pa_id: str, *, at: str, seq: int) -> bool:
    """The service returns the PA again (a token was made for it): no longer gone; news
    for the pharmacist too, unless a DELETE event keeps it deleted."""
    cur = db.conn.execute(
        "UPDATE pas SET gone_at = NULL, updated_at = ?, change_seq = ?,"
        " news_seq = CASE WHEN deleted = 0 THEN ? ELSE news_seq END WHERE id = ?"
        " AND gone_at IS NOT NULL",
        [at, seq, seq, pa_id],
    )
    return cur.rowcount == 1


def requests(db: Database) -> list[tuple[str, str]]:
    """(key, value) of every ``pa-bridge reconcile`` waiting for a serving daemon."""
    end = REQUEST_PREFIX[:-1] + chr(ord(REQUEST_PREFIX[-1]) + 1)
    return [
        (str(r[0]), str(r[1]))
        for r in db.conn.execute(
            "SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
            [REQUEST_PREFIX, end],
        )
    ]
