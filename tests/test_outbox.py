from __future__ import annotations

from typing import Any

from pa_bridge.config import QueueSettings
from pa_bridge.outbox import DeliveryFailed, Outbox, enqueue
from pa_bridge.store import Store
from pa_bridge.store.outbox import retry_item


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def _outbox(store: Store, deliver: Any, clock: Clock) -> Outbox:
    return Outbox(
        store,
        {"thing": deliver},
        QueueSettings(backoff_base_seconds=10, backoff_max_seconds=100),
        clock=clock,
    )


def test_item_is_retried_with_backoff_until_delivered(store: Store) -> None:
    clock = Clock()
    calls: list[dict[str, Any]] = []
    outcomes = iter([DeliveryFailed("down"), DeliveryFailed("still down"), None])

    def deliver(payload: dict[str, Any]) -> None:
        calls.append(payload)
        err = next(outcomes)
        if err is not None:
            raise err

    ob = _outbox(store, deliver, clock)
    item = store.write(lambda db: enqueue(db, "thing", {"n": 1}, now=clock()))
    assert ob.drain_once() == 1
    row = ob.list()[0]
    # listed as failed (its last attempt did) and retrying at the backoff's time
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 1, "down")
    assert row["retrying"] and row["next_attempt_at"] > row["created_at"]
    assert ob.drain_once() == 0  # not due yet: backoff
    clock.t += 10
    assert ob.drain_once() == 1
    assert ob.list()[0]["attempts"] == 2
    clock.t += 100
    assert ob.drain_once() == 1
    row = ob.list()[0]
    assert row["id"] == item and row["status"] == "delivered" and row["attempts"] == 3
    assert calls == [{"n": 1}] * 3
    assert ob.depth() == (0, None)


def test_permanent_failure_stays_visible_and_can_be_redriven(store: Store) -> None:
    clock = Clock()
    state = {"fail": True}

    def deliver(payload: dict[str, Any]) -> None:
        if state["fail"]:
            raise DeliveryFailed("refused for good", retryable=False)

    ob = _outbox(store, deliver, clock)
    item = store.write(lambda db: enqueue(db, "thing", {}, now=clock()))
    ob.drain_once()
    failed = ob.list("failed")[0]
    assert failed["last_error"] == "refused for good"
    assert not failed["retrying"] and failed["next_attempt_at"] is None
    clock.t += 10_000
    assert ob.drain_once() == 0  # failed items are not retried by themselves
    assert ob.depth()[0] == 1
    state["fail"] = False
    # what `pa-bridge queue retry` does: the store's statement, then the queue's pass
    assert store.write(lambda db: retry_item(db, item, clock()))
    assert ob.drain_once() == 1
    assert ob.list()[0]["status"] == "delivered"
    assert not store.write(lambda db: retry_item(db, item, clock()))  # delivered: nothing to do


def test_unexpected_exception_keeps_item_pending(store: Store) -> None:
    clock = Clock()

    def deliver(payload: dict[str, Any]) -> None:
        raise RuntimeError("bug")

    ob = _outbox(store, deliver, clock)
    store.write(lambda db: enqueue(db, "thing", {}, now=clock()))
    ob.drain_once()
    row = ob.list()[0]
    assert row["status"] == "failed" and row["last_error"] == "unexpected RuntimeError"
    assert row["retrying"]  # kept and tried again, never given up on for a bug


def test_a_clock_set_back_does_not_stall_the_queue(store: Store) -> None:
    clock = Clock()
    outcomes = iter([DeliveryFailed("down"), None])

    def deliver(payload: dict[str, Any]) -> None:
        err = next(outcomes)
        if err is not None:
            raise err

    ob = _outbox(store, deliver, clock)
    store.write(lambda db: enqueue(db, "thing", {}, now=clock()))
    assert ob.drain_once() == 1  # failed; next attempt 5-10 s ahead
    clock.t -= 86_400  # the wall clock is set back a day
    assert ob.drain_once() == 1, "the item waits for a day that already passed"
    assert ob.list()[0]["status"] == "delivered"


def test_a_delivered_reports_record_rides_in_the_next_commit_and_is_not_sent_again(
    sqlite_store: Store,
) -> None:
    """SQLite (one daemon per file): an outcome report's delivery is recorded with the
    next commit (decision 0025); meanwhile the daemon knows it is delivered."""
    store = sqlite_store
    store.defer_seconds = 3600.0  # only another commit or a flush writes it down
    clock = Clock()
    calls: list[dict[str, Any]] = []
    ob = Outbox(store, {"outcome_report": calls.append}, QueueSettings(), clock=clock)
    item = store.write(lambda db: enqueue(db, "outcome_report", {"claim_id": "c1"}, now=clock()))
    commits = store.commits
    assert ob.drain_once() == 1
    assert store.commits == commits  # no commit of its own
    stored = store.query("SELECT status FROM outbox WHERE id = ?", [item])
    assert stored == [{"status": "pending"}]
    assert ob.drain_once() == 0 and ob.deliver(item) is True
    assert calls == [{"claim_id": "c1"}]  # delivered once
    store.write(lambda db: enqueue(db, "other", {}, now=clock()))  # any commit takes it
    stored = store.query("SELECT status FROM outbox WHERE id = ?", [item])
    assert stored == [{"status": "delivered"}]
    assert ob.list("delivered")[0]["id"] == item


def test_other_deliveries_and_postgresql_record_at_once(store: Store) -> None:
    store.defer_seconds = 3600.0
    clock = Clock()
    deliverers: dict[str, Any] = {"outcome_report": lambda p: None, "webhook": lambda p: None}
    ob = Outbox(store, deliverers, QueueSettings(), clock=clock)
    kinds = ["webhook", "outcome_report"]
    ids = store.write(lambda db: [enqueue(db, k, {}, now=clock()) for k in kinds])
    assert ob.drain_once() == 2
    rows = {r["id"]: r["status"] for r in store.query("SELECT id, status FROM outbox")}
    expected_report = "pending" if store.dialect == "sqlite" else "delivered"
    assert rows == {ids[0]: "delivered", ids[1]: expected_report}
