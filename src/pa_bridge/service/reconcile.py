"""Reconciliation (issue 28, decision 0031): read PAs back from the service's requests
resource and apply what the callbacks missed.

A pass reads, in batches of ``[reconcile] batch_size`` tokens per ``POST
/requests/search`` (at most ``calls_per_minute`` calls a minute), every PA that is
not final, every PA changed in the last ``recent_days``, and every approval in the
expiring window without a renewal (store/reconcile.py ``candidates``). Each PA is read
with its own tokens (from its links: ``token_id`` of its hosted-page URLs) and the
api_id of its store (``[[pharmacies]] api_id``, else ``service.api_id``).

What comes back goes through the callbacks' own apply path
(:meth:`CallbackIntake.reconcile_many`): the same merge, ordering rule, history entry
(source ``reconcile``) and webhook; a read that changes nothing of the PA is not
applied. A PA the search does not return (no token left: "inaccessible through the
API, effectively deleted") is marked ``gone`` (a feed change, a history entry and a
webhook, like a deletion); one returned again is no longer gone.

One pass at a time for a fleet: the pass runs under ``store.fleet_once`` (an advisory
lock in PostgreSQL; SQLite has one daemon) and a lock in this process, and the fleet's
last start (``meta reconcile.last_started``) makes the next one due, whichever daemon
runs it. A summary of each pass is kept in ``meta`` (``reconcile.last_pass``, and
``reconcile.last_complete`` for the last pass that read every PA), for ``/healthz``,
``/metrics`` and ``doctor``: changes found by reconciliation mean callbacks are lost.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..callbacks.ingest import CallbackIntake
from ..client import CredentialsError, RequestNotFoundError, RequestsResource, ServiceError
from ..config import Settings
from ..logs import log_event
from ..metrics import Metrics
from ..store import Database, Kind, Store, StoreUnavailable, meta, now_iso, pa_history, pas
from ..store import reconcile as rows
from ..store.outbox import enqueue
from ..webhooks import change_payload
from .expiry import window

__all__ = [
    "LAST_COMPLETE",
    "LAST_RUN",
    "PassReport",
    "Reconciler",
    "health",
    "summary",
    "tokens_of",
]

LAST_STARTED = "reconcile.last_started"
LAST_RUN = "reconcile.last_pass"
LAST_COMPLETE = "reconcile.last_complete"
#: the scheduler's first pass waits this long after the daemon starts
FIRST_PASS_DELAY_S = 60.0
#: candidates read from the database at a time
PAGE = 1000

GONE_NOTE = "the service no longer returns this PA (no access token left): effectively deleted"
BACK_NOTE = "the service returns this PA again (a token was made for it)"


def tokens_of(row: Mapping[str, Any]) -> list[str]:
    """The PA's access tokens: ``token_id`` of its links (the claim interface's answer
    and the callbacks' ``tokens[].html_url``), in the order first seen."""
    urls: list[str] = []
    for key in ("urls_json", "links_json"):
        try:
            value = json.loads(row.get(key) or "null")
        except ValueError:
            continue
        if isinstance(value, list):
            urls += [u for u in value if isinstance(u, str)]
        elif isinstance(value, dict):
            urls += [u for u in value.get("token_urls") or [] if isinstance(u, str)]
            urls += [value[k] for k in ("html_url", "pdf_url") if isinstance(value.get(k), str)]
    found: dict[str, None] = {}
    for url in urls:
        try:
            query = urlsplit(url).query
        except ValueError:
            continue
        for k, v in parse_qsl(query):
            if k == "token_id" and v.strip():
                found.setdefault(v.strip(), None)
    return list(found)


@dataclass
class PassReport:
    """What a pass (or a one-PA read) did; kept as JSON in ``meta``."""

    started_at: str
    finished_at: str | None = None
    #: every candidate was read (no call failed): what "the last complete pass" means
    complete: bool = False
    #: the PA asked for (``pa-bridge reconcile --pa``), else None
    pa: str | None = None
    #: another daemon was running a pass: this one did nothing
    skipped: bool = False
    candidates: int = 0
    read: int = 0
    #: PAs whose status or events the read changed: what a lost callback carried
    #: (each applied as its callback would have been)
    changed: int = 0
    #: PAs the read only completed (the approval period, links: what a callback may
    #: lack); applied the same way, but no sign of a lost callback
    completed: int = 0
    gone: int = 0
    back: int = 0
    unchanged: int = 0
    #: PAs with no token in their links (cannot be read), or no api_id for their store
    no_token: int = 0
    no_api_id: int = 0
    calls: int = 0
    failed_calls: int = 0
    errors: list[str] = field(default_factory=list)
    #: for one PA: what happened to it (changed, unchanged, gone, back, no_token, ...)
    outcome: str | None = None

    @property
    def changes(self) -> int:
        """Changes found: status and events (``changed``), gone and back."""
        return self.changed + self.gone + self.back

    def as_json(self) -> str:
        return json.dumps({**asdict(self), "changes": self.changes})


