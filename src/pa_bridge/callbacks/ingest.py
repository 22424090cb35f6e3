"""The daemon's side of the callback listener: commit what the child hands over, many
callbacks per commit, then say what to answer to each.

200 only after the callback is committed; 503 when it cannot be, so the service
retries; authenticated bodies that are not the expected JSON are dead-lettered and
acknowledged. The child's notices of a 401 or a 413 are counted (and the 401s logged
without flooding the journal); nothing is stored for them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..logs import log_event
from ..metrics import Metrics
from ..store import Database, Kind, Store, StoreUnavailable, now_iso, pa_history, pas
from ..store import callbacks as kept
from ..store.outbox import enqueue
from ..webhooks import change_payload
from .framing import (
    KIND_CALLBACK,
    KIND_TOO_LARGE,
    KIND_UNAUTHORIZED,
    Message,
    internal_error_reply,
    unavailable_reply,
)
from .parse import (
    PENDING_PREFIX,
    CallbackShapeError,
    ParsedCallback,
    fields_agree,
    is_newer,
    merge_details,
    merge_events,
    merge_links,
    parse_callback,
)

__all__ = ["CallbackReceiver", "CallbackResult", "CallbackService", "UnauthorizedLog"]


@dataclass(frozen=True)
class CallbackResult:
    outcome: str  # stored, duplicate, dead_letter
    pa_id: str | None = None


class CallbackService:
    """Commits callbacks: dedupe, the PA's history, the ordering rule, links, dead
    letters, and the webhook's queue item in the same transaction when forwarding."""

    def __init__(self, store: Store, *, forward: bool, commit_timeout_s: float = 5.0) -> None:
        self.store = store
        self.forward = forward
        self.commit_timeout_s = commit_timeout_s

    def receive_many(
        self, items: list[tuple[bytes, str | None]]
    ) -> list[CallbackResult | BaseException]:
        """Commit every callback (or dead letter) in ``items`` together, one commit for
        the lot. Per item: its result, or the exception that kept it from being
        committed (StoreUnavailable when the database cannot take it)."""
        jobs: list[Callable[[Database], CallbackResult]] = []
        parsed: list[ParsedCallback | str] = []
        for body, content_type in items:
            try:
                cb = parse_callback(body)
            except CallbackShapeError as e:
                jobs.append(self._dead_letter_job(body, content_type, str(e)))
                parsed.append(str(e))
                continue
            jobs.append(self._apply_job(cb, body))
            parsed.append(cb)
        outcomes = self.store.write_all(jobs, timeout=self.commit_timeout_s)
        results: list[CallbackResult | BaseException] = []
        for (ok, value), cb_or_reason, (body, _) in zip(outcomes, parsed, items, strict=True):
            results.append(value)
            if not ok:
                continue
            if isinstance(cb_or_reason, str):
                log_event(
                    "callback.dead_letter",
                    level=logging.WARNING,
                    reason=cb_or_reason,
                    size=len(body),
                )
            else:
                log_event(
                    "callback.received",
                    pa_id=value.pa_id,
                    result=value.outcome,
                    workflow_status=cb_or_reason.workflow_status,
                )
        return results

    def _apply_job(self, cb: ParsedCallback, body: bytes) -> Callable[[Database], CallbackResult]:
        return lambda db: self._apply(db, cb, body)

    @staticmethod
    def _dead_letter_job(
        body: bytes, content_type: str | None, reason: str
    ) -> Callable[[Database], CallbackResult]:
        def job(db: Database) -> CallbackResult:
            kept.add_dead_letter(db, now_iso(), reason, (content_type or "")[:200], body)
            return CallbackResult("dead_letter")

        return job

    @staticmethod
    def _claim_placeholder(db: Database, cb: ParsedCallback) -> str | None:
        """The one PA we submitted whose answer named no PA (the empty format) and that
        this callback's identifiers agree with; None when there is none or several."""
        if not cb.match.get("bin"):
            return None
        found = []
        for pid, links_json in pas.awaiting_placeholders(db, PENDING_PREFIX):
            try:
                awaiting = json.loads(links_json or "{}").get("awaiting") or {}
            except (ValueError, AttributeError):
                continue
            if fields_agree(cb.match, awaiting):
                found.append(pid)
        return found[0] if len(found) == 1 else None

    def _apply(self, db: Database, cb: ParsedCallback, body: bytes) -> CallbackResult:
        now = now_iso()
        # The feed position first: on PostgreSQL it is the lock every PA change takes,
        # so taking it before the dedupe key (which waits for another daemon's insert
        # of the same key) keeps one lock order across daemons, and no deadlock
        # (decision 0021). A duplicate leaves a gap in the positions, which is harmless.
        seq = self.store.next_seq(db)
        if not kept.insert_once(db, cb.dedupe_key, now, cb.pa_id, body):
            return CallbackResult("duplicate", cb.pa_id)
        row = pas.callback_state(db, cb.pa_id)
        note = None
        if row is None:
            placeholder = self._claim_placeholder(db, cb)
            if placeholder is not None:  # the PA we submitted without an id: it is this one
                pas.rename(db, placeholder, cb.pa_id)
                row = pas.callback_state(db, cb.pa_id)
                note = f"matched to the submit recorded as {placeholder}"
        new_events = "[]"
        if cb.events:
            new_events = json.dumps(cb.events)
            merged = merge_events(row["events_json"] if row else None, cb.events)
            events_json: str | None = json.dumps(merged)
            deleted = int(any(e["type"] == "DELETE" for e in merged))
            fax_failed = int(
                any(e["type"] in ("REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE") for e in merged)
            )
        elif row is not None:
            events_json, deleted, fax_failed = row["events_json"], row["deleted"], row["fax_failed"]
        else:
            events_json, deleted, fax_failed = "[]", 0, 0
        links_json: str | None
        urls_json: str | None
        if cb.links or note or (row is None and cb.match):
            links = merge_links(row["links_json"] if row else None, cb.links)
            if row is None and cb.match:
                links["match"] = cb.match  # for a submit whose answer comes after this
            links.pop("awaiting", None)
            urls = json.loads(row["urls_json"] or "[]") if row else []
            for url in links.get("token_urls") or []:
                if url not in urls:
                    urls.append(url)
            links_json, urls_json = json.dumps(links), json.dumps(urls)
        else:  # nothing to merge (the hot path of a body without links)
            links_json, urls_json = (row["links_json"], row["urls_json"]) if row else ("{}", "[]")
        details_json = (
            merge_details(row["details_json"] if row else None, cb.details) if cb.details else None
        )
        # the current status moves only for a newer callback (decision 0005)
        status = (cb.workflow_status, cb.plan_outcome, cb.event_time)
        if row is not None and not (
            cb.workflow_status is not None
            and is_newer(
                (cb.event_time, cb.workflow_status, cb.plan_outcome),
                (row["status_time"], row["workflow_status"], row["plan_outcome"]),
            )
        ):
            status = (row["workflow_status"], row["plan_outcome"], row["status_time"])
        state: pas.CallbackState = {
            "workflow_status": status[0],
            "plan_outcome": status[1],
            "status_time": status[2],
            "events_json": events_json,
            "deleted": deleted,
            "fax_failed": fax_failed,
            "links_json": links_json,
            "urls_json": urls_json,
            "details_json": details_json,  # None: keep what the PA has
        }
        # a PA we did not start (or whose submit we have not stored): kept all the same
        record = pas.insert_from_callback if row is None else pas.update_from_callback
        record(db, cb.pa_id, state, now=now, seq=seq)
        pa_history.add(
            db,
            cb.pa_id,
            now,
            "callback",
            workflow_status=cb.workflow_status,
            plan_outcome=cb.plan_outcome,
            event_time=cb.event_time,
            events_json=new_events,
            note=note,
        )
        if self.forward:  # the change itself, not the PA at delivery (decision 0018)
            change = {
                "workflow_status": cb.workflow_status,
                "plan_outcome": cb.plan_outcome,
                "event_time": cb.event_time,
                "events": cb.events,
            }
            after = {
                "workflow_status": status[0],
                "plan_outcome": status[1],
                "deleted": deleted,
                "fax_failed": fax_failed,
                "events_json": events_json,
            }
            enqueue(db, Kind.WEBHOOK, change_payload(cb.pa_id, seq, now, change, after))
        return CallbackResult("stored", cb.pa_id)


