"""The use cases built directly, without HTTP (issue 31): ``ClaimIntake``, ``PaService``,
``Reversals`` and ``Deliveries`` on a real SQLite file, the real client and the
in-process sandbox, the queue drained when told to. What each takes and returns are
the models of ``service/bodies.py``; what each refuses is a kind of ``service/errors``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pa_bridge.app import make_client
from pa_bridge.client import PaServiceClient
from pa_bridge.config import Settings, load_settings
from pa_bridge.metrics import Metrics
from pa_bridge.outbox import Outbox
from pa_bridge.service import ClaimIntake, Deliveries, PaService, Reversals
from pa_bridge.service.bodies import ClaimAnswer, ClaimExchange, Pa, Reversal, SubmitPa
from pa_bridge.service.errors import Conflict, InvalidRequest, NotFound, Refused
from pa_bridge.service.pharmacies import Pharmacies
from pa_bridge.store import Store
from tests import builders as b


@dataclass
class Parts:
    settings: Settings
    store: Store
    client: PaServiceClient
    outbox: Outbox
    claims: ClaimIntake
    pas: PaService
    reversals: Reversals
    deliveries: Deliveries
    woken: list[bool]


@pytest.fixture
def parts(tmp_path: Path, sandbox: Any) -> Iterator[Parts]:
    settings = load_settings(
        storage={"path": str(tmp_path / "db.sqlite3")},
        queue={"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.01},
    )
    store = Store(settings.storage.path)
    client = make_client(settings, sandbox.url)
    metrics, pharmacies = Metrics(), Pharmacies.from_settings(settings)
    outbox = Outbox(store, None, settings.queue)
    pas = PaService(store, client, metrics, pharmacies=pharmacies)
    deliveries = Deliveries(settings, store, client, pas, pharmacies=pharmacies)
    deliveries.register(outbox)
    woken: list[bool] = []
    claims = ClaimIntake(
        settings,
        store,
        client,
        metrics,
        wake_queue=lambda: woken.append(True),
        report_ready=deliveries.report_ready,
        pharmacies=pharmacies,
    )
    reversals = Reversals(store, outbox, pharmacies=pharmacies)
    try:
        yield Parts(settings, store, client, outbox, claims, pas, reversals, deliveries, woken)
    finally:
        outbox.stop()
        deliveries.close()
        client.close()
        store.close()


def _exchange(codes: list[Any], **request: Any) -> ClaimExchange:
    return ClaimExchange.model_validate(
        {
            "request": b.request_bytes(**request).decode("latin-1"),
            "response": b.response_bytes(codes).decode("latin-1"),
        }
    )


def test_claim_intake_answers_a_75_reject_with_the_outcomes_message(parts: Parts) -> None:
    answer = parts.claims.intake(_exchange([b.REJECT_75]), "test")
    assert isinstance(answer, ClaimAnswer)
    assert (answer.message_source, answer.button_label) == ("outcomes", "Submit PA")
    assert answer.outcomes_elapsed_ms is not None and answer.reject_codes == ["75"]
    rows = parts.store.query("SELECT id, transaction_count FROM exchanges")
    assert rows == [{"id": answer.claim_id, "transaction_count": 1}]
    assert parts.woken == []  # nothing queued: the outcomes call was made


def test_claim_intake_queues_a_paid_claims_report_and_the_deliveries_send_it(
    parts: Parts,
) -> None:
    answer = parts.claims.intake(_exchange([b.PAID]), "test")
    assert (answer.message_source, answer.pa_eligible) == ("payer", False)
    assert parts.woken == [True]
    assert [i["kind"] for i in parts.outbox.list("pending")] == ["outcome_report"]
    assert parts.outbox.drain_once() == 1
    assert [i["status"] for i in parts.outbox.list()] == ["delivered"]


def test_claim_intake_refuses_what_is_not_an_exchange(parts: Parts) -> None:
    with pytest.raises(InvalidRequest) as bad:
        parts.claims.intake({"request": "x", "response": "y"}, "test")
    assert bad.value.code == "malformed_claim" and bad.value.detail["part"] == "request"
    with pytest.raises(InvalidRequest) as empty:
        parts.claims.intake({"request": "", "response": ""}, "test")
    assert empty.value.code == "invalid_body"
    assert parts.store.query("SELECT count(*) AS n FROM exchanges") == [{"n": 0}]


def test_pa_service_submits_once_and_answers_the_same_pa_again(parts: Parts) -> None:
    claim = parts.claims.intake(_exchange([b.REJECT_75]), "test")
    pa, created = parts.pas.submit_pa(claim.claim_id, SubmitPa(), "test")
    assert isinstance(pa, Pa) and created and pa.claim_id == claim.claim_id
    again, created_again = parts.pas.submit_pa(claim.claim_id, {}, "test")
    assert (again.pa_id, created_again) == (pa.pa_id, False)
    assert parts.pas.get_pa(pa.pa_id).history[0].source == "submit"
    feed = parts.pas.list_pas(None, 100)
    assert [p.pa_id for p in feed.pas] == [pa.pa_id]
    assert parts.pas.list_pas(feed.cursor, 100).pas == []
    with pytest.raises(NotFound):
        parts.pas.submit_pa("no-such-claim", {}, "test")


def test_pa_service_refuses_a_claim_that_allows_no_pa(parts: Parts) -> None:
    paid = parts.claims.intake(_exchange([b.PAID]), "test")
    with pytest.raises(Conflict) as e:
        parts.pas.submit_pa(paid.claim_id, {}, "test")
    assert e.value.code == "not_pa_eligible"


def test_reversals_deliver_a_b2_and_name_the_pa_it_deletes(parts: Parts) -> None:
    claim = parts.claims.intake(_exchange([b.REJECT_75]), "test")
    pa, _ = parts.pas.submit_pa(claim.claim_id, {}, "test")
    b2 = Reversal.model_validate({"request": b.request_bytes(code="B2").decode("latin-1")})
    answer, delivered = parts.reversals.reversal(b2, "test")
    assert delivered and answer.status == "delivered"
    assert answer.pa_found and [p.pa_id for p in answer.pas] == [pa.pa_id]
    with pytest.raises(InvalidRequest) as not_b2:
        parts.reversals.reversal({"request": b.request_bytes().decode("latin-1")}, "test")
    assert not_b2.value.code == "not_a_reversal"


def test_a_key_used_for_a_claim_is_refused_for_a_reversal(parts: Parts) -> None:
    parts.claims.intake(_exchange([b.REJECT_75]), "test", idempotency_key="k-1")
    b2 = {"request": b.request_bytes(code="B2").decode("latin-1")}
    with pytest.raises(Refused) as e:
        parts.reversals.reversal(b2, "test", idempotency_key="k-1")
    assert e.value.code == "idempotency_key_reused"