class _Stopped(Exception):
    """The daemon is stopping: the pass ends where it is (incomplete)."""


class Reconciler:
    """Reads PAs back from the requests resource and applies the differences (see the
    module doc). ``requests`` None: reconciliation is off (``off`` says why).
    ``default_api_id``: the api_id of a PA whose store has none of its own
    (``service.api_id``, or the sandbox's)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        requests: RequestsResource | None,
        callbacks: CallbackIntake,
        *,
        metrics: Metrics,
        default_api_id: str | None,
        off: str | None = None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.requests = requests
        self.callbacks = callbacks
        self.default_api_id = default_api_id
        self.api_ids = {p.provider_id: p.api_id for p in settings.pharmacies if p.api_id}
        self.off = (
            off if off is not None else (None if requests is not None else "no requests resource")
        )
        self.clock = clock
        self.on_change = on_change
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_call = 0.0
        self._started_at = time.monotonic()
        registry = metrics.registry
        self.changes_found = Counter(
            "pa_bridge_reconcile_changes",
            "Changes found by reconciliation, by kind: changed (status or events: a"
            " missed callback), gone (no longer returned), back, completed (only the"
            " approval period or links, which a callback may lack)",
            ["kind"],
            registry=registry,
        )
        for kind in ("changed", "gone", "back", "completed"):  # at 0: a rate sees the first
            self.changes_found.labels(kind)
        self.calls = Counter(
            "pa_bridge_reconcile_calls",
            "Calls to the requests resource, by result",
            ["result"],
            registry=registry,
        )
        registry.register(_SummaryCollector(store))

    @property
    def enabled(self) -> bool:
        return self.off is None

    def stop(self) -> None:
        """End a pass in progress at its next call (the daemon is stopping)."""
        self._stop.set()

    def close(self) -> None:
        if self.requests is not None:
            self.requests.close()

    # ---- the scheduler's tick ---------------------------------------------------------
    def tick(self) -> None:
        """What the daemon's scheduler runs every few seconds: answer the
        ``pa-bridge reconcile`` commands waiting, then a pass when the fleet's next is
        due. Never raises."""
        try:
            self._serve_requests()
            if self.enabled and self._due(self.store.reader()):
                if time.monotonic() - self._started_at >= FIRST_PASS_DELAY_S:
                    self.run_pass()
        except Exception as e:  # the scheduler must go on
            log_event("reconcile.failed", level=logging.ERROR, error=type(e).__name__)

    def _due(self, db: Database) -> bool:
        last = meta.get(db, LAST_STARTED)
        interval = self.settings.reconcile.interval_minutes * 60
        try:
            return last is None or self.clock() - float(last) >= interval
        except ValueError:
            return True

    def _serve_requests(self) -> None:
        for key, value in rows.requests(self.store.reader()):
            if self.store.write(functools.partial(meta.take, key=key)) is None:
                continue  # another daemon took it
            rid = key[len(rows.REQUEST_PREFIX) :]
            try:
                asked = json.loads(value)
            except ValueError:
                asked = {}
            pa_id = asked.get("pa") if isinstance(asked, dict) else None
            report = self.read_one(str(pa_id)) if pa_id else self.run_pass(wait=True)
            self.store.write(
                functools.partial(meta.put, key=rows.RESULT_PREFIX + rid, value=report.as_json())
            )

    # ---- a pass -------------------------------------------------------------------------
    def run_pass(self, *, wait: bool = False, wait_s: float = 600.0) -> PassReport:
        """One pass over the PAs, now (the scheduler's when due; ``pa-bridge reconcile``'s
        at once). With another pass running somewhere in the fleet: skipped, or with
        ``wait``, run after it ends (up to ``wait_s``)."""
        report = PassReport(started_at=now_iso(self.clock()))
        if not self.enabled:
            report.errors.append(f"reconciliation is off: {self.off}")
            return report
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock_pass() as mine:
                if mine:
                    self._pass(report)
                    return report
            if not wait or time.monotonic() >= deadline or self._stop.wait(1.0):
                report.skipped = True
                report.errors.append("another pass was running")
                return report

    def _lock_pass(self) -> Any:
        return _PassLock(self)

    def _pass(self, report: PassReport) -> None:
        now = self.clock()
        report.started_at = now_iso(now)
        self.store.write(lambda db: meta.put(db, LAST_STARTED, repr(now)))
        st = self.settings.reconcile
        changed_since = now_iso(now - st.recent_days * 86_400)
        _, last_day = window(now, self.settings.worklist.expiring_days)
        log_event("reconcile.started")
        after = ""
        complete = True
        try:
            while True:
                page = rows.candidates(
                    self.store.reader(),
                    after_id=after,
                    changed_since=changed_since,
                    last_day=last_day,
                    limit=PAGE,
                )
                if not page:
                    break
                after = page[-1]["id"]
                report.candidates += len(page)
                complete = self._read_page(page, report) and complete
        except _Stopped:  # the daemon is stopping: not a pass to report, and the
            # fleet's next one is due at once (after the next start's delay)
            report.errors.append("stopped")
            with contextlib.suppress(Exception):
                self.store.write(lambda db: meta.delete(db, LAST_STARTED))
            log_event("reconcile.stopped", candidates=report.candidates, read=report.read)
            return
        except StoreUnavailable as e:
            complete = False
            report.errors.append(f"database: {e}")
        report.complete = complete
        self._finish(report)

    def _read_page(self, page: list[rows.Candidate], report: PassReport) -> bool:
        """Read one page of candidates, batch by batch; False when a call failed."""
        by_api: dict[str, list[tuple[rows.Candidate, list[str]]]] = {}
        for row in page:
            tokens = tokens_of(row)
            api_id = self._api_id(row)
            if not tokens:
                report.no_token += 1
            elif api_id is None:
                report.no_api_id += 1
            else:
                by_api.setdefault(api_id, []).append((row, tokens))
        ok = True
        size = self.settings.reconcile.batch_size
        for api_id, items in by_api.items():
            for i in range(0, len(items), size):
                if not self._read_batch(api_id, items[i : i + size], report):
                    ok = False
        return ok

    def _api_id(self, row: Mapping[str, Any]) -> str | None:
        provider = row.get("provider_id")
        return self.api_ids.get(provider.strip() if provider else "") or self.default_api_id

    def _pace(self) -> None:
        per_minute = self.settings.reconcile.calls_per_minute
        if per_minute > 0:
            wait = self._last_call + 60.0 / per_minute - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                raise _Stopped
        if self._stop.is_set():
            raise _Stopped
        self._last_call = time.monotonic()

    def _read_batch(
        self, api_id: str, items: list[tuple[rows.Candidate, list[str]]], report: PassReport
    ) -> bool:
        assert self.requests is not None
        self._pace()
        tokens = [t for _, ts in items for t in ts]
        report.calls += 1
        try:
            found = self.requests.search_requests(tokens, api_id=api_id)
        except ServiceError as e:
            self.calls.labels(e.code).inc()
            report.failed_calls += 1
            if e.detail and len(report.errors) < 10:
                report.errors.append(f"{e.code}: {e.detail}")
            log_event("reconcile.call_failed", level=logging.WARNING, reason=e.code, pas=len(items))
            return False
        self.calls.labels("ok").inc()
        self._apply(items, found, report)
        return True

    def _apply(
        self,
        items: list[tuple[rows.Candidate, list[str]]],
        found: list[dict[str, Any]],
        report: PassReport,
    ) -> None:
        ours = {row["id"]: row for row, _ in items}
        by_token = {t: row["id"] for row, ts in items for t in ts}
        returned: set[str] = set()
        bodies: list[bytes] = []
        for obj in found:
            pa_id = str(obj.get("id")).strip()
            if pa_id not in ours:  # named otherwise here: by one of its tokens
                toks = obj.get("tokens")
                listed = toks if isinstance(toks, list) else []
                mine = {by_token.get(str(t.get("id"))) for t in listed if isinstance(t, dict)}
                returned |= {m for m in mine if m}
                continue
            returned.add(pa_id)
            bodies.append(json.dumps({"request": obj}).encode())
        report.read += len(returned)
        before = report.changes + report.completed
        for result in self.callbacks.reconcile_many(bodies) if bodies else []:
            if result.outcome == "changed":
                report.changed += 1
                self.changes_found.labels("changed").inc()
            elif result.outcome == "completed":
                report.completed += 1
                self.changes_found.labels("completed").inc()
            elif result.outcome == "unchanged":
                report.unchanged += 1
        # a PA deleted already (its DELETE came) is not returned, and that is no news
        missing = [
            pa_id
            for pa_id, row in ours.items()
            if pa_id not in returned and not row["gone_at"] and not row["deleted"]
        ]
        back = [pa_id for pa_id in returned if pa_id in ours and ours[pa_id]["gone_at"]]
        if missing or back:
            gone, came_back = self.store.write(lambda db: self._mark(db, missing, back))
            report.gone += gone
            report.back += came_back
            self.changes_found.labels("gone").inc(gone)
            self.changes_found.labels("back").inc(came_back)
        if (report.changes + report.completed) > before and self.on_change is not None:
            self.on_change()  # the queue's wake-up: webhooks were queued

    def _mark(self, db: Database, missing: list[str], back: list[str]) -> tuple[int, int]:
        """The PAs the service no longer returns, and those it returns again: a feed
        change each, a history entry and the webhook, as for a callback's change."""
        now = now_iso(self.clock())
        counts = [0, 0]
        for i, (ids, mark, note) in enumerate(
            ((missing, rows.mark_gone, GONE_NOTE), (back, rows.clear_gone, BACK_NOTE))
        ):
            for pa_id in ids:
                seq = self.store.next_seq(db)
                if not mark(db, pa_id, at=now, seq=seq):
                    continue
                counts[i] += 1
                state = pas.callback_state(db, pa_id)
                assert state is not None
                pa_history.add(
                    db,
                    pa_id,
                    now,
                    "reconcile",
                    workflow_status=state["workflow_status"],
                    plan_outcome=state["plan_outcome"],
                    note=note,
                )
                if self.callbacks.forward:
                    change: dict[str, Any] = {
                        "source": "reconcile",
                        "workflow_status": state["workflow_status"],
                        "plan_outcome": state["plan_outcome"],
                        "event_time": None,
                        "events": [],
                    }
                    after = {
                        "workflow_status": state["workflow_status"],
                        "plan_outcome": state["plan_outcome"],
                        "deleted": state["deleted"],
                        "fax_failed": state["fax_failed"],
                        "events_json": state["events_json"],
                        "gone": i == 0,
                    }
                    enqueue(db, Kind.WEBHOOK, change_payload(pa_id, seq, now, change, after))
        return counts[0], counts[1]

    def _finish(self, report: PassReport) -> None:
        report.finished_at = now_iso(self.clock())
        text = report.as_json()

        def job(db: Database) -> None:
            meta.put(db, LAST_RUN, text)
            if report.complete:
                meta.put(db, LAST_COMPLETE, text)

        self.store.write(job)
        log_event(
            "reconcile.finished",
            level=logging.WARNING if report.changes or not report.complete else logging.INFO,
            complete=report.complete,
            candidates=report.candidates,
            read=report.read,
            changed=report.changed,
            completed=report.completed,
            gone=report.gone,
            back=report.back,
            # PAs without a link carrying a token_id ("no_token" in the report: a log
            # field named with "token" would be blanked as a secret)
            no_access_link=report.no_token,
            no_api_id=report.no_api_id,
            calls=report.calls,
            failed_calls=report.failed_calls,
        )

    # ---- one PA -------------------------------------------------------------------------
    def read_one(self, pa_id: str) -> PassReport:
        """``pa-bridge reconcile --pa ID``: that PA alone, whatever its state, read with
        ``GET /requests/{id}`` and applied the same way; no fleet lock (a read applied
        twice changes the PA once)."""
        report = PassReport(started_at=now_iso(self.clock()), pa=pa_id)
        if not self.enabled or self.requests is None:
            report.outcome = "off"
            report.errors.append(f"reconciliation is off: {self.off}")
            return report
        row = rows.one(self.store.reader(), pa_id)
        if row is None:
            report.outcome = "unknown_pa"
            return report
        report.candidates = 1
        tokens, api_id = tokens_of(row), self._api_id(row)
        if not tokens or api_id is None:
            report.outcome = "no_token" if not tokens else "no_api_id"
            report.no_token, report.no_api_id = int(not tokens), int(bool(tokens))
            return report
        obj: dict[str, Any] | None = None
        for token in tokens:  # the first token that still opens it
            report.calls += 1
            try:
                obj = self.requests.get_request(pa_id, token, api_id=api_id)
                self.calls.labels("ok").inc()
                break
            except RequestNotFoundError:
                self.calls.labels("not_found").inc()
                continue
            except ServiceError as e:
                self.calls.labels(e.code).inc()
                report.failed_calls += 1
                report.errors.append(f"{e.code}: {e.detail}")
                report.outcome = (
                    "credentials_refused" if isinstance(e, CredentialsError) else "failed"
                )
                report.finished_at = now_iso(self.clock())
                return report
        before = report.changes
        self._apply([(row, tokens)], [obj] if obj is not None else [], report)
        report.complete = True
        if report.gone:
            report.outcome = "gone"
        elif report.back and report.changed:
            report.outcome = "changed"
        elif report.back:
            report.outcome = "back"
        elif report.changes > before:
            report.outcome = "changed"
        else:
            report.outcome = "completed" if report.completed else "unchanged"
        report.finished_at = now_iso(self.clock())
        return report


