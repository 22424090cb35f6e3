"""The outcomes call: its deadline, its worker pool, and its two HTTP paths.

httpx timeouts are per phase (connect, each read, each write, pool acquisition) and
DNS resolution has none: a server that trickles one byte every 100 ms never trips a
1.5 s read timeout. So the call runs on a small worker pool and the caller waits on
the future for at most the remaining budget; the worker reads the body with every
timeout set to the remaining budget and checks a monotonic deadline between chunks,
and a caller that gives up shuts the worker's socket, so an abandoned worker stops at
once. See docs/decisions/0002-outcomes-deadline.md.

The bytes go through kept-alive connections read by httptools (:mod:`._outcomes_http`,
decisions 0007 and 0029), or through httpx when a proxy applies.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import logging
import re
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote_plus

import httpx

from ..logs import log_event
from ._answers import BadOutcome, OutcomeResult, read_outcome
from ._outcomes_http import Deadline as FastDeadline
from ._outcomes_http import OutcomesConnection, OutcomesHttp, TooLarge, direct_route
from ._tls import is_tls_failure

__all__ = ["FORM_HEADERS", "OutcomesCall", "OutcomesTransport", "form_encode"]

log = logging.getLogger("pa_bridge.client")

_OUTCOMES_BODY_LIMIT = 64 * 1024
#: How long a caller back after its deadline still reads an answer already arrived.
_LATE_READ_S = 0.002
FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}
_FORM_SAFE = re.compile(r"[A-Za-z0-9_.~-]*")
#: Form names as they go on the wire (the outcomes interface has two dozen).
_FORM_NAMES: dict[str, str] = {}


def form_encode(form: Mapping[str, str]) -> bytes:
    """``urlencode(form).encode()``, byte for byte, without quoting what needs none:
    the names are the interface's (each looked at once), and most values are codes
    and numbers (letters and digits need no look at all)."""
    safe = _FORM_SAFE.fullmatch
    names = _FORM_NAMES
    out: list[str] = []
    for k, v in form.items():
        name = names.get(k)
        if name is None:
            name = k if safe(k) else quote_plus(k)
            if len(names) < 256:
                names[k] = name
        if not (v.isalnum() and v.isascii()) and not safe(v):
            v = quote_plus(v)
        out.append(f"{name}={v}")
    return "&".join(out).encode("ascii")


class _Deadline(Exception):
    """The outcomes call's deadline passed."""


class OutcomesCall:
    """An outcomes call under way (:meth:`PaServiceClient.start_outcomes`)."""

    def __init__(self, fallback_message: str, budget_ms: float) -> None:
        self.started = time.monotonic()
        self.deadline = self.started
        self.in_use: list[Any] = []
        self.future: concurrent.futures.Future[tuple[str, str]] | None = None
        #: (transport, connection) when the request went out on the caller's thread
        self.inline: tuple[OutcomesTransport, tuple[OutcomesConnection, bytes]] | None = None
        self._fallback = fallback_message
        self._budget_ms = budget_ms
        self._result: OutcomeResult | None = None

    def fail(self, exc: BaseException) -> OutcomeResult:
        error = str(exc) if isinstance(exc, _Deadline | BadOutcome) else _outcome_error(exc)
        elapsed = (time.monotonic() - self.started) * 1000
        log_event(
            "outcomes.fallback", level=logging.WARNING, elapsed_ms=round(elapsed), error=error
        )
        self._result = OutcomeResult(
            message=self._fallback,
            button_label="",
            source="fallback",
            error=error,
            elapsed_ms=elapsed,
        )
        return self._result

    def result(self) -> OutcomeResult:
        """The answer, or the fallback by the deadline; never raises."""
        if self._result is not None:
            return self._result
        future = self.future
        try:
            if self.inline is not None:
                transport, sent = self.inline
                self.inline = None
                label, message = transport.finish_inline(sent, self.deadline)
            elif future is None:
                raise BadOutcome("error: the call did not start")
            else:
                try:
                    label, message = future.result(
                        timeout=max(0.0, self.deadline - time.monotonic())
                    )
                except concurrent.futures.TimeoutError:
                    if not future.cancel():  # a worker is reading: unblock it now
                        OutcomesHttp.abort(self.in_use)
                    raise _Deadline(
                        f"deadline: no complete answer within {self._budget_ms:.0f} ms"
                    ) from None
            elapsed = (time.monotonic() - self.started) * 1000
            log.debug("outcomes answered in %.0f ms", elapsed)  # claim.accepted says it
            self._result = OutcomeResult(
                message=message or self._fallback,
                button_label=label,
                source="outcomes",
                error=None,
                elapsed_ms=elapsed,
            )
            return self._result
        except Exception as exc:  # the contract is: never raise
            return self.fail(exc)