class UnauthorizedLog:
    """Unauthenticated callback attempts, logged without flooding the journal (issue 19):
    the first of a spell is logged (``callback.unauthorized``, with its address); the
    others in the next ``interval_s`` are summed into one line when it ends
    (``callback.unauthorized_repeated``: ``count``, up to ten ``remotes``). The metric
    ``pa_bridge_callbacks_total{result="unauthorized"}`` counts every attempt."""

    MAX_REMOTES = 10

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._count = 0
        self._remotes: set[str] = set()

    def attempt(self, remote: str) -> None:
        with self._lock:
            if self._timer is not None:  # within a spell: summed
                self._count += 1
                if len(self._remotes) < self.MAX_REMOTES:
                    self._remotes.add(remote)
                return
            self._timer = threading.Timer(self.interval_s, self.flush)
            self._timer.name = "callbacks-unauthorized-log"
            self._timer.daemon = True
            self._timer.start()
        log_event("callback.unauthorized", level=logging.WARNING, remote=remote)

    def flush(self) -> None:
        """End the spell: log its sum, if any (at the interval's end, and at stop)."""
        with self._lock:
            timer, count, remotes = self._timer, self._count, sorted(self._remotes)
            self._timer, self._count, self._remotes = None, 0, set()
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if count:
            log_event(
                "callback.unauthorized_repeated",
                level=logging.WARNING,
                count=count,
                remotes=remotes,
                seconds=self.interval_s,
            )