class _PassLock:
    """This process's lock and the fleet's (``store.fleet_once``), held for a pass;
    ``mine`` says whether this daemon got both."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.r = reconciler
        self._fleet: Any = None
        self._local = False

    def __enter__(self) -> bool:
        if not self.r._lock.acquire(blocking=False):
            return False
        self._local = True
        try:
            fleet = self.r.store.fleet_once("reconcile.pass", 0)
            mine = bool(fleet.__enter__())
        except BaseException:
            self.r._lock.release()
            self._local = False
            raise
        self._fleet = fleet
        return mine

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fleet is not None:
                self._fleet.__exit__(*exc)
        finally:
            if self._local:
                self.r._lock.release()


# ---- what store IT sees ----------------------------------------------------------------
def summary(db: Database) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the last pass, the last complete pass) as kept in ``meta``; None when none."""

    def load(key: str) -> dict[str, Any] | None:
        text = meta.get(db, key)
        try:
            value = json.loads(text) if text else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    return load(LAST_RUN), load(LAST_COMPLETE)


def health(db: Database, off: str | None) -> tuple[dict[str, Any], list[str]]:
    """``reconcile`` for ``/healthz``, and its degraded reasons: ``callbacks_lost``
    when the last complete pass found changes (the callbacks did not bring them),
    ``reconcile_incomplete`` when the last pass could not read every PA."""
    last, complete = summary(db)
    out: dict[str, Any] = {
        "enabled": off is None,
        "off_reason": off,
        "last_complete_at": complete.get("finished_at") if complete else None,
        "last_changes": complete.get("changes") if complete else None,
        "last_pass_complete": last.get("complete") if last else None,
    }
    degraded = []
    if off is None and complete and complete.get("changes"):
        degraded.append("callbacks_lost")
    if off is None and last and not last.get("complete") and not last.get("skipped"):
        degraded.append("reconcile_incomplete")
    return out, degraded


class _SummaryCollector(Collector):
    """The fleet's last complete pass, read from the database at scrape time."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            _, complete = summary(self.store.reader())
        except Exception:  # a scrape never fails because of the database
            return
        when = GaugeMetricFamily(
            "pa_bridge_reconcile_last_complete_timestamp_seconds",
            "When the last complete reconciliation pass (of any daemon) ended (Unix time)",
        )
        found = GaugeMetricFamily(
            "pa_bridge_reconcile_last_pass_changes",
            "Changes the last complete reconciliation pass found (non-zero: callbacks are"
            " being lost)",
        )
        if complete and complete.get("finished_at"):
            from ..store import parse_iso

            when.add_metric([], parse_iso(str(complete["finished_at"])))
            found.add_metric([], float(complete.get("changes") or 0))
        yield when
        yield found


def new_request_id() -> str:
    """The id of a ``pa-bridge reconcile`` asking a serving daemon."""
    return uuid.uuid4().hex