class OutcomesTransport:
    """POST an outcomes form to one URL: the fast path (kept-alive connections,
    :mod:`._outcomes_http`) when no proxy applies, httpx otherwise. Runs on the call's worker."""

    def __init__(
        self,
        url: str,
        *,
        verify: bool | ssl.SSLContext,
        common: Mapping[str, Any],
        max_connections: int,
        user_agent: str,
    ) -> None:
        self._url = httpx.URL(url)
        # no connection kept alive on either path (decision 0036)
        self._httpx = httpx.Client(
            timeout=1.5,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
            **common,
        )
        self.fast: OutcomesHttp | None = None
        if direct_route(url):
            ctx = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
            self.fast = OutcomesHttp(
                url,
                ssl_context=ctx if url.startswith("https") else None,
                headers={**FORM_HEADERS, "User-Agent": user_agent},
            )

    def close(self) -> None:
        self._httpx.close()
        if self.fast is not None:
            self.fast.close()

    def call(self, form: dict[str, str], deadline: float, in_use: list[Any]) -> tuple[str, str]:
        """(button_label, message). Every timeout is the remaining budget, and the
        deadline is checked between chunks, so an abandoned worker stops soon too."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline("deadline: budget spent before the call started")
        if self.fast is not None:
            status, content_type, body = self._post_fast(form, deadline, in_use)
        else:
            status, content_type, body = self._post_httpx(form, deadline)
        if status != 200:
            raise BadOutcome(f"http_status: HTTP {status}")
        return read_outcome(content_type, body)

    def start_inline(
        self, form: dict[str, str], deadline: float
    ) -> tuple[OutcomesConnection, bytes] | None:
        """Send the form now, on the caller's thread, over a kept-alive connection, and
        return that connection and the bytes sent for :meth:`finish_inline` (which
        sends them again if the server had closed it); None when there is no idle
        connection (or it failed): the caller then hands the call to a worker.

        Most claims find a connection kept alive by the last one; sending on it does
        not block, and reading the answer later on the same thread, each read bounded
        by the time left, saves the two thread hand-offs of a worker (about a tenth
        of a 75-reject's CPU)."""
        fast = self.fast
        if fast is None or deadline <= time.monotonic():
            return None
        conn = fast.take_idle()
        if conn is None:
            return None
        body = form_encode(form)
        try:
            fast.send(conn, body, deadline)
        except (OSError, FastDeadline):
            return None  # closed by send(); a worker starts afresh
        return conn, body

    def finish_inline(
        self, sent: tuple[OutcomesConnection, bytes], deadline: float
    ) -> tuple[str, str]:
        """(button_label, message) of a call :meth:`start_inline` sent. An answer that
        is already here is read even when the caller comes back after the deadline
        (as a worker's finished answer would be); otherwise each read waits for the
        time left at most."""
        conn, form_body = sent
        read_until = max(deadline, time.monotonic() + _LATE_READ_S)
        status, content_type, body = self._fast(
            lambda fast: fast.receive_again(
                conn,
                form_body,
                deadline,
                limit=_OUTCOMES_BODY_LIMIT,
                read_until=read_until,
            ),
            read_until,
        )
        if status != 200:
            raise BadOutcome(f"http_status: HTTP {status}")
        return read_outcome(content_type, body)

    def _post_fast(
        self, form: dict[str, str], deadline: float, in_use: list[Any]
    ) -> tuple[int, str, bytes]:
        return self._fast(
            lambda fast: fast.post(
                form_encode(form), deadline, limit=_OUTCOMES_BODY_LIMIT, started=in_use
            ),
            deadline,
        )

    def _fast(
        self, step: Callable[[OutcomesHttp], tuple[int, str, bytes]], deadline: float
    ) -> tuple[int, str, bytes]:
        """Run ``step`` on the fast path, its failures mapped to ours."""
        assert self.fast is not None
        try:
            return step(self.fast)
        except FastDeadline as exc:
            raise _Deadline(f"deadline: {exc}") from None
        except TooLarge:
            raise BadOutcome("bad_body: answer too large") from None
        except TimeoutError:
            if time.monotonic() >= deadline - 0.005:
                raise _Deadline("deadline: no complete answer in time") from None
            raise BadOutcome("timeout: ReadTimeout") from None
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise _Deadline("deadline: no complete answer in time") from None
            raise BadOutcome(_outcome_error(exc)) from None

    def _post_httpx(self, form: dict[str, str], deadline: float) -> tuple[int, str, bytes]:
        """The same through httpx (when a proxy applies): every httpx timeout is the
        remaining budget; the body is streamed and the deadline checked between chunks."""
        try:
            with self._httpx.stream(
                "POST",
                self._url,
                content=form_encode(form),
                headers=FORM_HEADERS,
                timeout=httpx.Timeout(max(0.001, deadline - time.monotonic())),
            ) as resp:
                if resp.status_code != 200:
                    return resp.status_code, "", b""
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > _OUTCOMES_BODY_LIMIT:
                        raise BadOutcome("bad_body: answer too large")
                    if time.monotonic() > deadline:
                        raise _Deadline("deadline: answer still arriving at the deadline")
                return 200, resp.headers.get("content-type", ""), b"".join(chunks)
        except httpx.TransportError as exc:
            raise BadOutcome(_outcome_error(exc)) from None


def _outcome_error(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {type(exc).__name__}"
    if isinstance(exc, httpx.TransportError | OSError | http.client.HTTPException):
        if is_tls_failure(exc):
            return "tls: TLS failure"
        return f"unreachable: {type(exc).__name__}"
    return f"error: {type(exc).__name__}"
