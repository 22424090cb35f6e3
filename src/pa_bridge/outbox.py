"""The durable outbound queue: outcome reports, reversals, webhooks.

Items are rows in the ``outbox`` table, inserted by the same write job (so the same
transaction) that accepts the work. Each kind of item has a delivery thread of its own
(outcome reports and reversals to the PA service, webhooks to the dispensing system),
so a slow destination never delays another kind of work (issue 32); each runs
:meth:`Outbox.drain_once` for its kind every ``poll_seconds`` and as soon as
:meth:`wake` is called (an Event: no scheduler hop); what must survive a restart is
the table.

On SQLite (one daemon per file) the record of a delivered outcome report rides in the
next commit (``Store.defer``, decision 0025); until it is committed this daemon knows
the item is delivered and does not send it again. A crash in that second sends the
report again after the restart (the service answers it again).

A delivery that fails with a retryable error is tried again after an exponential
backoff with jitter (capped); one that fails for good (the service refuses the
content) is marked ``failed``. One refused for our own credentials or configuration
is ``held`` (``held_for`` says why, :class:`Hold`) and tried again by itself: at the
next start or reload (:meth:`Outbox.release`), or, held for a store this daemon does
not list, by a daemon that lists it (:attr:`Outbox.can_serve`). Nothing is dropped:
all stay visible in ``pa-bridge queue list`` with their last error, and
``pa-bridge queue retry ID`` re-drives any of them.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from .config import QueueSettings
from .logs import log_event
from .store import Database, Kind, Status, Store, now_iso, parse_iso
from .store import outbox as items
from .store.outbox import (
    QUEUE_STATUSES,
    Hold,
    drop_item,
    enqueue,
    hold_undelivered,
    list_items,
    retry_item,
)

__all__ = [
    "QUEUE_STATUSES",
    "Hold",
    "Kind",
    "Status",
    "enqueue",
    "Deliverer",
    "DeliveryFailed",
    "Outbox",
    "drop_item",
    "held_summary",
    "hold_undelivered",
    "list_items",
    "queue_summary",
    "retry_item",
]

Deliverer = Callable[[dict[str, Any]], None]


class DeliveryFailed(Exception):
    """Raised by a deliverer; ``retryable`` False marks the item failed for good, and
    ``hold`` (a :class:`Hold` value) holds it instead: it was refused for our own
    credentials or configuration, and is tried again once that may have changed."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        reason: str | None = None,
        hold: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable and hold is None
        #: a stable word for metrics and health (``unreachable``, ``credentials``, ...)
        self.reason = reason
        self.hold = hold


def _reason(e: DeliveryFailed) -> str:
    """The failure's kind: its own ``reason``, else the ``code`` of the service error
    it was raised from (``raise DeliveryFailed(...) from None`` keeps the context)."""
    if e.reason:
        return e.reason
    code = getattr(e.__context__, "code", None)
    return code if isinstance(code, str) and code else "refused" if not e.retryable else "error"


#: told of every delivery attempt: (kind, delivered?, failure reason or None)
Observer = Callable[[str, bool, str | None], None]

#: a delivery's result: (error or None, retryable, why it is held or None)
_Result = tuple[str | None, bool, str | None]


def _still_due(item: items.QueueRow, now: float, horizon: float) -> bool:
    """Whether an item a drain pass found due still is (as :func:`items.due` reads it)."""
    at = float(item["next_attempt_at"])
    return item["status"] == Status.PENDING and (at <= now or at > horizon)


def queue_summary(store: Store) -> tuple[dict[str, int], str | None]:
    """Undelivered items by status, and when the oldest of them was created."""
    store.flush()  # deliveries' records may be deferred (decision 0025)
    return items.summary(store.reader())


