"""Reading the service's answers: the claim interface's success bodies (every shape
the evidence allows), its error pages (mapped to our errors, with everything we sent
cut out), and the outcomes interface's body."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from ._contract import ALL_CLAIM_VARIABLES
from ._errors import (
    BadClaimError,
    CredentialsError,
    HttpStatusError,
    MissingVariablesError,
    RedirectError,
    ServiceError,
    ServiceTimeoutError,
    UnrecognizedNdcError,
)
from ._urls import best_urls, is_http

__all__ = [
    "BadOutcome",
    "ClaimResult",
    "OutcomeResult",
    "error_text",
    "missing_variables",
    "read_claim_body",
    "read_outcome",
    "status_error",
]

log = logging.getLogger("pa_bridge.client")


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The claim interface's answer, whichever of its formats came.

    ``pa_urls``: the PA link(s) read from the body, hosted-page links first (empty for
    the empty format: the link arrives with the PA's callback). ``pa_ids``: the PA id
    read from each link that names one (``/request/view/{id}``, ``/requests/{id}``).
    ``pa_id``: the first of them. Nothing in the answer says whether the PA is new or a
    duplicate (HTTP 200 and 201 alike mean success): the caller's own records do.
    ``format``: ``lines`` (bare URL lines), ``html`` (an HTML page), ``json``, or
    ``empty``. ``framing``: how the claim went on the wire (``stx_etx`` or ``none``).
    """

    pa_urls: tuple[str, ...]
    pa_id: str | None
    status_code: int
    format: Literal["lines", "html", "json", "empty"]
    pa_ids: tuple[str, ...] = ()
    framing: str = "stx_etx"


@dataclass(frozen=True, slots=True)
class OutcomeResult:
    """The outcomes interface's answer, or the fallback (``source == "fallback"``)."""

    message: str
    button_label: str
    source: Literal["outcomes", "fallback"]
    error: str | None
    elapsed_ms: float


#: why an outcomes call fell back, as ``fallback_reason`` says it (issue 16); an HTTP
#: error is ``http_<status>`` (``http_500``), or ``http_status`` if the status is unknown
FALLBACK_REASONS = ("timeout", "refused", "unreachable", "tls", "unreadable", "error")


def fallback_reason(error: str | None) -> dict[str, str | int]:
    """``{"fallback_reason": ...}`` (and ``fallback_http_status`` for an HTTP error)
    from an :class:`OutcomeResult`'s ``error``: ``timeout`` (the budget ran out, or a
    read timed out), ``http_<status>`` such as ``http_500`` (the service answered
    another status than 200; ``fallback_http_status`` has it as a number),
    ``refused`` (the connection was refused), ``unreachable`` (no connection: name,
    route, reset), ``tls``, ``unreadable`` (a 200 whose body is not an outcomes answer)
    or ``error``. Only our own words and the status code: nothing the service sent."""
    kind, _, rest = (error or "").partition(":")
    kind = kind.strip()
    if kind in ("deadline", "timeout"):
        return {"fallback_reason": "timeout"}
    if kind == "http_status":
        digits = "".join(c for c in rest if c.isdigit())[:3]
        if len(digits) != 3:
            return {"fallback_reason": "http_status"}
        return {"fallback_reason": f"http_{digits}", "fallback_http_status": int(digits)}
    if kind == "unreachable":
        return {"fallback_reason": "refused" if "Refused" in rest else "unreachable"}
    if kind == "tls":
        return {"fallback_reason": "tls"}
    if kind == "bad_body":
        return {"fallback_reason": "unreadable"}
    return {"fallback_reason": "error"}


