"""Reconciliation (issue 28, decision 0031): callbacks the service never delivered are
found by reading the PAs back from its requests resource, and applied as the callbacks
would have been.

The PA service is the sandbox, a real server on loopback, with its drill that loses
callbacks on purpose (``POST /sandbox/control``); the daemons run in-process on a real
SQLite file or a real PostgreSQL database (several daemons on one database for the
fleet's test); webhooks go to a fake receiver on loopback."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pa_bridge.callbacks.ingest import CallbackIntake
from pa_bridge.sandbox import (
    SANDBOX_API_ID,
    SANDBOX_API_KEY,
    SANDBOX_PASSWORD,
    SANDBOX_USERNAME,
    SandboxConfig,
    SandboxServer,
)
from pa_bridge.service.reconcile import tokens_of
from pa_bridge.store import PgStore, Store, outbox, pa_history
from tests import builders as b
from tests.fakes import FakeHttpServer, RecordedRequest, Reply
from tests.real_shapes import callback_body
from tests.support import pa_bridge_process, wait_until

SECRET = "whsec-reconcile-0123456789"


def _no_pa_bridge_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PA_BRIDGE_")}


@pytest.fixture
def service() -> Iterator[SandboxServer]:
    """The PA service: one sandbox for every daemon of a test (its PAs, its tokens)."""
    server = SandboxServer(SandboxConfig(step_seconds=0.02)).start()
    try:
        yield server
    finally:
        server.stop()


def service_settings(sb: SandboxServer) -> dict[str, Any]:
    """``[service]`` for a daemon on ``sb`` as if it were the real service."""
    return {
        "claim_url": sb.claim_url,
        "outcomes_url": sb.outcomes_url,
        "dashboard_url": sb.dashboard_url,
        "username": SANDBOX_USERNAME,
        "password": SANDBOX_PASSWORD,
        "api_key": SANDBOX_API_KEY,
        "api_url": sb.url,
        "api_id": SANDBOX_API_ID,
        "probe_seconds": 0,
    }


def control(sb: SandboxServer, **drills: Any) -> dict[str, Any]:
    r = httpx.post(f"{sb.url}/sandbox/control", json=drills)
    assert r.status_code == 200
    return r.json()  # type: ignore[no-any-return]


def sandbox_pas(sb: SandboxServer) -> dict[str, dict[str, Any]]:
    return {p["id"]: p for p in httpx.get(f"{sb.url}/sandbox/pas").json()["pas"]}


class Hook:
    """The dispensing system's webhook receiver: records every POST, answers 200."""

    def __init__(self) -> None:
        self.server = FakeHttpServer(lambda req: Reply(status=200, body=b"{}"))

    @property
    def url(self) -> str:
        return self.server.url + "/hook"

    def bodies(self) -> list[tuple[RecordedRequest, dict[str, Any]]]:
        return [(r, json.loads(r.body)) for r in self.server.requests]


class Pharmacy:
    """A daemon on the shared sandbox, and what the dispensing system does with it."""

    def __init__(self, daemon: Any, sb: SandboxServer) -> None:
        self.d = daemon
        self.sb = sb
        self.api = httpx.Client(base_url=daemon.intake_server.url, timeout=20)

    def take_callbacks(self) -> None:
        url = f"{self.d.callback_server.url}/callbacks/pharmacy"
        assert httpx.post(f"{self.sb.url}/sandbox/callback-url", json={"url": url}).is_success

    def submit(self, rx: str, group: str = "SYNGRP01") -> str:
        claim = b.Claim(group_id=group, rxs=(b.Rx(rx_number=rx),))
        r = self.api.post(
            "/v1/claims",
            json={
                "request": b.request_bytes(claim).decode("latin-1"),
                "response": b.response_bytes([b.REJECT_MR]).decode("latin-1"),
            },
        )
        assert r.status_code == 200, r.text
        pa = self.api.post(f"/v1/claims/{r.json()['claim_id']}/pa")
        assert pa.status_code == 201, pa.text
        return str(pa.json()["pa_id"])

    def reverse(self, rx: str, group: str = "SYNGRP01") -> None:
        claim = b.Claim(code="B2", group_id=group, rxs=(b.Rx(rx_number=rx),))
        r = self.api.post(
            "/v1/reversals", json={"request": b.request_bytes(claim).decode("latin-1")}
        )
        assert r.status_code == 200, r.text

    def pa(self, pa_id: str) -> dict[str, Any]:
        r = self.api.get(f"/v1/pa/{pa_id}")
        assert r.status_code == 200
        return r.json()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.api.close()