def held_summary(store: Store) -> dict[str, int]:
    """Held items by why they wait (:meth:`Hold.kind`: ``restore``, ``configuration``,
    ``pharmacy``)."""
    store.flush()
    return items.held_counts(store.reader())


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
        #: item id -> (error, retryable, hold); recorded by the next drain, never
        #: re-delivered
        self._unrecorded: dict[int, _Result] = {}
        #: delivered items whose deferred record is not committed yet: item id -> result
        self._settling: dict[int, _Result] = {}
        #: one daemon per SQLite file: nobody else can deliver an item whose record waits
        self._defer_records = store.dialect == "sqlite"
        self._lock = threading.Lock()
        #: one delivery thread per kind, and what wakes it
        self._lanes: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._stopping = threading.Event()
        self.observer: Observer | None = None
        #: whether this daemon can deliver the items of a store (a provider id): told
        #: by the composition root; items held for a store it serves are taken back
        self.can_serve: Callable[[str], bool] | None = None
        self._next_scan = 0.0

    def register(self, kind: str, deliverer: Deliverer) -> None:
        """Deliver items of ``kind`` with ``deliverer`` (the composition root's call)."""
        self.deliverers[kind] = deliverer

    # ---- the delivery thread -------------------------------------------------
    def start(self) -> None:
        """Start the delivery threads, one per kind: each drains its kind now, whenever
        woken, and every ``poll_seconds`` (items whose backoff ended, items other
        daemons queued)."""
        if self._lanes:
            return
        self._stopping.clear()
        for kind in Kind:
            wakeup = threading.Event()
            wakeup.set()
            thread = threading.Thread(
                target=self._run, args=(kind, wakeup), name=f"pa-bridge-outbox-{kind}", daemon=True
            )
            self._lanes[kind] = (thread, wakeup)
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Let the deliveries in progress finish, then stop the threads."""
        lanes, self._lanes = self._lanes, {}
        self._stopping.set()
        for _thread, wakeup in lanes.values():
            wakeup.set()
        deadline = time.monotonic() + timeout
        for thread, _wakeup in lanes.values():
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def running(self) -> bool:
        return bool(self._lanes) and all(t.is_alive() for t, _ in self._lanes.values())

    def wake(self) -> None:
        """Drain now instead of at the next interval. Cheap and coalescing: a drain in
        progress runs once more when it is done."""
        for _thread, wakeup in self._lanes.values():
            wakeup.set()

    def _run(self, kind: str, wakeup: threading.Event) -> None:
        while True:
            wakeup.wait(self.settings.poll_seconds)
            if self._stopping.is_set():
                return
            wakeup.clear()
            self._drain_job(kind)

    def _drain_job(self, kind: str) -> None:
        try:
            while self.drain_once(kind) >= self.settings.batch_size and not self._stopping.is_set():
                pass
        except Exception:  # keep the thread alive; the items stay queued
            log_event("outbox.drain_error", level=logging.ERROR, kind=kind)

    # ---- delivering ----------------------------------------------------------
    def drain_once(self, kind: str | None = None) -> int:
        """Deliver the items due now, of ``kind`` (None: of every kind), oldest first;
        how many there were."""
        self._record_pending()
        self._take_back_stores()
        now = self.clock()
        # Due: its time has come, or its time lies further ahead than any backoff can
        # put it, which means the wall clock was set back since it was scheduled (a
        # day back would otherwise stall the queue for a day). Issue 19.
        horizon = now + self.settings.backoff_max_seconds + 60.0
        due = items.due(self.store.reader(), now, horizon, self.settings.batch_size, kind)
        with self._lock:  # delivered, their records not committed yet: not due
            due = [i for i in due if i not in self._settling]
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
            known = self._result_not_committed(item_id)
            if known is not None:
                return known
            state = items.state(self.store.reader(), item_id)
            return state is not None and state[0] == Status.DELIVERED
        try:
            known = self._result_not_committed(item_id)
            if known is not None:
                return known
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
                hold: str | None = None
                if deliverer is None:  # a kind of another version: this one cannot send it
                    error, retryable = f"no deliverer for kind {item['kind']!r}", False
                    reason, hold = "no_deliverer", Hold.CONFIGURATION
                else:
                    try:
                        deliverer(json.loads(item["payload_json"]))
                    except DeliveryFailed as e:
                        error, retryable, reason = str(e), e.retryable, _reason(e)
                        hold = e.hold
                    except Exception as e:  # unexpected: keep it, retry later
                        error, reason = f"unexpected {type(e).__name__}", "unexpected"
                try:
                    self._record(item, error, retryable, hold)
                except Exception as e:  # the result stands; write it down on the next drain
                    with self._lock:
                        self._unrecorded[item_id] = (error, retryable, hold)
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

    def _result_not_committed(self, item_id: int) -> bool | None:
        """Whether this daemon delivered the item, by a result whose record is not
        committed yet (unrecorded or settling); None when there is no such result."""
        with self._lock:
            known = self._unrecorded.get(item_id) or self._settling.get(item_id)
        return None if known is None else known[0] is None

    def _record_pending(self) -> None:
        """Record the results that could not be written when they happened."""
        with self._lock:
            pending = list(self._unrecorded.items())
        for item_id, (error, retryable, hold) in pending:
            item = items.get(self.store.reader(), item_id)
            if item is not None:
                self._record(item, error, retryable, hold)
            with self._lock:
                self._unrecorded.pop(item_id, None)

    def _record(
        self, item: items.QueueRow, error: str | None, retryable: bool, hold: str | None = None
    ) -> None:
        attempts = int(item["attempts"]) + 1
        now = self.clock()
        if error is not None and hold is not None:
            status, next_at = Status.HELD, now
            payload = item["payload_json"]
        elif error is None:
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
        item_id = int(item["id"])

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
                held_for=hold if status == Status.HELD else None,
            )

        if error is None and self._defer_records and item["kind"] == Kind.OUTCOME_REPORT:
            with self._lock:
                self._settling[item_id] = (error, retryable, None)
            self.store.defer(job, then=lambda ok: self._settled(item_id, ok))
        else:
            self.store.write(job)
        log_event(
            "outbox.delivery",
            level=logging.INFO if error is None else logging.WARNING,
            item_id=item["id"],
            kind=item["kind"],
            status=str(status),
            attempts=attempts,
            error=error,
            **({"held_for": hold} if status == Status.HELD else {}),
        )

    def _settled(self, item_id: int, committed: bool) -> None:
        """A deferred record's batch is over: committed, or to be written again by the
        next drain (the delivery stands)."""
        with self._lock:
            result = self._settling.pop(item_id, None)
            if not committed and result is not None:
                self._unrecorded[item_id] = result
        if not committed:
            self.wake()

    # ---- held items ----------------------------------------------------------
    def release(self, held_for: str = Hold.CONFIGURATION) -> int:
        """Make every item held for ``held_for`` due now (the configuration may have
        changed: at start and on reload); the count. Items held for a store are looked
        at again at the next drain too."""
        released = self._release(held_for)
        self._next_scan = 0.0
        self.wake()
        return released

    def _release(self, held_for: str) -> int:
        released = self.store.write(lambda db: items.release_held(db, held_for, self.clock()))
        if released:
            log_event("outbox.released", held_for=str(held_for), count=released)
        return released

    def _take_back_stores(self) -> None:
        """Items held for a store this daemon lists (another daemon, or this one before
        a reload, could not serve them): due now. Looked at once per ``poll_seconds``,
        not on every wake-up."""
        can_serve = self.can_serve
        now = time.monotonic()
        if can_serve is None or now < self._next_scan:
            return
        self._next_scan = now + self.settings.poll_seconds
        mine = [p for p in items.held_pharmacies(self.store.reader()) if can_serve(p)]
        for provider_id in mine:
            self._release(Hold.pharmacy(provider_id))

    # ---- store IT ------------------------------------------------------------
    def list(self, status: str | None = None, limit: int = 200) -> list[items.QueueItem]:
        self.store.flush()  # deliveries' records may be deferred (decision 0025)
        return list_items(self.store.reader(), status, limit)

    def depth(self) -> tuple[int, float | None]:
        """(pending + failed items, age in seconds of the oldest one)."""
        self.store.flush()
        counts, oldest = items.summary(self.store.reader())
        age = None if oldest is None else max(0.0, self.clock() - parse_iso(oldest))
        return sum(counts.values()), age