class _PageParser(HTMLParser):
    """Anchors' ``href`` values, the text of ``<p>`` elements, and all visible text
    (without ``<title>``, ``<script>`` and ``<style>``)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.paragraphs: list[str] = []
        self.text: list[str] = []
        self._p: list[str] | None = None
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        tag = tag.lower()
        if tag == "a":
            for name, value in attrs:
                if name.lower() == "href" and value:
                    self.links.append(value.strip())
        elif tag == "p":
            self._close_p()
            self._p = []
        elif tag in ("title", "script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        tag = tag.lower()
        if tag == "p":
            self._close_p()
        elif tag in ("title", "script", "style") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        self.text.append(data)
        if self._p is not None:
            self._p.append(data)

    def _close_p(self) -> None:
        if self._p is not None:
            text = " ".join("".join(self._p).split())
            if text:
                self.paragraphs.append(text)
            self._p = None

    def close(self) -> None:
        super().close()
        self._close_p()


def _parse_page(text: str) -> _PageParser:
    parser = _PageParser()
    try:
        parser.feed(text)
        parser.close()
    except Exception:  # html.parser is tolerant; be safe anyway
        log.debug("an HTML body did not parse cleanly")
    return parser


#: A URL written out in text: http(s), up to whitespace, quotes or angle brackets.
_TEXT_URL_RE = re.compile(r"https?://[^\s<>\"']+", re.IGNORECASE)


def _json_urls(node: Any, out: list[str]) -> None:
    """Every http(s) URL among the string values of a JSON document, whatever the keys."""
    if isinstance(node, dict):
        for value in node.values():
            _json_urls(value, out)
    elif isinstance(node, list):
        for item in node:
            _json_urls(item, out)
    elif isinstance(node, str):
        value = node.strip()
        if is_http(value) and not any(c.isspace() for c in value):
            out.append(value)


def _json_pa_id(body: Any) -> str | None:
    """The PA id of a JSON answer shaped like the request object (``id`` beside
    ``workflow_status`` or ``tokens``, at the top or under ``request``), else None."""
    if isinstance(body, list):
        body = body[0] if body else None
    if not isinstance(body, dict):
        return None
    for node in (body, body.get("request")):
        if isinstance(node, dict) and ("workflow_status" in node or "tokens" in node):
            value = node.get("id")
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)
    return None


def read_claim_body(
    body: bytes, content_type: str, base: str
) -> tuple[Literal["lines", "html", "json", "empty"], tuple[str, ...], str | None]:
    """(format, PA links, PA id from the body) of a 2xx claim-interface answer.

    Every shape the evidence allows: an empty body; bare URL lines (``text/html`` or
    ``text/plain``, LF or CRLF, a trailing newline, one line per PA); an HTML page with
    the links in anchors or in its text; JSON with field names we do not know (every URL
    in it is found). Hosted-page links are preferred over the others.
    """
    text = body.decode("utf-8", errors="replace")
    stripped = text.strip()
    if not stripped:
        return "empty", (), None
    ctype = content_type.split(";")[0].strip().lower()
    urls: list[str] = []
    if ctype.endswith("json") or stripped.startswith(("{", "[")):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict | list):
            _json_urls(data, urls)
            return "json", best_urls([urljoin(base, u) for u in urls]), _json_pa_id(data)
    if "<" in stripped and re.search(r"<[A-Za-z!/]", stripped):
        page = _parse_page(text)
        urls.extend(urljoin(base, u) for u in page.links)
        urls.extend(m.group(0) for m in _TEXT_URL_RE.finditer(" ".join(page.text)))
        fmt: Literal["lines", "html"] = "html"
    else:
        for line in stripped.splitlines():
            urls.extend(m.group(0) for m in _TEXT_URL_RE.finditer(line.strip()))
        fmt = "lines"
    return fmt, best_urls([u.rstrip(".,;)") for u in urls if is_http(u)]), None


def error_text(resp: httpx.Response) -> str:
    """The service's explanation: the ``<p>`` elements of an HTML error page (the
    evidence's shape), the messages of a JSON error body, else the visible text."""
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        parts = []
        for err in body["errors"]:
            if isinstance(err, dict):
                parts.append(" ".join(str(err[k]) for k in ("message", "debug") if err.get(k)))
        return "; ".join(p for p in parts if p)
    text = resp.text
    if "<" in text and re.search(r"<[A-Za-z!/]", text):
        page = _parse_page(text)
        if page.paragraphs:
            return " ".join(page.paragraphs)
        text = " ".join(page.text)
    return " ".join(text.split())


_VARIABLE_RE = re.compile(r"\b(" + "|".join(ALL_CLAIM_VARIABLES) + r")\b")


def missing_variables(text: str) -> list[str]:
    found: dict[str, None] = {}
    for m in _VARIABLE_RE.finditer(text):
        found.setdefault(m.group(1), None)
    return list(found)


_SCRUB_MIN = 3
_REASON_MAX = 200