def _settled(sb: SandboxServer, ids: list[str]) -> bool:
    """Every PA at the service reached its last step (or was deleted)."""
    pas = sandbox_pas(sb)
    return all(pas[i]["workflow_status"] == "PA Response" or pas[i]["deleted"] for i in ids)


def _submit_losing_callbacks(ph: Pharmacy, *claims: tuple[str, ...]) -> list[str]:
    """Submit PA for each (Rx number[, group]) while the service drops every callback;
    their PAs, once the service's reached their last step."""
    ph.take_callbacks()
    control(ph.sb, drop_callbacks=True)
    ids = [ph.submit(*claim) for claim in claims]
    wait_until(lambda: _settled(ph.sb, ids), what="the service's PAs settled")
    return ids


def _lose_callbacks_for_four_pas(ph: Pharmacy) -> dict[str, str]:
    """Four PAs whose every callback is lost: approved, denied, pending, and one
    deleted by a reversal. pa-bridge has only what each submit answered."""
    control(ph.sb, drop_callbacks=True)
    ids = {
        "approved": ph.submit("000000100001"),
        "denied": ph.submit("000000100002", "SYNDENY"),
        "pending": ph.submit("000000100003", "SYNPEND"),
        "deleted": ph.submit("000000100004"),
    }
    ph.reverse("000000100004")
    wait_until(lambda: _settled(ph.sb, list(ids.values())), what="the service's PAs settled")
    assert control(ph.sb)["dropped_callbacks"] >= 3 * 3 + 2  # the deleted one: New, DELETE
    for pa_id in ids.values():  # nothing came: each still as its submit left it
        got = ph.pa(pa_id)
        assert (got["workflow_status"], got["deleted"]) == ("New", False)
        assert "callback" not in [h["source"] for h in got["history"]]
    return ids


def _assert_restored(ph: Pharmacy, ids: dict[str, str]) -> None:
    """Each PA as the service has it now, with a history entry found by reconciliation."""
    at_service = sandbox_pas(ph.sb)
    for name, pa_id in ids.items():
        got, theirs = ph.pa(pa_id), at_service[pa_id]
        last = got["history"][-1]
        assert last["source"] == "reconcile", (name, got["history"])
        if name == "deleted":  # the service no longer returns it: effectively deleted
            assert got["deleted"] is True and got["gone"] is True
            assert "no longer returns" in last["note"]
            continue
        assert (got["workflow_status"], got["plan_outcome"]) == (
            theirs["workflow_status"],
            theirs["plan_outcome"],
        ), name
        assert (last["workflow_status"], last["plan_outcome"]) == (
            theirs["workflow_status"],
            theirs["plan_outcome"],
        )
        assert got["deleted"] is False and got["gone"] is False
    approved = ph.pa(ids["approved"])
    end = at_service[ids["approved"]]["authorization_period"]["expiration_date"]
    assert approved["expires_at"] == end[:10]  # the approval period came with the read


