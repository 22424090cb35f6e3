"""The webhook to the dispensing system (issue 16, decision 0018): one POST per change,
describing that change, with a delivery id, signed; a receiver's 4xx is not retried
forever. The daemon runs in-process with a real SQLite file; the receiver is a fake on
127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from pa_bridge.config import ConfigError, load_settings
from tests import builders as b
from tests.fakes import FakeHttpServer, RecordedRequest, Reply
from tests.support import NO_SERVICE, document, wait_until

SECRET = "whsec-0123456789abcdef"


def _callback(pa_id: str, status: str, outcome: str | None = None, **extra: Any) -> bytes:
    req = {"id": pa_id, "workflow_status": status, "plan_outcome": outcome, "events": [], **extra}
    return json.dumps({"request": req}).encode()


def _verify(secret: str, body: bytes, header: str) -> bool:
    """What docs/api.md tells a receiver to do, written out here on its own."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    signed = fields["t"].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"]) and abs(time.time() - int(fields["t"])) < 300


class Receiver:
    """Answers ``status`` (500 until ``open`` is set, when ``hold``)."""

    def __init__(self, status: int = 200, *, hold: bool = False) -> None:
        self.status = status
        self.open = threading.Event()
        if not hold:
            self.open.set()
        self.server = FakeHttpServer(self._reply)

    def _reply(self, req: RecordedRequest) -> Reply:
        if not self.open.is_set():
            return Reply(status=500, body=b"not yet")
        return Reply(status=self.status, body=b"{}")


def _daemon(make_daemon: Any, url: str, **callbacks: Any) -> Any:
    return make_daemon(
        callbacks={"forward_url": url, **callbacks},
        sandbox={"enabled": False},
        service=NO_SERVICE,
    )


