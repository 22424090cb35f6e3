"""A PA first heard of in a callback gets its store (issue 18 follow-up, decision 0022):
the callback's ``pharmacy`` block names a store of ``[[pharmacies]]`` (its ``ncpdpid``,
else its ``npi``), so that store's scoped token and ``?pharmacy=`` see the PA; a store
not configured leaves it without one; a submit's store and product id are never
overwritten by a callback; ``prescription.ndc`` fills a missing product id. The ingest
on a real store of each engine, the intake app through ``app.test_client()`` against
a real sandbox on loopback, and one daemon for the composition root's wiring."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.app import create_app
from pa_bridge.callbacks.ingest import CallbackIntake, parse_callback
from pa_bridge.client import PaServiceClient
from pa_bridge.config import load_settings
from pa_bridge.store import PgStore, Store, now_iso, pas
from tests import builders as b
from tests.real_shapes import callback_body
from tests.support import NO_SERVICE
from tests.test_pharmacies import CREDS, TOKEN_A, TOKEN_ALL, A, B, C, Chain, _claim

TOKEN_B = "token-for-store-b-only-0003"
NPI_A = "1999999992"  # a synthetic NPI a store may be listed by instead
N = "1999999984"  # a store listed by its NPI (synthetic)
STORES = {**CREDS, N: ("store-n", "store-n-password-4", "store-n-api-key-4")}


def _entry(pid: str) -> dict[str, str]:
    user, pw, key = STORES[pid]
    return {"provider_id": pid, "username": user, "password": pw, "api_key": key}


@pytest.fixture
def chain_sandbox() -> Iterator[Any]:
    from pa_bridge.sandbox import SandboxConfig, SandboxPharmacy, SandboxServer

    stores = tuple(SandboxPharmacy(*STORES[p], provider_id=p) for p in (A, B, C, N))
    server = SandboxServer(SandboxConfig(step_seconds=0.05, pharmacies=stores)).start()
    try:
        yield server
    finally:
        server.stop()


CLAIM_NDC = b.Rx().product_id  # the builders' claim's 407-D7


class CbChain(Chain):
    """A chain's intake app, and the callback ingest on the same database with the
    provider ids of its ``[[pharmacies]]``, as the daemon builds it."""

    def __init__(self, app: Any, sandbox: Any, stores: list[str]) -> None:
        super().__init__(app, sandbox)
        self.ingest = CallbackIntake(self.services.store, forward=False, pharmacies=stores)

    def callback(
        self, pa_id: str, status: str = "New", outcome: str | None = None, **kw: Any
    ) -> None:
        body = callback_body(pa_id, status, outcome, **kw)
        (result,) = self.ingest.receive_many([(body, None)])
        assert not isinstance(result, BaseException) and result.outcome == "stored", result

    def pa(self, pa_id: str, token: str = TOKEN_ALL) -> Any:
        return self.get(f"/v1/pa/{pa_id}", token)

    def feed(self, token: str = TOKEN_ALL, **params: str) -> list[str]:
        r = self.get("/v1/pa", token, **params)
        assert r.status_code == 200, r.get_json()
        return [p["pa_id"] for p in r.get_json()["pas"]]


@pytest.fixture
def make_cb_chain(
    tmp_path: Path, chain_sandbox: Any, daemon_storage: dict[str, Any]
) -> Iterator[Any]:
    made: list[tuple[Any, Any, Any]] = []
    storage = {"path": str(tmp_path / "chain.sqlite3"), **daemon_storage}

    def make(stores: tuple[str, ...] = (A, B), claim_format: str = "") -> CbChain:
        settings = load_settings(
            storage=storage,
            intake={
                "listen": "127.0.0.1:0",
                "tokens": [TOKEN_ALL],
                "scoped_tokens": [
                    {"token": t, "pharmacies": [p]}
                    for t, p in ((TOKEN_A, A), (TOKEN_B, B))
                    if p in stores
                ],
            },
            callbacks={"listen": "127.0.0.1:0"},
            sandbox={"enabled": False},
            service={"claim_url": chain_sandbox.claim_url, "outcomes_url": "unused"},
            pharmacies=[_entry(p) for p in stores],
        )
        url = settings.storage.database_url()
        store = PgStore(url) if url is not None else Store(settings.storage.path)
        kwargs = chain_sandbox.client_kwargs()
        kwargs["claim_url"] += claim_format  # "empty": a blank answer, the PA comes by callback
        client = PaServiceClient(**kwargs)
        app = create_app(settings, store=store, client=client)
        made.append((app, store, client))
        return CbChain(app, chain_sandbox, [p.provider_id for p in settings.pharmacies])

    yield make
    for app, store, client in made:
        app.extensions["pa_bridge"].close()
        client.close()
        store.close()


# ---- what a body names (pure) ----------------------------------------------------------
def test_the_pharmacy_ids_and_an_11_digit_ndc_are_read_from_the_body() -> None:
    def parsed(pharmacy: Any = None, prescription: Any = None) -> Any:
        req: dict[str, Any] = {"id": "P1", "workflow_status": "New", "events": []}
        if pharmacy is not None:
            req["pharmacy"] = pharmacy
        if prescription is not None:
            req["prescription"] = prescription
        return parse_callback(json.dumps({"request": req}).encode())

    assert parsed({"ncpdpid": f" {A} ", "npi": int(NPI_A)}).pharmacy_ids == (A, NPI_A)
    assert parsed({"npi": NPI_A, "name": "SYNTHETIC"}).pharmacy_ids == (NPI_A,)
    assert parsed({"ncpdpid": "", "npi": None}).pharmacy_ids == ()
    assert parsed({"ncpdpid": True, "npi": {"x": 1}}).pharmacy_ids == ()
    assert parsed("not a block").pharmacy_ids == ()
    assert parsed(prescription={"ndc": "00093-5056-01"}).ndc == "00093505601"
    assert parsed(prescription={"ndc": " 00093505601 "}).ndc == "00093505601"
    for not_an_ndc in ("0093-5056-01", "000935056012", "0009350560X", 93505601, True):
        assert parsed(prescription={"ndc": not_an_ndc}).ndc is None, not_an_ndc
    # drug_id is the service's 6-digit drug id, never a product id
    assert parsed(prescription={"drug_id": "085705"}).ndc is None
    assert parsed().ndc is None and parsed().pharmacy_ids == ()


def test_a_store_is_picked_only_among_the_configured_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "unused.sqlite3")
    try:
        chain = CallbackIntake(store, forward=False, pharmacies=[f" {A}", NPI_A])
        single = CallbackIntake(store, forward=False)

        def body(**pharmacy: Any) -> Any:
            return parse_callback(callback_body("P1", "New", pharmacy=pharmacy))

        assert chain.pharmacy_of(body(ncpdpid=A, npi=NPI_A)) == A  # the NCPDP id first
        assert chain.pharmacy_of(body(ncpdpid=C, npi=int(NPI_A))) == NPI_A  # a number too
        assert chain.pharmacy_of(body(ncpdpid=C)) is None  # not a store of this deployment
        assert chain.pharmacy_of(body(ncpdpid=A[:-1])) is None  # text, not a prefix
        assert single.pharmacy_of(body(ncpdpid=A)) is None  # a single store: nothing filters
    finally:
        store.close()


# ---- on both engines ----------------------------------------------------------------------
def test_a_callback_only_pa_is_seen_by_its_stores_token_and_filter_only(
    make_cb_chain: Any,
) -> None:
    chain = make_cb_chain()
    chain.callback("CBA001", pharmacy={"ncpdpid": f" {A} ", "npi": NPI_A})
    chain.callback("CBB001", pharmacy={"ncpdpid": int(B)})  # a number, as the body may say
    chain.callback("CBC001", pharmacy={"ncpdpid": C})  # a store this deployment does not list
    chain.callback("CBX001")  # no pharmacy id at all
    assert chain.feed(TOKEN_A) == ["CBA001"]
    assert chain.feed(TOKEN_B) == ["CBB001"]
    assert chain.feed(pharmacy=A) == ["CBA001"]
    assert chain.feed(pharmacy=B) == ["CBB001"]
    assert chain.feed(pharmacy=C) == []
    assert chain.feed() == ["CBA001", "CBB001", "CBC001", "CBX001"]
    assert chain.pa("CBA001", TOKEN_A).get_json()["provider_id"] == A
    assert chain.pa("CBA001", TOKEN_B).status_code == 404
    assert chain.pa("CBB001", TOKEN_A).status_code == 404
    for unknown in ("CBC001", "CBX001"):
        assert chain.pa(unknown).get_json()["provider_id"] is None
        assert chain.pa(unknown, TOKEN_A).status_code == 404
    # the console's worklist, filtered the same way
    worklist = chain.get("/v1/console/worklist", TOKEN_B).get_json()
    assert [p["pa_id"] for p in worklist["pas"]] == ["CBB001"]
    assert chain.get("/v1/console/pa/CBB001", TOKEN_B).status_code == 200
    assert chain.get("/v1/console/pa/CBA001", TOKEN_B).status_code == 404


def test_a_later_callback_fills_a_missing_store_and_never_changes_one(
    make_cb_chain: Any,
) -> None:
    chain = make_cb_chain()
    chain.callback("CBL001")  # first without a pharmacy id
    assert chain.pa("CBL001").get_json()["provider_id"] is None
    chain.callback("CBL001", "PA Request", pharmacy={"npi": NPI_A, "ncpdpid": A})
    assert chain.pa("CBL001").get_json()["provider_id"] == A
    chain.callback("CBL001", "PA Response", "Favorable", pharmacy={"ncpdpid": B})
    got = chain.pa("CBL001").get_json()
    assert (got["provider_id"], got["workflow_status"]) == (A, "PA Response")
    assert chain.feed(TOKEN_B) == [] and chain.feed(TOKEN_A) == ["CBL001"]


def test_product_id_comes_from_an_11_digit_ndc_when_the_pa_has_none(
    make_cb_chain: Any,
) -> None:
    chain = make_cb_chain()
    chain.callback("CBN001", prescription={"ndc": "12345-6789-01", "drug_id": "085705"})
    chain.callback("CBN002", prescription={"drug_id": "085705", "ndc": "1234567890"})
    assert chain.pa("CBN001").get_json()["product_id"] == "12345678901"
    assert chain.pa("CBN002").get_json()["product_id"] is None
    chain.callback("CBN002", "PA Request", prescription={"ndc": "00093505601"})
    chain.callback("CBN001", "PA Request", prescription={"ndc": "00093505601"})
    assert chain.pa("CBN002").get_json()["product_id"] == "00093505601"
    assert chain.pa("CBN001").get_json()["product_id"] == "12345678901"  # not overwritten
    assert chain.pa("CBN001").get_json()["rx_number"] is None


def test_a_submits_store_and_product_id_are_never_overwritten_by_a_callback(
    make_cb_chain: Any,
) -> None:
    chain = make_cb_chain()
    claim = chain.post("/v1/claims", _claim(A, b.REJECT_MR), TOKEN_ALL).get_json()["claim_id"]
    pa = chain.post(f"/v1/claims/{claim}/pa", None, TOKEN_ALL).get_json()
    assert (pa["provider_id"], pa["product_id"]) == (A, CLAIM_NDC)
    chain.callback(
        pa["pa_id"], "PA Request", pharmacy={"ncpdpid": B}, prescription={"ndc": "12345678901"}
    )
    got = chain.pa(pa["pa_id"]).get_json()
    assert (got["workflow_status"], got["provider_id"], got["product_id"]) == (
        "PA Request",
        A,
        CLAIM_NDC,
    )
    assert chain.feed(TOKEN_B) == [] and chain.feed(TOKEN_A) == [pa["pa_id"]]


def test_a_callback_first_then_its_submit_in_the_empty_format_is_one_pa(
    make_cb_chain: Any,
) -> None:
    """The callback's identifiers (payer, store, NDC, Rx number) are kept to match the
    submit whose answer names no PA: the submit ties that PA to its claim."""
    chain = make_cb_chain(claim_format="empty")
    rx = b.Rx()
    chain.callback(
        "CBM001",
        pharmacy={"ncpdpid": A},
        prescription={"drug_id": "085705", "ndc": rx.product_id,
                      "prescription_reference": rx.rx_number},
    )  # fmt: skip
    assert chain.feed(TOKEN_A) == ["CBM001"]
    claim = chain.post("/v1/claims", _claim(A, b.REJECT_MR), TOKEN_A).get_json()["claim_id"]
    r = chain.post(f"/v1/claims/{claim}/pa", None, TOKEN_A)
    assert r.status_code == 201, r.get_json()
    pa = r.get_json()
    assert (pa["pa_id"], pa["claim_id"], pa["provider_id"]) == ("CBM001", claim, A)
    assert pa["matched"] is True and pa["rx_number"] == rx.rx_number
    assert [c["username"] for c in chain.calls("claim")] == ["store-a"]
    assert chain.feed(TOKEN_A) == ["CBM001"]
    stored = chain.services.store.reader().conn.execute(
        "SELECT links_json FROM pas WHERE id = 'CBM001'"
    )
    assert "match" not in json.loads(stored.fetchone()[0])


def test_a_submit_tying_a_callback_only_pa_takes_its_claims_store(make_cb_chain: Any) -> None:
    """The store of a PA first heard of in a callback is the claim's once a submit ties
    it (the claim's credentials are the truth); a PA tied already keeps its own."""
    chain = make_cb_chain()
    store = chain.services.store
    chain.callback("CBS001", pharmacy={"ncpdpid": B})
    claims = {
        pid: chain.post("/v1/claims", _claim(pid, b.REJECT_MR), TOKEN_ALL).get_json()["claim_id"]
        for pid in (A, B)
    }

    def link(claim_id: str, provider: str) -> None:
        def job(db: Any) -> None:
            submitted: pas.Submitted = {
                "pa_id": "CBS001", "claim_id": claim_id, "transaction_index": 0,
                "claim_key": f"key-{claim_id}", "urls_json": "[]", "links_json": "{}",
                "provider_id": provider,
            }  # fmt: skip
            pas.link_submitted(db, submitted, now=now_iso(), seq=store.next_seq(db))

        store.write(job)

    link(claims[A], A)
    assert chain.pa("CBS001").get_json()["provider_id"] == A
    link(claims[B], B)  # a second claim the service answered with the same PA
    got = chain.pa("CBS001").get_json()
    assert (got["claim_id"], got["provider_id"]) == (claims[A], A)


def test_a_callback_naming_both_ids_matches_a_claim_sent_with_its_npi(
    make_cb_chain: Any,
) -> None:
    """The real body's pharmacy has ``npi`` and ``ncpdpid``; a claim's 201-B1 is one of
    them. Callback first then the submit, and the submit first then the callback: one
    PA each time, the store's."""
    chain = make_cb_chain(stores=(A, N), claim_format="empty")
    both = {"ncpdpid": "7777777", "npi": N}  # the NCPDP id is not what the claims send

    def claim(rx: b.Rx) -> str:
        req = b.request_bytes(provider_id=N, provider_qualifier="01", rxs=(rx,))
        body = {
            "request": req.decode("latin-1"),
            "response": b.response_bytes([b.REJECT_MR]).decode("latin-1"),
        }
        return str(chain.post("/v1/claims", body, TOKEN_ALL).get_json()["claim_id"])

    def prescription(rx: b.Rx) -> dict[str, str]:
        return {"ndc": rx.product_id, "prescription_reference": rx.rx_number}

    first = b.Rx(rx_number="000006000001")
    chain.callback("CBN101", pharmacy=both, prescription=prescription(first))
    assert chain.pa("CBN101").get_json()["provider_id"] == N
    pa = chain.post(f"/v1/claims/{claim(first)}/pa", None, TOKEN_ALL).get_json()
    assert (pa["pa_id"], pa["provider_id"], pa["matched"]) == ("CBN101", N, True)

    later = b.Rx(rx_number="000006000002")
    started = chain.post(f"/v1/claims/{claim(later)}/pa", None, TOKEN_ALL).get_json()
    assert started["pa_id"].startswith("pending-") and started["provider_id"] == N
    chain.callback("CBN102", pharmacy=both, prescription=prescription(later))
    got = chain.pa("CBN102").get_json()
    assert (got["claim_id"], got["provider_id"]) == (started["claim_id"], N)
    # renamed, not doubled: the provisional id still answers, with the PA's own id
    assert chain.pa(started["pa_id"]).get_json()["pa_id"] == "CBN102"
    assert chain.feed() == ["CBN101", "CBN102"]


def test_the_pharmacy_agrees_on_either_of_a_callbacks_ids() -> None:
    from pa_bridge.pa_rules import fields_agree

    claim = {"bin": "610014", "provider": N, "ndc": CLAIM_NDC}
    assert fields_agree({"bin": "610014", "provider": "7777777", "provider_alt": N}, claim)
    assert fields_agree(claim, {"bin": "610014", "provider": N})
    assert not fields_agree({"bin": "610014", "provider": A, "provider_alt": NPI_A}, claim)
    assert not fields_agree({"bin": "610014", "provider": N, "ndc": "12345678901"}, claim)
    assert fields_agree({"bin": "610014"}, claim)  # a callback without a pharmacy id
    assert not fields_agree({"bin": "610015", "provider": N}, claim)


# ---- the composition root -----------------------------------------------------------
def test_the_daemon_gives_its_ingest_the_configured_stores(make_daemon: Any) -> None:
    d = make_daemon(
        sandbox={"enabled": False},
        service=NO_SERVICE,
        pharmacies=[_entry(A), _entry(B)],
        intake={"tokens": [TOKEN_ALL], "scoped_tokens": [{"token": TOKEN_A, "pharmacies": [A]}]},
    )
    url = f"{d.callback_server.url}/callbacks/pharmacy"
    for pa_id, pid in (("DMA001", A), ("DMB001", B)):
        body = callback_body(pa_id, "New", pharmacy={"ncpdpid": pid})
        assert httpx.post(url, content=body, timeout=10).status_code == 200
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        mine = api.get("/v1/pa", headers={"Authorization": f"Bearer {TOKEN_A}"}).json()
        assert [(p["pa_id"], p["provider_id"]) for p in mine["pas"]] == [("DMA001", A)]
        everyone = api.get(
            "/v1/pa", params={"pharmacy": B}, headers={"Authorization": f"Bearer {TOKEN_ALL}"}
        ).json()
        assert [p["pa_id"] for p in everyone["pas"]] == ["DMB001"]