def test_lost_callbacks_are_restored_by_a_pass(
    make_daemon: Any, service: SandboxServer, daemon_storage: dict[str, Any]
) -> None:
    hook = Hook()
    with hook.server:
        d = make_daemon(
            service=service_settings(service),
            sandbox={"enabled": False},
            storage=daemon_storage,
            reconcile={"calls_per_minute": 0, "batch_size": 3},
            callbacks={"forward_url": hook.url, "forward_secret": SECRET},
        )
        ph = Pharmacy(d, service)
        try:
            ph.take_callbacks()
            ids = _lose_callbacks_for_four_pas(ph)
            report = d.reconciler.run_pass()
            assert report.complete and not report.skipped
            assert (report.candidates, report.read) == (4, 3)
            assert (report.changed, report.gone) == (3, 1)
            assert report.calls == 2  # 4 PAs in batches of 3
            _assert_restored(ph, ids)

            # the same change a callback makes: one signed pa.changed webhook each
            wait_until(lambda: len(hook.server.requests) >= 4, what="four webhooks")
            by_pa = {body["pa_id"]: (r, body) for r, body in hook.bodies()}
            assert set(by_pa) == set(ids.values())
            for r, body in by_pa.values():
                assert r.headers["pa-bridge-event"] == "pa.changed" == body["event"]
                assert body["change"]["source"] == "reconcile"
                assert r.headers["pa-bridge-signature"].startswith("t=")
            assert by_pa[ids["denied"]][1]["pa"]["plan_outcome"] == "Unfavorable"
            assert by_pa[ids["deleted"]][1]["pa"]["deleted"] is True

            # a second pass finds nothing more: no new history, no new webhook
            entries = {i: len(ph.pa(i)["history"]) for i in ids.values()}
            again = d.reconciler.run_pass()
            assert again.complete and again.changes == 0 and again.unchanged == 3
            assert {i: len(ph.pa(i)["history"]) for i in ids.values()} == entries

            # store IT sees it: /healthz, /metrics
            health = ph.api.get("/healthz").json()
            assert health["reconcile"]["enabled"] is True
            assert health["reconcile"]["last_changes"] == 0  # the last complete pass
            metrics = ph.api.get("/metrics").text
            assert 'pa_bridge_reconcile_changes_total{kind="changed"} 3.0' in metrics
            assert "pa_bridge_reconcile_last_complete_timestamp_seconds" in metrics
        finally:
            ph.close()


def test_healthz_and_doctor_say_callbacks_are_lost_when_a_pass_finds_changes(
    make_daemon: Any, service: SandboxServer, tmp_path: Any, cli: Any
) -> None:
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 0},
    )
    ph = Pharmacy(d, service)
    try:
        _submit_losing_callbacks(ph, ("000000200001",))
        before = ph.api.get("/healthz").json()
        assert "callbacks_lost" not in before["degraded"]
        assert d.reconciler.run_pass().changed == 1
        health = ph.api.get("/healthz")
        assert health.status_code == 200  # it works: degraded, not unavailable
        assert "callbacks_lost" in health.json()["degraded"]
        assert health.json()["reconcile"]["last_changes"] == 1
        config = tmp_path / "doctor.toml"
        config.write_text(
            "[storage]\n"
            f"path = '{d.settings.storage.path}'\n"
            "[service]\n"
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in service_settings(service).items())
        )
        out = cli("doctor", "--config", str(config)).output
        line = next(x for x in out.splitlines() if "reconciliation pass" in x)
        assert line.startswith("warn") and "callbacks are being lost" in line
        assert "1 change(s)" in line
    finally:
        ph.close()