def test_three_changes_give_three_signed_bodies_each_describing_its_change(
    make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hook = Receiver(hold=True)  # nothing is taken until all three changes are stored
    with hook.server:
        d = _daemon(make_daemon, hook.server.url + "/hook", forward_secret=SECRET)
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        steps = [("New", None), ("PA Request", None), ("PA Response", "Favorable")]
        for status, outcome in steps:
            assert httpx.post(url, content=_callback("WH16AA", status, outcome)).status_code == 200
        wait_until(
            lambda: len(d.store.query("SELECT id FROM outbox WHERE kind = 'webhook'")) == 3,
            what="three changes queued",
        )
        hook.open.set()
        wait_until(
            lambda: len([i for i in d.use_cases.outbox.list() if i["status"] == "delivered"]) == 3,
            what="three deliveries",
        )
        by_id = {r.headers["pa-bridge-delivery"]: r for r in hook.server.requests}
        assert len(by_id) == 3  # one delivery id per change (retries repeat it)
        bodies = sorted(
            (json.loads(r.body) for r in by_id.values()), key=lambda b: int(b["cursor"])
        )
        assert [
            (b["change"]["workflow_status"], b["change"]["plan_outcome"]) for b in bodies
        ] == steps
        assert [(b["pa"]["workflow_status"], b["pa"]["plan_outcome"]) for b in bodies] == steps
        assert [b["pa"]["cursor"] for b in bodies] == [b["cursor"] for b in bodies]
        doc = document()
        schema = {**doc["components"]["schemas"]["WebhookChange"], "components": doc["components"]}
        validator = jsonschema_rs.Draft202012Validator(schema)
        for r in by_id.values():
            body = json.loads(r.body)
            assert [e.message for e in validator.iter_errors(body)] == []  # as documented
            assert body["delivery_id"] == r.headers["pa-bridge-delivery"]
            assert r.headers["pa-bridge-event"] == "pa.changed" == body["event"]
            assert _verify(SECRET, r.body, r.headers["pa-bridge-signature"])
            assert not _verify(SECRET, r.body + b" ", r.headers["pa-bridge-signature"])
            assert not _verify("another-secret-000", r.body, r.headers["pa-bridge-signature"])
        assert SECRET not in caplog.text


@pytest.mark.parametrize("status", [400, 404, 410, 422])
def test_a_receiver_4xx_fails_the_delivery_for_good(make_daemon: Any, status: int) -> None:
    hook = Receiver(status)
    with hook.server:
        d = _daemon(make_daemon, hook.server.url + "/hook")
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        assert httpx.post(url, content=_callback("WH16BB", "PA Request")).status_code == 200
        items = wait_until(
            lambda: [i for i in d.use_cases.outbox.list() if i["status"] == "failed"],
            what="the webhook failed for good",
        )
        assert items[0]["kind"] == "webhook" and items[0]["retrying"] is False
        assert items[0]["next_attempt_at"] is None and f"HTTP {status}" in items[0]["last_error"]
        d.use_cases.outbox.drain_once()  # another pass of the queue sends nothing
        assert len(hook.server.requests) == 1
        assert d.use_cases.outbox.list()[0]["attempts"] == 1


@pytest.mark.parametrize("status", [408, 429, 503])
def test_a_receiver_busy_or_down_is_retried(make_daemon: Any, status: int) -> None:
    hook = Receiver(status)
    with hook.server:
        d = _daemon(make_daemon, hook.server.url + "/hook")
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        assert httpx.post(url, content=_callback("WH16CC", "PA Request")).status_code == 200
        wait_until(lambda: len(hook.server.requests) >= 2, what="a second attempt")
        item = d.use_cases.outbox.list()[0]
        assert item["retrying"] is True and item["status"] == "failed"
        # the same change keeps its delivery id on every attempt
        assert len({r.headers["pa-bridge-delivery"] for r in hook.server.requests}) == 1
        assert "pa-bridge-signature" not in hook.server.requests[0].headers  # no secret set


def test_the_forward_secret_is_checked_and_read_from_its_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(
            callbacks={"forward_url": "http://127.0.0.1:9/h", "forward_secret": "t1ny-s3c"}
        )
    assert "callbacks.forward_secret" in str(e.value) and "t1ny-s3c" not in str(e.value)
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    s = load_settings(callbacks={"forward_secret_file": str(f)})
    assert s.callbacks.forward_secret is not None
    assert s.callbacks.forward_secret.get_secret_value() == SECRET


def test_an_item_queued_by_an_older_version_is_delivered_with_the_pa_as_it_is(
    make_daemon: Any,
) -> None:
    from pa_bridge.store import Kind
    from pa_bridge.store.outbox import enqueue

    hook = Receiver(hold=True)
    with hook.server:
        d = _daemon(make_daemon, hook.server.url + "/hook")
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        assert httpx.post(url, content=_callback("WH16DD", "PA Request")).status_code == 200
        seq = int(d.store.query("SELECT change_seq FROM pas WHERE id = 'WH16DD'")[0]["change_seq"])
        d.store.write(lambda db: enqueue(db, Kind.WEBHOOK, {"pa_id": "WH16DD", "change_seq": seq}))
        hook.open.set()
        wait_until(
            lambda: len([i for i in d.use_cases.outbox.list() if i["status"] == "delivered"]) == 2,
            what="both delivered",
        )
        old = [
            json.loads(r.body) for r in hook.server.requests if json.loads(r.body)["change"] == {}
        ]
        assert len(old) == 1 and old[0]["delivery_id"] == f"WH16DD@{seq}"
        assert old[0]["pa"]["workflow_status"] == "PA Request"


def test_a_hung_webhook_receiver_never_delays_outcome_reports(make_daemon: Any) -> None:
    """Issue 32: six webhooks to a receiver that never answers (each POST waits for the
    sender's 10 s timeout) are queued before a paid claim; the claim's outcome report
    is delivered while they hang (a thread per kind of work, not one for all)."""
    hung = FakeHttpServer(Reply(mode="stall"))
    with hung:
        d = make_daemon(callbacks={"forward_url": hung.url + "/hook"})
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        for n in range(6):
            assert httpx.post(url, content=_callback(f"WHHUNG{n}", "New")).status_code == 200
        wait_until(lambda: hung.requests, what="a webhook POST hanging at the receiver")
        with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
            claim = {
                "request": b.request_bytes().decode("latin-1"),
                "response": b.response_bytes([b.PAID]).decode("latin-1"),
            }
            assert api.post("/v1/claims", json=claim).status_code == 200

        def report_delivered() -> bool:
            d.store.flush()  # the delivery's record may be deferred (decision 0025)
            rows = d.store.query("SELECT status FROM outbox WHERE kind = 'outcome_report'")
            return [r["status"] for r in rows] == ["delivered"]

        t0 = time.monotonic()
        wait_until(report_delivered, timeout=8, what="the outcome report, webhooks hanging")
        print(f"\nhung-webhook drill: report delivered in {time.monotonic() - t0:.2f} s")
        webhooks = d.store.query("SELECT status FROM outbox WHERE kind = 'webhook'")
        assert len(webhooks) >= 6 and all(w["status"] == "pending" for w in webhooks)
        d.stop()  # before the receiver goes: the hung POSTs end with the daemon
