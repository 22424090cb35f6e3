"""A pharmacy's desk for the worklist's tests (issue 26): the intake app through Flask's
test client on a real SQLite file, the sandbox on loopback answering Submit PA (in its
empty format by default: the PA's id comes with its first callback), the callback
ingest on the same store fed bodies in the real service's shapes (tests/real_shapes.py),
and a clock the test moves (the only fake: time is outside our control).

The callback ingest stamps its own times with the real clock, so a PA first heard of
in a callback was created "now" in real time; the fake clock starts at the real one
and only moves forward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pa_bridge.app import create_app
from pa_bridge.callbacks.ingest import CallbackIntake
from pa_bridge.client import PaServiceClient
from pa_bridge.config import load_settings
from pa_bridge.store import Store, now_iso
from pa_bridge.store import reconcile as reconcile_rows
from tests import builders as b
from tests.real_shapes import request_object


def claim_body(rx: str, code: str = "B1") -> dict[str, str]:
    """A claim rejected MR (answered at once, no outcomes call) for Rx ``rx``; or its B2."""
    req = b.request_bytes(code=code, rxs=(b.Rx(rx_number=rx),))
    body = {"request": req.decode("latin-1")}
    if code == "B1":
        body["response"] = b.response_bytes([b.REJECT_MR]).decode("latin-1")
    return body


_REQUEST_OBJECT_ARGS = {"portal", "token", "events", "payer", "pharmacy", "prescription"}


class Desk:
    def __init__(self, where: Path, sandbox: Any, *, claim_format: str = "empty") -> None:
        self.start = self.now = time.time()
        settings = load_settings(
            storage={"path": str(where)},
            intake={"listen": "127.0.0.1:0"},
            callbacks={"listen": "127.0.0.1:0"},
            sandbox={"enabled": False},
            service={
                "claim_url": sandbox.claim_url,
                "outcomes_url": sandbox.outcomes_url,
                "username": sandbox.config.username,
                "password": sandbox.config.password,
                "api_key": sandbox.config.api_key,
            },
        )
        self.store = Store(settings.storage.path)
        kwargs = sandbox.client_kwargs()
        kwargs["claim_url"] += claim_format  # "empty": a blank answer, the PA comes by callback
        self.client = PaServiceClient(**kwargs)
        self.app = create_app(settings, store=self.store, client=self.client, clock=self.clock)
        self.http = self.app.test_client()
        self.services = self.app.extensions["pa_bridge"]
        self.ingest = CallbackIntake(self.store, forward=False)
        self.pending_alert_hours = settings.intake.pending_alert_hours
        self.expiring_days = settings.worklist.expiring_days
        self.expiring_reminder_days = settings.worklist.expiring_reminder_days

    def clock(self) -> float:
        return self.now

    def close(self) -> None:
        self.services.close()
        self.client.close()
        self.store.close()

    # ---- the API, as the console and the dispensing system call it -------------------
    def get(self, path: str, **params: str) -> Any:
        return self.http.get(path, query_string=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.http.post(path, json=body) if body is not None else self.http.post(path)

    def claim(self, rx: str) -> str:
        r = self.post("/v1/claims", claim_body(rx))
        assert r.status_code == 200, r.get_json()
        claim_id: str = r.get_json()["claim_id"]
        return claim_id

    def submit(self, claim_id: str) -> dict[str, Any]:
        r = self.post(f"/v1/claims/{claim_id}/pa")
        assert r.status_code in (200, 201), r.get_json()
        pa: dict[str, Any] = r.get_json()
        return pa

    def reverse(self, rx: str) -> dict[str, Any]:
        r = self.post("/v1/reversals", claim_body(rx, code="B2"))
        assert r.status_code == 200, r.get_json()
        answer: dict[str, Any] = r.get_json()
        return answer

    def worklist(self) -> dict[str, Any]:
        r = self.get("/v1/console/worklist")
        assert r.status_code == 200, r.get_json()
        data: dict[str, Any] = r.get_json()
        return data

    def page(self, pa_id: str) -> dict[str, Any]:
        r = self.get(f"/v1/console/pa/{pa_id}")
        assert r.status_code == 200, (pa_id, r.get_json())
        data: dict[str, Any] = r.get_json()
        return data

    def acknowledge(self, pa_id: str, cursor: str | None = None) -> dict[str, Any]:
        r = self.post(f"/v1/pa/{pa_id}/acknowledge", {"cursor": cursor} if cursor else None)
        assert r.status_code == 200, r.get_json()
        answer: dict[str, Any] = r.get_json()
        return answer

    # ---- the service's callbacks ---------------------------------------------------
    def callback_body(
        self, pa_id: str, status: str | None, outcome: str | None = None, **kw: Any
    ) -> bytes:
        """A callback in the real service's shape (``status`` None: a body without a
        ``workflow_status``); ``period``: its ``authorization_period``."""
        period = kw.pop("period", None)
        own = {k: kw.pop(k) for k in list(kw) if k not in _REQUEST_OBJECT_ARGS}
        req = request_object(pa_id, status or "", outcome, **kw)
        req.update(own)  # any other field of the body, as given
        if status is None:
            del req["workflow_status"]
        if period is not None:
            req["authorization_period"] = period
        return json.dumps({"request": req}).encode()

    def send(self, body: bytes) -> str:
        """Hand a body to the ingest as the listener does; its outcome (stored, duplicate)."""
        (result,) = self.ingest.receive_many([(body, "application/json")])
        assert not isinstance(result, BaseException), result
        return result.outcome

    def callback(
        self, pa_id: str, status: str | None, outcome: str | None = None, **kw: Any
    ) -> str:
        return self.send(self.callback_body(pa_id, status, outcome, **kw))

    # ---- reconciliation (issue 28): what a pass applies ------------------------------
    def read_back(self, body: bytes) -> str:
        """A request object read back from the service's requests resource, applied as
        a reconciliation pass applies it (the callbacks' merge, only where it changes the
        PA); its outcome (changed, completed, unchanged)."""
        (result,) = self.ingest.reconcile_many([body])
        return result.outcome

    def gone(self, pa_id: str, *, back: bool = False) -> bool:
        """What a reconciliation pass records when the service no longer returns the PA
        (``back``: returns it again); whether the PA changed."""

        def job(db: Any) -> bool:
            mark = reconcile_rows.clear_gone if back else reconcile_rows.mark_gone
            return mark(db, pa_id, at=now_iso(self.now), seq=self.store.next_seq(db))

        changed: bool = self.store.write(job)
        return changed


def prescription(rx: str, name: str | None = None, strength: str | None = None) -> dict[str, Any]:
    """A callback's prescription block naming the claim (Rx number and NDC, so the first
    callback of a PA submitted in the empty format finds it) and a drug, as given."""
    block: dict[str, Any] = {
        "drug_id": "085705",
        "ndc": b.Rx().product_id,
        "prescription_reference": rx,
        "days_supply": "",
        "quantity": "30",
        "rationale": None,
    }
    if name is not None:
        block["name"] = name
    if strength is not None:
        block["strength"] = strength
    return block


def fax_failed(
    time: str = "2026-11-24T08:00:00Z", kind: str = "REQUEST_FAX_FAILED"
) -> dict[str, Any]:
    return {"type": kind, "time": time, "remote_user": {"display_name": "SYN USER"}}


def delete(time: str = "2026-11-24T09:00:00Z") -> dict[str, Any]:
    return {"type": "DELETE", "time": time, "remote_user": {"display_name": "SYN USER"}}


def items_by_pa(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The worklist's PA items by PA id."""
    return {i["pa"]["pa_id"]: i for i in data["items"] if i["pa"] is not None}
