"""The client of the PA service's pharmacy interfaces (see the package docstring)."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Mapping
from http.cookiejar import CookieJar
from urllib.parse import urlencode, urlsplit

import httpx

import ncpdp

from ..logs import log_event
from ._answers import BadOutcome, ClaimResult, OutcomeResult, read_claim_body, status_error
from ._contract import (
    CLAIM_FRAMINGS,
    DASHBOARD_LOGIN_VARIABLES,
    ClaimMetadata,
    Credentials,
    dashboard_login_url,
)
from ._errors import (
    BadResponseError,
    HttpStatusError,
    InvalidClaimError,
    MissingClaimDataError,
    ServiceError,
    ServiceTimeoutError,
    TlsError,
    UnreachableError,
)
from ._mapping import claim_minimum_missing, frame_claim, outcome_variables
from ._outcomes import OUTCOMES_HEADERS, OutcomesCall, post_outcomes
from ._tls import is_tls_failure, verify_context
from ._urls import dedup, pa_id_from_url

__all__ = ["PaServiceClient", "transport_error"]

log = logging.getLogger("pa_bridge.client")
_USER_AGENT = "pa-bridge"
_login_url = dashboard_login_url


class _NoCookies(CookieJar):
    """A jar that keeps no cookie (one pharmacy's login must never ride on another's
    call), without reading the answers' ``Set-Cookie`` to decide so."""

    def extract_cookies(self, response: object, request: object) -> None:
        return None


def transport_error(exc: httpx.TransportError, what: str) -> ServiceError:
    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return ServiceTimeoutError(
            "The PA service did not answer in time. Try again in a moment.",
            detail=f"{name} talking to the {what}",
        )
    if is_tls_failure(exc):
        return TlsError(
            "A secure connection to the PA service could not be made. "
            "Ask store IT to check the certificate settings.",
            detail=f"TLS failure talking to the {what}: {exc}",
        )
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.ProtocolError) and not isinstance(
        exc, httpx.RemoteProtocolError
    ):
        return HttpStatusError(
            "The PA service address is not usable. Ask store IT to check the configuration.",
            detail=f"{name} talking to the {what}: {exc}",
        )
    return UnreachableError(
        "The PA service cannot be reached. Check the network; try again in a moment.",
        detail=f"{name} talking to the {what}: {exc}",
    )