def test_doctor_says_reconciliation_is_off_without_an_api_id(
    service: SandboxServer, tmp_path: Any, cli: Any
) -> None:
    settings = {k: v for k, v in service_settings(service).items() if k != "api_id"}
    config = tmp_path / "doctor.toml"
    config.write_text(
        "[storage]\n"
        f"path = '{tmp_path / 'db.sqlite3'}'\n"
        "[service]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    )
    out = cli("doctor", "--config", str(config)).output
    line = next(x for x in out.splitlines() if x.split()[1:2] == ["reconciliation:"])
    assert line.startswith("warn") and "off: no service.api_id" in line


def test_several_daemons_on_one_database_make_one_pass_at_a_time(
    make_daemon: Any, service: SandboxServer, pg_url: str
) -> None:
    fleet = [
        make_daemon(
            service=service_settings(service),
            sandbox={"enabled": False},
            storage={"url": pg_url},
            reconcile={"calls_per_minute": 0, "batch_size": 2},
        )
        for _ in range(3)
    ]
    ph = Pharmacy(fleet[0], service)
    try:
        ph.take_callbacks()
        ids = _lose_callbacks_for_four_pas(ph)

        # another daemon holds the fleet's pass: none of these starts one
        other = PgStore(pg_url)
        try:
            with other.fleet_once("reconcile.pass", 0) as mine:
                assert mine
                assert all(d.reconciler.run_pass().skipped for d in fleet)
        finally:
            other.close()
        assert all(ph.pa(i)["workflow_status"] == "New" for i in ids.values())

        # all three at once, each waiting for its turn: the passes do not overlap, and
        # the first one's changes are found once
        reports: list[Any] = []
        lock = threading.Lock()

        def run(d: Any) -> None:
            report = d.reconciler.run_pass(wait=True, wait_s=60)
            with lock:
                reports.append(report)

        threads = [threading.Thread(target=run, args=(d,)) for d in fleet]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert len(reports) == 3 and all(r.complete and not r.skipped for r in reports)
        spans = sorted((r.started_at, r.finished_at) for r in reports)
        assert all(spans[i][0] >= spans[i - 1][1] for i in (1, 2)), spans
        assert sorted(r.changes for r in reports) == [0, 0, 4]
        _assert_restored(ph, ids)
        for pa_id in ids.values():  # one entry found by reconciliation, not three
            assert [h["source"] for h in ph.pa(pa_id)["history"]].count("reconcile") == 1

        # the fleet's next pass is due an interval after this one, on every daemon
        assert not any(d.reconciler._due(d.store.reader()) for d in fleet)
    finally:
        ph.close()


def test_a_read_back_applies_the_callbacks_ordering_rule(store_url: str) -> None:
    """A read that says less than pa-bridge knows (an older place in the workflow) does
    not move the PA back, and is not applied at all: no history, no change."""
    store = PgStore(store_url) if store_url.startswith("postgresql://") else Store(store_url)
    try:
        ingest = CallbackIntake(store, forward=False)
        (stored,) = ingest.receive_many(
            [(callback_body("RC28AA", "PA Response", "Favorable"), None)]
        )
        assert not isinstance(stored, BaseException) and stored.outcome == "stored"
        older = callback_body("RC28AA", "PA Request")
        assert [r.outcome for r in ingest.reconcile_many([older])] == ["unchanged"]
        newer = callback_body("RC28AA", "Archived", "Favorable")
        unknown = callback_body("RC28ZZ", "New")
        results = ingest.reconcile_many([newer, unknown, b"not json"])
        assert [r.outcome for r in results] == ["changed", "unknown", "invalid"]
        history = pa_history.for_pa(store.reader(), "RC28AA")
        assert [(h["source"], h["workflow_status"]) for h in history] == [
            ("callback", "PA Response"),
            ("reconcile", "Archived"),
        ]
        assert pa_history.for_pa(store.reader(), "RC28ZZ") == []  # never inserted
    finally:
        store.close()


def test_a_late_callback_for_a_change_reconciliation_applied_is_not_a_second_change(
    store_url: str,
) -> None:
    """The service's callback for a change a pass already read back comes late (it was
    held up, not lost): it is kept, but the PA's history and the dispensing system's
    webhooks show the one change once. A later change still comes through."""
    store = PgStore(store_url) if store_url.startswith("postgresql://") else Store(store_url)
    try:
        ingest = CallbackIntake(store, forward=True)

        def webhooks() -> int:
            return sum(
                1
                for item in outbox.list_items(store.reader(), limit=1000)
                if item["kind"] == "webhook"
            )

        (first,) = ingest.receive_many([(callback_body("RC28LT", "New"), None)])
        assert not isinstance(first, BaseException) and first.outcome == "stored"
        decided = callback_body("RC28LT", "PA Response", "Favorable")
        assert [r.outcome for r in ingest.reconcile_many([decided])] == ["changed"]
        assert webhooks() == 2
        (late,) = ingest.receive_many([(decided, None)])
        assert not isinstance(late, BaseException) and late.outcome == "stored"
        history = pa_history.for_pa(store.reader(), "RC28LT")
        assert [(h["source"], h["workflow_status"]) for h in history] == [
            ("callback", "New"),
            ("reconcile", "PA Response"),
        ]
        assert webhooks() == 2
        (archived,) = ingest.receive_many(
            [(callback_body("RC28LT", "Archived", "Favorable"), None)]
        )
        assert not isinstance(archived, BaseException) and archived.outcome == "stored"
        assert [h["source"] for h in pa_history.for_pa(store.reader(), "RC28LT")] == [
            "callback",
            "reconcile",
            "callback",
        ]
        assert webhooks() == 3
    finally:
        store.close()


def test_an_incomplete_pass_is_not_the_last_complete_one(
    make_daemon: Any, service: SandboxServer
) -> None:
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 0},
    )
    ph = Pharmacy(d, service)
    try:
        ph.take_callbacks()
        pa_id = ph.submit("000000300001")
        wait_until(lambda: ph.pa(pa_id)["workflow_status"] == "PA Response", what="callbacks")
        assert d.reconciler.run_pass().complete
        control(service, requests_status=503)  # the service is down for maintenance
        report = d.reconciler.run_pass()
        assert not report.complete and report.failed_calls == 1
        assert ph.pa(pa_id)["gone"] is False  # an error is not "no longer returned"
        health = ph.api.get("/healthz").json()
        assert "reconcile_incomplete" in health["degraded"]
        assert health["reconcile"]["last_complete_at"] is not None
        control(service, requests_status=None)
    finally:
        ph.close()