class CallbackReceiver:
    """Says what to answer to each message of a batch the child handed over, after
    committing its callbacks together (:meth:`handle`, the :class:`FrameServer`'s
    handler). ``on_stored`` is called after a commit that stored a callback when the
    service forwards them (the queue's wake-up)."""

    def __init__(
        self,
        service: CallbackService,
        metrics: Metrics,
        *,
        on_stored: Callable[[], None] | None = None,
        unauthorized_log: UnauthorizedLog | None = None,
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.on_stored = on_stored
        self.unauthorized_log = unauthorized_log or UnauthorizedLog()
        self._counters: dict[str, Any] = {}

    def _count(self, outcome: str) -> None:
        counter = self._counters.get(outcome)
        if counter is None:
            counter = self._counters[outcome] = self.metrics.callbacks.labels(outcome)
        counter.inc()

    def handle(self, batch: list[Message]) -> list[tuple[int, bytes]]:
        replies: list[tuple[int, bytes] | None] = [None] * len(batch)
        items: list[tuple[bytes, str | None]] = []
        where: list[int] = []
        for i, msg in enumerate(batch):
            if msg.kind == KIND_CALLBACK:
                items.append((msg.body, msg.text or None))
                where.append(i)
                continue
            if msg.kind == KIND_UNAUTHORIZED:
                self._count("unauthorized")
                self.unauthorized_log.attempt(msg.text)
            elif msg.kind == KIND_TOO_LARGE:
                self._count("too_large")
            replies[i] = (204, b"")
        stored = False
        for i, result in zip(where, self.service.receive_many(items) if items else [], strict=True):
            if isinstance(result, StoreUnavailable):
                self._count("unavailable")
                log_event("callback.not_committed", level=logging.ERROR, error=str(result))
                replies[i] = unavailable_reply()
            elif isinstance(result, BaseException):  # a bug: this callback alone gets a 500
                log_event("callback.error", level=logging.ERROR, error=type(result).__name__)
                replies[i] = internal_error_reply()
            else:
                self._count(result.outcome)
                stored = stored or result.outcome == "stored"
                answer = {"status": result.outcome, "pa_id": result.pa_id}
                replies[i] = (200, json.dumps(answer).encode())
        if stored and self.service.forward and self.on_stored is not None:
            self.on_stored()
        return [r if r is not None else internal_error_reply() for r in replies]
