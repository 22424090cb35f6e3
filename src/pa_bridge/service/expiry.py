"""Approvals that lapse (issue 28): the "Expiring soon" window, and its announcement.

An approved PA (plan outcome Favorable, not deleted, still returned by the service)
whose approval ends (``pas.expires_at``, from ``authorization_period.expiration_date``)
within ``[worklist] expiring_days`` of today, and that no renewal PA renews yet:

- is "Expiring soon" in the console's "Needs you" (worklist.py asks :func:`is_expiring`),
  until acknowledged; an acknowledgement made before the last
  ``[worklist] expiring_reminder_days`` stops holding then (:func:`reminder_due`), so
  the entry comes back when the date comes close;
- is announced once, when it enters the window (:class:`ExpiryWatch`): a feed entry
  (its cursor moves; ``expiring`` is true in the PA answer), a history entry (source
  ``expiring``) and, with ``callbacks.forward_url``, a signed ``pa.expiring`` webhook,
  all in one transaction. A new end date (a renewed period) is announced again when
  it comes close in its turn.

"Today" is the pharmacy's: the daemon's local date. Times come from the use cases'
clock, so the tests move it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..config import Settings
from ..logs import log_event
from ..pa_guide import Guide
from ..store import Database, Kind, Store, expiry, now_iso, pa_history, pas
from ..store.outbox import enqueue
from ..webhooks import EXPIRING, change_payload

__all__ = [
    "EXPIRING_GUIDE",
    "ExpiryWatch",
    "days_left",
    "is_expiring",
    "local_date",
    "reminder_due",
    "window",
]

#: what the console says of an approval about to lapse
EXPIRING_GUIDE = Guide(
    "Approval ends soon",
    "The plan's approval for this PA ends soon; without a renewal the next fill is rejected again.",
    "Ask the prescriber's office to start a renewal PA now, before the approval ends."
    " Acknowledge it here once asked; it comes back a week before the end date.",
    "warn",
    "expiring",
)


def local_date(now: float) -> dt.date:
    """The pharmacy's date at ``now`` (the daemon's local time zone)."""
    return dt.datetime.fromtimestamp(now).astimezone().date()


def window(now: float, days: int) -> tuple[str, str]:
    """(first, last) day of the window as ``YYYY-MM-DD``: approvals that ended in the
    last ``days`` (still shown until acknowledged) up to those ending ``days`` ahead."""
    today = local_date(now)
    return (today - dt.timedelta(days=days)).isoformat(), (
        today + dt.timedelta(days=days)
    ).isoformat()


def days_left(row: Mapping[str, Any], now: float) -> int | None:
    """Days from today to the approval's last day (negative once it ended)."""
    end = row.get("expires_at")
    if not end:
        return None
    try:
        return (dt.date.fromisoformat(str(end)) - local_date(now)).days
    except ValueError:
        return None


def is_expiring(row: Mapping[str, Any], now: float, days: int) -> bool:
    """Whether the PA belongs in "Expiring soon" now (see the module doc)."""
    left = days_left(row, now)
    return (
        left is not None
        and -days <= left <= days
        and row.get("plan_outcome") == "Favorable"
        and not row.get("deleted")
        and row.get("gone_at") is None
        and row.get("renewed_by") is None
    )


def reminder_due(row: Mapping[str, Any], now: float, reminder_days: int, acked_at: str) -> bool:
    """Whether an acknowledgement made at ``acked_at`` stopped holding: it was made
    before the last ``reminder_days`` before the end date, and that time has come."""
    left = days_left(row, now)
    if left is None or left > reminder_days:
        return False
    end = dt.date.fromisoformat(str(row["expires_at"]))
    start = end - dt.timedelta(days=reminder_days)
    local_midnight = dt.datetime.combine(start, dt.time()).astimezone()
    return acked_at < now_iso(local_midnight.timestamp())


class ExpiryWatch:
    """Announces each approval entering the window, once (:meth:`scan`); several
    daemons may scan at once: each announcement is checked again inside its write,
    after the feed position is taken, so one of them makes it."""

    BATCH = 50

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        forward: bool,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.forward = forward
        self.clock = clock
        self.on_change = on_change

    def scan(self) -> int:
        """Announce every approval that entered the window and was not announced yet;
        how many were."""
        now = self.clock()
        today = local_date(now).isoformat()
        _, last_day = window(now, self.settings.worklist.expiring_days)
        announced = 0
        while True:
            due = expiry.expiring_due(self.store.reader(), today, last_day, self.BATCH)
            if not due:
                break
            ids = [r["id"] for r in due]

            def job(db: Database, ids: list[str] = ids) -> list[str]:
                return self._announce(db, ids, today, last_day, now)

            made = self.store.write(job)
            announced += len(made)
            if len(due) < self.BATCH or not made:
                break
        if announced:
            log_event(
                "expiry.announced",
                count=announced,
                window_days=self.settings.worklist.expiring_days,
            )
            if self.forward and self.on_change is not None:
                self.on_change()
        return announced

    def _announce(
        self, db: Database, ids: list[str], first_day: str, last_day: str, now: float
    ) -> list[str]:
        at = now_iso(now)
        made = []
        for pa_id in ids:
            seq = self.store.next_seq(db)
            if not expiry.announce(db, pa_id, first_day, last_day, at=at, seq=seq):
                continue  # another daemon did, or the PA changed meanwhile
            made.append(pa_id)
            row = pas.get(db, pa_id)
            assert row is not None
            note = f"the approval ends on {row['expires_at']}: ask the prescriber to renew it"
            pa_history.add(
                db,
                pa_id,
                at,
                "expiring",
                workflow_status=row["workflow_status"],
                plan_outcome=row["plan_outcome"],
                note=note,
            )
            if self.forward:
                change: dict[str, Any] = {
                    "source": "expiring",
                    "workflow_status": row["workflow_status"],
                    "plan_outcome": row["plan_outcome"],
                    "event_time": None,
                    "events": [],
                }
                state = {
                    "workflow_status": row["workflow_status"],
                    "plan_outcome": row["plan_outcome"],
                    "deleted": row["deleted"],
                    "fax_failed": row["fax_failed"],
                    "events_json": row["events_json"],
                    "expiring": True,
                }
                enqueue(
                    db, Kind.WEBHOOK, change_payload(pa_id, seq, at, change, state, event=EXPIRING)
                )
        return made
