"""Approvals that lapse (issue 28): the approval's end date kept on the PA
(``pas.expires_at``), the renewal links both ways (``renewal_of``, ``renewed_by``), and
the announcement of a PA entering the "Expiring soon" window (``expiring_at``).

``expires_at`` is a date, ``YYYY-MM-DD``, read from the service's
``authorization_period.expiration_date`` as written (an ISO 8601 date or date-time:
its date part; or ``MM/DD/YYYY``, the interface's "date" type). Dates compare as text.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, TypedDict, cast

from ._db import Database
from ._rows import all_rows

__all__ = [
    "ExpiringRow",
    "announce",
    "expiring_due",
    "expiry_date",
    "in_window",
    "record_facts",
]

_ISO = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})")
_US = re.compile(r"^\s*(\d{1,2})/(\d{1,2})/(\d{4})\s*$")


def expiry_date(value: object) -> str | None:
    """``YYYY-MM-DD`` of an approval's end as the service wrote it, or None when it is
    not a date we can read (the PA then has no end date: nothing is announced)."""
    if not isinstance(value, str):
        return None
    m = _ISO.match(value)
    if m:
        y, mo, d = (int(x) for x in m.groups())
    else:
        m = _US.match(value)
        if not m:
            return None
        mo, d, y = (int(x) for x in m.groups())
    try:
        return dt.date(y, mo, d).isoformat()
    except ValueError:
        return None


def record_facts(
    db: Database,
    pa_id: str,
    *,
    expires_at: str | None,
    renewal_of: str | None,
    renewals: list[str],
) -> None:
    """What a callback (or a reconciliation read) says of the PA's approval period and
    its renewals, in the same transaction as the PA's change. A new end date clears
    the announcement, so the new date is announced when it comes close in its turn;
    ``renewal_of`` marks the PA it renews as renewed by this one (a PA we hold), and
    ``renewals`` (the service's ``associated_requests.renewals``) marks this one."""
    if expires_at is not None:
        db.conn.execute(
            "UPDATE pas SET expiring_at = CASE WHEN expires_at = ? THEN expiring_at END,"
            " expires_at = ? WHERE id = ?",
            [expires_at, expires_at, pa_id],
        )
    if renewal_of is not None and renewal_of != pa_id:
        db.conn.execute("UPDATE pas SET renewal_of = ? WHERE id = ?", [renewal_of, pa_id])
        db.conn.execute(
            "UPDATE pas SET renewed_by = ? WHERE id = ? AND renewed_by IS NULL",
            [pa_id, renewal_of],
        )
    if renewals:
        db.conn.execute(
            "UPDATE pas SET renewed_by = coalesce(renewed_by, ?) WHERE id = ?",
            [renewals[-1], pa_id],
        )


class ExpiringRow(TypedDict):
    id: str
    expires_at: str


def expiring_due(db: Database, first_day: str, last_day: str, limit: int) -> list[ExpiringRow]:
    """Approved PAs, not deleted, not gone, not renewed, whose approval ends between
    ``first_day`` and ``last_day`` (``YYYY-MM-DD``, both included) and that have not
    been announced for that date."""
    return cast(
        list[ExpiringRow],
        all_rows(
            db,
            f"SELECT id, expires_at FROM pas WHERE {_DUE} ORDER BY expires_at, id LIMIT ?",  # noqa: S608 - our condition
            [first_day, last_day, limit],
        ),
    )


#: what makes a PA due for its announcement (``?``: the window's first and last day)
_DUE = (
    "expires_at >= ? AND expires_at <= ? AND expiring_at IS NULL"
    " AND renewed_by IS NULL AND gone_at IS NULL AND deleted = 0"
    " AND plan_outcome = 'Favorable'"
)


def announce(db: Database, pa_id: str, first_day: str, last_day: str, *, at: str, seq: int) -> bool:
    """Mark the PA as announced (a feed entry: its position moves to ``seq``) if it is
    still due; False when another daemon (or a change meanwhile) got there first. Call
    inside a write job, after ``store.next_seq``: the check is then against every
    change committed before."""
    cur = db.conn.execute(
        f"UPDATE pas SET expiring_at = ?, updated_at = ?, change_seq = ? WHERE id = ? AND {_DUE}",  # noqa: S608 - our condition
        [at, at, seq, pa_id, first_day, last_day],
    )
    return cur.rowcount == 1


def in_window(db: Database, first_day: str, last_day: str, limit: int) -> list[dict[str, Any]]:
    """Every approved PA, not deleted, not gone, not renewed, whose approval ends in the
    window, announced or not (the console's "Expiring soon"), soonest first."""
    return all_rows(
        db,
        "SELECT * FROM pas WHERE expires_at >= ? AND expires_at <= ? AND renewed_by IS NULL"
        " AND gone_at IS NULL AND deleted = 0 AND plan_outcome = 'Favorable'"
        " ORDER BY expires_at, id LIMIT ?",
        [first_day, last_day, limit],
    )
