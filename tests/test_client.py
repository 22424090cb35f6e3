"""The PA service client: against the sandbox for every status path, against the
misbehaving fake server for every fault drill. Real HTTP on 127.0.0.1 only."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import pytest
import trustme
from hypothesis import given
from hypothesis import strategies as st

import ncpdp
from pa_bridge.client import (
    OPTIONAL_CLAIM_VARIABLES,
    OUTCOME_VARIABLES,
    BadClaimError,
    ClaimMetadata,
    CredentialsError,
    HttpStatusError,
    InvalidClaimError,
    MissingClaimDataError,
    MissingVariablesError,
    PaServiceClient,
    RedirectError,
    ServiceError,
    ServiceTimeoutError,
    TlsError,
    UnreachableError,
    UnrecognizedNdcError,
    claim_metadata,
    claim_minimum_missing,
    dashboard_login_url,
    failure_kind,
    frame_claim,
    is_framed,
    origin,
    outcome_variables,
    patient_age,
)
from pa_bridge.client._outcomes import form_body
from pa_bridge.sandbox import SANDBOX_API_KEY, SANDBOX_PASSWORD, SandboxConfig, SandboxServer

from .builders import (
    CARDHOLDER_ID,
    PAID,
    PATIENT_DOB,
    PATIENT_FIRST,
    PATIENT_LAST,
    REJECT_75,
    REJECT_MR,
    REJECT_TWO,
    Claim,
    Outcome,
    Rx,
    request,
    request_bytes,
    response,
)
from .fakes import FakeHttpServer, Reply, json_reply, wait_until
from .support import free_port

SECRETS = (SANDBOX_PASSWORD, SANDBOX_API_KEY)
PHI = (PATIENT_FIRST, PATIENT_LAST, PATIENT_DOB, CARDHOLDER_ID)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxServer]:
    with SandboxServer(SandboxConfig(step_seconds=0.05)) as sb:
        yield sb


@pytest.fixture
def client(sandbox: SandboxServer) -> Iterator[PaServiceClient]:
    with PaServiceClient(**sandbox.client_kwargs(), timeout_s=5.0) as c:
        yield c


def fake_client(url: str, **kw: object) -> PaServiceClient:
    args: dict[str, object] = {
        "claim_url": url + "/claim",
        "outcomes_url": url + "/outcomes",
        "dashboard_url": url + "/dashboard",
        "username": "u",
        "password": "pw-secret-123",
        "api_key": "key-secret-456",
        "timeout_s": 2.0,
    }
    args.update(kw)
    return PaServiceClient(**args)  # type: ignore[arg-type]


def unique_claim(n: int, **kw: object) -> Claim:
    """A claim with its own Rx number, so tests sharing a sandbox do not collide."""
    rx = Rx(rx_number=f"{700000000000 + n:012d}", **kw)  # type: ignore[arg-type]
    return Claim(rxs=(rx,))


def rejected_vars(outcome: Outcome = REJECT_75, **claim_kw: object) -> dict[str, str]:
    return outcome_variables(
        request(Claim(), **claim_kw), response([outcome]), api_key=SANDBOX_API_KEY
    )


# --------------------------------------------------------------------------- pure mapping


def test_outcome_variables_map_provider_id_and_qualifier_by_meaning() -> None:
    # The interface doc pairs service_provider_id with 202-B2 and its qualifier with
    # 201-B1; the standard (and the primer) say 201-B1 is the id: we map by meaning.
    req = request(Claim(provider_id="7654321", provider_qualifier="07"))
    header = req.header
    assert header.slot("B1").strip() == "7654321" and header.slot("B2") == "07"
    v = outcome_variables(req, response([REJECT_75]), api_key="k")
    assert v["service_provider_id"] == "7654321"
    assert v["service_provider_id_qualifier"] == "07"


def test_outcome_variables_quantity_from_442_e7_with_implied_decimals() -> None:
    # The doc names 422-E7; the standard's Quantity Dispensed is 442-E7, 9(7)v999.
    req = request(Claim(rxs=(Rx(quantity="30500"),)))
    assert req.find("07", "E7", 0) == "30500"
    v = outcome_variables(req, response([REJECT_75]), api_key="k")
    assert v["quantity_dispensed"] == "30.500"


def test_outcome_variables_are_complete_and_by_field() -> None:
    v = outcome_variables(
        request(), response([REJECT_75]), api_key="k", prescriber_fax="5550001111"
    )
    assert set(v) == set(OUTCOME_VARIABLES)
    assert v["bin"] == "610014" and v["pcn"] == "SYNPCN" and v["group_id"] == "SYNGRP01"
    assert v["rejection_code"] == "75"
    assert v["rejection_message"] == "PRIOR AUTHORIZATION REQUIRED CALL HELP DESK"
    assert v["prescription_reference_number"] == "000001234567"
    assert v["prescription_reference_number_qualifier"] == "1"
    assert v["product_service_id"] == "00093505601"
    assert v["product_service_id_qualifier"] == "03"
    assert v["cardholder_id"] == CARDHOLDER_ID and v["person_code"] == "001"
    assert v["prescriber_id"] == "1999999984" and v["prescriber_id_qualifier"] == "01"
    assert v["days_supply"] == "030" and v["fill_number"] == "00"
    assert v["transaction_response_status"] == "R"
    assert v["prescriber_fax"] == "5550001111"
    assert v["approval_code"] == ""


def test_outcome_variables_several_codes_comma_separated() -> None:
    v = outcome_variables(request(), response([REJECT_TWO]), api_key="k")
    assert v["rejection_code"] == "76,79"
    paid = Outcome(status="P", approved_codes=("01", "03"))
    v = outcome_variables(request(), response([paid]), api_key="k")
    assert v["approval_code"] == "01,03" and v["rejection_code"] == ""


def test_outcome_variables_second_transaction() -> None:
    claim = Claim(rxs=(Rx(), Rx(rx_number="000009999999", product_id="00093505699")))
    v = outcome_variables(request(claim), response([PAID, REJECT_75]), 1, api_key="k")
    assert v["prescription_reference_number"] == "000009999999"
    assert v["product_service_id"] == "00093505699"
    assert v["rejection_code"] == "75"


def test_patient_age() -> None:
    assert patient_age("19610407", "20261123") == "65"
    assert patient_age("19611124", "20261123") == "64"  # birthday tomorrow
    assert patient_age("19611123", "20261123") == "65"  # birthday today
    assert patient_age("garbage", "20261123") == ""
    v = outcome_variables(request(), response([REJECT_75]), api_key="k")
    assert v["patient_age"] == "65"
    v = outcome_variables(request(), response([REJECT_75]), api_key="k", patient_age="40")
    assert v["patient_age"] == "40"


def test_claim_metadata_from_the_exchange() -> None:
    md = claim_metadata(request(), response([REJECT_75]), None)
    assert md.rejection_code == "75"
    assert md.rejection_msg == "PRIOR AUTHORIZATION REQUIRED CALL HELP DESK"
    assert md.help_phone == "8005550100"
    assert md.preferred_product_id_qualifier == "03"
    assert md.preferred_product_id == "00093505602"
    assert md.preferred_product_description == "SYNTHETIC PREFERRED 10MG"
    assert md.physician_npi == "1999999984" and md.physician_dea == ""
    assert md.physician_lname == "DRSYNTH"
    form = md.as_form()
    assert "physician_dea" not in form and "bin_number" not in form
    assert form["rejection_code"] == "75"


def test_claim_metadata_dea_and_dispensing_values_win() -> None:
    claim = Claim(rxs=(Rx(prescriber_qualifier="12", prescriber_id="AB1234563"),))
    md = claim_metadata(
        request(claim),
        response([REJECT_MR]),
        {"physician_lname": "OVERRIDE", "group_id": "G2", "help_phone": "", "unknown": "x"},
    )
    assert md.physician_dea == "AB1234563" and md.physician_npi == ""
    assert md.physician_lname == "OVERRIDE"
    assert md.group_id == "G2"
    assert md.rejection_code == "MR"
    assert "unknown" not in md.as_form()
    assert ClaimMetadata.from_mapping({"group_id": "X", "nope": "y"}) == ClaimMetadata(group_id="X")


def test_claim_metadata_is_derived_from_the_variable_table() -> None:
    """Every optional claim variable, and only those, is a keyword and an attribute."""
    values = {name: f"v{i}" for i, name in enumerate(OPTIONAL_CLAIM_VARIABLES)}
    md = ClaimMetadata(**values)
    assert [getattr(md, name) for name in OPTIONAL_CLAIM_VARIABLES] == list(values.values())
    assert list(md.as_form()) == list(OPTIONAL_CLAIM_VARIABLES)
    assert ClaimMetadata().physician_npi == ""
    with pytest.raises(TypeError, match="nope"):
        ClaimMetadata(nope="x")
    with pytest.raises(AttributeError):
        _ = md.nope
    with pytest.raises(AttributeError):
        md.group_id = "y"  # type: ignore[misc]
    assert ClaimMetadata(group_id="X", bin_number="") == ClaimMetadata(group_id="X")
    assert hash(ClaimMetadata(group_id="X")) == hash(ClaimMetadata(group_id="X"))
    assert "X" in repr(ClaimMetadata(group_id="X"))


@given(st.text(alphabet="AB\x1c\x1e\r\n", max_size=20))
def test_framing_is_recognised_after_framing(core: str) -> None:
    assert is_framed(frame_claim(core, "stx_etx"))
    assert not is_framed(frame_claim(core, "none"))


def test_url_helpers_shared_with_doctor() -> None:
    assert origin("https://user:pw@svc.example.test:8443/a/b?api_key=s#x") == (
        "https://svc.example.test:8443"
    )
    assert dashboard_login_url("https://svc.example.test/dash/") == (
        "https://svc.example.test/dash/login"
    )
    assert failure_kind(httpx.ConnectError("x")) == "cannot connect (ConnectError)"
    refused = httpx.ConnectError("boom")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert failure_kind(refused) == "connection refused"


def test_claim_minimum_names_what_is_missing() -> None:
    t = request(Claim(cardholder_id="", rxs=(Rx(prescriber_id="", days_supply=""),)))
    missing = claim_minimum_missing(t)
    assert "302-C2 Cardholder ID" in missing
    assert "411-DB Prescriber ID" in missing
    assert "405-D5 Days Supply" in missing
    # physician_npi metadata stands in for the prescriber id.
    missing = claim_minimum_missing(t, ClaimMetadata(physician_npi="1999999984"))
    assert "411-DB Prescriber ID" not in missing
    assert claim_minimum_missing(request()) == []


def test_claim_minimum_for_b2_needs_less() -> None:
    t = request(Claim(code="B2", cardholder_id="", first_name="", dob=""))
    assert claim_minimum_missing(t) == []
    t = request(Claim(code="B2", rxs=(Rx(rx_number=""),)))
    assert claim_minimum_missing(t) == ["402-D2 Prescription/Service Reference Number"]


def test_missing_claim_data_is_raised_before_sending() -> None:
    with FakeHttpServer(Reply(status=201)) as fake, fake_client(fake.url) as c:
        with pytest.raises(MissingClaimDataError) as ei:
            c.submit_claim(request_bytes(Claim(cardholder_id="")))
        assert ei.value.missing == ["302-C2 Cardholder ID"]
        assert ei.value.code == "missing_claim_data" and not ei.value.retryable
        assert "302-C2 Cardholder ID" in ei.value.message
        assert fake.requests == []


def test_unreadable_claim_is_refused_before_sending() -> None:
    with FakeHttpServer(Reply(status=201)) as fake, fake_client(fake.url) as c:
        with pytest.raises(InvalidClaimError):
            c.submit_claim(b"not a claim")
        with pytest.raises(InvalidClaimError):
            c.submit_claim(ncpdp.serialize(response([REJECT_75])))
        with pytest.raises(InvalidClaimError):
            c.submit_claim(request_bytes(code="E1"))
        assert fake.requests == []


# --------------------------------------------------------------------------- claim: sandbox


@pytest.mark.parametrize("fmt", ["", "json"])
def test_b1_creates_a_pa_in_each_format(sandbox: SandboxServer, fmt: str) -> None:
    n = {"": 1, "json": 2}[fmt]
    kwargs = sandbox.client_kwargs() | {"claim_url": sandbox.claim_url + fmt}
    with PaServiceClient(**kwargs) as c:
        result = c.submit_claim(request_bytes(unique_claim(n)))
    assert result.status_code == 200
    assert result.format == {"": "lines", "json": "json"}[fmt]
    assert len(result.pa_urls) == 1
    assert result.pa_id is not None and len(result.pa_id) == 6
    assert f"/request/view/{result.pa_id}?token_id=" in result.pa_urls[0]
    page = httpx.get(result.pa_urls[0])
    assert page.status_code == 200 and result.pa_id in page.text


def test_b1_in_the_empty_format_is_a_pa_without_a_link(sandbox: SandboxServer) -> None:
    kwargs = sandbox.client_kwargs() | {"claim_url": sandbox.claim_url + "empty"}
    before = len(httpx.get(sandbox.url + "/sandbox/pas").json()["pas"])
    with PaServiceClient(**kwargs) as c:
        result = c.submit_claim(request_bytes(unique_claim(3)))
    assert (result.status_code, result.format, result.pa_urls, result.pa_id) == (
        200,
        "empty",
        (),
        None,
    )
    assert len(httpx.get(sandbox.url + "/sandbox/pas").json()["pas"]) == before + 1


def test_b1_sends_metadata_and_the_claim(sandbox: SandboxServer) -> None:
    seen: list[dict[str, list[str]]] = []

    def answer(req: object) -> Reply:
        seen.append(parse_qs(req.body.decode()))  # type: ignore[attr-defined]
        return Reply(
            status=200,
            body=b"https://portal.example.test/request/view/ABC123?token_id=t\n",
            content_type="text/html",
        )

    with FakeHttpServer(answer) as fake, fake_client(fake.url) as c:
        raw = request_bytes()
        md = claim_metadata(request(), response([REJECT_75]), {"group_id": "NEWGROUP"})
        result = c.submit_claim(raw, md)
    form = seen[0]
    assert form["ncpdp_claim"] == ["\x02" + raw.decode("latin-1") + "\x03"]
    assert form["username"] == ["u"] and form["api_key"] == ["key-secret-456"]
    assert form["rejection_code"] == ["75"] and form["group_id"] == ["NEWGROUP"]
    assert form["physician_npi"] == ["1999999984"]
    assert "physician_dea" not in form and "bin_number" not in form  # empty: not sent
    assert result.pa_urls == ("https://portal.example.test/request/view/ABC123?token_id=t",)
    assert result.pa_id == "ABC123"


def test_duplicate_b1_returns_the_original_pa(sandbox: SandboxServer) -> None:
    kwargs = sandbox.client_kwargs() | {"claim_url": sandbox.claim_url + "json"}
    with PaServiceClient(**kwargs) as c:
        first = c.submit_claim(request_bytes(unique_claim(10)))
        again = c.submit_claim(request_bytes(unique_claim(10)))
    # nothing in the answer marks the duplicate: the same PA comes back, HTTP 200 both
    assert first.status_code == again.status_code == 200
    assert again.pa_id == first.pa_id and again.pa_urls == first.pa_urls


def test_b2_deletes_the_pa(client: PaServiceClient, sandbox: SandboxServer) -> None:
    created = client.submit_claim(request_bytes(unique_claim(11)))
    deleted = client.submit_claim(request_bytes(unique_claim(11), code="B2"))
    assert deleted.status_code == 200 and deleted.pa_id == created.pa_id
    pas = {p["id"]: p for p in httpx.get(sandbox.url + "/sandbox/pas").json()["pas"]}
    assert pas[created.pa_id]["deleted"] is True
    assert [e["type"] for e in pas[created.pa_id]["events"]] == ["DELETE"]


def test_wrong_password_is_a_credentials_error(sandbox: SandboxServer) -> None:
    kwargs = sandbox.client_kwargs() | {"password": "wrong-password-xyz"}
    with PaServiceClient(**kwargs) as c, pytest.raises(CredentialsError) as ei:
        c.submit_claim(request_bytes(unique_claim(12)))
    err = ei.value
    assert err.code == "credentials" and err.status_code == 403 and not err.retryable
    for text in (err.message, err.detail, str(err)):
        assert "wrong-password-xyz" not in text and SANDBOX_API_KEY not in text


def test_missing_variables_are_named(sandbox: SandboxServer) -> None:
    kwargs = sandbox.client_kwargs() | {"api_key": ""}
    with PaServiceClient(**kwargs) as c, pytest.raises(MissingVariablesError) as ei:
        c.submit_claim(request_bytes(unique_claim(13)))
    assert ei.value.missing == ["api_key"] and ei.value.code == "missing_variables"
    assert "api_key" in ei.value.message


def test_unknown_ndc_is_422(client: PaServiceClient) -> None:
    with pytest.raises(UnrecognizedNdcError) as ei:
        client.submit_claim(request_bytes(unique_claim(14, product_id="00000000000")))
    assert ei.value.code == "unrecognized_ndc" and ei.value.status_code == 422


def test_dashboard_login(client: PaServiceClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = client.dashboard_login()
    assert token
    assert token not in caplog.text
    url = client.dashboard_url_with_token(token)
    assert url.startswith(client.dashboard_url + "?token=")
    assert httpx.get(url).status_code == 200


def test_dashboard_login_wrong_password(sandbox: SandboxServer) -> None:
    kwargs = sandbox.client_kwargs() | {"password": "nope-nope"}
    with PaServiceClient(**kwargs) as c, pytest.raises(CredentialsError):
        c.dashboard_login()


def test_nothing_sensitive_is_logged(
    client: PaServiceClient, sandbox: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client.submit_claim(request_bytes(unique_claim(15)))
    client.outcomes(rejected_vars(), fallback_message="x")
    token = client.dashboard_login()
    kwargs = sandbox.client_kwargs() | {"password": "wrong-pw-777"}
    with PaServiceClient(**kwargs) as bad, pytest.raises(CredentialsError):
        bad.submit_claim(request_bytes(unique_claim(15)))
    text = caplog.text
    for value in (*PHI, *SECRETS, token, "wrong-pw-777"):
        assert value not in text


# --------------------------------------------------------------------------- claim: fault drills


@pytest.mark.parametrize(
    ("reply", "error", "retryable"),
    [
        (Reply(status=302, headers={"Location": "http://elsewhere/x"}), RedirectError, False),
        (Reply(status=408), ServiceTimeoutError, True),
        (
            json_reply(500, {"errors": [{"code": 500001, "message": "bad", "debug": "AM07 D7"}]}),
            BadClaimError,
            False,
        ),
        (Reply(status=503), HttpStatusError, True),
        (Reply(status=400, body=b"malformed"), HttpStatusError, False),
        (
            Reply(
                mode="reset",
                status=201,
                body=b"<a href='/pa/X'>x</a>" * 50,
                content_type="text/html",
            ),
            UnreachableError,
            True,
        ),
        (Reply(mode="close"), UnreachableError, True),
    ],
)
def test_claim_status_and_fault_mapping(
    reply: Reply, error: type[ServiceError], retryable: bool
) -> None:
    with FakeHttpServer(reply) as fake, fake_client(fake.url) as c:
        with pytest.raises(error) as ei:
            c.submit_claim(request_bytes())
    err = ei.value
    assert err.retryable is retryable
    assert err.message and err.code
    assert "pw-secret-123" not in str(err) and "key-secret-456" not in str(err)
    if isinstance(err, BadClaimError):
        assert "AM07 D7" in err.detail


def test_404_text_body_names_missing_variables() -> None:
    body = b"Missing POST variables: ncpdp_claim, api_key"
    with FakeHttpServer(Reply(status=404, body=body, content_type="text/plain")) as fake:
        with fake_client(fake.url) as c, pytest.raises(MissingVariablesError) as ei:
            c.submit_claim(request_bytes())
    assert ei.value.missing == ["ncpdp_claim", "api_key"]


def test_claim_timeout() -> None:
    with FakeHttpServer(Reply(mode="stall", seconds=5)) as fake:
        with fake_client(fake.url, timeout_s=0.3) as c, pytest.raises(ServiceTimeoutError) as ei:
            c.submit_claim(request_bytes())
    assert ei.value.retryable and ei.value.code == "timeout"


def test_connection_refused() -> None:
    with fake_client(f"http://127.0.0.1:{free_port()}") as c:
        with pytest.raises(UnreachableError) as ei:
            c.submit_claim(request_bytes())
        result = c.outcomes(rejected_vars(), fallback_message="orig")
    assert ei.value.code == "unreachable" and ei.value.retryable
    assert result.source == "fallback" and result.error and result.error.startswith("unreachable")


@pytest.fixture(scope="module")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, str]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    ca_path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    return server_ctx, str(ca_path)


def test_untrusted_certificate_is_a_tls_error(tls_material: tuple[ssl.SSLContext, str]) -> None:
    server_ctx, ca_path = tls_material
    ok = Reply(
        status=201,
        body=b"https://portal.example.test/request/view/TLS001?token_id=t\n",
        content_type="text/html",
    )
    with FakeHttpServer(ok, tls=server_ctx) as fake:
        with fake_client(fake.url) as c:
            with pytest.raises(TlsError) as ei:
                c.submit_claim(request_bytes())
            assert c.outcomes(rejected_vars(), fallback_message="o").error == "tls: TLS failure"
        assert ei.value.code == "tls" and not ei.value.retryable
        # With the CA bundle configured (verify=<path>) the same server is trusted.
        with fake_client(fake.url, verify=ca_path) as c:
            assert c.submit_claim(request_bytes()).pa_id == "TLS001"


def test_outcomes_over_tls_with_the_configured_ca(tls_material: tuple[ssl.SSLContext, str]) -> None:
    server_ctx, ca_path = tls_material
    with (
        FakeHttpServer(Reply(body=JSON_OK), tls=server_ctx) as fake,
        fake_client(fake.url, verify=ca_path) as c,
    ):
        for _ in range(2):
            got = c.outcomes(rejected_vars(), fallback_message="o")
            assert (got.source, got.button_label) == ("outcomes", "Start PA"), got.error
        assert len(fake.requests) == 2


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=30))
def test_the_outcomes_form_is_urlencoded_byte_for_byte(form: dict[str, str]) -> None:
    # the body the service reads is the stdlib's urlencode, names quoted too, twice
    # (the second time from the remembered names)
    assert form_body(form) == urlencode(form).encode()
    assert form_body(form) == urlencode(form).encode()


# --------------------------------------------------------------------------- outcomes: sandbox


@pytest.mark.parametrize("suffix", [".json", ".txt"])
def test_outcomes_replacement_for_75(sandbox: SandboxServer, suffix: str) -> None:
    kwargs = sandbox.client_kwargs() | {"outcomes_url": sandbox.url + "/outcomes" + suffix}
    with PaServiceClient(**kwargs) as c:
        result = c.outcomes(rejected_vars(), fallback_message="PRIOR AUTH REQUIRED")
    assert result.source == "outcomes" and result.error is None
    assert result.button_label == "Submit PA"
    assert result.message.startswith("Prior authorization required")


def test_outcomes_other_claims_keep_the_message(client: PaServiceClient) -> None:
    result = client.outcomes(rejected_vars(REJECT_MR), fallback_message="fallback")
    assert result.source == "outcomes"
    assert result.message == "PRODUCT NOT ON FORMULARY" and result.button_label == ""
    paid = client.outcomes(rejected_vars(PAID), fallback_message="paid message")
    assert paid.source == "outcomes" and paid.message == "paid message"


def test_outcomes_500_drill_falls_back(client: PaServiceClient) -> None:
    result = client.outcomes(rejected_vars(bin="999997"), fallback_message="orig")
    assert result.source == "fallback" and result.message == "orig"
    assert result.button_label == "" and result.error == "http_status: HTTP 500"


def test_outcomes_stall_drill_returns_the_fallback_in_budget(client: PaServiceClient) -> None:
    # The sandbox answers after 5 s; the client returns the fallback at the deadline.
    result = client.outcomes(rejected_vars(bin="999998"), fallback_message="orig")
    assert result.source == "fallback" and result.message == "orig"
    assert result.error is not None and result.error.startswith("deadline")


def test_outcomes_trickle_drill_returns_the_fallback_in_budget(client: PaServiceClient) -> None:
    # The sandbox trickles its answer over 3 s: every read succeeds, the total does not.
    result = client.outcomes(rejected_vars(bin="999996"), fallback_message="orig")
    assert result.source == "fallback" and result.error is not None
    assert result.error.startswith("deadline")
    assert result.elapsed_ms < 1500 + 1000  # proves it returned, not a timing claim


@pytest.mark.parametrize(("bin_", "fault"), [("999998", "stall"), ("999996", "trickle")])
def test_a_stall_or_a_trickle_falls_back_and_the_next_call_is_answered(
    sandbox: SandboxServer, bin_: str, fault: str
) -> None:
    """A stall or a trickle ends in the fallback by the deadline; the worker it held
    stops by itself and the next call is answered."""
    with PaServiceClient(**sandbox.client_kwargs()) as c:
        assert c.outcomes(rejected_vars(), fallback_message="o").source == "outcomes"
        call = c.start_outcomes(rejected_vars(bin=bin_), budget_ms=400, fallback_message="orig")
        result = call.result()
        assert result.source == "fallback" and result.message == "orig", fault
        assert result.error is not None and result.error.startswith("deadline"), result.error
        assert result.elapsed_ms < 400 + 1000  # it returned: not a timing claim
        assert c.outcomes(rejected_vars(), fallback_message="o").source == "outcomes"


def test_outcomes_answer_that_came_is_used_by_a_late_caller(sandbox: SandboxServer) -> None:
    """A caller back after its deadline (its own commit was slow) still takes an
    answer that arrived in time."""
    with PaServiceClient(**sandbox.client_kwargs()) as c:
        call = c.start_outcomes(rejected_vars(), budget_ms=1000, fallback_message="o")
        assert call.future is not None
        wait_until(call.future.done, what="the answer")
        wait_until(lambda: time.monotonic() > call.deadline + 0.05, what="the deadline")
        result = call.result()
        assert result.source == "outcomes" and result.button_label == "Submit PA"


def test_outcomes_bad_api_key_falls_back(sandbox: SandboxServer) -> None:
    with PaServiceClient(**sandbox.client_kwargs() | {"api_key": "wrong"}) as c:
        v = c.outcome_variables(request(), response([REJECT_75]))
        result = c.outcomes(v, fallback_message="orig")
    assert result.source == "fallback" and result.error == "http_status: HTTP 403"


# --------------------------------------------------------------------------- outcomes: fakes


JSON_OK = b'{"button_label": "Start PA", "message": "Replacement"}'


@pytest.mark.parametrize(
    ("reply", "error_prefix"),
    [
        (Reply(mode="trickle", body=JSON_OK, seconds=3.0), "deadline"),
        (Reply(mode="stall", seconds=5.0), "deadline"),
        (Reply(mode="stall_mid_body", body=JSON_OK, seconds=5.0), "deadline"),
        (Reply(mode="reset", body=JSON_OK * 100), "unreachable"),
        (Reply(mode="close"), "unreachable"),
        (Reply(body=b"<html>explore</html>", content_type="text/html"), "bad_body"),
        (Reply(body=b"{nope", content_type="application/json"), "bad_body"),
        (Reply(body=b"[1, 2]", content_type="application/json"), "bad_body"),
        (Reply(body=b"no separator", content_type="text/plain"), "bad_body"),
        (Reply(body=b"\xff\xfe", content_type="text/plain"), "bad_body"),
        (Reply(status=404, body=b"not here"), "http_status: HTTP 404"),
        (Reply(status=201, body=JSON_OK), "http_status: HTTP 201"),
        (Reply(status=302, headers={"Location": "/elsewhere"}), "http_status: HTTP 302"),
    ],
)
def test_outcomes_faults_give_the_fallback(reply: Reply, error_prefix: str) -> None:
    with FakeHttpServer(reply) as fake, fake_client(fake.url) as c:
        result = c.outcomes(rejected_vars(), budget_ms=400, fallback_message="orig")
    assert result.source == "fallback"
    assert result.message == "orig" and result.button_label == ""
    assert result.error is not None and result.error.startswith(error_prefix), result.error


@pytest.mark.parametrize(
    ("reply", "label", "message"),
    [
        (Reply(body=JSON_OK), "Start PA", "Replacement"),
        (
            Reply(body=b"Start PA;Call us; then submit", content_type="text/plain"),
            "Start PA",
            "Call us; then submit",
        ),
        (
            Reply(body=b";Unchanged message", content_type="text/plain; charset=utf-8"),
            "",
            "Unchanged message",
        ),
        (Reply(body=b'{"message": "Only message"}'), "", "Only message"),
    ],
)
def test_outcomes_answer_formats(reply: Reply, label: str, message: str) -> None:
    with FakeHttpServer(reply) as fake, fake_client(fake.url) as c:
        result = c.outcomes(rejected_vars(), fallback_message="orig")
        sent = parse_qs(fake.requests[0].body.decode())
    assert (result.source, result.button_label, result.message) == ("outcomes", label, message)
    assert sent["api_key"] == [SANDBOX_API_KEY]  # the variables' own api_key is kept
    assert set(sent) <= set(OUTCOME_VARIABLES)


def test_outcomes_fill_in_the_api_key_and_never_raise() -> None:
    with FakeHttpServer(Reply(body=JSON_OK)) as fake, fake_client(fake.url) as c:
        v = rejected_vars()
        del v["api_key"]
        assert c.outcomes(v, fallback_message="o").source == "outcomes"
        assert parse_qs(fake.requests[0].body.decode())["api_key"] == ["key-secret-456"]
        weird = c.outcomes({"x": object()}, budget_ms=-5, fallback_message="o")  # type: ignore[dict-item]
        assert weird.source == "fallback"
    closed = c.outcomes(rejected_vars(), fallback_message="after close")
    assert closed.source == "fallback" and closed.message == "after close"


@pytest.mark.parametrize(
    "after",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n then pay",
        b"HTTP/1.1 500 Oops\r\nContent-Type: text/html\r\nContent-Length: 4\r\n\r\nsorr",
        b"garbage, not an answer",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
    ],
)
def test_outcomes_read_the_answer_and_nothing_sent_after_it(after: bytes) -> None:
    """A server that writes more after a whole answer (a stray second answer, junk) in
    the same packet: the pharmacist sees the answer's own message, nothing of what came
    after, and the connection is not used again."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 16\r\n\r\n"
    reply = Reply(mode="raw", body=answer + b"Start PA;Call us" + after)
    with FakeHttpServer(reply) as fake, fake_client(fake.url) as c:
        result = c.outcomes(rejected_vars(), budget_ms=400, fallback_message="orig")
        assert (result.source, result.button_label, result.message) == (
            "outcomes",
            "Start PA",
            "Call us",
        ), result.error


