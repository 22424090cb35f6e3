"""Retention purge and VACUUM, run by the daemon's scheduler.

Retention (``[storage]``):

- after ``retention_days``: the raw claim content of an exchange (``request_raw``,
  ``response_raw``, ``metadata_json``) is set to NULL and ``raw_purged_at`` stamped;
  callback bodies likewise (``body_purged_at``); dead letters and ``Idempotency-Key``
  records are deleted (decision 0017: a retry comes within minutes, not weeks);
- after ``metadata_retention_days``: the rows themselves (exchanges, PAs with their
  history, delivered queue items, audit, callbacks) are deleted.

Never purged automatically: anything the durable queue still needs. An exchange with
a queue item that is ``pending`` or ``failed`` keeps its raw content and its row; a PA
with a pending or failed webhook keeps its row; queue items that are not delivered are
never deleted. The newest PA (highest ``change_seq``) is also kept so that the PA
feed's cursor never goes backwards after a restart.

Chunks: candidates are found on a read connection (which never blocks the writer,
WAL), then purged by rowid, at most ``chunk`` rows per ``store.write`` job, each its
own short transaction; the conditions are checked again inside the write.

VACUUM needs to run outside a transaction with no other write in progress: it runs
through :meth:`Store.exclusive`, which holds the write path for its duration (writes
that arrive meanwhile wait). It is skipped when less than ``min_free_ratio`` of the
file is free pages, and scheduled for a quiet hour (Sunday 03:30 local time).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .config import Settings
from .logs import log_event
from .store import Database, Store, now_iso

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

# exchanges the durable queue still needs (outcome reports and reversals name them)
_QUEUED_EXCHANGES = (
    "SELECT claim_id FROM outbox WHERE status IN ('pending', 'failed') AND claim_id IS NOT NULL"
)
# PAs a webhook still has to forward
_QUEUED_PAS = (
    "SELECT json_extract(payload_json, '$.pa_id') FROM outbox"
    " WHERE kind = 'webhook' AND status IN ('pending', 'failed')"
    " AND json_extract(payload_json, '$.pa_id') IS NOT NULL"
)


_RAW_NULL = "UPDATE exchanges SET request_raw = NULL, response_raw = NULL, metadata_json = NULL,"
_NEWEST_PA_KEPT = "updated_at < ? AND change_seq < (SELECT max(change_seq) FROM pas)"
_NO_PA = "NOT EXISTS (SELECT 1 FROM pas WHERE pas.claim_id = exchanges.id)"


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


def _candidates(
    store: Store, table: str, where: str, params: list[Any], chunk: int
) -> Iterator[list[int]]:
    """Rowids matching ``where``, ``chunk`` at a time, read without the write lock."""
    last = -(2**63)
    while True:
        rows = (
            store.reader()
            .conn.execute(
                f"SELECT rowid FROM {table} WHERE ({where}) AND rowid > ? ORDER BY rowid LIMIT ?",  # noqa: S608 - fixed SQL
                [*params, last, chunk],
            )
            .fetchall()
        )
        if not rows:
            return
        ids = [int(r[0]) for r in rows]
        yield ids
        last = ids[-1]
        if len(ids) < chunk:
            return


def _run_step(
    store: Store,
    report: PurgeReport,
    name: str,
    table: str,
    where: str,
    params: list[Any],
    apply: Callable[[Database, str, list[int]], int | dict[str, int]],
    chunk: int,
) -> None:
    """Find candidates in ``table``, then apply the change one chunk per write job. A
    job may run twice (the store retries a failed batch), so it returns its counts
    instead of adding them up itself."""
    for ids in _candidates(store, table, where, params, chunk):
        marks = ",".join("?" * len(ids))

        def job(db: Database, ids: list[int] = ids, marks: str = marks) -> int | dict[str, int]:
            return apply(db, marks, ids)

        n = store.write(job)
        report.chunks += 1
        counts = n if isinstance(n, dict) else {name: n}
        for k, v in counts.items():
            setattr(report, k, getattr(report, k) + v)


def purge(store: Store, settings: Settings, *, now: float, chunk: int = CHUNK) -> PurgeReport:
    """Apply the retention policy as of ``now`` (epoch seconds)."""
    started = time.monotonic()
    st = settings.storage
    raw_cut = now_iso(now - st.retention_days * DAY)
    meta_cut = now_iso(now - st.metadata_retention_days * DAY)
    stamp = now_iso(now)
    r = PurgeReport(raw_before=raw_cut, metadata_before=meta_cut)

    # ---- raw content -------------------------------------------------------------
    ex_raw = f"received_at < ? AND raw_purged_at IS NULL AND id NOT IN ({_QUEUED_EXCHANGES})"

    def purge_raw(db: Database, marks: str, ids: list[int]) -> int:
        return db.execute(
            _RAW_NULL + f" raw_purged_at = ? WHERE rowid IN ({marks}) AND {ex_raw}",
            [stamp, *ids, raw_cut],
        ).rowcount

    _run_step(store, r, "raw_exchanges", "exchanges", ex_raw, [raw_cut], purge_raw, chunk)

    cb_raw = "received_at < ? AND body_purged_at IS NULL"

    def purge_bodies(db: Database, marks: str, ids: list[int]) -> int:
        return db.execute(
            f"UPDATE callbacks SET body = NULL, body_purged_at = ? WHERE rowid IN ({marks}) AND {cb_raw}",  # noqa: S608
            [stamp, *ids, raw_cut],
        ).rowcount

    _run_step(store, r, "callback_bodies", "callbacks", cb_raw, [raw_cut], purge_bodies, chunk)

    def delete(table: str, where: str, cut: str) -> Callable[[Database, str, list[int]], int]:
        def job(db: Database, marks: str, ids: list[int]) -> int:
            return db.execute(
                f"DELETE FROM {table} WHERE rowid IN ({marks}) AND ({where})",  # noqa: S608
                [*ids, cut],
            ).rowcount

        return job

    dl = "received_at < ?"
    _run_step(
        store,
        r,
        "dead_letters",
        "dead_letters",
        dl,
        [raw_cut],
        delete("dead_letters", dl, raw_cut),
        chunk,
    )

    ik = "created_at < ?"
    _run_step(
        store,
        r,
        "idempotency_keys",
        "idempotency_keys",
        ik,
        [raw_cut],
        delete("idempotency_keys", ik, raw_cut),
        chunk,
    )

    # ---- metadata ----------------------------------------------------------------
    # PAs first (exchanges are referenced by pas.claim_id), each with its history
    pa_where = _NEWEST_PA_KEPT + f" AND id NOT IN ({_QUEUED_PAS})"

    def delete_pas(db: Database, marks: str, ids: list[int]) -> dict[str, int]:
        rows = db.execute(
            f"SELECT id FROM pas WHERE rowid IN ({marks}) AND {pa_where}",  # noqa: S608
            [*ids, meta_cut],
        ).fetchall()
        pa_ids = [row[0] for row in rows]
        if not pa_ids:
            return {}
        pm = ",".join("?" * len(pa_ids))
        history = db.execute(
            f"DELETE FROM pa_history WHERE pa_id IN ({pm})",  # noqa: S608
            pa_ids,
        ).rowcount
        pas = db.execute(f"DELETE FROM pas WHERE id IN ({pm})", pa_ids).rowcount  # noqa: S608
        return {"pas": pas, "pa_history": history}

    _run_step(store, r, "pas", "pas", pa_where, [meta_cut], delete_pas, chunk)

    hist = "received_at < ?"
    _run_step(
        store,
        r,
        "pa_history",
        "pa_history",
        hist,
        [meta_cut],
        delete("pa_history", hist, meta_cut),
        chunk,
    )

    ex_meta = f"received_at < ? AND id NOT IN ({_QUEUED_EXCHANGES}) AND {_NO_PA}"
    _run_step(
        store,
        r,
        "exchanges",
        "exchanges",
        ex_meta,
        [meta_cut],
        delete("exchanges", ex_meta, meta_cut),
        chunk,
    )

    ob = "status = 'delivered' AND coalesce(delivered_at, updated_at) < ?"
    _run_step(store, r, "outbox", "outbox", ob, [meta_cut], delete("outbox", ob, meta_cut), chunk)

    au = "at < ?"
    _run_step(store, r, "audit", "audit", au, [meta_cut], delete("audit", au, meta_cut), chunk)

    cb = "received_at < ?"
    _run_step(
        store, r, "callbacks", "callbacks", cb, [meta_cut], delete("callbacks", cb, meta_cut), chunk
    )

    r.seconds = round(time.monotonic() - started, 3)
    return r


def vacuum(store: Store, *, min_free_ratio: float = 0.05) -> VacuumReport:
    """VACUUM the database when at least ``min_free_ratio`` of its pages are free,
    then truncate the WAL. Holds the write path while it runs (see module doc)."""
    reader = store.reader().conn
    pages = int(reader.execute("PRAGMA page_count").fetchone()[0])
    free = int(reader.execute("PRAGMA freelist_count").fetchone()[0])
    report = VacuumReport(ran=False, pages_before=pages, free_before=free, pages_after=pages)
    if pages == 0 or free < max(1, pages * min_free_ratio):
        report.reason = "too few free pages"
        return report
    started = time.monotonic()

    def run(conn: sqlite3.Connection) -> int:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return int(conn.execute("PRAGMA page_count").fetchone()[0])

    report.pages_after = store.exclusive(run)
    report.ran = True
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _local_zone() -> Any:
    try:
        from tzlocal import get_localzone

        return get_localzone()
    except Exception:  # no usable local zone: fall back to UTC
        return UTC


def schedule_maintenance(
    scheduler: Any, store: Store, settings: Settings, *, clock: Callable[[], float] = time.time
) -> None:
    """Purge hourly (first a minute after start) and VACUUM weekly (Sunday 03:30 local).
    The jobs log and carry on; they never raise into the scheduler."""

    def purge_job() -> None:
        try:
            report = purge(store, settings, now=clock())
        except Exception as e:
            log_event("maintenance.purge_failed", level=logging.ERROR, error=type(e).__name__)
            return
        log_event(
            "maintenance.purged" if report.total else "maintenance.purge_nothing",
            **report.counts(),
            seconds=report.seconds,
        )

    def vacuum_job() -> None:
        try:
            report = vacuum(store)
        except Exception as e:
            log_event("maintenance.vacuum_failed", level=logging.ERROR, error=type(e).__name__)
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
