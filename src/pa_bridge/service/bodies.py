"""Every request and response body of the local API (``/v1/...``), defined once.

UseCases take and return these models, the views dump them, and the OpenAPI
components are generated from them (web/openapi.py). Field order is the order of the
keys in the answers; a field left out when it does not apply is ``None`` here and
dropped by :func:`dump` (``exclude_none``) for the answers that do so (the claim
answer); the PA answers keep their nulls.

Request bodies check their fields in order; :func:`read` says the first field that is
not what it should be as an ``InvalidRequest`` with its code (``invalid_body``; NCPDP
that does not parse is ``malformed_claim``, with where in its ``detail``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_serializer,
    model_validator,
)
from typing_extensions import TypedDict

import ncpdp

from ..client import FALLBACK_REASONS
from ..pa_guide import ATTENTION_ORDER
from ..pa_rules import WORKFLOW_RANK
from ._parse import invalid, parse_transmission
from .errors import InvalidRequest

__all__ = [
    "AcknowledgeAnswer",
    "DashboardQuery",
    "KeyHeader",
    "PaFeedQuery",
    "PharmacyQuery",
    "AcknowledgeBody",
    "Acknowledgement",
    "Claim",
    "ClaimAnswer",
    "ClaimTransactionPa",
    "ClaimExchange",
    "ConsoleClaim",
    "ConsolePa",
    "Error",
    "ErrorInfo",
    "Event",
    "Health",
    "HistoryEntry",
    "Pa",
    "PaLinks",
    "PaList",
    "PaWithHistory",
    "Reversal",
    "ReversalAnswer",
    "ReversalPa",
    "SubmitPa",
    "TransactionAnswer",
    "WebhookChange",
    "Worklist",
    "WorklistClaim",
    "WorklistItem",
    "WorklistPa",
    "dump",
    "read",
]


_Body_T = TypeVar("_Body_T", bound=BaseModel)


def read(model: type[_Body_T], data: Any) -> _Body_T:
    """``data`` as ``model``, or :class:`InvalidRequest` for its first field that is not
    what it should be (its code, message and detail as the validator said them)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        ctx = first.get("ctx") or {}
        raise InvalidRequest(
            first["type"] if "message" in ctx else "invalid_body",
            str(ctx.get("message") or first["msg"]),
            ctx.get("detail"),
        ) from None


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON-ready dict of an answer: the claim answers leave out what does not
    apply, the others keep their nulls."""
    return model.model_dump(exclude_none=isinstance(model, ClaimAnswer | TransactionAnswer))


# ---- what a request says besides its body -------------------------------------------------
def _text(description: str, **schema: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "minLength": 1, **schema, "description": description})


class KeyHeader(BaseModel):
    """The ``Idempotency-Key`` header of the POSTs (decision 0017)."""

    idempotency_key: Annotated[
        str | None,
        _text(
            "Send the same key again (a UUID, 1-255 printable ASCII characters) when"
            " re-sending the same request: the first request's answer comes back, with its"
            " status (header `Idempotent-Replayed: true`), and nothing is done twice. The"
            " same key with other content, or on another path, is a 422"
            " `idempotency_key_reused`.",
            maxLength=255,
            pattern="^[!-~]+$",
        ),
    ] = Field(default=None, alias="Idempotency-Key")


_PHARMACY = (
    "a chain's store: only the claims and PAs of this provider id (201-B1); a token limited"
    " to other stores is refused"
)


class PharmacyQuery(BaseModel):
    """``?pharmacy=``: one store of a chain."""

    pharmacy: Annotated[str | None, _text(_PHARMACY)] = None


class DashboardQuery(BaseModel):
    """``GET /v1/dashboard/open``."""

    pharmacy: Annotated[
        str | None,
        _text(
            "a chain's store (provider id) to log in as: required when several are"
            " configured, unless the token is limited to one"
        ),
    ] = None


class PaFeedQuery(BaseModel):
    """``GET /v1/pa``."""

    since: Annotated[
        str | None,
        _text(
            "a `cursor` from an earlier answer: only PAs changed after it (a cursor beyond"
            " the newest change is a 400 naming the newest, `detail.newest_cursor`)"
        ),
    ] = None
    limit: Annotated[
        int,
        WithJsonSchema(
            {
                "type": "integer",
                "minimum": 1,
                "default": 100,
                "description": "at most this many; more than 1000 is taken as 1000",
            }
        ),
    ] = 100
    pharmacy: Annotated[
        str | None, _text(_PHARMACY + "; the cursor never skips one of its changes")
    ] = None
    claim_id: Annotated[
        str | None,
        _text(
            "only this claim's PAs (as in GET /v1/claims/{claim_id}); `since` and `limit`"
            " do not apply"
        ),
    ] = None


# ---- request bodies ---------------------------------------------------------------------
def _request(value: Any) -> ncpdp.Transmission:
    return parse_transmission(value, "request", want="request")[0]


def _response(value: Any) -> ncpdp.Transmission:
    return parse_transmission(value, "response", want="response")[0]


def _as_sent(value: Any) -> Any:
    return value


def _metadata(value: Any) -> dict[str, Any]:
    value = value or {}
    if not isinstance(value, dict):
        raise invalid("invalid_body", "'metadata' must be an object")
    return value


RawRequest = Annotated[
    ncpdp.Transmission,
    PlainValidator(_request),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "description": "the raw NCPDP request (separators as \\u001e \\u001c \\u001d)",
        }
    ),
]
RawResponse = Annotated[
    ncpdp.Transmission,
    PlainValidator(_response),
    WithJsonSchema({"type": "string", "minLength": 1, "description": "the raw NCPDP response"}),
]
RawReversal = Annotated[
    ncpdp.Transmission,
    PlainValidator(_request),
    WithJsonSchema({"type": "string", "minLength": 1, "description": "the raw NCPDP B2"}),
]
#: the transaction index of a submit, taken as sent: the use case checks it against
#: the claim (after finding the claim, as it always has)
TransactionIndex = Annotated[
    Any,
    PlainValidator(_as_sent),
    WithJsonSchema(
        {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "which transaction of the claim",
        }
    ),
]
MetadataOverride = Annotated[
    Any,
    PlainValidator(_as_sent),
    WithJsonSchema(
        {
            "type": "object",
            "description": "metadata overriding what came with the claim",
            "additionalProperties": True,
        }
    ),
]
MessageSource = Literal["outcomes", "fallback", "payer"]
FallbackReason = Annotated[
    str,
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": [*FALLBACK_REASONS, "http_status", "not_recorded"]},
                {"type": "string", "pattern": "^http_[1-5][0-9][0-9]$"},
            ]
        }
    ),
]

#: the outcomes the service reports (its OUTCOME enumeration)
PLAN_OUTCOMES = ("Favorable", "Unfavorable", "Cancelled", "Pending", "Unknown", "Unsent", "N/A")
#: PA events kept from callbacks
EVENT_TYPES = ("DELETE", "REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE")


def _open_enum(values: tuple[str, ...] | list[str], description: str) -> WithJsonSchema:
    """One of ``values``, or null, or (should the service add one) another string:
    pa-bridge passes the service's values on unchanged, so the enum is open."""
    return WithJsonSchema(
        {"anyOf": [{"enum": [*values, None]}, {"type": "string"}], "description": description}
    )