def _scrubbed_reason(text: str, sent: Iterable[str]) -> str:
    """The service's words without anything we sent it. A service that echoes its
    form back (our password, api_key, the claim with the patient's name and date of
    birth) must not put that on the pharmacist's screen or in a log (issue 19): every
    value we sent, and every field of the claim, is cut out; what is left is cut short."""
    values: set[str] = set()
    for v in sent:
        if not v:
            continue
        values.add(v)
        for part in re.split(r"[\x02\x03\x1c\x1d\x1e]", v):
            if len(part) > 2 + _SCRUB_MIN:
                values.add(part[2:])  # a claim field without its 2-character id
                values.add(part)
    out = text
    for v in sorted((x.strip() for x in values), key=len, reverse=True):
        if len(v) >= _SCRUB_MIN:
            out = re.sub(re.escape(v), "[...]", out, flags=re.IGNORECASE)
    out = " ".join(out.split())
    return out if len(out) <= _REASON_MAX else out[: _REASON_MAX - 3] + "..."


def status_error(resp: httpx.Response, what: str, sent: Iterable[str] = ()) -> ServiceError:
    """Map a non-2xx answer to a typed error a pharmacist can act on. ``detail`` has
    the status and a short reason from the service's page with everything in ``sent``
    (the form we posted) cut out: never the service's body as it came."""
    status = resp.status_code
    text = error_text(resp)
    reason = _scrubbed_reason(text, sent)
    detail = (
        f"HTTP {status} from the {what}: {reason}" if reason else f"HTTP {status} from the {what}"
    )
    if 300 <= status < 400:
        location = resp.headers.get("location", "")
        return RedirectError(
            f"The PA service redirected the request (HTTP {status}). "
            "Ask store IT to check the service address in the configuration.",
            detail=f"HTTP {status} from the {what}; Location: {urlsplit(location).netloc}"
            f"{urlsplit(location).path}",
            status_code=status,
        )
    if status in (401, 403):
        return CredentialsError(
            "The PA service did not accept the pharmacy's credentials. "
            "Ask store IT to check the username, password and API key.",
            detail=detail,
            status_code=status,
        )
    if status == 404:
        missing = missing_variables(text)
        msg = (
            "The PA service says information is missing: " + ", ".join(missing) + "."
            if missing
            else "The PA service address was not found. Ask store IT to check the configuration."
        )
        return MissingVariablesError(msg, missing=missing, detail=detail, status_code=status)
    if status == 408:
        return ServiceTimeoutError(
            "The PA service timed out. Try again in a moment.", detail=detail, status_code=status
        )
    if status == 422:
        return UnrecognizedNdcError(
            "The PA service does not recognise the drug (NDC) on this claim. "
            "Check the product ID and submit again.",
            detail=detail,
            status_code=status,
        )
    if status == 500:
        return BadClaimError(
            "The PA service could not process this claim. "
            "Check the claim in the dispensing system; store IT can see the details.",
            detail=detail,
            status_code=status,
        )
    retryable = status in (429, 502, 503, 504)
    return HttpStatusError(
        f"The PA service answered with an error (HTTP {status})."
        + (" Try again in a moment." if retryable else " Ask store IT to check the logs."),
        detail=detail,
        retryable=retryable,
        status_code=status,
    )


class BadOutcome(Exception):
    """The outcomes call gave no usable answer; ``str()`` says why (``kind: detail``)."""


def read_outcome(content_type: str, body: bytes) -> tuple[str, str]:
    """(button_label, message) from a JSON or text outcomes answer."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadOutcome("bad_body: not UTF-8") from None
    ctype = content_type.split(";")[0].strip().lower()
    stripped = text.strip()
    if ctype == "application/json" or ctype.endswith("+json") or stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            raise BadOutcome("bad_body: invalid JSON") from None
        if not isinstance(data, dict):
            raise BadOutcome("bad_body: JSON is not an object")
        message = data.get("message")
        label = data.get("button_label", "")
        if label is None:
            label = ""
        if not isinstance(message, str) or not isinstance(label, str):
            raise BadOutcome("bad_body: message or button_label is not a string")
    elif ctype in ("text/plain", "") and ";" in text:
        # Split at the FIRST ';' (the button text never contains one).
        label, message = text.split(";", 1)
        label = label.strip()
    else:
        raise BadOutcome(f"bad_body: unexpected content type {ctype or 'none'}")
    # An empty message means "no replacement": the caller shows its own (unchanged).
    return label, message.strip()
