"""The sandbox's state: its PAs (memory or SQLite), the status steps, and callbacks.

One scheduler thread runs timed tasks (status steps, callback attempts); callback
HTTP posts run on a small pool so a slow receiver does not hold up the clock.
Deliveries for one PA go in order: only the head of its queue is ever in flight, and
a failed head is retried with exponential backoff before anything behind it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import heapq
import itertools
import json
import logging
import secrets
import sqlite3
import string
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from ..client import verify_context
from .config import SandboxConfig

__all__ = ["SandboxState", "CallbackTarget", "now_iso"]

log = logging.getLogger("pa_bridge.sandbox")

_ID_ALPHABET = string.ascii_uppercase + string.digits
#: Keys of a stored PA that are the sandbox's own bookkeeping, not the request object.
_INTERNAL = ("history", "final_outcome", "dup_key", "deleted", "callbacks", "portal")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class CallbackTarget:
    url: str | None = None
    username: str | None = None
    password: str | None = None


@dataclass
class _Delivery:
    pa_id: str
    payload: dict[str, Any]
    attempts: int = 0


@dataclass
class _PaQueue:
    items: deque[_Delivery] = field(default_factory=deque)
    busy: bool = False


class SandboxState:
    """PAs, the clock that moves them, and the callback outbox."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.stop_event = threading.Event()
        self.callback = CallbackTarget(
            config.callback_url, config.callback_username, config.callback_password
        )
        self.dashboard_tokens: set[str] = set()
        #: the sandbox's own address (set when it starts, or by its first request)
        self.portal = ""
        #: the sandbox's switch (switch.SandboxSwitch) when one runs beside it
        self.switch: Any = None
        self._db_lock = threading.RLock()
        self._db = sqlite3.connect(config.db_path or ":memory:", check_same_thread=False)
        with self._db_lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL" if config.db_path else "PRAGMA user_version")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS pa ("
                " id TEXT PRIMARY KEY, dup_key TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,"
                " seq INTEGER NOT NULL, data TEXT NOT NULL)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS pa_dup ON pa (dup_key)")
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._http: httpx.Client | None = None
        self._queues: dict[str, _PaQueue] = {}
        self._closed = False
        self._claims: list[dict[str, Any]] = []
        self._calls: list[dict[str, Any]] = []
        #: token id -> PA id, for the requests resource (rebuilt from the store at start)
        self._by_token: dict[str, str] = {}
        #: drills (POST /sandbox/control): callbacks lost on purpose (counted), callbacks
        #: without the approval period, the requests resource answering an error status
        self.drop_callbacks = False
        self.dropped_callbacks = 0
        self.omit_period = False
        self.requests_status: int | None = None
        self._resume()

    # ------------------------------------------------------------------ store

    def _save(self, pa: dict[str, Any]) -> None:
        with self._db_lock, self._db:
            self._db.execute(
                "INSERT INTO pa (id, dup_key, deleted, seq, data) VALUES (?, ?, ?, "
                " COALESCE((SELECT seq FROM pa WHERE id = ?), (SELECT COUNT(*) FROM pa)), ?)"
                " ON CONFLICT(id) DO UPDATE SET deleted = excluded.deleted, data = excluded.data",
                (pa["id"], pa["dup_key"], int(pa["deleted"]), pa["id"], json.dumps(pa)),
            )

    def get(self, pa_id: str) -> dict[str, Any] | None:
        with self._db_lock:
            row = self._db.execute("SELECT data FROM pa WHERE id = ?", (pa_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def find(self, dup_key: str, *, include_deleted: bool) -> dict[str, Any] | None:
        with self._db_lock:
            row = self._db.execute(
                "SELECT data FROM pa WHERE dup_key = ? AND (? OR deleted = 0)"
                " ORDER BY seq DESC LIMIT 1",
                (dup_key, int(include_deleted)),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def all(self) -> list[dict[str, Any]]:
        with self._db_lock:
            rows = self._db.execute("SELECT data FROM pa ORDER BY seq").fetchall()
        return [json.loads(r[0]) for r in rows]

    def _new_id(self) -> str:
        while True:
            pa_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(6))
            if self.get(pa_id) is None:
                return pa_id

    def portal_of(self, pa: dict[str, Any]) -> str:
        """The base of a PA's links: where the sandbox was reached when it was created
        (a PA kept from an older sandbox has none: the sandbox's own address)."""
        return str(pa.get("portal") or self.portal)

    def token_url(self, pa: dict[str, Any]) -> str:
        """The hosted-page link a pharmacist opens: ``{portal}/request/view/{id}?token_id=``."""
        return f"{self.portal_of(pa)}/request/view/{pa['id']}?token_id={pa['tokens'][0]['id']}"

    def by_tokens(self, tokens: list[str]) -> list[dict[str, Any]]:
        """The PAs not deleted that these tokens open, once each, in the tokens' order."""
        with self._db_lock:
            ids = [self._by_token.get(t) for t in tokens]
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for pa_id in ids:
            if pa_id is None or pa_id in seen:
                continue
            seen.add(pa_id)
            pa = self.get(pa_id)
            if pa is not None and not pa["deleted"]:
                out.append(pa)
        return out

    def request_object(self, pa: dict[str, Any]) -> dict[str, Any]:
        """The PA as the real service's request object looks in a callback (the
        evidence, the product's real-service-evidence.md): links (``href``, ``html_url``,
        ``pdf_url``, ``thumbnail_urls``, ``tokens`` with their own links), values as
        strings where the type is a number or boolean (``urgent: "false"``, quantities),
        ``is_epa`` a boolean and ``attachments_included`` a number (as in the
        evidence), ``created_at`` and no ``updated_at``, ``events`` only for a DELETE or
        a fax failure, and no patient data at all (the sandbox has none to send)."""
        portal, pa_id = self.portal_of(pa), pa["id"]
        rx = dict(pa.get("prescription") or {})
        for key in ("quantity", "days_supply", "fill_number"):
            rx[key] = "" if rx.get(key) is None else str(rx[key])
        return {
            "id": pa_id,
            "api_id": self.config.api_id,
            "href": f"{portal}/requests/{pa_id}",
            "html_url": f"{portal}/request/view/{pa_id}",
            "pdf_url": f"{portal}/requests/{pa_id}/download",
            "thumbnail_urls": [],
            "workflow_status": pa["workflow_status"],
            "plan_outcome": pa["plan_outcome"],
            "is_epa": True,
            # booleans as strings, as the evidence's urgent is
            "is_renewal": "true" if pa.get("renewal_of") else "false",
            "urgent": "false",
            "attachments_included": 0,
            "memo": None,
            "form_id": None,
            "created_at": pa["created_at"],
            "payer": pa.get("payer") or {},
            "prescriber": pa.get("prescriber") or {},
            "prescription": rx,
            "pharmacy": pa.get("pharmacy") or {},
            "tokens": [
                {
                    "id": t["id"],
                    "request_id": pa_id,
                    "href": f"{portal}/requests/tokens/{t['id']}",
                    "html_url": f"{portal}/request/view/{pa_id}?token_id={t['id']}",
                    "pdf_url": f"{portal}/requests/{pa_id}/download?token_id={t['id']}",
                }
                for t in pa["tokens"]
            ],
            "events": list(pa.get("events") or []),
            "associated_requests": {
                "appeals": [],
                "renewals": [
                    {"id": r, "href": f"{portal}/requests/{r}"} for r in pa.get("renewals") or []
                ],
                "request_being_appealed": None,
                "request_being_renewed": {
                    "id": pa["renewal_of"],
                    "href": f"{portal}/requests/{pa['renewal_of']}",
                }
                if pa.get("renewal_of")
                else None,
            },
            **(
                {"authorization_period": pa["authorization_period"]}
                if pa.get("authorization_period")
                else {}
            ),
        }

    def record_claim(
        self, *, framed: bool, fmt: str, username: str = "", provider_id: str = ""
    ) -> None:
        """Remember that a claim arrived, framed STX ... ETX or not (both accepted),
        with whose credentials and from which store (201-B1)."""
        with self._cond:
            self._claims.append(
                {
                    "at": now_iso(),
                    "framed": framed,
                    "format": fmt,
                    "username": username,
                    "provider_id": provider_id,
                }
            )
            del self._claims[:-1000]

    def claims(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._claims)

    def record_call(self, interface: str, username: str, **extra: str) -> None:
        """Remember a call to ``interface`` made with ``username``'s credentials."""
        with self._cond:
            self._calls.append(
                {"at": now_iso(), "interface": interface, "username": username, **extra}
            )
            del self._calls[:-5000]

    def calls(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._calls)

    # ------------------------------------------------------------------ PA life

    def create(
        self, dup_key: str, fields: dict[str, Any], final_outcome: str, portal: str = ""
    ) -> dict[str, Any]:
        """A new PA in status New (callback now), then PA Request and PA Response.
        ``portal``: the base of its hosted-page links (the sandbox's own address)."""
        with self._db_lock:
            pa_id = self._new_id()
            ts = now_iso()
            token = secrets.token_urlsafe(24)
            pa: dict[str, Any] = {
                "id": pa_id,
                "workflow_status": "New",
                "plan_outcome": None,
                "is_epa": True,
                "created_at": ts,
                "events": [],
                "tokens": [{"id": token, "request_id": pa_id}],
                **fields,
                "history": [{"workflow_status": "New", "plan_outcome": None, "time": ts}],
                "final_outcome": final_outcome,
                "dup_key": dup_key,
                "deleted": False,
                "portal": portal.rstrip("/"),
            }
            self._save(pa)
            self._by_token[token] = pa_id
        log.info("sandbox PA %s created (New)", pa_id)
        self._enqueue_callback(pa)
        self._schedule(self.config.step_seconds, lambda: self._advance(pa_id))
        return pa

    def find_or_create(
        self, dup_key: str, fields: dict[str, Any], final_outcome: str, portal: str = ""
    ) -> tuple[dict[str, Any], bool]:
        """The live PA for this claim (duplicate True), or a new one; atomic."""
        with self._db_lock:
            existing = self.find(dup_key, include_deleted=False)
            if existing is not None:
                return existing, True
            return self.create(dup_key, fields, final_outcome, portal), False

    def _advance(self, pa_id: str) -> None:
        with self._db_lock:
            pa = self.get(pa_id)
            if pa is None or pa["deleted"] or pa["workflow_status"] == "PA Response":
                return
            ts = now_iso()
            if pa["workflow_status"] == "New":
                pa["workflow_status"], pa["plan_outcome"] = "PA Request", None
            else:
                pa["workflow_status"], pa["plan_outcome"] = "PA Response", pa["final_outcome"]
                if pa["final_outcome"] == "Favorable":  # approved for a year from now
                    pa["authorization_period"] = {
                        "effective_date": ts,
                        "expiration_date": (datetime.now(UTC) + timedelta(days=365))
                        .isoformat(timespec="seconds")
                        .replace("+00:00", "Z"),
                    }
            pa["history"].append(
                {
                    "workflow_status": pa["workflow_status"],
                    "plan_outcome": pa["plan_outcome"],
                    "time": ts,
                }
            )
            self._save(pa)
        log.info("sandbox PA %s moved to %s", pa_id, pa["workflow_status"])
        self._enqueue_callback(pa)
        if pa["workflow_status"] != "PA Response":
            self._schedule(self.config.step_seconds, lambda: self._advance(pa_id))

    def record_remote_user(self, pa_id: str, remote_user: dict[str, str]) -> None:
        """Who opened the hosted page, as the service saves it in the PA's history
        (``remote_user``, pa-service-interface.md). Kept for ``GET /sandbox/pas``
        (``remote_users``); never in a callback."""
        with self._db_lock:
            current = self.get(pa_id)
            if current is None:
                return
            current.setdefault("remote_users", []).append({**remote_user, "time": now_iso()})
            self._save(current)

    def delete(self, pa: dict[str, Any], remote_user: str) -> dict[str, Any]:
        """Soft-delete: a DELETE event, the status steps stop, a callback goes out."""
        with self._db_lock:
            current = self.get(pa["id"]) or pa
            if current["deleted"]:
                return current
            ts = now_iso()
            current["deleted"] = True
            current["events"].append(
                {"type": "DELETE", "time": ts, "remote_user": {"display_name": remote_user}}
            )
            current["history"].append(
                {
                    "workflow_status": current["workflow_status"],
                    "plan_outcome": current["plan_outcome"],
                    "time": ts,
                    "event": "DELETE",
                }
            )
            self._save(current)
        log.info("sandbox PA %s deleted", current["id"])
        self._enqueue_callback(current)
        return current

    def renew(self, pa_id: str) -> dict[str, Any] | None:
        """A renewal of the PA (as a prescriber starts one before the approval lapses):
        a new PA with ``is_renewal`` and ``associated_requests.request_being_renewed``,
        the original's ``renewals`` naming it; its own status steps and callbacks
        follow. None for an unknown PA."""
        with self._db_lock:
            original = self.get(pa_id)
            if original is None:
                return None
            fields: dict[str, Any] = {
                k: original[k]
                for k in ("payer", "prescription", "prescriber", "pharmacy")
                if k in original
            }
            fields["renewal_of"] = pa_id
            renewal = self.create(
                f"renewal:{pa_id}:{len(original.get('renewals') or [])}",
                fields,
                original["final_outcome"],
                self.portal_of(original),
            )
            original = self.get(pa_id) or original
            original.setdefault("renewals", []).append(renewal["id"])
            self._save(original)
        return renewal

    def _resume(self) -> None:
        """After a restart on SQLite: finish the status steps of unfinished PAs."""
        for pa in self.all():
            for t in pa.get("tokens") or []:
                self._by_token[t["id"]] = pa["id"]
            if not pa["deleted"] and pa["workflow_status"] != "PA Response":
                pa_id = pa["id"]
                self._schedule(self.config.step_seconds, functools.partial(self._advance, pa_id))

    # ------------------------------------------------------------------ scheduler

    def _schedule(self, delay: float, task: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), task))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-scheduler", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                if self._closed:
                    return
                _, _, task = heapq.heappop(self._heap)
            try:
                task()
            except Exception:
                log.exception("sandbox task failed")

    # ------------------------------------------------------------------ callbacks

    def _enqueue_callback(self, pa: dict[str, Any]) -> None:
        pa_id = pa["id"]
        if self.drop_callbacks:  # lost for good, as the service's are after its retries
            with self._cond:
                self.dropped_callbacks += 1
            log.info("sandbox PA %s callback dropped (drill)", pa_id)
            return
        payload = {"request": self.request_object(pa)}
        if self.omit_period:
            payload["request"].pop("authorization_period", None)
        with self._cond:
            q = self._queues.setdefault(pa_id, _PaQueue())
            q.items.append(_Delivery(pa_id, payload))
            start = not q.busy
            q.busy = True
        if start:
            self._schedule(0, lambda: self._attempt(pa_id))

    def _attempt(self, pa_id: str) -> None:
        with self._cond:
            if self._closed:
                return
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=4, thread_name_prefix="sandbox-callback"
                )
            pool = self._pool
        try:
            pool.submit(self._deliver, pa_id)
        except RuntimeError:  # shutting down
            return

    def _client(self) -> httpx.Client:
        with self._cond:
            if self._http is None:
                self._http = httpx.Client(
                    verify=verify_context(self.config.callback_verify),
                    timeout=self.config.callback_timeout_seconds,
                    follow_redirects=False,
                )
            return self._http

    def _deliver(self, pa_id: str) -> None:
        with self._cond:
            q = self._queues.get(pa_id)
            if q is None or not q.items:
                if q is not None:
                    q.busy = False
                return
            delivery = q.items[0]
            target = CallbackTarget(
                self.callback.url, self.callback.username, self.callback.password
            )
        if not target.url:
            with self._cond:
                dropped = len(q.items)
                q.items.clear()
                q.busy = False
            log.info(
                "sandbox PA %s: no callback URL registered, %d callback(s) dropped", pa_id, dropped
            )
            return
        delivery.attempts += 1
        ok = False
        status: int | str
        try:
            if target.username:
                auth = httpx.BasicAuth(target.username, target.password or "")
                resp = self._client().post(target.url, json=delivery.payload, auth=auth)
            else:  # credentials in the URL's userinfo, if any, still apply
                resp = self._client().post(target.url, json=delivery.payload)
            status = resp.status_code
            ok = status == 200
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        except RuntimeError:  # client closed while stopping
            return
        self._record(pa_id, ok)
        if ok:
            log.info(
                "sandbox PA %s callback (%s) delivered after %d attempt(s)",
                pa_id,
                delivery.payload["request"]["workflow_status"],
                delivery.attempts,
            )
            with self._cond:
                q.items.popleft()
                more = bool(q.items)
                if not more:
                    q.busy = False
            if more:
                self._schedule(0, lambda: self._attempt(pa_id))
            return
        delay = min(
            self.config.retry_base_seconds * (2 ** (delivery.attempts - 1)),
            self.config.retry_max_seconds,
        )
        log.info(
            "sandbox PA %s callback attempt %d failed (%s); retry in %.2f s",
            pa_id,
            delivery.attempts,
            status,
            delay,
        )
        self._schedule(delay, lambda: self._attempt(pa_id))

    def _record(self, pa_id: str, ok: bool) -> None:
        with self._db_lock:
            pa = self.get(pa_id)
            if pa is None:
                return
            stats = pa.setdefault("callbacks", {"attempts": 0, "delivered": 0})
            stats["attempts"] += 1
            stats["delivered"] += int(ok)
            self._save(pa)

    def pending_callbacks(self) -> int:
        with self._cond:
            return sum(len(q.items) for q in self._queues.values())

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the clock and the deliveries; wake any stalled drill; close the db."""
        self.stop_event.set()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread, pool = self._thread, self._pool
        if thread is not None:
            thread.join(timeout=5)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            http, self._http = self._http, None
        if http is not None:
            http.close()
        with self._db_lock:
            self._db.close()