WorkflowStatus = Annotated[
    str | None,
    _open_enum(
        list(WORKFLOW_RANK),
        "the service's workflow status (both workflows of its interface); null before the"
        " first callback of a PA we did not start. A status the service adds later is"
        " passed on as it is.",
    ),
]
PlanOutcome = Annotated[
    str | None,
    _open_enum(
        PLAN_OUTCOMES,
        "the plan's determination: Favorable approved, Unfavorable denied, Cancelled,"
        " Pending (plan working), Unknown (no determination), Unsent (archived before"
        " sending), N/A (PA not required); null not yet sent",
    ),
]
EventType = Annotated[
    str,
    WithJsonSchema(
        {
            "anyOf": [{"enum": list(EVENT_TYPES)}, {"type": "string"}],
            "description": "DELETE: the PA was deleted (its claim reversed);"
            " REQUEST_FAX_FAILED / REQUEST_FAX_FAILURE: the fax to the prescriber failed",
        }
    ),
]


class _Body(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _every_field(cls, data: Any) -> Any:
        """A missing field is checked like a null one, in field order."""
        if not isinstance(data, dict):
            raise invalid("invalid_body", "the body must be a JSON object")
        return {name: data.get(name) for name in cls.model_fields}


class ClaimExchange(_Body):
    """``POST /v1/claims``: the exchange the dispensing system had with the payer."""

    request: RawRequest
    response: RawResponse
    metadata: Annotated[
        dict[str, Any],
        PlainValidator(_metadata),
        WithJsonSchema(
            {
                "type": "object",
                "description": "dispensing-system metadata passed on when a PA is submitted "
                "(physician, plan, preferred product, BIN/PCN/group overrides)",
                "additionalProperties": True,
            }
        ),
    ] = Field(default_factory=dict)


class Reversal(_Body):
    """``POST /v1/reversals``."""

    request: RawReversal


class SubmitPa(_Body):
    """``POST /v1/claims/{claim_id}/pa`` (the body may be empty)."""

    transaction: TransactionIndex = 0
    metadata: MetadataOverride = None

    @model_validator(mode="before")
    @classmethod
    def _every_field(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise invalid("invalid_body", "the body must be a JSON object or empty")
        return {"transaction": data.get("transaction", 0), "metadata": data.get("metadata")}


# ---- claim answers ----------------------------------------------------------------------
class _ClaimId(BaseModel):
    claim_id: str


class _Index(BaseModel):
    index: int = Field(ge=0)


class _Transaction(BaseModel):
    transaction_status: str
    reject_codes: list[str]
    pa_eligible: bool
    message: str = Field(description="the message to show the pharmacist")
    button_label: str = Field(description="empty: show no submit-PA button")
    message_source: MessageSource
    fallback_reason: FallbackReason | None = Field(
        default=None,
        description="with message_source fallback only: why the outcomes call failed"
        " (timeout: no answer within the budget; http_<status>, e.g. http_500: another"
        " status than 200, also in fallback_http_status; refused: connection refused;"
        " unreachable: no connection; tls; unreadable: a 200 that is not an outcomes"
        " answer; error; not_recorded: a replayed Idempotency-Key whose first answer was"
        " not recorded, rebuilt from the stored claim)",
    )
    fallback_http_status: int | None = Field(
        default=None, description="with an http_<status> fallback_reason: the status"
    )
    outcomes_elapsed_ms: float | None = Field(
        default=None, ge=0, description="time the outcomes call took (70/75/76 rejects only)"
    )


class TransactionAnswer(_Transaction, _Index):
    """The answer for one transaction of a claim."""


class ClaimAnswer(_Transaction, _ClaimId):
    """``POST /v1/claims``: the first transaction's answer at the top level."""

    transactions: list[TransactionAnswer] | None = Field(
        default=None, description="one per transaction, when the claim has several"
    )
    tolerated: list[str] | None = Field(
        default=None, description="deviations from the standard the parser tolerated"
    )
    elapsed_ms: float = Field(ge=0)
    _text: str | None = PrivateAttr(default=None)

    def json_text(self) -> str:
        """The answer as compact JSON, made once: the body the API sends (as Flask's
        ``jsonify`` would) and the record the store keeps."""
        if self._text is None:
            # pydantic's serializer writes the same compact JSON, but non-ASCII text
            # and DEL as they are where json.dumps escapes them, and a float under 1e-4
            # without an exponent: only answers free of these take the fast way
            text = self.model_dump_json(exclude_none=True)
            floats = [self.elapsed_ms, self.outcomes_elapsed_ms]
            floats += [t.outcomes_elapsed_ms for t in self.transactions or ()]
            if not text.isascii() or "\x7f" in text or _tiny(*floats):
                text = json.dumps(dump(self), separators=(",", ":"))
            self._text = text
        return self._text


def _tiny(*values: float | None) -> bool:
    return any(v is not None and 0 < abs(v) < 1e-4 for v in values)


# ---- PAs --------------------------------------------------------------------------------
class PaLinks(TypedDict, total=False):
    """Links from the PA's callbacks, each only when known."""

    html_url: str
    pdf_url: str
    token_urls: list[str]


class Event(TypedDict):
    """An event a callback reported (type and time only: remote_user may name a person)."""

    type: EventType
    time: Annotated[
        str | None, Field(description="as the service sent it (ISO 8601, or not a time at all)")
    ]


class Pa(BaseModel):
    pa_id: str
    claim_id: str | None
    transaction_index: int | None
    rx_number: str | None = Field(
        default=None,
        description="402-D2 of the claim the PA was submitted for (null for a PA known only"
        " from its callbacks, or submitted before pa-bridge kept it)",
    )
    product_id: str | None = Field(
        default=None,
        description="407-D7 (the NDC) of that claim; for a PA known only from its callbacks,"
        " the callback's 11-digit prescription.ndc, else null",
    )
    provider_id: str | None = Field(
        default=None,
        description="the pharmacy: 201-B1 (service provider id) of that claim; for a PA"
        " known only from its callbacks, the [[pharmacies]] store its callback's pharmacy"
        " block names (ncpdpid or npi), else null",
    )
    urls: list[str] = Field(
        description="the PA's links: those the claim interface answered, then the token "
        "links its callbacks brought"
    )
    url: str | None = Field(
        description="the link to open: the hosted page with its token when known; null "
        "while the link is on its way (empty-format answer, callback not yet in)"
    )
    links: PaLinks = Field(description="links from the PA's callbacks")
    link_pending: bool = Field(
        description="PA started, link on its way (it comes with the PA's callback)"
    )
    open_url: str = Field(description="GET it to be redirected to the PA")
    workflow_status: WorkflowStatus
    plan_outcome: PlanOutcome
    status: WorkflowStatus = Field(description="the same as workflow_status")
    deleted: bool = Field(
        description="a DELETE event arrived, or the service no longer returns the PA"
        " (`gone`): either way it is deleted"
    )
    fax_failed: bool
    events: list[Event]
    matched: bool
    created_at: str
    updated_at: str
    cursor: str
    gone: bool = Field(
        default=False,
        description="reconciliation found that the service no longer returns the PA (no"
        " access token left): effectively deleted; false again if it comes back",
    )
    expires_at: str | None = Field(
        default=None,
        description="the last day of the approval (`authorization_period.expiration_date`"
        " as YYYY-MM-DD), null when the service gave none",
    )
    expiring: bool = Field(
        default=False,
        description="the approval ends within `[worklist] expiring_days` and no renewal"
        " is known: announced once by a `pa.expiring` webhook and feed entry",
    )
    renewal_of: str | None = Field(
        default=None, description="the PA this one renews (`is_renewal`), if known"
    )
    renewed_by: str | None = Field(default=None, description="a PA that renews this one, if known")
    provisional_id: str | None = Field(
        default=None,
        description="the `pending-` id Submit PA answered when the service's answer named"
        " no PA (its empty format), before the PA's first callback brought the service's"
        " id; `GET /v1/pa/{provisional_id}` (and `/open`) still answer for the PA, under"
        " its `pa_id`. Null for a PA whose id was known from the start",
    )


class HistoryEntry(BaseModel):
    received_at: str
    source: Literal["submit", "callback", "reversal", "reconcile", "expiring"] = Field(
        description="what made the entry: reconcile, a change the callbacks missed, found"
        " by reading the PA back from the service (applied as its callback would have"
        " been); expiring, the approval entered the expiring window"
    )
    workflow_status: WorkflowStatus
    plan_outcome: PlanOutcome
    event_time: str | None
    events: list[Event]
    note: str | None


class PaWithHistory(Pa):
    """``GET /v1/pa/{pa_id}``: the PA and everything that happened to it, in arrival order."""

    history: list[HistoryEntry]


class PaList(BaseModel):
    """``GET /v1/pa``: the feed."""

    pas: list[Pa]
    cursor: str = Field(description="pass as `since` for later changes")


# ---- reversals, errors ------------------------------------------------------------------
class ReversalPa(BaseModel):
    """A PA the service deletes for a reversal."""

    pa_id: str
    workflow_status: WorkflowStatus
    deleted: bool = Field(description="true once its DELETE event has arrived by callback")


class ReversalAnswer(BaseModel):
    reversal_id: str
    queue_id: int
    status: Literal["delivered", "pending", "failed"] = Field(
        description="delivered: the service took it; pending: queued, retried until it"
        " does; failed (in a 422 reversal_refused's detail): refused for good"
    )
    last_error: str | None
    pa_found: bool = Field(description="whether pa-bridge holds a PA for the reversed claim")
    pas: list[ReversalPa] = Field(
        description="the PAs pa-bridge holds for the reversed claim (by claim key): the"
        " service deletes them"
    )
    message: str = Field(description="what happened, in plain words")


# ---- claims and webhooks (issue 16) -------------------------------------------------------
class ClaimTransactionPa(BaseModel):
    index: int = Field(ge=0)
    pa_id: str | None


class Claim(BaseModel):
    """``GET /v1/claims/{claim_id}``: the answer given, and the claim's PA(s)."""

    claim_id: str
    received_at: str
    transaction_code: str | None
    transaction_count: int = Field(ge=1)
    provider_id: str | None = Field(
        default=None, description="the pharmacy: 201-B1 (service provider id) of the claim"
    )
    answer: ClaimAnswer | None = Field(
        description="the answer given (null for a moment after it is sent)"
    )
    transactions: list[ClaimTransactionPa]
    pa: Pa | None = Field(description="its PA, if any (the first of `pas`)")
    pas: list[Pa] = Field(
        description="per transaction that has one: the PA submitted from it, or the live PA"
        " of the same claim key (BIN, PCN, group, Rx number, fill number, provider)"
        " submitted from another exchange"
    )

    @field_serializer("answer", mode="wrap")
    def _answer_as_given(self, value: ClaimAnswer | None, handler: Any) -> Any:
        """The answer as the claim's answer is sent: what does not apply left out."""
        return None if value is None else dump(value)


class WebhookChangeInfo(BaseModel):
    received_at: str | None = None
    source: Literal["callback", "reconcile", "expiring"] = Field(
        default="callback",
        description="callback; reconcile (the same change, found by reading the PA back"
        " from the service: handle it exactly as a callback's); expiring (`pa.expiring`)",
    )
    workflow_status: WorkflowStatus = None
    plan_outcome: PlanOutcome = None
    event_time: str | None = None
    events: list[Event] = Field(default_factory=list)


class WebhookChange(BaseModel):
    """One change of one PA, POSTed to ``callbacks.forward_url`` (decision 0018)."""

    delivery_id: str = Field(description="the same on every retry of this change")
    event: Literal["pa.changed", "pa.expiring"] = Field(
        description="pa.changed: the PA changed; pa.expiring: its approval entered the"
        " expiring window (once per PA and end date)"
    )
    pa_id: str
    cursor: str = Field(description="the feed cursor of this change")
    change: WebhookChangeInfo = Field(description="what this callback said")
    pa: Pa = Field(description="the PA as it was right after this change")


class ErrorInfo(BaseModel):
    code: str = Field(description="stable, machine-readable")
    message: str = Field(description="for a person to act on")
    detail: Any = Field(description="more about it: any JSON value, or null")


class Error(BaseModel):
    """Every error body. `detail` is never PHI and never a secret."""

    error: ErrorInfo


# ---- health, and the console's answers (issue 31: each its model) ------------------------
Tone = Literal["ok", "warn", "bad", "info"]
Attention = Annotated[
    str,
    WithJsonSchema(
        {
            "enum": list(ATTENTION_ORDER),
            "description": "why it needs the pharmacist (the worklist's groups, in this order)",
        }
    ),
]


class HealthReconcile(BaseModel):
    enabled: bool
    off_reason: str | None = None
    last_complete_at: str | None = None
    last_changes: int | None = Field(
        default=None, description="changes it found: non-zero means callbacks are lost"
    )
    last_pass_complete: bool | None = None


class Health(BaseModel):
    """``GET /healthz``. The daemon adds its own checks; every boolean must be true."""

    model_config = ConfigDict(extra="allow")

    status: Literal["ok", "degraded", "unavailable"] = Field(
        description="degraded (200): it works, but `degraded` lists what needs store IT;"
        " unavailable (503): a check is false"
    )
    degraded: list[str] | None = Field(
        default=None,
        description="service_unreachable, service_credentials_refused, queue_failed,"
        " queue_held_after_restore, queue_held_for_configuration, callbacks_lost (the last"
        " reconciliation pass found changes the callbacks missed), reconcile_incomplete,"
        " callbacks_certificate_expired, callbacks_certificate_expiring (and tap_,"
        " inline_, inline_switch_client_ for those certificates) (docs/operations.md)",
    )
    database: bool
    queue_depth: int | None = Field(ge=0, description="null while the queue cannot be read")
    queue_oldest_age_s: float | None = None
    queue_held_for: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        description="held queue items by why they wait: restore (for review after a"
        " restore), configuration (refused for pa-bridge's credentials or configuration:"
        " retried at the next start or reload), pharmacy (a store this daemon does not"
        " list: left for a daemon that does)",
    )
    scheduler: bool | None = None
    writer: bool | None = None
    callbacks: bool | None = Field(
        default=None, description="the callback listener's process is running"
    )
    daemon_id: str | None = Field(
        default=None,
        description="host:pid of the daemon that answered (several daemons may share one"
        " PostgreSQL database)",
    )
    database_engine: Literal["sqlite", "postgresql"] | None = None
    reconcile: HealthReconcile | None = Field(
        default=None,
        description="reading PAs back from the service (issue 28): the fleet's last complete pass",
    )
    callbacks_certificate_expires_at: str | None = Field(
        default=None,
        description="when the callback listener's TLS certificate expires (with"
        " `callbacks.tls_cert`)",
    )
    tap_certificate_expires_at: str | None = Field(
        default=None, description="when the tap listener's TLS certificate expires"
    )
    inline_certificate_expires_at: str | None = Field(
        default=None, description="when the inline listener's TLS certificate expires"
    )
    inline_switch_client_certificate_expires_at: str | None = Field(
        default=None,
        description="when inline's client certificate to the switch expires",
    )
    wire: bool | None = Field(
        default=None, description="the tap and inline listeners' event loop runs"
    )


class AcknowledgeBody(BaseModel):
    """``POST /v1/pa/{pa_id}/acknowledge``'s optional body."""

    cursor: str | None = Field(
        default=None, description="the PA's `cursor` as the pharmacist's page showed it"
    )


class Acknowledgement(BaseModel):
    at: str = Field(description="when (UTC)")
    by: str = Field(
        description="who: `token#N` (the N-th `[intake] tokens` entry), or `console` on"
        " loopback with no tokens"
    )
    attention: Attention | None
    cursor: str | None = Field(description="the PA's cursor acknowledged: the one the page showed")


class AcknowledgeAnswer(BaseModel):
    """``POST /v1/pa/{pa_id}/acknowledge``."""

    pa_id: str
    acknowledged: Acknowledgement


class NamedLink(BaseModel):
    href: str
    label: str = Field(description="what it opens: which PA, its page or PDF, a token or not")


class WorklistPa(BaseModel):
    """A PA as the console shows it: its status in words, no patient data."""

    model_config = ConfigDict(extra="allow")

    pa_id: str
    claim_id: str | None = None
    transaction_index: int | None = None
    workflow_status: str | None
    plan_outcome: str | None
    deleted: bool
    fax_failed: bool
    open_url: str
    url: str | None
    created_at: str | None = None
    updated_at: str | None = None
    cursor: str | None = None
    rx_number: str | None = None
    product_id: str | None = None
    label: str = Field(description="the status in a pharmacist's words")
    meaning: str = Field(description="what it means")
    next_step: str = Field(description="what to do next")
    tone: Tone
    attention: Attention | None = Field(
        description="the worklist group its latest state puts it in (null: nothing to do):"
        " deleted; else a fax failure no later status has followed; else its current"
        " status's group; else waiting too long"
    )
    notes: list[str] = Field(
        default_factory=list,
        description="what the label does not say already (a fax failure a later status"
        " superseded); never the label again",
    )
    news_cursor: str | None = Field(
        default=None,
        description="the cursor of its latest news (a new status or outcome, an event not"
        " seen before): an acknowledgement of an older cursor no longer holds",
    )
    provisional_id: str | None = Field(
        default=None,
        description="the provisional `pending-...` id a submit answered before the PA's"
        " first callback (it still finds the PA)",
    )
    drug_name: str | None = Field(
        default=None, description="name and strength, from the service's callbacks"
    )
    expiration_date: str | None = Field(
        default=None,
        description="end of the approval period (`authorization_period`), as the service"
        " wrote it; null unless the PA's latest state is an approval",
    )
    effective_date: str | None = None
    expires_at: str | None = Field(default=None, description="the approval's last day, YYYY-MM-DD")
    days_left: int | None = Field(
        default=None, description="days until the approval ends (negative: ended)"
    )
    renewal_of: str | None = Field(default=None, description="the PA this one renews")
    renewed_by: str | None = Field(default=None, description="a PA renewing this one")
    gone: bool = Field(
        default=False, description="the service no longer returns it: effectively deleted"
    )
    is_epa: bool | None = Field(default=None, description="ePA or classic (fax)")
    page_url: str = Field(description="the PA's console page")
    acknowledged: Acknowledgement | None = None
    other_links: list[NamedLink] | None = Field(
        default=None, description="(a PA's page) every link but `url`, named for what it opens"
    )
    groups: dict[str, str] | None = Field(
        default=None, description="(a PA's page) each group's words, by key"
    )


class WorklistClaim(BaseModel):
    """A claim rejected for PA, as the console shows it."""

    key: str = Field(description="claim_id:transaction_index")
    claim_id: str
    transaction_index: int = Field(ge=0)
    received_at: str
    rx_number: str | None
    product_id: str | None
    reject_codes: list[str]
    message: str | None
    button_label: str
    message_source: MessageSource | None
    fallback_reason: FallbackReason | None = Field(
        default=None,
        description="why the outcomes message is missing, when the answer recorded it",
    )
    pa: WorklistPa | None
    pa_via: Literal["claim", "claim_key"] | None = Field(
        default=None, description="`claim_key`: the PA of the same claim sent earlier"
    )


class WorklistItem(BaseModel):
    attention: Attention
    key: str = Field(description="`claim:<key>` or `pa:<pa_id>`")
    since: str | None = Field(description="received or last changed")
    claim: WorklistClaim | None
    pa: WorklistPa | None
    returned: bool = Field(
        default=False,
        description="acknowledged before, and back: news since, or another group",
    )


class StatusGuide(BaseModel):
    """One status the service can report (or an event), in words."""

    workflow_status: str | None
    plan_outcome: str | None
    event: str | None = None
    label: str
    meaning: str
    next_step: str
    tone: Tone
    attention: Attention | None = None
    overdue: str | None = Field(
        default=None,
        description="what to do when it has waited too long (null: the general words)",
    )


class WorklistGroup(BaseModel):
    key: Attention
    title: str
    words: str = Field(description="the group in a few words")
    tone: Tone
    count: int = Field(ge=0)


class PharmacyChoice(BaseModel):
    provider_id: str
    name: str | None


class Worklist(BaseModel):
    """``GET /v1/console/worklist``: what the console shows. No patient names, dates of
    birth or cardholder ids, only Rx number, product id and drug name."""

    generated_at: str
    day_start: str = Field(description="local midnight, in UTC")
    pending_alert_hours: float
    counts: dict[str, int] = Field(description="items per group, and `total`")
    groups: list[WorklistGroup]
    items: list[WorklistItem] = Field(description="what needs the pharmacist, most urgent first")
    claims: list[WorklistClaim]
    pas: list[WorklistPa]
    guide: list[StatusGuide]
    pharmacy: str | None = Field(description="the one store shown (a chain), else null")
    pharmacies: list[PharmacyChoice] = Field(
        default_factory=list,
        description="a chain's stores the token may choose between (empty for a single store)",
    )


class ConsoleClaim(BaseModel):
    """The claim a PA came from (BIN, PCN and group identify the plan, not the patient)."""

    claim_id: str
    transaction_index: int
    received_at: str
    transaction_code: str | None
    bin: str | None
    pcn: str | None
    group_id: str | None
    rx_number: str | None
    product_id: str | None
    reject_codes: list[str]
    message: str | None
    message_source: MessageSource | None
    fallback_reason: FallbackReason | None = None
    purged: bool


class ConsolePa(BaseModel):
    """``GET /v1/console/pa/{pa_id}``: one PA for its console page. No patient data."""

    generated_at: str
    pa: WorklistPa
    claim: ConsoleClaim | None = Field(
        description="the claim it came from (null for a PA known only from callbacks)"
    )
    history: list[HistoryEntry]
    events: list[Event]
    acknowledgements: list[Acknowledgement]