def test_a_reversal_whose_delete_callback_came_is_not_a_lost_callback(
    make_daemon: Any, service: SandboxServer
) -> None:
    """The service no longer returns a PA it deleted, whose DELETE its callback
    brought: that is the deletion pa-bridge knows, not news, so a pass after an
    ordinary reversal finds nothing and /healthz does not say callbacks are lost."""
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 0},
    )
    ph = Pharmacy(d, service)
    try:
        ph.take_callbacks()
        kept, reversed_ = ph.submit("000000350001"), ph.submit("000000350002")
        ph.reverse("000000350002")
        wait_until(lambda: ph.pa(reversed_)["deleted"] is True, what="the DELETE callback")
        wait_until(
            lambda: ph.pa(kept)["workflow_status"] == "PA Response", what="the kept PA's callbacks"
        )
        report = d.reconciler.run_pass()
        assert report.complete and (report.changes, report.gone) == (0, 0), report
        got = ph.pa(reversed_)
        assert got["deleted"] is True and got["gone"] is False
        assert "reconcile" not in [h["source"] for h in got["history"]]
        health = ph.api.get("/healthz").json()
        assert "callbacks_lost" not in health["degraded"]
        assert health["reconcile"]["last_changes"] == 0
        # asked for by id, it is what pa-bridge already has, not a change
        assert d.reconciler.read_one(reversed_).outcome == "unchanged"
        assert 'pa_bridge_reconcile_changes_total{kind="gone"} 1' not in ph.api.get("/metrics").text
    finally:
        ph.close()


def test_the_changes_counter_is_there_at_zero_before_any_pass(
    make_daemon: Any, service: SandboxServer
) -> None:
    """A rate over the counter (the alert "callbacks are being lost") sees the first
    change only if the series existed before it, at 0."""
    d = make_daemon(service=service_settings(service), sandbox={"enabled": False})
    text = httpx.get(f"{d.intake_server.url}/metrics").text
    for kind in ("changed", "gone", "back", "completed"):
        assert f'pa_bridge_reconcile_changes_total{{kind="{kind}"}} 0.0' in text, kind