def test_concurrent_outcomes_against_a_trickle_all_fall_back() -> None:
    with (
        FakeHttpServer(Reply(mode="trickle", body=JSON_OK * 4, seconds=3.0)) as fake,
        fake_client(fake.url, outcomes_workers=4) as c,
        concurrent.futures.ThreadPoolExecutor(12) as pool,
    ):
        futures = [
            pool.submit(c.outcomes, rejected_vars(), budget_ms=300, fallback_message="orig")
            for _ in range(12)
        ]
        results = [f.result() for f in futures]
    assert all(r.source == "fallback" for r in results)
    assert {r.message for r in results} == {"orig"}


def test_client_repr_hides_secrets(tmp_path: Path) -> None:
    with fake_client("http://127.0.0.1:9") as c:
        assert "pw-secret-123" not in repr(c) and "key-secret-456" not in repr(c)


# --------------------------------------------------------------------------- outcomes: wire


class KeepAliveServer:
    """A raw-socket server that keeps its connections and answers each request on them
    with ``answer(n, body)`` (``n``: the request's number, from 1): the bytes to write,
    status line and headers included, in one write or, as a list, in several. Counts
    the connections it accepted, the requests and the writes made."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.connections = 0
        self.requests = 0
        self.writes = 0
        self.heads: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []

    def __enter__(self) -> KeepAliveServer:
        t = threading.Thread(target=self._accept, daemon=True)
        self._threads.append(t)
        t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            self._socks.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a client may close or reset at any time
            self._requests(conn)

    def _requests(self, conn: socket.socket) -> None:
        data = b""
        while not self._stop.is_set():
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            self.heads.append(head)
            length = int(
                next(
                    (
                        line.split(b":", 1)[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    b"0",
                )
            )
            while len(data) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            body, data = data[:length], data[length:]
            self.requests += 1
            pieces = self.answer(self.requests, body)
            for piece in pieces if isinstance(pieces, list) else [pieces]:
                try:  # a client that closed after its own answer may reset the rest
                    conn.sendall(piece)
                except OSError:
                    pass
                finally:
                    self.writes += 1


def _text_answer(message: bytes) -> bytes:
    body = b"Start PA;" + message
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def _own_message(body: bytes) -> bytes:
    """The message a call's own answer carries: its BIN, as sent."""
    return parse_qs(body.decode())["bin"][0].encode()


