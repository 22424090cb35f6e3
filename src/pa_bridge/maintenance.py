"""Retention purge and VACUUM, run by the daemon's scheduler.

Retention (``[storage]``):

- after ``retention_days``: the raw claim content of an exchange (``request_raw``,
  ``response_raw``, ``metadata_json``) is set to NULL and ``raw_purged_at`` stamped;
  callback bodies likewise (``body_purged_at``); dead letters and ``Idempotency-Key``
  records are deleted (decision 0017: a retry comes within minutes, not weeks);
- after ``metadata_retention_days``: the rows themselves (exchanges, PAs with their
  history, delivered queue items, callbacks) are deleted;
- the audit log keeps its entries ``[audit] retention_days`` (six years by default),
  its hash chain's floor moving with them (``audit_trail.purge``).

Never purged automatically: anything the durable queue still needs. An exchange with
a queue item that is ``pending`` or ``failed`` keeps its raw content and its row; a PA
with a pending or failed webhook keeps its row; queue items that are not delivered are
never deleted. The newest PA (highest ``change_seq``) is also kept so that the PA
feed's cursor never goes backwards after a restart.

Chunks: candidates are found on a read connection (which never blocks the writer,
WAL), then purged by rowid, at most ``chunk`` rows per ``store.write`` job, each its
own short transaction; the conditions are checked again inside the write (the
statements are in store/retention.py).

VACUUM needs to run outside a transaction with no other write in progress: it runs
through :meth:`Store.exclusive`, which holds the write path for its duration (writes
that arrive meanwhile wait). It is skipped when less than ``min_free_ratio`` of the
file is free pages, and scheduled for a quiet hour (Sunday 03:30 local time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from . import audit_trail
from .config import Settings
from .logs import log_event
from .store import Store, now_iso, retention

_R = TypeVar("_R")

__all__ = [
    "CHUNK",
    "PurgeReport",
    "VacuumReport",
    "purge",
    "vacuum",
    "schedule_maintenance",
]

CHUNK = 500
DAY = 86400.0


@dataclass
class PurgeReport:
    raw_exchanges: int = 0
    callback_bodies: int = 0
    dead_letters: int = 0
    idempotency_keys: int = 0
    exchanges: int = 0
    pas: int = 0
    pa_history: int = 0
    outbox: int = 0
    audit: int = 0
    callbacks: int = 0
    chunks: int = 0
    seconds: float = 0.0
    raw_before: str = ""
    metadata_before: str = ""

    def counts(self) -> dict[str, int]:
        d = asdict(self)
        return {k: v for k, v in d.items() if isinstance(v, int)}

    @property
    def total(self) -> int:
        return sum(v for k, v in self.counts().items() if k != "chunks")


@dataclass
class VacuumReport:
    ran: bool
    pages_before: int
    free_before: int
    pages_after: int = 0
    seconds: float = 0.0
    reason: str = field(default="")


def purge(store: Store, settings: Settings, *, now: float, chunk: int = CHUNK) -> PurgeReport:
    """Apply the retention policy as of ``now`` (epoch seconds)."""
    started = time.monotonic()
    st = settings.storage
    raw_cut = now_iso(now - st.retention_days * DAY)
    meta_cut = now_iso(now - st.metadata_retention_days * DAY)
    stamp = now_iso(now)
    r = PurgeReport(raw_before=raw_cut, metadata_before=meta_cut)
    counts = retention.purge(store, raw_cut=raw_cut, meta_cut=meta_cut, stamp=stamp, chunk=chunk)
    for k, v in counts.items():
        setattr(r, k, getattr(r, k) + v)
    r.audit += audit_trail.purge(store, settings, now, chunk)
    r.seconds = round(time.monotonic() - started, 3)
    return r


def vacuum(store: Store, *, min_free_ratio: float = 0.05) -> VacuumReport:
    """VACUUM the database when at least ``min_free_ratio`` of its pages are free,
    then truncate the WAL. Holds the write path while it runs (see module doc)."""
    pages, free = retention.page_counts(store)
    report = VacuumReport(ran=False, pages_before=pages, free_before=free, pages_after=pages)
    if pages == 0 or free < max(1, pages * min_free_ratio):
        report.reason = "too few free pages"
        return report
    started = time.monotonic()

    report.pages_after = retention.vacuum(store)
    report.ran = True
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _local_zone() -> Any:
    try:
        from tzlocal import get_localzone

        return get_localzone()
    except Exception:  # no usable local zone: fall back to UTC
        return UTC


def _fleet_once(
    store: Store, job: str, period_s: float, run: Callable[[], _R], *, failed: str
) -> _R | None:
    """``run()`` when this daemon is the fleet's one to do ``job`` in this period (always,
    alone on SQLite); None when another did it, or when it failed: logged as ``failed``,
    never raised into the scheduler."""
    try:
        with store.fleet_once(job, period_s) as mine:
            return run() if mine else None
    except Exception as e:
        log_event(failed, level=logging.ERROR, error=type(e).__name__)
        return None


def schedule_maintenance(
    scheduler: Any, store: Store, settings: Settings, *, clock: Callable[[], float] = time.time
) -> None:
    """Purge hourly (first a minute after start) and VACUUM weekly (Sunday 03:30 local).
    The jobs log and carry on; they never raise into the scheduler."""

    def purge_job() -> None:
        # several daemons on one PostgreSQL database: one of them, once an hour
        report = _fleet_once(
            store,
            "maintenance.purge",
            3600,
            lambda: purge(store, settings, now=clock()),
            failed="maintenance.purge_failed",
        )
        if report is None:
            return
        log_event(
            "maintenance.purged" if report.total else "maintenance.purge_nothing",
            **report.counts(),
            seconds=report.seconds,
        )

    def vacuum_job() -> None:
        report = _fleet_once(
            store,
            "maintenance.vacuum",
            7 * 86400,
            lambda: vacuum(store),
            failed="maintenance.vacuum_failed",
        )
        if report is None:
            return
        log_event(
            "maintenance.vacuumed" if report.ran else "maintenance.vacuum_skipped",
            pages_before=report.pages_before,
            free_before=report.free_before,
            pages_after=report.pages_after,
            seconds=report.seconds,
        )

    scheduler.add_job(
        purge_job,
        "interval",
        hours=1,
        id="maintenance-purge",
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC) + timedelta(minutes=1),
    )
    scheduler.add_job(
        vacuum_job,
        "cron",
        day_of_week="sun",
        hour=3,
        minute=30,
        timezone=_local_zone(),
        id="maintenance-vacuum",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=3600,
    )
