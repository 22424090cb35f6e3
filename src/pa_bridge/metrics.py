"""Prometheus metrics, one registry per daemon (so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .outbox import Hold, held_summary, queue_summary
from .store import Status, callbacks, parse_iso

if TYPE_CHECKING:
    from .service_health import ServiceHealth
    from .store import Store

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 5.0)


class _StoreCollector(Collector):
    """Queue depth, oldest queued item and dead letters, read at scrape time."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "pa_bridge_queue_depth", "Undelivered queue items", labels=["status"]
        )
        oldest = GaugeMetricFamily(
            "pa_bridge_queue_oldest_age_seconds", "Age of the oldest undelivered queue item"
        )
        held = GaugeMetricFamily(
            "pa_bridge_queue_held",
            "Held queue items, by why they wait: restore (review after a restore),"
            " configuration (refused for our credentials or configuration: retried at the"
            " next start or reload), pharmacy (a store this daemon does not list)",
            labels=["held_for"],
        )
        dead = GaugeMetricFamily("pa_bridge_dead_letters", "Callback bodies kept as dead letters")
        try:
            counts, first = queue_summary(self.store)
            for status in (Status.PENDING, Status.FAILED, Status.HELD):
                depth.add_metric([status], counts.get(status, 0))
            why = held_summary(self.store) if counts.get(Status.HELD) else {}
            for hold in Hold:
                held.add_metric([hold.value], why.get(hold.value, 0))
            age = 0.0 if first is None else max(0.0, self.clock() - parse_iso(first))
            oldest.add_metric([], age)
            dead.add_metric([], callbacks.count_dead_letters(self.store.reader()))
        except Exception:  # a scrape never fails because of the database
            return
        yield depth
        yield held
        yield oldest
        yield dead


class _ServiceCollector(Collector):
    """The service's state and the deliveries, from :class:`ServiceHealth`."""

    def __init__(self, health: ServiceHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        h = self.health
        with h._lock:
            reachable, creds, last_ok = h.reachable, h.credentials, h.last_success_at
            failures = dict(h.failures)
            delivered = dict(h.delivered)
            last_delivery = dict(h.last_delivery_at)
        up = GaugeMetricFamily(
            "pa_bridge_service_up",
            "1 when the PA service answered the last time it was reached for, 0 when it did"
            " not (absent until it is first reached for)",
        )
        if reachable is not None:
            up.add_metric([], 1.0 if reachable else 0.0)
        yield up
        refused = GaugeMetricFamily(
            "pa_bridge_service_credentials_refused",
            "1 when the PA service refused the pharmacy's credentials the last time",
        )
        refused.add_metric([], 1.0 if creds == "refused" else 0.0)
        yield refused
        last = GaugeMetricFamily(
            "pa_bridge_service_last_success_timestamp_seconds",
            "When the PA service last answered a call with success (Unix time)",
        )
        if last_ok is not None:
            last.add_metric([], last_ok)
        yield last
        fails = CounterMetricFamily(
            "pa_bridge_delivery_failures",
            "Failed delivery attempts of queued items, by kind and reason",
            labels=["kind", "reason"],
        )
        for (kind, reason), n in sorted(failures.items()):
            fails.add_metric([kind, reason], n)
        yield fails
        done = CounterMetricFamily(
            "pa_bridge_deliveries", "Queued items delivered, by kind", labels=["kind"]
        )
        for kind, n in sorted(delivered.items()):
            done.add_metric([kind], n)
        yield done
        when = GaugeMetricFamily(
            "pa_bridge_delivery_last_success_timestamp_seconds",
            "When a queued item of each kind was last delivered (Unix time)",
            labels=["kind"],
        )
        for kind, t in sorted(last_delivery.items()):
            when.add_metric([kind], t)
        yield when


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.claims = Counter(
            "pa_bridge_claims", "Claims taken in, by decision", ["decision"], registry=r
        )
        self.outcomes_calls = Counter(
            "pa_bridge_outcomes_calls",
            "Outcomes interface calls, by result",
            ["result"],
            registry=r,
        )
        self.outcomes_latency = Histogram(
            "pa_bridge_outcomes_call_seconds",
            "Elapsed time of outcomes calls made before answering a claim",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.budget_misses = Counter(
            "pa_bridge_budget_misses",
            "Claim answers that took longer than outcomes.budget_ms",
            registry=r,
        )
        self.callbacks = Counter(
            "pa_bridge_callbacks", "Pharmacy callbacks, by result", ["result"], registry=r
        )
        self.pa_submits = Counter(
            "pa_bridge_pa_submits", "Submit-PA clicks, by result", ["result"], registry=r
        )
        # the NCPDP tap and inline modes (issue 30, decision 0039)
        self.inline_answers = Counter(
            "pa_bridge_inline_answers",
            "Answers relayed to the dispensing system in inline mode, by what was sent"
            " (passed: the payer's bytes; replaced: the outcomes message; fallback: the"
            " payer's bytes after an error or time-out of ours; dropped: an answer of the"
            " switch no waiting request was given)",
            ["result"],
            registry=r,
        )
        self.inline_switch_failures = Counter(
            "pa_bridge_inline_switch_failures",
            "Requests the switch did not answer, and connections to it that failed, by reason",
            ["reason"],
            registry=r,
        )
        self.tap_exchanges = Counter(
            "pa_bridge_tap_exchanges",
            "Claim exchanges seen on the wire (tap and inline), by what was done with them",
            ["mode", "result"],
            registry=r,
        )

    def watch_store(self, store: Store, clock: Callable[[], float]) -> None:
        self.registry.register(_StoreCollector(store, clock))

    def watch_service(self, health: ServiceHealth) -> None:
        self.registry.register(_ServiceCollector(health))
