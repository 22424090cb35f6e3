"""What the daemon knows of the PA service and of its own deliveries, for ``/healthz``
and ``/metrics``: whether the service answered the last time we reached for it,
whether it refused our credentials, when something last went through, and how
queued deliveries fail, by kind and reason.

It learns from every queued delivery (the outbox's observer) and from a light probe
run by the scheduler (:func:`probe_service`): the dashboard login when a dashboard
URL is configured (it proves the credentials and changes nothing), otherwise a GET
of the outcomes URL (reachability only; the interface description says its base URL
answers with a page for exploration)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .logs import log_event
from .store import now_iso

__all__ = ["ServiceHealth", "UNREACHABLE_REASONS", "CREDENTIAL_REASONS"]

#: failure reasons that mean we did not get an answer at all
UNREACHABLE_REASONS = frozenset({"unreachable", "timeout", "tls"})
#: failure reasons that mean the service refused who we are
CREDENTIAL_REASONS = frozenset({"credentials"})


class ServiceHealth:
    """Thread-safe; every method is cheap (no I/O)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.reachable: bool | None = None  # None: not tried yet
        self.credentials: str = "unknown"  # ok, refused, unknown
        self.last_success_at: float | None = None
        self.last_failure: tuple[str, str, float] | None = None  # (what, reason, at)
        self.failures: dict[tuple[str, str], int] = {}  # (kind, reason) -> count
        self.delivered: dict[str, int] = {}
        self.last_delivery_at: dict[str, float] = {}

    # ---- what happened -----------------------------------------------------------
    def service_answered(self, what: str, *, credentials_checked: bool = True) -> None:
        with self._lock:
            was = (self.reachable, self.credentials)
            self.reachable = True
            if credentials_checked:
                self.credentials = "ok"
            self.last_success_at = self.clock()
        if was[0] is False or was[1] == "refused":
            log_event("service.recovered", what=what)

    def service_failed(self, what: str, reason: str) -> None:
        with self._lock:
            was = (self.reachable, self.credentials)
            self.last_failure = (what, reason, self.clock())
            if reason in UNREACHABLE_REASONS:
                self.reachable = False
            else:
                self.reachable = True  # it answered, with an error
                if reason in CREDENTIAL_REASONS:
                    self.credentials = "refused"
        if reason in UNREACHABLE_REASONS and was[0] is not False:
            log_event("service.unreachable", level=30, what=what, reason=reason)
        if reason in CREDENTIAL_REASONS and was[1] != "refused":
            log_event("service.credentials_refused", level=40, what=what)

    def delivery(self, kind: str, ok: bool, reason: str | None) -> None:
        """The outbox's observer."""
        with self._lock:
            if ok:
                self.delivered[kind] = self.delivered.get(kind, 0) + 1
                self.last_delivery_at[kind] = self.clock()
            else:
                key = (kind, reason or "error")
                self.failures[key] = self.failures.get(key, 0) + 1
        if kind == "webhook":  # the dispensing system's receiver, not the service
            return
        if ok:
            self.service_answered(f"delivery.{kind}")
        elif reason:
            self.service_failed(f"delivery.{kind}", reason)

    # ---- what to say -------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            failure = self.last_failure
            by_kind: dict[str, dict[str, int]] = {}
            for (kind, reason), n in sorted(self.failures.items()):
                by_kind.setdefault(kind, {})[reason] = n
            return {
                "service": {
                    "reachable": self.reachable,
                    "credentials": self.credentials,
                    "last_success_at": _iso(self.last_success_at),
                    "last_failure": None
                    if failure is None
                    else {"what": failure[0], "reason": failure[1], "at": _iso(failure[2])},
                },
                "deliveries": {
                    "delivered": dict(sorted(self.delivered.items())),
                    "failures": by_kind,
                    "last_success_at": {
                        k: _iso(v) for k, v in sorted(self.last_delivery_at.items())
                    },
                },
            }

    def degraded_reasons(self) -> list[str]:
        with self._lock:
            out = []
            if self.reachable is False:
                out.append("service_unreachable")
            if self.credentials == "refused":
                out.append("service_credentials_refused")
            return out


def _iso(t: float | None) -> str | None:
    return None if t is None else now_iso(t)