@pytest.mark.parametrize("late", [False, True])
def test_an_extra_answer_is_never_shown_to_another_call(
    late: bool,
) -> None:
    """The service writes a second, unasked-for answer behind every third one, in the
    same packet or in a write of its own (which TCP may hold back until the next
    request goes out): every call reads its own answer (its BIN back), never the stray
    one (issue 32). The test waits until each write is made before the next call."""
    stray = _text_answer(b"STRAY, to nobody")

    def answer(n: int, body: bytes) -> bytes | list[bytes]:
        own = _text_answer(_own_message(body))
        if n % 3 != 1:
            return own
        return [own, stray] if late else own + stray

    with KeepAliveServer(answer) as server, fake_client(server.url) as c:
        for n in range(30):
            bin_ = f"6100{n:02d}"
            result = c.outcomes(rejected_vars(bin=bin_), budget_ms=800, fallback_message="o")
            assert (result.source, result.message) == ("outcomes", bin_), (n, result)
            writes = n + 1 + (n // 3 + 1 if late else 0)
            wait_until(lambda writes=writes: server.writes == writes, what="the writes")
    assert server.requests == server.connections == 30


def test_each_call_goes_on_a_connection_of_its_own() -> None:
    """The promise behind the test above: an answer is read only from the connection
    its own request went out on (decision 0043)."""
    with (
        KeepAliveServer(lambda n, body: _text_answer(_own_message(body))) as server,
        fake_client(server.url) as c,
    ):
        for _ in range(3):
            result = c.outcomes(rejected_vars(), fallback_message="o")
            assert result.source == "outcomes", result.error
    assert (server.requests, server.connections) == (3, 3)
    # and it says so: the service need not keep a connection it will not see again
    assert all(b"\r\nconnection: close" in h.lower() for h in server.heads), server.heads


# Answers in shapes a server may use, read through the client (httpx, h11); the shapes request
# smuggling uses are refused (the payer's message is shown).
ANSWERS: dict[str, tuple[bytes, str | None]] = {
    "json": (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 23\r\n\r\n"
        b'{"message": "Call us."}',
        "Call us.",
    ),
    "continue, chunked": (
        b"HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\nHTTP/1.1 200 OK\r\n"
        b"Transfer-Encoding: Chunked\r\ncontent-type: text/plain; charset=utf-8\r\n\r\n"
        b"3\r\nA;b\r\n2\r\nde\r\n0\r\n\r\n",
        "bde",
    ),
    "until the end": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nA;until the end",
        "until the end",
    ),
    "1.0": (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nA;abc", "abc"),
    "close": (b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", None),
    "nothing": (b"", None),
    "cut in the body": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nA;c", None),
    "not http": (b"SSH-2.0-OpenSSH_9.2\r\n", None),
    "two lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 7\r\n\r\nA;bc",
        None,
    ),
    "bad length": (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\nA;bc", None),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_answers_in_the_shapes_servers_use(case: str) -> None:
    raw, message = ANSWERS[case]
    with FakeHttpServer(Reply(mode="raw", body=raw)) as fake, fake_client(fake.url) as c:
        result = c.outcomes(rejected_vars(), budget_ms=800, fallback_message="payer")
    if message is None:
        assert (result.source, result.message) == ("fallback", "payer"), result
    else:
        assert (result.source, result.message) == ("outcomes", message), result.error


def test_outcomes_drop_a_connection_the_server_closed() -> None:
    with FakeHttpServer(Reply(body=JSON_OK, keep_alive=True)) as fake, fake_client(fake.url) as c:
        for _ in range(3):
            result = c.outcomes(rejected_vars(), fallback_message="o")
            assert result.source == "outcomes", result.error
            for t in fake._threads:  # the fake has closed its end of every connection
                t.join(5)
        assert len(fake.requests) == 3 and len(fake._threads) == 3


@pytest.mark.parametrize("mode", ["keep_then_drop", "keep_then_reset"])
def test_a_service_that_times_kept_alive_connections_out_answers_every_call(mode: str) -> None:
    """The service closes a kept-alive connection when the next request comes on it,
    without an answer: no request ever goes on a used connection, so none is lost."""
    with (
        FakeHttpServer(Reply(body=JSON_OK, keep_alive=True, mode=mode)) as fake,
        fake_client(fake.url) as c,
    ):
        results = [
            c.outcomes(rejected_vars(), budget_ms=800, fallback_message="o") for _ in range(6)
        ]
        for _ in range(3):
            call = c.start_outcomes(rejected_vars(), budget_ms=800, fallback_message="o")
            results.append(call.result())
    assert [r.source for r in results] == ["outcomes"] * 9, [r.error for r in results]
    assert len(fake.requests) == 9 and fake.dropped == []


def test_a_fresh_connection_closed_without_an_answer_is_not_tried_again() -> None:
    with FakeHttpServer(Reply(mode="close")) as fake, fake_client(fake.url) as c:
        result = c.outcomes(rejected_vars(), budget_ms=800, fallback_message="o")
    assert result.source == "fallback" and result.error.startswith("unreachable")
    assert len(fake.requests) == 1


def test_outcomes_go_through_the_proxy_when_one_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fake plays the proxy: httpx sends it the absolute URL and it answers.
    with FakeHttpServer(Reply(body=JSON_OK)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "")
        with fake_client("http://pa.invalid") as c:
            result = c.outcomes(rejected_vars(), fallback_message="o")
    assert result.source == "outcomes", result.error
    assert proxy.requests[0].path == "http://pa.invalid/outcomes"


def test_a_cookie_the_service_sets_never_rides_on_a_later_call() -> None:
    """One pharmacy's login must never ride on another's call: a ``Set-Cookie`` in any
    answer is kept: no call after it sends it back."""
    cookie = {"Set-Cookie": "session=pharmacy-a; Path=/"}
    with FakeHttpServer(Reply(body=JSON_OK, headers=cookie)) as fake, fake_client(fake.url) as c:
        first = c.outcomes(rejected_vars(), fallback_message="o")
        second = c.outcomes(rejected_vars(), fallback_message="o")
    assert first.source == second.source == "outcomes", (first.error, second.error)
    sent = [{k.lower() for k in r.headers} for r in fake.requests]
    assert len(sent) == 2 and not any("cookie" in h for h in sent)
