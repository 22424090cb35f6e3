"""The integrator's API (issue 16): re-sent exchanges and Idempotency-Key, malformed
exchanges, look-ups, reversal answers, fallback reasons, cursors. The daemon runs
in-process with a real SQLite file; the PA service is a purpose-built fake on
127.0.0.1 that counts what it is sent (or the sandbox)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import builders as b
from tests.fakes import FakeHttpServer, RecordedRequest, Reply
from tests.support import free_port, wait_until

PORTAL = "https://portal.example.test"


def _exchange(req: bytes | None = None, resp: bytes | None = None) -> dict[str, Any]:
    return {
        "request": (req if req is not None else b.request_bytes()).decode("latin-1"),
        "response": (resp if resp is not None else b.response_bytes([b.REJECT_MR])).decode(
            "latin-1"
        ),
    }


class FakeService:
    """The claim interface answers a link (PA ``PA<n>``, one per distinct claim),
    the outcomes interface ``outcomes_reply``; every request is counted."""

    def __init__(self) -> None:
        self.outcomes_reply = Reply(
            status=200,
            body=json.dumps({"button_label": "Start PA", "message": "Use the PA."}).encode(),
        )
        self.claim_reply: Reply | None = None
        self.server = FakeHttpServer(self._reply)

    def _reply(self, req: RecordedRequest) -> Reply:
        if req.path.startswith("/outcomes"):
            return self.outcomes_reply
        if self.claim_reply is not None:
            return self.claim_reply
        n = len(self.claims)
        link = f"{PORTAL}/request/view/PA{n}?token_id=t{n}"
        return Reply(status=200, body=link.encode() + b"\r\n", content_type="text/html")

    @property
    def claims(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path.startswith("/cmmimport")]

    @property
    def outcomes(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path.startswith("/outcomes")]


@pytest.fixture
def service() -> Iterator[FakeService]:
    s = FakeService()
    with s.server:
        yield s


def _api(
    make_daemon: Any,
    service: FakeService,
    overrides: dict[str, Any] | None = None,
    **sections: dict[str, Any],
) -> httpx.Client:
    svc = {
        "claim_url": service.server.url + "/cmmimport/",
        "outcomes_url": service.server.url + "/outcomes",
        "username": "u",
        "password": "p",
        "api_key": "k",
        **(overrides or {}),
    }
    d = make_daemon(service=svc, **sections)
    c = httpx.Client(base_url=d.intake_server.url, timeout=10)
    c.daemon = d  # type: ignore[attr-defined]
    return c


def _count(api: httpx.Client, table: str) -> int:
    sql = f"SELECT count(*) AS n FROM {table}"  # noqa: S608 - our own table names
    return int(api.daemon.store.query(sql)[0]["n"])  # type: ignore[attr-defined]


# ---- 1. re-sent exchanges ---------------------------------------------------------------


def test_a_resent_exchange_shows_and_answers_the_pa_of_its_claim(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        first = api.post("/v1/claims", json=_exchange()).json()["claim_id"]
        again = api.post("/v1/claims", json=_exchange()).json()["claim_id"]
        assert first != again  # without a key, two exchanges are two claims
        created = api.post(f"/v1/claims/{first}/pa")
        assert created.status_code == 201
        pa = created.json()
        for _ in range(3):  # the re-sent exchange's button, clicked three times
            r = api.post(f"/v1/claims/{again}/pa")
            assert r.status_code == 200 and r.json()["pa_id"] == pa["pa_id"]
        assert len(service.claims) == 1  # the service heard the claim once
        # the second claim shows its PA, by claim key
        got = api.get(f"/v1/claims/{again}").json()
        assert [p["pa_id"] for p in got["pas"]] == [pa["pa_id"]]
        assert got["transactions"] == [{"index": 0, "pa_id": pa["pa_id"]}]
        assert got["pa"]["pa_id"] == pa["pa_id"] and got["pa"]["claim_id"] == first
        assert got["answer"]["pa_eligible"] is True
        listed = api.get("/v1/pa", params={"claim_id": again}).json()["pas"]
        assert [p["pa_id"] for p in listed] == [pa["pa_id"]]
        # a PA carries its Rx number and product id
        assert pa["rx_number"] == b.Rx().rx_number and pa["product_id"] == b.Rx().product_id


def test_concurrent_clicks_on_two_exchanges_of_one_claim_call_the_service_once(
    make_daemon: Any, service: FakeService
) -> None:
    link = f"{PORTAL}/request/view/PASLOW?token_id=t"
    service.claim_reply = Reply(
        status=200, body=link.encode() + b"\r\n", content_type="text/html", mode="trickle",
        seconds=0.3,
    )  # fmt: skip
    with _api(make_daemon, service) as api:
        claims = [api.post("/v1/claims", json=_exchange()).json()["claim_id"] for _ in range(2)]
        start = threading.Barrier(4)
        answers: list[httpx.Response] = []

        def click(claim_id: str) -> None:
            with httpx.Client(base_url=str(api.base_url), timeout=10) as c:
                start.wait()
                answers.append(c.post(f"/v1/claims/{claim_id}/pa"))

        threads = [threading.Thread(target=click, args=(c,)) for c in claims * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(r.status_code for r in answers) == [200, 200, 200, 201]
        assert {r.json()["pa_id"] for r in answers} == {"PASLOW"}
        assert len(service.claims) == 1


def test_idempotency_key_on_claims_replays_the_first_answer(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        body = _exchange(resp=b.response_bytes([b.REJECT_75]))
        key = {"Idempotency-Key": "3b8f0c2e-7d7e-4c55-9a51-1f0d2b6e8a10"}
        one = api.post("/v1/claims", json=body, headers=key)
        two = api.post("/v1/claims", json=body, headers=key)
        assert one.status_code == two.status_code == 200
        assert "idempotent-replayed" not in one.headers
        assert two.headers["idempotent-replayed"] == "true"
        first, second = one.json(), two.json()
        assert second["claim_id"] == first["claim_id"]
        assert second["message"] == first["message"] == "Use the PA."
        assert _count(api, "exchanges") == 1
        assert len(service.outcomes) == 1  # the outcomes call was not made again
        other = api.post("/v1/claims", json=_exchange(), headers=key)
        assert other.status_code == 422
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        bad = api.post("/v1/claims", json=body, headers={"Idempotency-Key": "with blank"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_idempotency_key"
        assert _count(api, "exchanges") == 1


def test_the_same_key_at_the_same_moment_makes_one_claim(
    make_daemon: Any, service: FakeService
) -> None:
    # the outcomes interface takes 300 ms: both requests are in flight together
    service.outcomes_reply = Reply(
        status=200,
        body=json.dumps({"button_label": "Start PA", "message": "Use the PA."}).encode(),
        mode="trickle",
        seconds=0.3,
    )
    with _api(make_daemon, service) as api:
        body = _exchange(resp=b.response_bytes([b.REJECT_75]))
        key = {"Idempotency-Key": "same-moment-0001"}
        start = threading.Barrier(2)
        answers: list[httpx.Response] = []

        def send() -> None:
            with httpx.Client(base_url=str(api.base_url), timeout=10) as c:
                start.wait()
                answers.append(c.post("/v1/claims", json=body, headers=key))

        threads = [threading.Thread(target=send) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert [r.status_code for r in answers] == [200, 200]
        assert len({r.json()["claim_id"] for r in answers}) == 1
        assert {r.json()["message"] for r in answers} == {"Use the PA."}
        assert _count(api, "exchanges") == 1


def test_idempotency_key_on_submit_answers_the_pa_again(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        claim = api.post("/v1/claims", json=_exchange()).json()["claim_id"]
        key = {"Idempotency-Key": "click-0001-a"}
        one = api.post(f"/v1/claims/{claim}/pa", headers=key)
        two = api.post(f"/v1/claims/{claim}/pa", headers=key)
        assert (one.status_code, two.status_code) == (201, 201)  # the first answer's status
        assert two.json()["pa_id"] == one.json()["pa_id"]
        assert two.headers["idempotent-replayed"] == "true"
        assert list(two.json()) == list(one.json())  # the same shape as the first answer
        assert len(service.claims) == 1
        other = api.post("/v1/claims", json=_exchange(b.request_bytes(rxs=(b.Rx(rx_number="7"),))))
        r = api.post(f"/v1/claims/{other.json()['claim_id']}/pa", headers=key)
        assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused"
        assert len(service.claims) == 1


# ---- 2. malformed means 400 --------------------------------------------------------------


def test_an_exchange_cut_short_is_a_400_naming_what_is_missing(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        cut = b.request_bytes()[:70]  # the header and half the insurance segment
        r = api.post("/v1/claims", json=_exchange(cut, b.response_bytes([b.REJECT_75])))
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "malformed_claim"
        assert "request: a transaction group (it ends after the header)" in err["detail"]["missing"]
        assert "transaction group" in err["message"]
        # a transaction without its claim segment: nothing to start a PA for
        req = b.request(b.Claim())
        group = req.groups[0]
        no_claim = type(req)(
            header=req.header,
            segments=req.segments,
            groups=[type(group)([s for s in group.segments if s.id != "07"])],
        )
        r = api.post("/v1/claims", json=_exchange(bytes(no_claim)))
        assert r.status_code == 400, r.text
        assert "request: the claim segment AM07 (transaction 1)" in r.json()["error"]["message"]
        # a response transaction without its status
        resp = b.response([b.REJECT_75])
        rgroup = resp.groups[0]
        no_status = type(resp)(
            header=resp.header,
            segments=resp.segments,
            groups=[type(rgroup)([s for s in rgroup.segments if s.id != "21"])],
        )
        r = api.post("/v1/claims", json=_exchange(resp=bytes(no_status)))
        assert r.status_code == 400, r.text
        assert "AM21" in r.json()["error"]["message"]
        for phi in (b.PATIENT_LAST, b.PATIENT_FIRST, b.CARDHOLDER_ID):
            assert phi not in r.text
        assert _count(api, "exchanges") == 0  # nothing stored
        assert service.outcomes == []


# ---- 3. look-ups -----------------------------------------------------------------------


def test_claim_lookups_and_the_claim_filter(make_daemon: Any, service: FakeService) -> None:
    with _api(make_daemon, service) as api:
        paid = api.post("/v1/claims", json=_exchange(resp=b.response_bytes([b.PAID]))).json()
        mr = api.post(
            "/v1/claims", json=_exchange(b.request_bytes(rxs=(b.Rx(rx_number="000000000777"),)))
        ).json()
        pa = api.post(f"/v1/claims/{mr['claim_id']}/pa").json()
        got = api.get(f"/v1/claims/{paid['claim_id']}").json()
        assert got["pas"] == [] and got["pa"] is None
        assert got["transactions"] == [{"index": 0, "pa_id": None}]
        assert got["answer"]["claim_id"] == paid["claim_id"]
        assert got["transaction_code"] == "B1" and got["received_at"]
        assert api.get("/v1/pa", params={"claim_id": paid["claim_id"]}).json()["pas"] == []
        mine = api.get("/v1/pa", params={"claim_id": mr["claim_id"]}).json()["pas"]
        assert [p["pa_id"] for p in mine] == [pa["pa_id"]]
        assert mine[0]["rx_number"] == "000000000777"
        for path in ("/v1/claims/nope", "/v1/pa?claim_id=nope"):
            r = api.get(path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_claim"


# ---- 4. reversals -----------------------------------------------------------------------


def _b2() -> dict[str, str]:
    return {"request": b.request_bytes(code="B2").decode("latin-1")}


def test_a_reversal_says_which_pa_the_service_deletes(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        none = api.post("/v1/reversals", json=_b2())
        assert none.status_code == 200
        assert none.json()["pa_found"] is False and none.json()["pas"] == []
        assert "knows no PA" in none.json()["message"]
        claim = api.post("/v1/claims", json=_exchange()).json()["claim_id"]
        pa = api.post(f"/v1/claims/{claim}/pa").json()
        r = api.post("/v1/reversals", json=_b2())
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "delivered" and body["pa_found"] is True
        assert [p["pa_id"] for p in body["pas"]] == [pa["pa_id"]]
        assert pa["pa_id"] in body["message"]


def test_a_reversal_refused_for_good_is_a_422_and_failed_in_the_queue(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        service.claim_reply = Reply(
            status=500, body=b"<p>Claim could not be read</p>", content_type="text/html"
        )
        r = api.post("/v1/reversals", json=_b2())
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "reversal_refused"
        assert err["detail"]["status"] == "failed" and err["detail"]["queue_id"]
        items = api.daemon.use_cases.outbox.list()  # type: ignore[attr-defined]
        assert [(i["kind"], i["status"], i["retrying"]) for i in items] == [
            ("reversal", "failed", False)
        ]


def test_a_reversal_queued_for_retry_is_202_and_a_replayed_key_sends_nothing(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(
        make_daemon,
        service,
        {"claim_url": f"http://127.0.0.1:{free_port()}/cmmimport/"},
        queue={"backoff_base_seconds": 60, "backoff_max_seconds": 60},
    ) as api:
        key = {"Idempotency-Key": "b2-0001"}
        r = api.post("/v1/reversals", json=_b2(), headers=key)
        assert r.status_code == 202 and r.json()["status"] == "pending"
        again = api.post("/v1/reversals", json=_b2(), headers=key)
        assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["reversal_id"] == r.json()["reversal_id"]
        assert _count(api, "outbox") == 1


# ---- 5. fallback reasons -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reason", "status"),
    [
        (Reply(status=500, body=b"oops"), "http_500", 500),
        (Reply(status=200, body=b"{not json"), "unreadable", None),
        (Reply(status=200, body=b"{}", mode="stall", seconds=3.0), "timeout", None),
    ],
)
def test_a_fallback_answer_says_why(
    make_daemon: Any, service: FakeService, reply: Reply, reason: str, status: int | None
) -> None:
    service.outcomes_reply = reply
    with _api(make_daemon, service, outcomes={"budget_ms": 400}) as api:
        r = api.post("/v1/claims", json=_exchange(resp=b.response_bytes([b.REJECT_75])))
        body = r.json()
        assert body["message_source"] == "fallback"
        assert body["fallback_reason"] == reason
        assert body.get("fallback_http_status") == status
        # the stored answer (written just after the answer is sent) says it too
        stored = wait_until(
            lambda: api.get(f"/v1/claims/{body['claim_id']}").json()["answer"],
            what="the answer recorded",
        )
        assert stored["fallback_reason"] == reason


def test_a_refused_connection_is_the_fallback_reason(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service, {"outcomes_url": f"http://127.0.0.1:{free_port()}/o"}) as api:
        body = api.post("/v1/claims", json=_exchange(resp=b.response_bytes([b.REJECT_75]))).json()
        assert body["message_source"] == "fallback" and body["fallback_reason"] == "refused"
        ok = api.post("/v1/claims", json=_exchange()).json()
        assert "fallback_reason" not in ok


# ---- 6. cursors -----------------------------------------------------------------------------


def test_a_cursor_beyond_the_newest_change_is_a_400_but_the_restore_floor_counts(
    make_daemon: Any, service: FakeService
) -> None:
    with _api(make_daemon, service) as api:
        claim = api.post("/v1/claims", json=_exchange()).json()["claim_id"]
        api.post(f"/v1/claims/{claim}/pa")
        cursor = int(api.get("/v1/pa").json()["cursor"])
        assert api.get("/v1/pa", params={"since": str(cursor)}).status_code == 200
        r = api.get("/v1/pa", params={"since": str(cursor + 1)})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "invalid_cursor" and "beyond the newest change" in err["message"]
        assert err["detail"]["newest_cursor"] == str(cursor)
        # after a restore, cursors up to the floor were handed out before it: accepted
        floor = cursor + 5_000_000
        api.daemon.store.write(  # type: ignore[attr-defined]
            lambda db: db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('feed.seq_floor', ?)",
                [str(floor)],
            )
        )
        r = api.get("/v1/pa", params={"since": str(floor)})
        assert r.status_code == 200 and r.json() == {"pas": [], "cursor": str(floor)}
        assert api.get("/v1/pa", params={"since": str(floor + 1)}).status_code == 400


def test_idempotency_keys_are_purged_with_the_claims_content(store: Any) -> None:
    from pa_bridge.config import load_settings
    from pa_bridge.maintenance import purge
    from pa_bridge.store import idempotency

    old, new = "2020-01-01T00:00:00.000Z", "2099-01-01T00:00:00.000Z"
    store.write(lambda db: idempotency.insert(db, "claims", "old-key-1", "f" * 64, "c1", old))
    store.write(lambda db: idempotency.insert(db, "claims", "new-key-1", "f" * 64, "c2", new))
    report = purge(store, load_settings(), now=time.time())
    assert report.idempotency_keys == 1
    assert idempotency.get(store.reader(), "old-key-1") is None
    assert idempotency.get(store.reader(), "new-key-1") == ("claims", "f" * 64, "c2", None)


def test_a_cursor_handed_out_after_a_forward_clock_jump_is_taken_back(
    make_app: Any, daemon_storage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: the clock ran a day ahead while a PA changed (then was set right): the
    feed handed out that change's cursor, a day in the future, and must take it back
    (it refused every cursor more than 60 s ahead of its clock)."""
    from pa_bridge.store import now_iso, pas

    app = make_app(storage=daemon_storage)
    state: pas.CallbackState = {
        "workflow_status": "New", "plan_outcome": None, "status_time": None,
        "events_json": "[]", "deleted": 0, "fax_failed": 0, "links_json": "{}",
        "urls_json": "[]", "details_json": None, "fax_failed_latest": 0, "news_seq": 0,
    }  # fmt: skip
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400)  # the clock a day ahead
    app.store.write(
        lambda db: pas.insert_from_callback(
            db, "JUMP01", state, now=now_iso(), seq=app.store.next_seq(db)
        )
    )
    monkeypatch.setattr(time, "time", real)  # set right again
    cursor = app.get("/v1/pa").json()["cursor"]
    assert int(cursor) > real() * 1_000_000 + 3_600_000_000  # the day ahead
    again = app.get("/v1/pa", params={"since": cursor})
    assert again.status_code == 200, again.json()
    assert again.json() == {"pas": [], "cursor": cursor}
    assert app.get("/v1/pa", params={"since": str(int(cursor) + 1)}).status_code == 400
