"""The durable outbound queue: outcome reports, reversals, webhooks.

Items are rows in the ``outbox`` table, inserted by the same write job (so the same
transaction) that accepts the work. APScheduler runs :meth:`Outbox.drain_once` on an
interval and whenever :meth:`wake` is called; APScheduler's own job store stays in
memory because our jobs are fixed: what must survive a restart is the table.

A delivery that fails with a retryable error is tried again after an exponential
backoff with jitter (capped); one that fails for good (the service refuses the
content) is marked ``failed``. Nothing is dropped: both stay visible in
``pa-bridge queue list`` with their last error, and ``pa-bridge queue retry ID``
re-drives any of them.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from .config import QueueSettings
from .logs import log_event
from .store import Database, Kind, Status, Store, now_iso, parse_iso
from .store import outbox as items
from .store.outbox import (
    QUEUE_STATUSES,
    drop_item,
    enqueue,
    hold_undelivered,
    list_items,
    retry_item,
)

__all__ = [
    "QUEUE_STATUSES",
    "Kind",
    "Status",
    "enqueue",
    "Deliverer",
    "DeliveryFailed",
    "Outbox",
    "drop_item",
    "hold_undelivered",
    "list_items",
    "queue_summary",
    "retry_item",
]

Deliverer = Callable[[dict[str, Any]], None]


class DeliveryFailed(Exception):
    """Raised by a deliverer; ``retryable`` False marks the item failed for good."""

    def __init__(self, message: str, *, retryable: bool = True, reason: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        #: a stable word for metrics and health (``unreachable``, ``credentials``, ...)
        self.reason = reason


def _reason(e: DeliveryFailed) -> str:
    """The failure's kind: its own ``reason``, else the ``code`` of the service error
    it was raised from (``raise DeliveryFailed(...) from None`` keeps the context)."""
    if e.reason:
        return e.reason
    code = getattr(e.__context__, "code", None)
    return code if isinstance(code, str) and code else "refused" if not e.retryable else "error"


#: told of every delivery attempt: (kind, delivered?, failure reason or None)
Observer = Callable[[str, bool, str | None], None]


def _still_due(item: items.QueueRow, now: float, horizon: float) -> bool:
    """Whether an item a drain pass found due still is (as :func:`items.due` reads it)."""
    at = float(item["next_attempt_at"])
    return item["status"] == Status.PENDING and (at <= now or at > horizon)


def queue_summary(store: Store) -> tuple[dict[str, int], str | None]:
    """Undelivered items by status, and when the oldest of them was created."""
    return items.summary(store.reader())


class Outbox:
    def __init__(
        self,
        store: Store,
        deliverers: dict[str, Deliverer] | None,
        settings: QueueSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.deliverers: dict[str, Deliverer] = deliverers if deliverers is not None else {}
        self.settings = settings
        self.clock = clock
        self._inflight: dict[int, threading.Event] = {}
        #: deliveries whose result could not be recorded yet (the database was locked):
        #: item id -> (error, retryable); recorded by the next drain, never re-delivered
        self._unrecorded: dict[int, tuple[str | None, bool]] = {}
        self._lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._draining = False
        self._again = False
        self._wake_scheduled = False
        self.last_drain_at = time.monotonic()
        self.observer: Observer | None = None

    def register(self, kind: str, deliverer: Deliverer) -> None:
        """Deliver items of ``kind`` with ``deliverer`` (the composition root's call)."""
        self.deliverers[kind] = deliverer

    # ---- scheduling ----------------------------------------------------------
    def start(self, scheduler: BackgroundScheduler) -> None:
        self._scheduler = scheduler
        scheduler.add_job(
            self._drain_job,
            "interval",
            seconds=self.settings.poll_seconds,
            id="outbox-drain",
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )

    def wake(self) -> None:
        """Drain soon instead of waiting for the next interval. Cheap and coalescing:
        a running drain just loops once more; otherwise one early run is scheduled."""
        with self._lock:
            if self._draining:
                self._again = True
                return
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        if self._scheduler is not None and self._scheduler.running:
            job = self._scheduler.get_job("outbox-drain")
            if job is not None:
                job.modify(next_run_time=datetime.now(UTC))

    def _drain_job(self) -> None:
        self.last_drain_at = time.monotonic()
        with self._lock:
            self._draining = True
            self._wake_scheduled = False
        try:
            while True:
                n = self.drain_once()
                with self._lock:
                    if n < self.settings.batch_size and not self._again:
                        break
                    self._again = False
        except Exception:  # keep the scheduler alive; the items stay queued
            log_event("outbox.drain_error", level=logging.ERROR)
        finally:
            with self._lock:
                self._draining = False

    # ---- delivering ----------------------------------------------------------
    def drain_once(self) -> int:
        self._record_pending()
        now = self.clock()
        # Due: its time has come, or its time lies further ahead than any backoff can
        # put it, which means the wall clock was set back since it was scheduled (a
        # day back would otherwise stall the queue for a day). Issue 19.
        horizon = now + self.settings.backoff_max_seconds + 60.0
        due = items.due(self.store.reader(), now, horizon, self.settings.batch_size)
        for item_id in due:
            # an item a request is delivering right now is that request's: skip it
            self.deliver(item_id, wait_s=0.0, due=(now, horizon))
        return len(due)

    def deliver(
        self, item_id: int, *, wait_s: float = 60.0, due: tuple[float, float] | None = None
    ) -> bool:
        """Try one item now. True when it is delivered (now or before). When another
        thread is delivering it at this moment, wait up to ``wait_s`` for that
        attempt and answer by its result. A delivery whose result cannot be written
        (the database is locked) still counts: it is recorded later, not repeated."""
        with self._lock:
            running = self._inflight.get(item_id)
            if running is None:
                done = self._inflight[item_id] = threading.Event()
        if running is not None:
            running.wait(wait_s)
            with self._lock:
                if item_id in self._unrecorded:
                    return self._unrecorded[item_id][0] is None
            state = items.state(self.store.reader(), item_id)
            return state is not None and state[0] == Status.DELIVERED
        try:
            with self._lock:
                if item_id in self._unrecorded:
                    return self._unrecorded[item_id][0] is None
            with self.store.item_lock(item_id) as mine:
                if not mine:  # another daemon is delivering it at this moment
                    return False
                item = items.get(self.store.reader(), item_id)
                if item is None:
                    return False
                if item["status"] == Status.DELIVERED:
                    return True
                if due is not None and not _still_due(item, *due):
                    return False  # another daemon tried it since this pass read it
                deliverer = self.deliverers.get(item["kind"])
                error: str | None = None
                reason: str | None = None
                retryable = True
                if deliverer is None:
                    error, retryable = f"no deliverer for kind {item['kind']!r}", False
                    reason = "no_deliverer"
                else:
                    try:
                        deliverer(json.loads(item["payload_json"]))
                    except DeliveryFailed as e:
                        error, retryable, reason = str(e), e.retryable, _reason(e)
                    except Exception as e:  # unexpected: keep it, retry later
                        error, reason = f"unexpected {type(e).__name__}", "unexpected"
                try:
                    self._record(item, error, retryable)
                except Exception as e:  # the result stands; write it down on the next drain
                    with self._lock:
                        self._unrecorded[item_id] = (error, retryable)
                    log_event(
                        "outbox.record_deferred",
                        level=logging.WARNING,
                        item_id=item_id,
                        kind=item["kind"],
                        delivered=error is None,
                        error=type(e).__name__,
                    )
                if self.observer is not None:
                    self.observer(str(item["kind"]), error is None, reason)
                return error is None
        finally:
            with self._lock:
                self._inflight.pop(item_id, None)
            done.set()

    def _record_pending(self) -> None:
        """Record the results that could not be written when they happened."""
        with self._lock:
            pending = list(self._unrecorded.items())
        for item_id, (error, retryable) in pending:
            item = items.get(self.store.reader(), item_id)
            if item is not None:
                self._record(item, error, retryable)
            with self._lock:
                self._unrecorded.pop(item_id, None)

    def _record(self, item: items.QueueRow, error: str | None, retryable: bool) -> None:
        attempts = int(item["attempts"]) + 1
        now = self.clock()
        if error is None:
            status, next_at = Status.DELIVERED, now
            # a delivered outcome report needs no PHI kept in the queue
            payload = "{}" if item["kind"] == Kind.OUTCOME_REPORT else item["payload_json"]
        elif retryable:
            backoff = min(
                self.settings.backoff_max_seconds,
                self.settings.backoff_base_seconds * (2 ** min(attempts - 1, 30)),
            )
            status, next_at = Status.PENDING, now + backoff * random.uniform(0.5, 1.0)
            payload = item["payload_json"]
        else:
            status, next_at = Status.FAILED, now
            payload = item["payload_json"]

        def job(db: Database) -> None:
            items.record_attempt(
                db,
                item["id"],
                status=status,
                attempts=attempts,
                next_attempt_at=next_at,
                last_error=error,
                now=now_iso(now),
                payload_json=payload,
            )

        self.store.write(job)
        log_event(
            "outbox.delivery",
            level=logging.INFO if error is None else logging.WARNING,
            item_id=item["id"],
            kind=item["kind"],
            status=str(status),
            attempts=attempts,
            error=error,
        )

    # ---- store IT ------------------------------------------------------------
    def list(self, status: str | None = None, limit: int = 200) -> list[items.QueueItem]:
        return list_items(self.store.reader(), status, limit)

    def retry(self, item_id: int) -> bool:
        now = self.clock()
        ok = self.store.write(lambda db: retry_item(db, item_id, now))
        if ok:
            self.wake()
        return ok

    def depth(self) -> tuple[int, float | None]:
        """(pending + failed items, age in seconds of the oldest one)."""
        counts, oldest = items.summary(self.store.reader())
        age = None if oldest is None else max(0.0, self.clock() - parse_iso(oldest))
        return sum(counts.values()), age
