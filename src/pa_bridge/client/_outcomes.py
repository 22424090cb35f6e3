"""The outcomes call: its deadline, on the client's one ``httpx.Client`` (decision 0043).

httpx timeouts are per phase (connect, each read, each write, pool acquisition) and
DNS resolution has none: a server that trickles one byte every 100 ms never trips a
1.5 s read timeout. So the call runs on a small worker pool and the caller waits on
the future for at most the remaining budget (:meth:`OutcomesCall.result`); the worker
sends with every timeout set to the budget left, reads the body in pieces and checks
a monotonic deadline between them, so a worker its caller gave up on stops by itself
soon after (decision 0002).

Each call goes on a connection of its own (the client asks for ``Connection: close``):
an answer is read from the connection its request went out on and from no other, so a
stray second answer from the service, however late it comes, is never read as another
claim's, and no request meets a kept-alive connection the service is just closing.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections.abc import Mapping
from urllib.parse import quote_plus

import httpx

from ..logs import log_event
from ._answers import BadOutcome, OutcomeResult, read_outcome
from ._tls import causes, is_tls_failure

__all__ = ["OUTCOMES_HEADERS", "OutcomesCall", "form_body", "post_outcomes"]

log = logging.getLogger("pa_bridge.client")

_OUTCOMES_BODY_LIMIT = 64 * 1024
#: The answer is read as it comes (no content coding to undo, so the body limit is on
#: what arrives).
OUTCOMES_HEADERS = {
    "Accept-Encoding": "identity",
    "Content-Type": "application/x-www-form-urlencoded",
}


#: The form's names are the interface's two dozen: each is quoted once.
_quoted_name = functools.lru_cache(maxsize=256)(quote_plus)


def form_body(form: Mapping[str, str]) -> bytes:
    """``urlencode(form).encode()``, byte for byte (the same stdlib quoting), with
    each name's quoting remembered: half the quoting work of a claim's outcomes call."""
    return "&".join([f"{_quoted_name(k)}={quote_plus(v)}" for k, v in form.items()]).encode()


class _Deadline(Exception):
    """The outcomes call's deadline passed."""


class OutcomesCall:
    """An outcomes call under way (:meth:`PaServiceClient.start_outcomes`)."""

    def __init__(self, fallback_message: str, budget_ms: float) -> None:
        self.started = time.monotonic()
        self.deadline = self.started
        self.future: concurrent.futures.Future[tuple[str, str]] | None = None
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
        """The answer, or the fallback by the deadline; never raises. A caller back
        after its deadline still takes an answer that came in time."""
        if self._result is not None:
            return self._result
        future = self.future
        try:
            if future is None:
                raise BadOutcome("error: the call did not start")
            try:
                label, message = future.result(timeout=max(0.0, self.deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                future.cancel()  # not started yet: it never will; else it stops by itself
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


def post_outcomes(
    http: httpx.Client,
    url: httpx.URL,
    headers: httpx.Headers,
    form: dict[str, str],
    deadline: float,
) -> tuple[str, str]:
    """(button_label, message) of the outcomes answer to ``form``, on a worker. Every
    timeout is the budget left, and the deadline is checked between the body's pieces.
    The request is built here with the client's headers merged once (``headers``), and
    sent by the client (its proxy for the URL, its pool): the client's per-call merging
    of its defaults, which cost a claim more CPU than the form, has nothing to add."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Deadline("deadline: budget spent before the call started")
    request = httpx.Request(
        "POST",
        url,
        headers=headers,
        content=form_body(form),
        extensions={"timeout": httpx.Timeout(remaining).as_dict()},
    )
    try:
        resp = http.send(request, stream=True)
        try:
            return _read(resp, deadline)
        finally:
            resp.close()
    except httpx.TimeoutException:
        if time.monotonic() >= deadline - 0.005:
            raise _Deadline("deadline: no complete answer in time") from None
        raise


def _read(resp: httpx.Response, deadline: float) -> tuple[str, str]:
    if resp.status_code != 200:
        raise BadOutcome(f"http_status: HTTP {resp.status_code}")
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_raw():
        size += len(chunk)
        if size > _OUTCOMES_BODY_LIMIT:
            raise BadOutcome("bad_body: answer too large")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _Deadline("deadline: answer still arriving at the deadline")
    return read_outcome(resp.headers.get("content-type", ""), b"".join(chunks))


def _outcome_error(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {type(exc).__name__}"
    if isinstance(exc, httpx.TransportError | OSError):
        if is_tls_failure(exc):
            return "tls: TLS failure"
        if any(isinstance(c, ConnectionRefusedError) for c in causes(exc)):
            return "unreachable: ConnectionRefusedError"
        return f"unreachable: {type(exc).__name__}"
    return f"error: {type(exc).__name__}"
