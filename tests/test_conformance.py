"""Conformance of the client to the real PA service, from the evidence.

One table of answers shaped as the real service answers (docs in
``../shared/docs/real-service-evidence.md``, "Claim interface"), each case naming
the fact it stands on, drives :class:`PaServiceClient` over real HTTP on 127.0.0.1.
Where the evidence leaves a point open, every shape it allows is a case.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import parse_qs

import pytest

from pa_bridge.client import (
    BadClaimError,
    CredentialsError,
    HttpStatusError,
    MissingVariablesError,
    PaServiceClient,
    RedirectError,
    ServiceError,
    ServiceTimeoutError,
    UnrecognizedNdcError,
    pa_id_from_url,
)
from pa_bridge.config import ConfigError, load_settings

from .builders import request_bytes
from .fakes import FakeHttpServer, RecordedRequest, Reply

PORTAL = "https://portal.example.test"
PAGE_A = f"{PORTAL}/request/view/AB12CD?token_id=tok0a1b2c3"
PAGE_B = f"{PORTAL}/request/view/EF34GH?token_id=tok9z8y7x6"


@dataclass(frozen=True)
class Success:
    fact: str
    status: int
    content_type: str | None
    body: bytes
    format: str
    urls: tuple[str, ...]
    pa_id: str | None


SUCCESSES = [
    Success(
        "developer page: the URL(s) in plain text in an HTML document; Java splits the "
        "body on newlines and opens each line: one bare line, text/html, trailing LF",
        200, "text/html", PAGE_A.encode() + b"\n", "lines", (PAGE_A,), "AB12CD",
    ),
    Success(
        "the same, text/plain with CRLF line ends",
        200, "text/plain; charset=utf-8", PAGE_A.encode() + b"\r\n", "lines", (PAGE_A,), "AB12CD",
    ),
    Success(
        "C# opens the whole body as one URL: a single line without a newline",
        200, "text/html", PAGE_A.encode(), "lines", (PAGE_A,), "AB12CD",
    ),
    Success(
        "several transactions per header: one line per PA created, every one opened",
        200, "text/html", f"{PAGE_A}\r\n{PAGE_B}\r\n".encode(), "lines", (PAGE_A, PAGE_B),
        "AB12CD",
    ),
    Success(
        "any 2xx is success; neither reference tells 200 from 201",
        201, "text/html", PAGE_A.encode() + b"\n", "lines", (PAGE_A,), "AB12CD",
    ),
    Success(
        "'an HTML document': the URL in an anchor",
        200, "text/html",
        f"<html><head><title>PA</title></head><body><a href='{PAGE_A}'>Open</a></body></html>".encode(),
        "html", (PAGE_A,), "AB12CD",
    ),
    Success(
        "'an HTML document': the URL as the page's text",
        200, "text/html", f"<html><body><p>{PAGE_A}</p></body></html>".encode(), "html",
        (PAGE_A,), "AB12CD",
    ),
    Success(
        "verbose JSON, field names not shown anywhere: every URL is found and the hosted "
        "page is preferred over API, PDF and thumbnail links",
        200, "application/json",
        (
            b'{"outcome": "created", "items": [{"api": "https://api.example.test/requests/AB12CD",'
            b' "pdf": "https://portal.example.test/requests/AB12CD/download",'
            b' "thumb": "https://www.example.test/async/thumbnail/?request=AB12CD",'
            b' "launch": "' + PAGE_A.encode() + b'"}]}'
        ),
        "json", (PAGE_A,), "AB12CD",
    ),
    Success(
        "verbose JSON shaped like the request object (callbacks' html_url and tokens)",
        200, "application/json",
        (
            b'{"request": {"id": "CLRQU2", "workflow_status": "New",'
            b' "html_url": "https://portal.example.test/requests/CLRQU2",'
            b' "tokens": [{"id": "tk1", "html_url":'
            b' "https://portal.example.test/requests/CLRQU2?token_id=tk1"}]}}'
        ),
        "json", ("https://portal.example.test/requests/CLRQU2?token_id=tk1",), "CLRQU2",
    ),
    Success(
        "the empty format: a blank body, no URL; the PA exists and comes with its callback",
        200, "text/html", b"", "empty", (), None,
    ),
    Success(
        "the empty format with only whitespace and no content type",
        200, None, b"\r\n", "empty", (), None,
    ),
    Success(
        "any 2xx means the PA was created: a body without a link is still a success",
        200, "text/html", b"<html><body><p>Thank you</p></body></html>", "html", (), None,
    ),
]  # fmt: skip


@dataclass(frozen=True)
class Failure:
    fact: str
    status: int
    body: bytes
    error: type[ServiceError]
    message_in_detail: str


def _page(title: str, *paragraphs: str) -> bytes:
    ps = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f"<html><head><title>{title} Page-Title</title></head><body>{ps}</body></html>".encode()


FAILURES = [
    Failure("3xx: redirect or proxy problem", 302, _page("Moved", "Moved"), RedirectError, ""),
    Failure(
        "400: malformed request", 400, _page("Bad Request", "Malformed request"),
        HttpStatusError, "Malformed request",
    ),
    Failure(
        "403: wrong username or password", 403,
        _page("Forbidden", "Wrong or unknown username or password"), CredentialsError,
        "Wrong or unknown username or password",
    ),
    Failure(
        "404: wrong URL or missing POST variables (named in the body)", 404,
        _page("Not Found", "Missing POST variable: api_key", "Missing POST variable: ncpdp_claim"),
        MissingVariablesError, "Missing POST variable: api_key Missing POST variable: ncpdp_claim",
    ),
    Failure(
        "408: timeout; the Java reference says try again in one minute", 408,
        _page("Timeout", "Request timed out"), ServiceTimeoutError, "Request timed out",
    ),
    Failure(
        "422: unprocessable, usually an unrecognised NDC", 422,
        _page("Unprocessable Entity", "Unrecognised NDC 00000000000"), UnrecognizedNdcError,
        "Unrecognised NDC 00000000000",
    ),
    Failure(
        "500: usually a badly formed claim, detail in the body", 500,
        _page("Server Error", "Claim could not be parsed", "segment AM07 field D7"),
        BadClaimError, "Claim could not be parsed segment AM07 field D7",
    ),
]  # fmt: skip


@contextmanager
def _client(url: str, **kw: object) -> Iterator[PaServiceClient]:
    with PaServiceClient(
        claim_url=url + "/cmmimport/",
        outcomes_url=url + "/outcomes",
        dashboard_url=url + "/dashboard",
        username="u",
        password="pw-secret-123",
        api_key="key-secret-456",
        timeout_s=5,
        **kw,  # type: ignore[arg-type]
    ) as c:
        yield c


@pytest.mark.parametrize("case", SUCCESSES, ids=[c.fact[:60] for c in SUCCESSES])
def test_every_success_shape_is_read(case: Success) -> None:
    reply = Reply(status=case.status, body=case.body, content_type=case.content_type)
    with FakeHttpServer(reply) as fake, _client(fake.url) as c:
        result = c.submit_claim(request_bytes())
    assert result.status_code == case.status
    assert result.format == case.format
    assert result.pa_urls == case.urls
    assert result.pa_id == case.pa_id
    assert len(result.pa_ids) == len({pa_id_from_url(u) for u in case.urls} - {None})


@pytest.mark.parametrize("case", FAILURES, ids=[c.fact[:40] for c in FAILURES])
def test_every_error_status_with_an_html_page(case: Failure) -> None:
    reply = Reply(status=case.status, body=case.body, content_type="text/html")
    with FakeHttpServer(reply) as fake, _client(fake.url) as c, pytest.raises(case.error) as ei:
        c.submit_claim(request_bytes())
    err = ei.value
    assert err.status_code == case.status
    assert case.message_in_detail in err.detail
    assert "Page-Title" not in err.detail  # the message is the <p> elements, not the title
    assert "pw-secret-123" not in str(err) and "key-secret-456" not in str(err)
    if isinstance(err, MissingVariablesError):
        assert err.missing == ["api_key", "ncpdp_claim"]


def _recording(requests: list[RecordedRequest]) -> FakeHttpServer:
    def answer(req: RecordedRequest) -> Reply:
        requests.append(req)
        return Reply(status=200, body=PAGE_A.encode() + b"\n", content_type="text/html")

    return FakeHttpServer(answer)


@pytest.mark.parametrize("code", ["B1", "B2"])
@pytest.mark.parametrize("already_framed", [False, True])
def test_every_claim_goes_out_framed_stx_etx(code: str, already_framed: bool) -> None:
    """Every reference claim is framed STX (0x02) ... ETX (0x03); the Java client adds
    the framing to an unframed claim. B1 and B2 alike, whatever framing came in."""
    raw = request_bytes(code=code)
    sent_in = b"\x02" + raw + b"\x03" if already_framed else raw
    seen: list[RecordedRequest] = []
    with _recording(seen) as fake, _client(fake.url) as c:
        result = c.submit_claim(sent_in)
    form = parse_qs(seen[0].body.decode("ascii"))
    assert form["ncpdp_claim"] == ["\x02" + raw.decode("latin-1") + "\x03"]
    assert seen[0].headers["content-type"].startswith("application/x-www-form-urlencoded")
    assert "authorization" not in seen[0].headers  # credentials travel in the body
    assert form["username"] == ["u"] and form["api_key"] == ["key-secret-456"]
    assert result.framing == "stx_etx"


def test_claim_framing_none_sends_the_claim_bare() -> None:
    raw = request_bytes()
    seen: list[RecordedRequest] = []
    with _recording(seen) as fake, _client(fake.url, claim_framing="none") as c:
        c.submit_claim(b"\x02" + raw + b"\x03")
    assert parse_qs(seen[0].body.decode("ascii"))["ncpdp_claim"] == [raw.decode("latin-1")]


def test_an_unknown_framing_is_refused() -> None:
    with pytest.raises(ValueError, match="claim_framing"):
        PaServiceClient(
            claim_url="http://127.0.0.1:9/c",
            outcomes_url="http://127.0.0.1:9/o",
            dashboard_url="http://127.0.0.1:9/d",
            username="u",
            password="p",
            api_key="k",
            claim_framing="crlf",
        )


@pytest.mark.parametrize(
    ("url", "pa_id"),
    [
        (f"{PORTAL}/request/view/AB12CD?token_id=t", "AB12CD"),  # interface description
        (f"{PORTAL}/request/view/AB12CD", "AB12CD"),
        ("https://dashboard.example.test/requests/CLRQU2?token_id=t", "CLRQU2"),  # callbacks
        ("https://dashboard.example.test/api/requests/CLRQU2/download", "CLRQU2"),  # pdf_url
        ("https://www.example.test/async/thumbnail/?request=CLRQU2&mode=plan", "CLRQU2"),
        ("https://api.example.test/requests/tokens/tk1", None),
        (f"{PORTAL}/dashboard", None),
    ],
)
def test_pa_id_from_each_link_shape(url: str, pa_id: str | None) -> None:
    assert pa_id_from_url(url) == pa_id


def test_the_claim_framing_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().service.claim_framing == "stx_etx"
    monkeypatch.setenv("PA_BRIDGE_SERVICE__CLAIM_FRAMING", "none")
    s = load_settings()
    assert s.service.claim_framing == "none" and s.sandbox_enabled  # not a service config
    monkeypatch.setenv("PA_BRIDGE_SERVICE__CLAIM_FRAMING", "crlf")
    with pytest.raises(ConfigError) as ei:
        load_settings()
    assert any(p.startswith("service.claim_framing") for p in ei.value.problems)