def test_tokens_come_from_the_links_the_pa_has() -> None:
    row = {
        "urls_json": json.dumps(["https://portal.test/request/view/AB12CD?token_id=tok-a"]),
        "links_json": json.dumps(
            {
                "html_url": "https://portal.test/requests/AB12CD",
                "token_urls": [
                    "https://portal.test/request/view/AB12CD?token_id=tok-a",
                    "https://portal.test/request/view/AB12CD?token_id=tok-b&x=1",
                ],
                "match": {"bin": "610014"},
            }
        ),
    }
    assert tokens_of(row) == ["tok-a", "tok-b"]
    assert tokens_of({"urls_json": "[]", "links_json": "{}"}) == []
    assert tokens_of({"urls_json": "not json", "links_json": None}) == []


def _config(tmp_path: Any, sb: SandboxServer, db: Any) -> str:
    """A config file for ``pa-bridge reconcile`` on ``db`` and the service ``sb``."""
    path = tmp_path / "reconcile.toml"
    path.write_text(
        f"[storage]\npath = '{db}'\n[sandbox]\nenabled = false\n"
        "[reconcile]\ncalls_per_minute = 0\n[service]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in service_settings(sb).items())
    )
    return str(path)


def test_the_command_reads_one_pa_or_all_of_them_without_a_daemon(
    make_daemon: Any, service: SandboxServer, tmp_path: Any, cli: Any
) -> None:
    d = make_daemon(service=service_settings(service), sandbox={"enabled": False})
    ph = Pharmacy(d, service)
    try:
        one, two = _submit_losing_callbacks(ph, ("000000400001",), ("000000400002", "SYNDENY"))
    finally:
        ph.close()
    d.stop()  # no daemon serves the file now: the command runs the pass itself
    config = _config(tmp_path, service, d.settings.storage.path)
    r = cli("reconcile", "--config", config, "--pa", one)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"PA {one}: changed")
    r = cli("reconcile", "--config", config, "--pa", one)
    assert r.exit_code == 0 and r.output.startswith(f"PA {one}: unchanged"), r.output
    r = cli("reconcile", "--config", config)
    assert r.exit_code == 0, r.output
    assert "pass complete: 2 of 2 PAs read in 1 call(s); 1 change(s) found" in r.output
    assert "callbacks were lost" in r.output
    r = cli("reconcile", "--config", config, "--pa", "NOSUCH", "--json")
    assert r.exit_code == 1 and json.loads(r.output)["outcome"] == "unknown_pa"
    store = Store(d.settings.storage.path)
    try:
        assert store.query("SELECT plan_outcome FROM pas WHERE id = ?", [two]) == [
            {"plan_outcome": "Unfavorable"}
        ]
    finally:
        store.close()


def test_the_commands_own_log_lines_are_json_lines(
    make_daemon: Any, service: SandboxServer, tmp_path: Any
) -> None:
    """As a process (a timer, a shell): a pass that finds a change logs at WARNING.
    With no logging set up, Python printed the bare event name, ``reconcile.finished``,
    on stderr; the lines are the daemon's JSON lines, redacted like them."""
    d = make_daemon(service=service_settings(service), sandbox={"enabled": False})
    ph = Pharmacy(d, service)
    try:
        _submit_losing_callbacks(ph, ("000000450001",))
    finally:
        ph.close()
    d.stop()
    config = _config(tmp_path, service, d.settings.storage.path)
    r = pa_bridge_process("reconcile", "--config", config, cwd=tmp_path, env=_no_pa_bridge_env())
    assert r.returncode == 0, r.stderr
    assert "1 change(s) found" in r.stdout
    lines = [json.loads(x) for x in r.stderr.splitlines() if x.strip()]
    (finished,) = [x for x in lines if x["event"] == "reconcile.finished"]
    assert finished["level"] == "warning" and finished["changed"] == 1
    # every count is a number (a name with "token" in it was blanked as a secret)
    counts = {k: v for k, v in finished.items() if k not in ("ts", "level", "event", "complete")}
    assert all(isinstance(v, int) for v in counts.values()), counts
    assert finished["no_access_link"] == 0


