"""F6 claim exchanges through the daemon, end to end (issue 17), and the response
defects real claims showed, as the daemon sees them. In process, against the
in-process sandbox, over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests import builders as b
from tests.ncpdp.samples import LITERAL_D0_HEADER_REJECT, LITERAL_D0_NO_GROUP_75

IIN = "61001400"


def _f6_request(**kw: Any) -> bytes:
    return b.request_bytes(version="F6", bin=IIN, **kw)


@pytest.fixture
def api(make_daemon: Any) -> Any:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        c.daemon = d  # type: ignore[attr-defined]
        yield c


def _f6_75(api: httpx.Client) -> dict[str, Any]:
    r = api.post(
        "/v1/claims",
        json=b.exchange_json(_f6_request(), b.response_bytes([b.REJECT_75], version="F6")),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_an_f6_75_reject_gets_the_outcomes_message(api: httpx.Client) -> None:
    body = _f6_75(api)
    assert body["message_source"] == "outcomes"
    assert body["pa_eligible"] is True and body["reject_codes"] == ["75"]


def test_an_f6_75_reject_gets_a_pa(api: httpx.Client) -> None:
    body = _f6_75(api)
    pa = api.post(f"/v1/claims/{body['claim_id']}/pa")
    assert pa.status_code == 201, pa.text
    assert pa.json()["pa_id"] and pa.json()["url"]


def test_an_f6_mr_reject_and_an_f6_paid_claim(api: httpx.Client) -> None:
    mr = api.post(
        "/v1/claims",
        json=b.exchange_json(_f6_request(), b.response_bytes([b.REJECT_MR], version="F6")),
    ).json()
    assert mr["message_source"] == "payer" and mr["pa_eligible"] is True
    paid = api.post(
        "/v1/claims", json=b.exchange_json(_f6_request(), b.response_bytes([b.PAID], version="F6"))
    ).json()
    assert paid["pa_eligible"] is False and paid["transaction_status"] == "P"


def test_an_f6_reversal_is_delivered(api: httpx.Client) -> None:
    r = api.post("/v1/reversals", json={"request": _f6_request(code="B2").decode("latin-1")})
    assert r.status_code in (200, 202), r.text


def test_an_f6_transmission_with_two_claims_is_refused_even_when_its_counts_agree(
    api: httpx.Client,
) -> None:
    """F6 carries one transaction. A second AM07 with 109-A9 = 2 (and a response that
    answers two) is not two claims: it is refused, naming F6's rule, and nothing is
    stored; the reversal of such a transmission too."""
    two = (b.Rx(rx_number="000002500001"), b.Rx(rx_number="000002500002"))
    request = _f6_request(rxs=two)
    assert request[22:23] == b"2"  # 109-A9 says two
    response = b.response_bytes([b.REJECT_75, b.REJECT_75], version="F6")
    before = api.get("/v1/pa").json()["cursor"]
    r = api.post("/v1/claims", json=b.exchange_json(request, response))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "malformed_claim" and error["detail"]["field_id"] == "A9"
    assert "F6" in error["message"] and "one transaction" in error["message"]
    assert api.get("/v1/pa").json()["cursor"] == before
    d = api.daemon  # type: ignore[attr-defined]
    assert d.store.query("SELECT count(*) AS n FROM exchanges") == [{"n": 0}]
    b2 = api.post(
        "/v1/reversals", json={"request": _f6_request(code="B2", rxs=two).decode("latin-1")}
    )
    assert b2.status_code == 400 and "one transaction" in b2.json()["error"]["message"]


def test_a_75_sent_without_its_group_is_not_turned_into_an_accept(api: httpx.Client) -> None:
    """Real claims: a payer's 75 with no group separator, header saying accepted."""
    body = api.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), LITERAL_D0_NO_GROUP_75)
    ).json()
    assert body["transaction_status"] == "R"
    assert body["reject_codes"] == ["75"] and body["pa_eligible"] is True


def test_a_header_level_reject_without_group_is_rejected(api: httpx.Client) -> None:
    body = api.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), LITERAL_D0_HEADER_REJECT)
    ).json()
    assert body["transaction_status"] == "R" and body["pa_eligible"] is False


def test_f6_outcome_variables_carry_the_iin_where_the_bin_was() -> None:
    from pa_bridge.client import OUTCOME_VARIABLES, outcome_variables

    req = b.request(version="F6", bin=IIN)
    resp = b.response([b.REJECT_75], version="F6")
    assert not req.group_separators and len(req.groups) == 1
    v = outcome_variables(req, resp, api_key="k")
    assert set(v) == set(OUTCOME_VARIABLES)
    assert v["bin"] == IIN and v["pcn"] == "SYNPCN" and v["group_id"] == "SYNGRP01"
    assert v["rejection_code"] == "75"
    assert v["prescription_reference_number"] == "000001234567"
    assert v["quantity_dispensed"] == "30.000"
