"""The client of the PA service's pharmacy interfaces.

Three interfaces, each with its own pool of connections (httpx for the claim
interface and the dashboard; kept-alive ``http.client`` connections for the outcomes
call, which is on every 70/75/76 claim's path: see ``_outcomes_http`` and
docs/decisions/0007-outcomes-http-path.md):

* the pharmacy **claim interface** (:meth:`PaServiceClient.submit_claim`): B1 starts a
  PA, B2 deletes it. Both are **safe to retry**: the service answers a duplicate B1 or
  B2 with the response for the original PA and never creates a second one, so a caller
  that did not get an answer (timeout, connection reset) may send the same claim again.
  Errors say whether a retry can help (``ServiceError.retryable``);
* the **outcomes interface** (:meth:`PaServiceClient.outcomes`): never raises, and
  returns within a hard total deadline (see "Outcomes deadline" below);
* the **dashboard login** (:meth:`PaServiceClient.dashboard_login`).

Every failure is one of our own :class:`ServiceError` subclasses, with a stable
``code``, a ``message`` a pharmacist can act on (plain words, no PHI, no secrets), a
``detail`` for store IT, and ``retryable``.

Outcomes deadline. httpx timeouts are per phase (connect, each read, each write, pool
acquisition) and DNS resolution has none: a server that trickles one byte every 100 ms
never trips a 1.5 s read timeout. So the call runs on a small worker pool and the
caller waits on the future for at most the remaining budget; the worker reads the body
with every timeout set to the remaining budget and checks a monotonic deadline between
chunks, and a caller that gives up shuts the worker's socket, so an abandoned worker
stops at once.
See docs/decisions/0002-outcomes-deadline.md.

Logging: status codes, PA ids, elapsed times and error codes only. Never claim
content, patient data, cardholder ids, the password, the api_key or a dashboard token.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from html.parser import HTMLParser
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, quote_plus, urlencode, urljoin, urlsplit

import httpx

import ncpdp

from ._outcomes_http import Deadline as FastDeadline
from ._outcomes_http import OutcomesHttp, TooLarge, direct_route
from .logs import log_event

__all__ = [
    "CLAIM_FRAMINGS",
    "CLAIM_VARIABLES",
    "OPTIONAL_CLAIM_VARIABLES",
    "OUTCOME_VARIABLES",
    "BadClaimError",
    "BadResponseError",
    "ClaimMetadata",
    "ClaimResult",
    "CredentialsError",
    "HttpStatusError",
    "InvalidClaimError",
    "MissingClaimDataError",
    "MissingVariablesError",
    "OutcomeResult",
    "OutcomesCall",
    "PaServiceClient",
    "RedirectError",
    "ServiceError",
    "ServiceTimeoutError",
    "TlsError",
    "UnreachableError",
    "UnrecognizedNdcError",
    "best_urls",
    "claim_metadata",
    "claim_minimum_missing",
    "frame_claim",
    "outcome_variables",
    "pa_id_from_url",
    "patient_age",
    "read_claim_body",
]

log = logging.getLogger("pa_bridge.client")

#: Required variables of the claim interface.
CLAIM_VARIABLES: tuple[str, ...] = ("username", "password", "api_key", "ncpdp_claim")

#: Optional metadata variables of the claim interface, in the interface's order.
OPTIONAL_CLAIM_VARIABLES: tuple[str, ...] = (
    "physician_fname",
    "physician_lname",
    "physician_specialty",
    "physician_npi",
    "physician_dea",
    "physician_street",
    "physician_city",
    "physician_state",
    "physician_zip",
    "physician_phone",
    "physician_fax",
    "pharmacy_plan_name",
    "prescription_sig",
    "rejection_code",
    "rejection_msg",
    "help_phone",
    "preferred_product_id_qualifier",
    "preferred_product_id",
    "preferred_product_description",
    "bin_number",
    "pcn_number",
    "group_id",
)

#: Every variable of the outcomes interface ("all required").
OUTCOME_VARIABLES: tuple[str, ...] = (
    "api_key",
    "bin",
    "pcn",
    "group_id",
    "approval_code",
    "rejection_code",
    "rejection_message",
    "prescription_reference_number",
    "prescription_reference_number_qualifier",
    "product_service_id",
    "product_service_id_qualifier",
    "service_provider_id",
    "service_provider_id_qualifier",
    "cardholder_id",
    "person_code",
    "prescriber_id",
    "prescriber_id_qualifier",
    "days_supply",
    "fill_number",
    "quantity_dispensed",
    "transaction_response_status",
    "patient_age",
    "prescriber_fax",
)

_ALL_CLAIM_VARIABLES = CLAIM_VARIABLES + OPTIONAL_CLAIM_VARIABLES
_DETAIL_LIMIT = 500
_OUTCOMES_BODY_LIMIT = 64 * 1024


# --------------------------------------------------------------------------- errors


_FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}
_FORM_SAFE = re.compile(r"[A-Za-z0-9_.~-]*")


def form_encode(form: Mapping[str, str]) -> bytes:
    """``urlencode(form).encode()``, byte for byte, without quoting values that need
    none (most outcome variables are codes and numbers; quoting each one costs more
    than the rest of the call's encoding)."""
    safe = _FORM_SAFE.fullmatch
    return "&".join(
        f"{k if safe(k) else quote_plus(k)}={v if safe(v) else quote_plus(v)}"
        for k, v in form.items()
    ).encode("ascii")


class ServiceError(Exception):
    """Base of every error of this module.

    ``code``: stable machine string; ``message``: for the pharmacist (no PHI, no
    secrets); ``detail``: for store IT; ``retryable``: whether sending the same request
    again may succeed.
    """

    code: ClassVar[str] = "service_error"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        detail: str = "",
        retryable: bool | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail[:_DETAIL_LIMIT]
        self.retryable = self.default_retryable if retryable is None else retryable
        self.status_code = status_code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" + (f" ({self.detail})" if self.detail else "")


class CredentialsError(ServiceError):
    """403: wrong or unknown username, password or api_key."""

    code = "credentials"


class MissingVariablesError(ServiceError):
    """404: wrong URL or missing POST variables; ``missing`` names those the body names."""

    code = "missing_variables"

    def __init__(self, message: str, *, missing: list[str], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.missing = missing


class ServiceTimeoutError(ServiceError):
    """408 from the service, or no answer in time on our side."""

    code = "timeout"
    default_retryable = True


class UnrecognizedNdcError(ServiceError):
    """422: unprocessable fields, usually an NDC the service does not know."""

    code = "unrecognized_ndc"


class BadClaimError(ServiceError):
    """500: usually a badly formed claim; ``detail`` carries the service's explanation."""

    code = "bad_claim"


class RedirectError(ServiceError):
    """3xx: a redirect or proxy problem; the configured URL is probably wrong."""

    code = "redirect"


class HttpStatusError(ServiceError):
    """Any other non-2xx status."""

    code = "http_error"


class UnreachableError(ServiceError):
    """Connection refused, name not resolved, connection reset."""

    code = "unreachable"
    default_retryable = True


class TlsError(ServiceError):
    """The TLS handshake failed (certificate not trusted, expired, wrong host)."""

    code = "tls"


class BadResponseError(ServiceError):
    """A 2xx answer we cannot use (the dashboard login without a token). A claim
    interface 2xx is never one: the PA exists, whatever the body says."""

    code = "bad_response"
    default_retryable = True


class MissingClaimDataError(ServiceError):
    """Checked before sending: the claim plus metadata misses payer-sheet fields."""

    code = "missing_claim_data"

    def __init__(self, missing: list[str]) -> None:
        super().__init__(
            "The claim is missing information the PA service needs: "
            + ", ".join(missing)
            + ". Complete it in the dispensing system and submit again.",
            detail="missing: " + ", ".join(missing),
        )
        self.missing = missing


class InvalidClaimError(ServiceError):
    """The claim is not a B1/B2 request we can read (checked before sending)."""

    code = "invalid_claim"


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimMetadata:
    """The optional metadata variables of the claim interface ("" means not sent)."""

    physician_fname: str = ""
    physician_lname: str = ""
    physician_specialty: str = ""
    physician_npi: str = ""
    physician_dea: str = ""
    physician_street: str = ""
    physician_city: str = ""
    physician_state: str = ""
    physician_zip: str = ""
    physician_phone: str = ""
    physician_fax: str = ""
    pharmacy_plan_name: str = ""
    prescription_sig: str = ""
    rejection_code: str = ""
    rejection_msg: str = ""
    help_phone: str = ""
    preferred_product_id_qualifier: str = ""
    preferred_product_id: str = ""
    preferred_product_description: str = ""
    bin_number: str = ""
    pcn_number: str = ""
    group_id: str = ""

    def as_form(self) -> dict[str, str]:
        """The non-empty variables, in the interface's order."""
        out: dict[str, str] = {}
        for name in OPTIONAL_CLAIM_VARIABLES:
            value = getattr(self, name).strip()
            if value:
                out[name] = value
        return out

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> ClaimMetadata:
        """Known variable names only; other keys are ignored."""
        return cls(**{k: str(v) for k, v in values.items() if k in OPTIONAL_CLAIM_VARIABLES})


# --------------------------------------------------------------------------- pure helpers


def _s(value: str | None) -> str:
    return (value or "").strip()


def claim_metadata(
    request: ncpdp.Transmission,
    response: ncpdp.Transmission | None,
    dispensing: Mapping[str, str] | None,
    index: int = 0,
) -> ClaimMetadata:
    """The metadata variables for transaction ``index`` of a claim exchange.

    From the claim: physician npi (411-DB when 466-EZ is 01), dea (411-DB when 466-EZ
    is 12), last name 427-DR, first name 364-2J, phone 498-PM. From the response:
    rejection code(s) 511-FB (comma-separated), message 526-FQ, help desk 550-8F, the
    first preferred product 552-AP/553-AR/556-AU. Non-empty values of the dispensing
    system's ``dispensing`` mapping win over claim-derived ones; unknown keys there
    are ignored.
    """
    values: dict[str, str] = {}
    req = request.as_request()
    if 0 <= index < len(req.transactions):
        tx = req.transactions[index]
        qualifier = _s(tx.prescriber_id_qualifier)
        if tx.prescriber_id:
            if qualifier == "01":
                values["physician_npi"] = tx.prescriber_id
            elif qualifier == "12":
                values["physician_dea"] = tx.prescriber_id
        values["physician_lname"] = _s(tx.prescriber_last_name)
        values["physician_fname"] = _s(tx.prescriber_first_name)
        values["physician_phone"] = _s(tx.prescriber_phone)
    if response is not None:
        resp = response.as_response()
        if 0 <= index < len(resp.transactions):
            rtx = resp.transactions[index]
            values["rejection_code"] = ",".join(r.code for r in rtx.reject_codes if r.code)
            values["rejection_msg"] = _s(rtx.additional_message)
            values["help_phone"] = _s(rtx.help_desk_phone)
            if rtx.preferred_products:
                p = rtx.preferred_products[0]
                values["preferred_product_id_qualifier"] = _s(p.qualifier)
                values["preferred_product_id"] = _s(p.id)
                values["preferred_product_description"] = _s(p.description)
    for key, value in (dispensing or {}).items():
        if key in OPTIONAL_CLAIM_VARIABLES and str(value).strip():
            values[key] = str(value).strip()
    return ClaimMetadata(**{k: v for k, v in values.items() if v})


# (field label, getter) for the payer-sheet minimum the interface reads.
_B1_HEADER_MINIMUM = (
    ("101-A1 BIN Number", "bin"),
    ("102-A2 Version/Release Number", "version"),
    ("103-A3 Transaction Code", "transaction_code"),
    ("201-B1 Service Provider ID", "service_provider_id"),
    ("401-D1 Date of Service", "date_of_service"),
)


def claim_minimum_missing(
    transmission: ncpdp.Transmission, metadata: ClaimMetadata | None = None
) -> list[str]:
    """The payer-sheet fields the claim interface reads that this claim lacks.

    B1: BIN (or ``bin_number``), version, transaction code, service provider id, date
    of service, cardholder id, patient first and last name, date of birth, and per
    transaction product id, Rx number, quantity, days supply and prescriber id (unless
    ``physician_npi`` or ``physician_dea`` is given). B2: BIN, provider, date of service,
    and per transaction Rx number and product id. Labels name the field, e.g.
    ``"302-C2 Cardholder ID"``; a field of the second transaction says so.
    """
    md = metadata or ClaimMetadata()
    req = transmission.as_request()
    missing: list[str] = []
    code = req.transaction_code.strip()

    def need(label: str, value: str | None, override: str = "") -> None:
        if not _s(value) and not override.strip():
            missing.append(label)

    need("101-A1 BIN Number", req.bin, md.bin_number)
    need("201-B1 Service Provider ID", req.service_provider_id)
    need("401-D1 Date of Service", req.date_of_service)
    if code == "B2":
        for tx in req.transactions:
            suffix = f" (transaction {tx.index + 1})" if tx.index else ""
            need("402-D2 Prescription/Service Reference Number" + suffix, tx.rx_number)
            need("407-D7 Product/Service ID" + suffix, tx.product_id)
        if not req.transactions:
            missing.append("402-D2 Prescription/Service Reference Number")
        return missing
    need("102-A2 Version/Release Number", req.version)
    need("103-A3 Transaction Code", req.transaction_code)
    need("302-C2 Cardholder ID", req.cardholder_id)
    need("310-CA Patient First Name", req.patient.first_name)
    need("311-CB Patient Last Name", req.patient.last_name)
    need("304-C4 Date of Birth", req.patient.date_of_birth)
    prescriber_override = md.physician_npi or md.physician_dea
    for tx in req.transactions:
        suffix = f" (transaction {tx.index + 1})" if tx.index else ""
        need("407-D7 Product/Service ID" + suffix, tx.product_id)
        need("402-D2 Prescription/Service Reference Number" + suffix, tx.rx_number)
        need("442-E7 Quantity Dispensed" + suffix, None if tx.quantity is None else "x")
        need("405-D5 Days Supply" + suffix, None if tx.days_supply is None else "x")
        need("411-DB Prescriber ID" + suffix, tx.prescriber_id, prescriber_override)
    if not req.transactions:
        missing.append("407-D7 Product/Service ID")
    return missing


STX = "\x02"
ETX = "\x03"
#: Values of ``service.claim_framing``.
CLAIM_FRAMINGS: tuple[str, ...] = ("stx_etx", "none")


def frame_claim(claim: str, framing: str = "stx_etx") -> str:
    """The claim as it goes on the wire: STX (0x02) before the header and ETX (0x03)
    after the last byte (``stx_etx``: every reference claim is framed so), or bare
    (``none``). Framing the claim already had, and CR/LF after it, are dropped first."""
    core = claim.rstrip("\r\n")
    if core.startswith(STX):
        core = core[1:]
    if core.endswith(ETX):
        core = core[:-1]
    return f"{STX}{core}{ETX}" if framing == "stx_etx" else core


def patient_age(date_of_birth: str | None, date_of_service: str | None) -> str:
    """Whole years between two CCYYMMDD dates, or "" when either is unreadable."""
    try:
        dob = ncpdp.decode_date(_s(date_of_birth))
        dos = ncpdp.decode_date(_s(date_of_service))
    except (ncpdp.NcpdpError, ValueError):
        return ""
    if not isinstance(dob, date) or not isinstance(dos, date) or dos < dob:
        return ""
    years = dos.year - dob.year - ((dos.month, dos.day) < (dob.month, dob.day))
    return str(years)


_age = patient_age  # outcome_variables() has a parameter of the same name


def outcome_variables(
    request: ncpdp.Transmission,
    response: ncpdp.Transmission,
    index: int = 0,
    *,
    api_key: str,
    patient_age: str = "",
    prescriber_fax: str = "",
    views: tuple[ncpdp.RequestView, ncpdp.ResponseView] | None = None,
) -> dict[str, str]:
    """Every outcomes variable for transaction ``index``, mapped by meaning.

    The interface document pairs ``service_provider_id`` with 202-B2 and its qualifier
    with 201-B1; in the standard 201-B1 is the id and 202-B2 the qualifier, and that is
    what we send (tests/test_client.py keeps a test of it). It also names 422-E7 for
    quantity dispensed; the standard's field is 442-E7, sent as a decimal with its three
    implied places made explicit ("30.000"), so it cannot be misread as 30000 units.
    Several approval or rejection codes are sent comma-separated. ``patient_age`` is
    computed from 304-C4 and the date of service when not given. Every variable is
    present (the interface marks them all required); unknown values are "".
    ``views``: the two transmissions' views when the caller already has them.
    """
    req, resp = views if views is not None else (request.as_request(), response.as_response())
    tx = req.transactions[index] if 0 <= index < len(req.transactions) else None
    rtx = resp.transactions[index] if 0 <= index < len(resp.transactions) else None
    claim_seg = request.groups[index].segment("07") if 0 <= index < len(request.groups) else None
    age = patient_age or _age(req.patient.date_of_birth, req.date_of_service)
    quantity = ""
    if tx is not None and tx.quantity is not None:
        quantity = str(tx.quantity)
    elif claim_seg is not None:
        quantity = _s(claim_seg.get("E7"))
    return {
        "api_key": api_key,
        "bin": _s(req.bin),
        "pcn": _s(req.pcn),
        "group_id": _s(req.group_id),
        "approval_code": ",".join(rtx.approved_message_codes) if rtx else "",
        "rejection_code": ",".join(r.code for r in rtx.reject_codes) if rtx else "",
        "rejection_message": _s(rtx.additional_message) if rtx else "",
        "prescription_reference_number": _s(tx.rx_number) if tx else "",
        "prescription_reference_number_qualifier": _s(tx.rx_number_qualifier) if tx else "",
        "product_service_id": _s(tx.product_id) if tx else "",
        "product_service_id_qualifier": _s(tx.product_id_qualifier) if tx else "",
        # By meaning: 201-B1 is the id, 202-B2 its qualifier (the doc swaps them).
        "service_provider_id": _s(req.service_provider_id),
        "service_provider_id_qualifier": _s(req.service_provider_id_qualifier),
        "cardholder_id": _s(req.cardholder_id),
        "person_code": _s(req.person_code),
        "prescriber_id": _s(tx.prescriber_id) if tx else "",
        "prescriber_id_qualifier": _s(tx.prescriber_id_qualifier) if tx else "",
        "days_supply": _s(claim_seg.get("D5")) if claim_seg else "",
        "fill_number": _s(claim_seg.get("D3")) if claim_seg else "",
        # 442-E7 (the doc says 422-E7).
        "quantity_dispensed": quantity,
        "transaction_response_status": _s(rtx.transaction_status) if rtx else "",
        "patient_age": age,
        "prescriber_fax": prescriber_fax,
    }


# --------------------------------------------------------------------------- reading answers


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
#: Path shapes that name the PA: the hosted page ``/request/view/{id}`` (interface
#: description), the request page ``/requests/{id}`` and its PDF
#: ``/api/requests/{id}/download`` (the callbacks' ``html_url`` and ``pdf_url``).
_PA_PATH_RES = (
    re.compile(r"/request/view/([A-Za-z0-9_-]+)/?$"),
    re.compile(r"/requests/([A-Za-z0-9_-]+)(?:/download)?/?$"),
)
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{2,64}$")


def _dedup(urls: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for u in urls:
        seen.setdefault(u, None)
    return tuple(seen)


def _is_http(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


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
        if _is_http(value) and not any(c.isspace() for c in value):
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


def pa_id_from_url(url: str) -> str | None:
    """The PA id a link names: the hosted page ``{portal}/request/view/{id}?token_id=``,
    the request page ``/requests/{id}``, its PDF ``/api/requests/{id}/download``, or a
    ``request={id}`` query parameter (thumbnails). None for any other link."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    for pattern in _PA_PATH_RES:
        m = pattern.search(parts.path)
        if m and _ID_RE.match(m.group(1)) and m.group(1) not in ("tokens", "search"):
            return m.group(1)
    for key, value in parse_qsl(parts.query):
        if key == "request" and _ID_RE.match(value):
            return value
    return None


def _url_rank(url: str) -> int:
    """Lower is better: the hosted page with its token, the hosted page, any page with a
    token, the request page, anything else; API, PDF and thumbnail links last."""
    parts = urlsplit(url)
    path = parts.path.lower()
    has_token = any(k == "token_id" for k, _ in parse_qsl(parts.query))
    if "/request/view/" in path:
        return 0 if has_token else 1
    if "thumbnail" in path or path.endswith("/download") or path.endswith(".pdf"):
        return 9
    if parts.netloc.lower().startswith("api.") or "/requests/tokens/" in path:
        return 8
    if has_token:
        return 2
    if pa_id_from_url(url):
        return 3
    return 5


def best_urls(urls: list[str]) -> tuple[str, ...]:
    """The links of the best kind present (see :func:`_url_rank`), in their order:
    several PAs give several links of the same kind, and all of them are kept."""
    unique = _dedup(urls)
    if not unique:
        return ()
    best = min(_url_rank(u) for u in unique)
    return tuple(u for u in unique if _url_rank(u) == best)


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
    return fmt, best_urls([u.rstrip(".,;)") for u in urls if _is_http(u)]), None


def _error_text(resp: httpx.Response) -> str:
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


_VARIABLE_RE = re.compile(r"\b(" + "|".join(_ALL_CLAIM_VARIABLES) + r")\b")


def _missing_variables(text: str) -> list[str]:
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


def _status_error(resp: httpx.Response, what: str, sent: Iterable[str] = ()) -> ServiceError:
    """Map a non-2xx answer to a typed error a pharmacist can act on. ``detail`` has
    the status and a short reason from the service's page with everything in ``sent``
    (the form we posted) cut out: never the service's body as it came."""
    status = resp.status_code
    text = _error_text(resp)
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
        missing = _missing_variables(text)
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


def _is_tls_failure(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError | ssl.CertificateError):
            return True
        text = str(cur)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _transport_error(exc: httpx.TransportError, what: str) -> ServiceError:
    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return ServiceTimeoutError(
            "The PA service did not answer in time. Try again in a moment.",
            detail=f"{name} talking to the {what}",
        )
    if _is_tls_failure(exc):
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


def _make_verify(verify: bool | str) -> bool | ssl.SSLContext:
    """httpx 0.28 deprecates ``verify=<path>``: build the context ourselves."""
    if isinstance(verify, str):
        import os

        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return verify


class _Deadline(Exception):
    pass


class _BadOutcome(Exception):
    pass


def _parse_outcome(content_type: str, body: bytes) -> tuple[str, str]:
    """(button_label, message) from a JSON or text outcomes answer."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadOutcome("bad_body: not UTF-8") from None
    ctype = content_type.split(";")[0].strip().lower()
    stripped = text.strip()
    if ctype == "application/json" or ctype.endswith("+json") or stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            raise _BadOutcome("bad_body: invalid JSON") from None
        if not isinstance(data, dict):
            raise _BadOutcome("bad_body: JSON is not an object")
        message = data.get("message")
        label = data.get("button_label", "")
        if label is None:
            label = ""
        if not isinstance(message, str) or not isinstance(label, str):
            raise _BadOutcome("bad_body: message or button_label is not a string")
    elif ctype in ("text/plain", "") and ";" in text:
        # Split at the FIRST ';' (the button text never contains one).
        label, message = text.split(";", 1)
        label = label.strip()
    else:
        raise _BadOutcome(f"bad_body: unexpected content type {ctype or 'none'}")
    # An empty message means "no replacement": the caller shows its own (unchanged).
    return label, message.strip()


# --------------------------------------------------------------------------- the client


class OutcomesCall:
    """An outcomes call under way (:meth:`PaServiceClient.start_outcomes`)."""

    def __init__(self, fallback_message: str, budget_ms: float) -> None:
        self.started = time.monotonic()
        self.deadline = self.started
        self.in_use: list[Any] = []
        self.future: concurrent.futures.Future[tuple[str, str]] | None = None
        self._fallback = fallback_message
        self._budget_ms = budget_ms
        self._result: OutcomeResult | None = None

    def fail(self, exc: BaseException) -> OutcomeResult:
        error = str(exc) if isinstance(exc, _Deadline | _BadOutcome) else _outcome_error(exc)
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
            if future is None:
                raise _BadOutcome("error: the call did not start")
            try:
                label, message = future.result(timeout=max(0.0, self.deadline - time.monotonic()))
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
        self._outcomes_url_parsed = httpx.URL(outcomes_url)
        self.dashboard_url = dashboard_url
        self.dashboard_login_url = dashboard_login_url or dashboard_url.rstrip("/") + "/login"
        self._username = username
        self._password = password
        self._api_key = api_key
        self.timeout_s = timeout_s
        ctx = _make_verify(verify)
        common: dict[str, Any] = {
            "verify": ctx,
            "follow_redirects": False,
            "headers": {"User-Agent": "pa-bridge"},
        }
        self._claim_http = httpx.Client(timeout=timeout_s, **common)
        self._outcomes_http = httpx.Client(
            timeout=1.5, limits=httpx.Limits(max_connections=outcomes_workers * 2), **common
        )
        self._dashboard_http = httpx.Client(timeout=timeout_s, **common)
        # The outcomes call's fast path (see _outcomes_http); httpx when a proxy applies.
        self._outcomes_fast: OutcomesHttp | None = None
        if direct_route(outcomes_url):
            fast_ctx = ctx if isinstance(ctx, ssl.SSLContext) else httpx.create_ssl_context(ctx)
            self._outcomes_fast = OutcomesHttp(
                outcomes_url,
                ssl_context=fast_ctx if outcomes_url.startswith("https") else None,
                headers={**_FORM_HEADERS, "User-Agent": "pa-bridge"},
            )
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=outcomes_workers, thread_name_prefix="pa-outcomes"
        )
        self._closed = False
        self._lock = threading.Lock()

    @property
    def api_key(self) -> str:
        """The outcomes/claim api_key (for :func:`outcome_variables`); never log it."""
        return self._api_key

    # -- lifecycle

    def close(self) -> None:
        """Stop the outcomes workers (each ends within its own budget) and the pools."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._claim_http.close()
        self._outcomes_http.close()
        if self._outcomes_fast is not None:
            self._outcomes_fast.close()
        self._dashboard_http.close()

    def __enter__(self) -> PaServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # no secrets
        return f"PaServiceClient(claim_url={self.claim_url!r}, username=<set>, api_key=<set>)"

    # -- claim interface

    def submit_claim(
        self, ncpdp_claim: bytes | str, metadata: ClaimMetadata | None = None
    ) -> ClaimResult:
        """POST a B1 (start a PA) or B2 (delete it) to the claim interface.

        Checks the payer-sheet minimum first (:class:`MissingClaimDataError`). B1 and B2
        are safe to retry: a duplicate is answered with the original PA. The claim goes
        out framed STX ... ETX (``claim_framing="stx_etx"``, as every reference claim
        is) or bare (``"none"``), whatever framing it came with.
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
        form = {
            "username": self._username,
            "password": self._password,
            "api_key": self._api_key,
            "ncpdp_claim": frame_claim(text, self.claim_framing),
            **md.as_form(),
        }
        started = time.monotonic()
        try:
            resp = self._claim_http.post(self.claim_url, data=form)
        except httpx.TransportError as exc:
            err = _transport_error(exc, "claim interface")
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
            err = _status_error(resp, "claim interface", form.values())
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
        ids = _dedup([i for i in (pa_id_from_url(u) for u in urls) if i])
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
            api_key=self._api_key,
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
            form.setdefault("api_key", self._api_key)
            if self._closed:
                raise _BadOutcome("closed: client is closed")
            call.future = self._pool.submit(self._outcomes_call, form, call.deadline, call.in_use)
        except Exception as exc:  # the contract is: never raise
            call.fail(exc)
        return call

    def _outcomes_call(
        self, form: dict[str, str], deadline: float, in_use: list[Any]
    ) -> tuple[str, str]:
        """Runs on a worker: every timeout is the remaining budget, and the deadline is
        checked between chunks, so an abandoned worker stops soon too."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline("deadline: budget spent before the call started")
        if self._outcomes_fast is not None:
            status, content_type, body = self._post_outcomes_fast(form, deadline, in_use)
        else:
            status, content_type, body = self._post_outcomes_httpx(form, deadline)
        if status != 200:
            raise _BadOutcome(f"http_status: HTTP {status}")
        return _parse_outcome(content_type, body)

    def _post_outcomes_fast(
        self, form: dict[str, str], deadline: float, in_use: list[Any]
    ) -> tuple[int, str, bytes]:
        assert self._outcomes_fast is not None
        try:
            return self._outcomes_fast.post(
                form_encode(form), deadline, limit=_OUTCOMES_BODY_LIMIT, started=in_use
            )
        except FastDeadline as exc:
            raise _Deadline(f"deadline: {exc}") from None
        except TooLarge:
            raise _BadOutcome("bad_body: answer too large") from None
        except TimeoutError:
            if time.monotonic() >= deadline - 0.005:
                raise _Deadline("deadline: no complete answer in time") from None
            raise _BadOutcome("timeout: ReadTimeout") from None
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise _Deadline("deadline: no complete answer in time") from None
            raise _BadOutcome(_outcome_error(exc)) from None

    def _post_outcomes_httpx(self, form: dict[str, str], deadline: float) -> tuple[int, str, bytes]:
        """The same through httpx (when a proxy applies): every httpx timeout is the
        remaining budget; the body is streamed and the deadline checked between chunks."""
        try:
            with self._outcomes_http.stream(
                "POST",
                self._outcomes_url_parsed,
                content=form_encode(form),
                headers=_FORM_HEADERS,
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
                        raise _BadOutcome("bad_body: answer too large")
                    if time.monotonic() > deadline:
                        raise _Deadline("deadline: answer still arriving at the deadline")
                return 200, resp.headers.get("content-type", ""), b"".join(chunks)
        except httpx.TransportError as exc:
            raise _BadOutcome(_outcome_error(exc)) from None

    # -- dashboard

    def dashboard_login(self) -> str:
        """POST username and plaintext_password; the token (never logged)."""
        try:
            resp = self._dashboard_http.post(
                self.dashboard_login_url,
                data={"username": self._username, "plaintext_password": self._password},
            )
        except httpx.TransportError as exc:
            err = _transport_error(exc, "dashboard login")
            log_event("service.dashboard_login_failed", level=logging.WARNING, reason=err.code)
            raise err from None
        if not 200 <= resp.status_code < 300:
            err = _status_error(
                resp, "dashboard login", (self._username, self._password, self._api_key)
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


def _outcome_error(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {type(exc).__name__}"
    if isinstance(exc, httpx.TransportError | OSError | http.client.HTTPException):
        if _is_tls_failure(exc):
            return "tls: TLS failure"
        return f"unreachable: {type(exc).__name__}"
    return f"error: {type(exc).__name__}"
