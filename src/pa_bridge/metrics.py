"""Prometheus metrics, one registry per daemon (so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .outbox import queue_summary
from .store import parse_iso

if TYPE_CHECKING:
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
        dead = GaugeMetricFamily("pa_bridge_dead_letters", "Callback bodies kept as dead letters")
        try:
            counts, first = queue_summary(self.store)
            for status in ("pending", "failed"):
                depth.add_metric([status], counts.get(status, 0))
            age = 0.0 if first is None else max(0.0, self.clock() - parse_iso(first))
            oldest.add_metric([], age)
            dead.add_metric([], self.store.query("SELECT count(*) AS n FROM dead_letters")[0]["n"])
        except Exception:  # a scrape never fails because of the database
            return
        yield depth
        yield oldest
        yield dead


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

    def watch_store(self, store: Store, clock: Callable[[], float]) -> None:
        self.registry.register(_StoreCollector(store, clock))