class PaServiceClient:
    """Client of the PA service's pharmacy interfaces (see the module docstring).

    Thread-safe. ``verify``: True (system CAs), False, or a CA bundle file/directory.
    ``dashboard_login_url`` defaults to ``dashboard_url + "/login"``. ``claim_framing``:
    ``stx_etx`` (default) or ``none``, see :func:`frame_claim`.
    """

    def __init__(
        self,
        *,
        claim_url: str,
        outcomes_url: str,
        dashboard_url: str,
        username: str,
        password: str,
        api_key: str,
        timeout_s: float = 15.0,
        verify: bool | str = True,
        dashboard_login_url: str | None = None,
        outcomes_workers: int = 16,
        claim_framing: str = "stx_etx",
    ) -> None:
        if claim_framing not in CLAIM_FRAMINGS:
            raise ValueError(f"claim_framing must be one of {', '.join(CLAIM_FRAMINGS)}")
        self.claim_framing = claim_framing
        self.claim_url = claim_url
        self.outcomes_url = outcomes_url
        self.dashboard_url = dashboard_url
        self.dashboard_login_url = dashboard_login_url or _login_url(dashboard_url)
        self._credentials = Credentials(username, password, api_key)
        self.timeout_s = timeout_s
        # one client for the three interfaces: one TLS setup, the proxy settings of
        # the environment honoured alike, and every call on a connection of its own, so
        # that an answer is only ever read by the request it answers (decision 0043)
        self._http = httpx.Client(
            timeout=timeout_s,
            verify=verify_context(verify),
            follow_redirects=False,
            headers={"User-Agent": _USER_AGENT, "Connection": "close"},
            limits=httpx.Limits(max_connections=outcomes_workers * 2 + 4),
            # no cookies kept: one pharmacy's login must never ride on another's call
            cookies=_NoCookies(),
        )
        self._outcomes_url = httpx.URL(outcomes_url)
        self._outcomes_headers = httpx.Headers({**self._http.headers, **OUTCOMES_HEADERS})
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=outcomes_workers, thread_name_prefix="pa-outcomes"
        )
        self._closed = False
        self._lock = threading.Lock()

    @property
    def api_key(self) -> str:
        """The outcomes/claim api_key (for :func:`outcome_variables`); never log it."""
        return self._credentials.api_key

    @property
    def credentials(self) -> Credentials:
        """The credentials used when a call is given none (a single store's)."""
        return self._credentials

    @credentials.setter
    def credentials(self, value: Credentials) -> None:
        """New credentials for the calls that start from now on (a reload)."""
        self._credentials = value

    # -- lifecycle

    def close(self) -> None:
        """Stop the outcomes workers (each ends within its own budget) and the pools."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    def __enter__(self) -> PaServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # no secrets
        return f"PaServiceClient(claim_url={self.claim_url!r}, username=<set>, api_key=<set>)"

    # -- claim interface

    def submit_claim(
        self,
        ncpdp_claim: bytes | str,
        metadata: ClaimMetadata | None = None,
        *,
        credentials: Credentials | None = None,
    ) -> ClaimResult:
        """POST a B1 (start a PA) or B2 (delete it) to the claim interface.

        Checks the payer-sheet minimum first (:class:`MissingClaimDataError`). B1 and B2
        are safe to retry: a duplicate is answered with the original PA. The claim goes
        out framed STX ... ETX (``claim_framing="stx_etx"``, as every reference claim
        is) or bare (``"none"``), whatever framing it came with (line breaks before or
        after it, STX/ETX, a trailing separator). ``credentials``: the
        submitting pharmacy's (default: this client's).
        """
        text = ncpdp_claim.decode("latin-1") if isinstance(ncpdp_claim, bytes) else ncpdp_claim
        try:
            transmission = ncpdp.parse(text, strict=False)
        except ncpdp.ParseError as exc:
            raise InvalidClaimError(
                "The claim could not be read. Check it in the dispensing system.",
                detail=f"claim does not parse (at byte offset {exc.offset})",
            ) from None
        if not transmission.is_request:
            raise InvalidClaimError(
                "This is a claim response, not a claim request.",
                detail="the claim interface takes the request (B1 or B2), without the response",
            )
        code = transmission.transaction_code.strip()
        if code not in ("B1", "B2"):
            raise InvalidClaimError(
                f"Only B1 and B2 claims can be sent to the PA service (this is {code!r}).",
                detail=f"transaction code {code!r}",
            )
        md = metadata or ClaimMetadata()
        missing = claim_minimum_missing(transmission, md)
        if missing:
            raise MissingClaimDataError(missing)
        creds = credentials or self._credentials
        # the transmission itself, without the framing it came with (line breaks, STX,
        # ETX, a trailing separator: what lenient parsing kept apart), framed our way
        core = text[len(transmission.leading) : len(text) - len(transmission.trailing)]
        form = {
            "username": creds.username,
            "password": creds.password,
            "api_key": creds.api_key,
            "ncpdp_claim": frame_claim(core, self.claim_framing),
            **md.as_form(),
        }
        started = time.monotonic()
        try:
            resp = self._http.post(self.claim_url, data=form)
        except httpx.TransportError as exc:
            err = transport_error(exc, "claim interface")
            log_event(
                "service.claim_failed",
                level=logging.WARNING,
                transaction_code=code,
                reason=err.code,
                error=type(exc).__name__,
            )
            raise err from None
        elapsed_ms = (time.monotonic() - started) * 1000
        if not 200 <= resp.status_code < 300:
            err = status_error(resp, "claim interface", form.values())
            log_event(
                "service.claim_refused",
                level=logging.WARNING,
                transaction_code=code,
                http_status=resp.status_code,
                reason=err.code,
                elapsed_ms=round(elapsed_ms),
            )
            raise err
        result = self._read_claim_answer(resp, code)
        log_event(
            "service.claim_answered",
            transaction_code=code,
            http_status=resp.status_code,
            format=result.format,
            pa_id=result.pa_id,
            links=len(result.pa_urls),
            framing=self.claim_framing,
            elapsed_ms=round(elapsed_ms),
        )
        return result

    def _read_claim_answer(self, resp: httpx.Response, code: str) -> ClaimResult:
        fmt, urls, body_id = read_claim_body(
            resp.content, resp.headers.get("content-type", ""), str(resp.request.url)
        )
        ids = dedup([i for i in (pa_id_from_url(u) for u in urls) if i])
        pa_id = ids[0] if ids else body_id
        if code == "B1" and not urls and fmt != "empty":
            # Any 2xx means the PA exists at the service (the evidence): never answer it
            # with an error. Its link comes with its callback, as for the empty format.
            log_event(
                "service.claim_answered_without_link",
                level=logging.WARNING,
                http_status=resp.status_code,
                format=fmt,
                size=len(resp.content),
                note="the link is expected with the PA's callback",
            )
        return ClaimResult(
            pa_urls=urls,
            pa_id=pa_id,
            status_code=resp.status_code,
            format=fmt,
            pa_ids=ids,
            framing=self.claim_framing,
        )

    # -- outcomes interface

    def outcome_variables(
        self,
        request: ncpdp.Transmission,
        response: ncpdp.Transmission,
        index: int = 0,
        *,
        patient_age: str = "",
        prescriber_fax: str = "",
    ) -> dict[str, str]:
        """:func:`outcome_variables` with this client's api_key."""
        return outcome_variables(
            request,
            response,
            index,
            api_key=self._credentials.api_key,
            patient_age=patient_age,
            prescriber_fax=prescriber_fax,
        )

    def outcomes(
        self,
        variables: Mapping[str, str],
        *,
        budget_ms: float = 1500,
        fallback_message: str,
    ) -> OutcomeResult:
        """POST the outcome variables; NEVER raises; returns within ``budget_ms``.

        An answer with an empty message keeps ``fallback_message`` (the service's
        "unchanged") with ``source="outcomes"``.
        Any non-200, unreadable body, error, or no complete answer by the deadline gives
        the fallback: ``message=fallback_message``, ``button_label=""``,
        ``source="fallback"`` and ``error`` saying why. An ``api_key`` missing from
        ``variables`` is filled in with this client's.
        """
        return self.start_outcomes(
            variables, budget_ms=budget_ms, fallback_message=fallback_message
        ).result()

    def start_outcomes(
        self,
        variables: Mapping[str, str],
        *,
        budget_ms: float = 1500,
        fallback_message: str,
    ) -> OutcomesCall:
        """Start the call of :meth:`outcomes` on a worker and return at once; the
        caller does other work (stores the claim) and then takes ``.result()``, which
        waits until the same deadline at most and never raises."""
        call = OutcomesCall(fallback_message, budget_ms)
        try:
            budget_s = max(0.0, float(budget_ms) / 1000.0)
            # Return a little before the budget so that waking up and building the
            # result stay inside it.
            margin = min(0.02, budget_s * 0.05)
            call.deadline = call.started + budget_s - margin
            form = {k: str(v) for k, v in variables.items()}
            form.setdefault("api_key", self._credentials.api_key)
            if self._closed:
                raise BadOutcome("closed: client is closed")
            call.future = self._pool.submit(
                post_outcomes,
                self._http,
                self._outcomes_url,
                self._outcomes_headers,
                form,
                call.deadline,
            )
        except Exception as exc:  # the contract is: never raise
            call.fail(exc)
        return call

    # -- dashboard

    def dashboard_login(self, credentials: Credentials | None = None) -> str:
        """POST username and plaintext_password (``credentials``: the pharmacy's,
        default this client's); the token (never logged)."""
        creds = credentials or self._credentials
        try:
            resp = self._http.post(
                self.dashboard_login_url,
                data=dict(
                    zip(DASHBOARD_LOGIN_VARIABLES, (creds.username, creds.password), strict=True)
                ),
            )
        except httpx.TransportError as exc:
            err = transport_error(exc, "dashboard login")
            log_event("service.dashboard_login_failed", level=logging.WARNING, reason=err.code)
            raise err from None
        if not 200 <= resp.status_code < 300:
            err = status_error(
                resp, "dashboard login", (creds.username, creds.password, creds.api_key)
            )
            log_event(
                "service.dashboard_login_refused",
                level=logging.WARNING,
                http_status=resp.status_code,
                reason=err.code,
            )
            raise err
        token = resp.text.strip()
        ctype = resp.headers.get("content-type", "")
        if "json" in ctype or token.startswith("{"):
            try:
                data = json.loads(token)
            except ValueError:
                data = None
            token = str(data.get("token", "")).strip() if isinstance(data, dict) else ""
        if not token or any(c.isspace() for c in token) or len(token) > 4096:
            raise BadResponseError(
                "The PA service's dashboard did not answer with a login. Try again.",
                detail=f"dashboard login answered HTTP {resp.status_code} without a usable token",
                status_code=resp.status_code,
            )
        log_event("service.dashboard_login")
        return token

    def dashboard_url_with_token(self, token: str) -> str:
        """The dashboard URL carrying ``token``, to redirect a browser to."""
        sep = "&" if urlsplit(self.dashboard_url).query else "?"
        return f"{self.dashboard_url}{sep}{urlencode({'token': token})}"