def test_the_command_asks_the_daemon_serving_the_database(
    make_daemon: Any, service: SandboxServer, tmp_path: Any, cli: Any
) -> None:
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 0},
    )
    ph = Pharmacy(d, service)
    try:
        (pa_id,) = _submit_losing_callbacks(ph, ("000000500001",))
        config = _config(tmp_path, service, d.settings.storage.path)
        r = cli("reconcile", "--config", config, "--wait", "60")
        assert r.exit_code == 0, r.output
        assert "asked the serving daemon" in r.output
        assert "1 change(s) found" in r.output
        assert ph.pa(pa_id)["history"][-1]["source"] == "reconcile"  # the daemon applied it
        r = cli("reconcile", "--config", config, "--pa", pa_id, "--wait", "60")
        assert r.exit_code == 0 and f"PA {pa_id}: unchanged" in r.output, r.output
    finally:
        ph.close()


def test_the_command_says_when_reconciliation_is_off(tmp_path: Any, cli: Any) -> None:
    config = tmp_path / "off.toml"
    config.write_text(
        f"[storage]\npath = '{tmp_path / 'db.sqlite3'}'\n[reconcile]\nenabled = false\n"
    )
    r = cli("reconcile", "--config", str(config))
    assert r.exit_code == 1 and "reconciliation is off: [reconcile] enabled = false" in r.output


def test_a_pass_fetches_the_approval_period_a_callback_lacked(
    make_daemon: Any, service: SandboxServer
) -> None:
    """The callbacks came, but without ``authorization_period``: the pass reads it back
    (the PA was changed within ``recent_days``). Completing a PA is no lost callback:
    /healthz does not say callbacks_lost."""
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 0},
    )
    ph = Pharmacy(d, service)
    try:
        ph.take_callbacks()
        control(service, omit_period=True)
        pa_id = ph.submit("000000600001")
        wait_until(lambda: ph.pa(pa_id)["plan_outcome"] == "Favorable", what="approved")
        assert ph.pa(pa_id)["expires_at"] is None
        report = d.reconciler.run_pass()
        assert (report.changed, report.completed, report.changes) == (0, 1, 0)
        got = ph.pa(pa_id)
        end = sandbox_pas(service)[pa_id]["authorization_period"]["expiration_date"]
        assert got["expires_at"] == end[:10]
        assert got["history"][-1]["source"] == "reconcile"
        assert "callbacks_lost" not in ph.api.get("/healthz").json()["degraded"]
        assert d.reconciler.run_pass().completed == 0  # once
    finally:
        ph.close()
        control(service, omit_period=False)


def test_a_pass_cut_short_by_a_stop_is_not_reported_and_the_next_is_due(
    make_daemon: Any, service: SandboxServer
) -> None:
    d = make_daemon(
        service=service_settings(service),
        sandbox={"enabled": False},
        reconcile={"calls_per_minute": 1, "batch_size": 1},  # a minute between calls
    )
    ph = Pharmacy(d, service)
    try:
        ph.submit("000000700001")
        ph.submit("000000700002")

        def searches() -> int:
            calls = httpx.get(f"{service.url}/sandbox/calls").json()["calls"]
            return sum(c["interface"] == "requests.search_requests" for c in calls)

        done: list[Any] = []
        worker = threading.Thread(target=lambda: done.append(d.reconciler.run_pass()))
        worker.start()
        wait_until(lambda: searches() == 1, what="the first call")  # then it waits a minute
        d.reconciler.stop()  # what the daemon's stop does
        worker.join(20)
        assert not worker.is_alive() and done[0].errors == ["stopped"]
        assert searches() == 1
        health = ph.api.get("/healthz").json()
        assert health["reconcile"]["last_pass_complete"] is None  # nothing reported
        assert "reconcile_incomplete" not in health["degraded"]
        assert d.reconciler._due(d.store.reader())  # the fleet's next pass is due
    finally:
        ph.close()
