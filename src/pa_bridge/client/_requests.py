"""The service's requests resource, read back (issue 28, reconciliation):
``GET /requests/{id}`` and ``POST /requests/search`` (pa-service-interface.md,
Endpoints and Authentication).

On the wire, as the interface describes it:

* every call states the version, ``v=1``, in the query;
* ``GET /requests/{id}``: ``Authorization: Bearer <api_id>+<token_id>``, the PA's own
  token; the answer is ``{"request": {...}}`` (the bare object is taken too);
* ``POST /requests/search``: the tokens as URL-encoded form data, ``token_ids[]`` once
  per token (the interface's wire convention and the service's own Ruby client), and
  ``Authorization: Bearer <api_id>+x-no-pass``: the api_id alone in the header, as
  for a call that needs no more, so one token deleted meanwhile cannot refuse the
  whole batch (a guess: which token, if any, the header should carry for a search is
  not shown). The answer is ``{"requests": [...]}``, each element the request object
  bare or wrapped ``{"request": {...}}`` (the abbreviated list's shape); a PA with no
  token left is simply not in it ("inaccessible through the API").

The status is checked before the body is parsed. Errors are :class:`ServiceError`\\ s:
401 (the api_id refused) is :class:`CredentialsError`; 404 on a GET is
:class:`RequestNotFoundError` (the PA is not returned: deleted, or no token left);
408, 429, 502-504 and transport failures may be retried; an answer that is not the
JSON described is :class:`BadResponseError`. The service's error body
``{"errors": [{"code", "message", "debug"}]}`` gives the detail (its code and message,
capped; never ``debug``). Values in the request objects may be strings where the type
is a boolean or a number (the product's real-service-evidence.md): the objects are
handed on as they came, for the callback parser, which reads either.

Logging: status codes, counts and elapsed times; never a token, the api_id or a body.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from ..logs import log_event
from ._client import transport_error
from ._errors import (
    BadResponseError,
    CredentialsError,
    HttpStatusError,
    RedirectError,
    RequestNotFoundError,
    ServiceError,
    ServiceTimeoutError,
)
from ._tls import verify_context

__all__ = ["VERSION", "NO_PASS", "RequestsResource", "read_request", "read_requests"]

#: the interface's version, sent with every call
VERSION = "1"
#: the token part of a Bearer header for a call that needs only the api_id
NO_PASS = "x-no-pass"  # noqa: S105 - the interface's literal, not a secret
_USER_AGENT = "pa-bridge"
_DETAIL = 200


def _errors_text(resp: httpx.Response) -> str:
    """The service's own words for an error: ``code message`` of each entry of
    ``{"errors": [...]}`` (never ``debug``), capped; "" when the body is not that."""
    try:
        doc = json.loads(resp.content or b"null")
    except ValueError:
        return ""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return ""
    parts = []
    for e in errors:
        if isinstance(e, dict):
            text = " ".join(str(e[k]) for k in ("code", "message") if e.get(k) is not None)
            if text:
                parts.append(text)
    return "; ".join(parts)[:_DETAIL]


def _status_error(resp: httpx.Response, what: str) -> ServiceError:
    status = resp.status_code
    said = _errors_text(resp)
    detail = f"HTTP {status} from {what}" + (f": {said}" if said else "")
    if 300 <= status < 400:
        return RedirectError(
            "The PA service's requests resource redirected the call. Ask store IT to check"
            " service.api_url.",
            detail=detail,
            status_code=status,
        )
    if status in (401, 403):
        return CredentialsError(
            "The PA service did not accept the api_id. Ask store IT to check service.api_id.",
            detail=detail,
            status_code=status,
        )
    if status == 404:
        return RequestNotFoundError(
            "The PA service does not return this PA (deleted, or no access token left).",
            detail=detail,
            status_code=status,
        )
    if status == 408:
        return ServiceTimeoutError(
            "The PA service timed out. Try again in a moment.", detail=detail, status_code=status
        )
    retryable = status in (429, 500, 502, 503, 504)
    return HttpStatusError(
        f"The PA service's requests resource answered HTTP {status}.",
        detail=detail,
        retryable=retryable,
        status_code=status,
    )


def _object(value: Any) -> dict[str, Any] | None:
    """A request object, bare or wrapped ``{"request": {...}}``; None for anything else
    (no object, or no id)."""
    if not isinstance(value, dict):
        return None
    inner = value.get("request")
    obj = inner if isinstance(inner, dict) else value
    pa_id = obj.get("id")
    if pa_id is None or isinstance(pa_id, bool | dict | list) or not str(pa_id).strip():
        return None
    return obj


def _json(resp: httpx.Response, what: str) -> Any:
    try:
        return json.loads(resp.content)
    except (ValueError, UnicodeDecodeError):
        raise BadResponseError(
            "The PA service's answer could not be read. Try again later.",
            detail=f"HTTP {resp.status_code} from {what}: not JSON",
            status_code=resp.status_code,
        ) from None


def read_request(resp: httpx.Response) -> dict[str, Any]:
    """The request object of a 2xx answer to ``GET /requests/{id}``."""
    obj = _object(_json(resp, "GET /requests/{id}"))
    if obj is None:
        raise BadResponseError(
            "The PA service's answer could not be read. Try again later.",
            detail=f"HTTP {resp.status_code} from GET /requests/{{id}}: no request object",
            status_code=resp.status_code,
        )
    return obj


def read_requests(resp: httpx.Response) -> list[dict[str, Any]]:
    """The request objects of a 2xx answer to ``POST /requests/search``; an element
    that is not one is left out (and logged by count)."""
    doc = _json(resp, "POST /requests/search")
    items = doc.get("requests") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise BadResponseError(
            "The PA service's answer could not be read. Try again later.",
            detail=f"HTTP {resp.status_code} from POST /requests/search: no requests list",
            status_code=resp.status_code,
        )
    found = [obj for obj in (_object(x) for x in items) if obj is not None]
    if len(found) != len(items):
        log_event(
            "service.requests_unreadable",
            level=logging.WARNING,
            unreadable=len(items) - len(found),
            of=len(items),
        )
    return found


class RequestsResource:
    """``GET /requests/{id}`` and ``POST /requests/search`` at ``api_url`` (the
    requests resource's base address, ``service.api_url``). Thread-safe. ``verify``:
    True (system CAs), False, or a CA bundle."""

    def __init__(self, api_url: str, *, timeout_s: float = 15.0, verify: bool | str = True) -> None:
        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(
            timeout=timeout_s,
            verify=verify_context(verify),
            follow_redirects=False,
            headers={"User-Agent": _USER_AGENT, "Accept": "application/json"},
        )

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"RequestsResource(api_url={self.api_url!r})"

    def _send(self, what: str, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        try:
            resp = self._http.send(request)
        except httpx.TransportError as exc:
            err = transport_error(exc, "requests resource")
            log_event("service.requests_failed", level=logging.WARNING, call=what, reason=err.code)
            raise err from None
        log_event(
            "service.requests_answered",
            level=logging.DEBUG,
            call=what,
            http_status=resp.status_code,
            elapsed_ms=round((time.monotonic() - started) * 1000),
        )
        if not 200 <= resp.status_code < 300:
            raise _status_error(resp, what)
        return resp

    def get_request(self, pa_id: str, token_id: str, *, api_id: str) -> dict[str, Any]:
        """One PA (``GET /requests/{id}`` with its token): its request object."""
        request = self._http.build_request(
            "GET",
            f"{self.api_url}/requests/{quote(pa_id, safe='')}",
            params={"v": VERSION},
            headers={"Authorization": f"Bearer {api_id}+{token_id}"},
        )
        return read_request(self._send("GET /requests/{id}", request))

    def search_requests(self, token_ids: Sequence[str], *, api_id: str) -> list[dict[str, Any]]:
        """The PAs these tokens open (``POST /requests/search``): their request objects,
        in the service's order. A PA no token opens any more is not among them."""
        if not token_ids:
            return []
        request = self._http.build_request(
            "POST",
            f"{self.api_url}/requests/search",
            params={"v": VERSION},
            data={"token_ids[]": list(token_ids)},
            headers={"Authorization": f"Bearer {api_id}+{NO_PASS}"},
        )
        return read_requests(self._send("POST /requests/search", request))
