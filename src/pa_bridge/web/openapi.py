"""OpenAPI 3.1 description of the local API (the intake listener), served at
``GET /openapi.json``.

``tests/test_openapi.py`` keeps it true: every route of the intake app is here and
every path here is a route, and real answers validate against these schemas.
"""

from __future__ import annotations

import copy
from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from .. import __version__
from ..pa_guide import ATTENTION_ORDER
from ..service import bodies
from . import people

__all__ = ["bp", "document"]

bp = Blueprint("openapi", __name__)

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


#: Every operation may answer these (auth, oversized body, storage, unexpected).
_DEFAULT_ERROR = _error(
    "An error: 401 without a valid token, 403 for a cross-site request or a host name"
    " not allowed (`intake.allowed_hosts`), 405 for a method the path does not take (with"
    " `Allow` naming those it does), 413 for an oversized body, 415 for a body that is"
    " not JSON, 503 when the database cannot be used, ..."
)

#: the body limit's default (``intake.max_body_bytes``); the served document names the
#: configured one
DEFAULT_MAX_BODY_BYTES = 1_048_576

_UNAUTHORIZED = {
    **_error("no valid `Authorization: Bearer <token>` (only when `intake.tokens` is configured)"),
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
}


def _too_large(limit: int) -> dict[str, Any]:
    return _error(
        f"the body is larger than `intake.max_body_bytes` ({limit} bytes on this server);"
        " `detail.max_body_bytes` says the limit"
    )


_NULLABLE_STR = {"type": ["string", "null"]}

#: The bodies' schemas, generated from the models the services take and return (one
#: definition of every body). Serialization mode for answers, validation for requests.
_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (bodies.Error, "serialization"),
    (bodies.ClaimExchange, "validation"),
    (bodies.TransactionAnswer, "serialization"),
    (bodies.ClaimAnswer, "serialization"),
    (bodies.SubmitPa, "validation"),
    (bodies.Pa, "serialization"),
    (bodies.PaWithHistory, "serialization"),
    (bodies.PaList, "serialization"),
    (bodies.Reversal, "validation"),
    (bodies.ReversalAnswer, "serialization"),
    (bodies.Claim, "serialization"),
    (bodies.WebhookChange, "serialization"),
]


def _generated() -> dict[str, Any]:
    _, top = models_json_schema(_MODELS, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = top["$defs"]
    return schemas


#: Still written by hand: the health answer (the daemon adds its own checks to it) and
#: the console's worklist.
_SCHEMAS: dict[str, Any] = {
    **_generated(),
    "Health": {
        "type": "object",
        "required": ["status", "database", "queue_depth"],
        "properties": {
            "status": {
                "enum": ["ok", "degraded", "unavailable"],
                "description": "degraded (200): it works, but `degraded` lists what needs"
                " store IT; unavailable (503): a check is false",
            },
            "degraded": {
                "type": "array",
                "items": {"type": "string"},
                "description": "service_unreachable, service_credentials_refused,"
                " queue_failed, queue_held_after_restore, queue_held_for_configuration,"
                " callbacks_lost (the last reconciliation pass found changes the callbacks"
                " missed), reconcile_incomplete (docs/operations.md)",
            },
            "database": {"type": "boolean"},
            "queue_depth": {"type": ["integer", "null"], "minimum": 0},
            "queue_oldest_age_s": {"type": ["number", "null"]},
            "queue_held_for": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
                "description": "held queue items by why they wait: restore (for review"
                " after a restore), configuration (refused for pa-bridge's credentials or"
                " configuration: retried at the next start or reload), pharmacy (a store"
                " this daemon does not list: left for a daemon that does)",
            },
            "scheduler": {"type": "boolean"},
            "writer": {"type": "boolean"},
            "callbacks": {
                "type": "boolean",
                "description": "the callback listener's process is running",
            },
            "daemon_id": {
                "type": "string",
                "description": "host:pid of the daemon that answered (several daemons"
                " may share one PostgreSQL database)",
            },
            "database_engine": {"enum": ["sqlite", "postgresql"]},
            "reconcile": {
                "type": "object",
                "description": "reading PAs back from the service (issue 28): the fleet's"
                " last complete pass",
                "properties": {
                    "enabled": {"type": "boolean"},
                    "off_reason": _NULLABLE_STR,
                    "last_complete_at": _NULLABLE_STR,
                    "last_changes": {
                        "type": ["integer", "null"],
                        "description": "changes it found: non-zero means callbacks are lost",
                    },
                    "last_pass_complete": {"type": ["boolean", "null"]},
                },
            },
        },
        "additionalProperties": True,
    },
    "WorklistPa": {
        "type": "object",
        "required": [
            "pa_id",
            "workflow_status",
            "plan_outcome",
            "deleted",
            "fax_failed",
            "open_url",
            "url",
            "label",
            "meaning",
            "next_step",
            "tone",
            "attention",
            "page_url",
        ],
        "properties": {
            "pa_id": {"type": "string"},
            "claim_id": _NULLABLE_STR,
            "transaction_index": {"type": ["integer", "null"]},
            "workflow_status": _NULLABLE_STR,
            "plan_outcome": _NULLABLE_STR,
            "deleted": {"type": "boolean"},
            "fax_failed": {"type": "boolean"},
            "open_url": {"type": "string"},
            "url": _NULLABLE_STR,
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
            "cursor": {"type": "string"},
            "rx_number": _NULLABLE_STR,
            "product_id": _NULLABLE_STR,
            "label": {"type": "string", "description": "the status in a pharmacist's words"},
            "meaning": {"type": "string", "description": "what it means"},
            "next_step": {"type": "string", "description": "what to do next"},
            "tone": {"enum": ["ok", "warn", "bad", "info"]},
            "attention": {
                "oneOf": [_ref("Attention"), {"type": "null"}],
                "description": "the worklist group its latest state puts it in (null: nothing"
                " to do): deleted; else a fax failure no later status has followed; else its"
                " current status's group; else waiting too long",
            },
            "notes": {
                "type": "array",
                "items": {"type": "string"},
                "description": "what the label does not say already (a fax failure a later"
                " status superseded); never the label again",
            },
            "news_cursor": {
                "type": "string",
                "description": "the cursor of its latest news (a new status or outcome, an"
                " event not seen before): an acknowledgement of an older cursor no longer"
                " holds",
            },
            "provisional_id": _NULLABLE_STR,
            "drug_name": {
                "type": ["string", "null"],
                "description": "name and strength, from the service's callbacks",
            },
            "expiration_date": {
                "type": ["string", "null"],
                "description": "end of the approval period (`authorization_period`), as the "
                "service wrote it; null unless the PA's latest state is an approval",
            },
            "effective_date": _NULLABLE_STR,
            "expires_at": {
                "type": ["string", "null"],
                "description": "the approval's last day, YYYY-MM-DD",
            },
            "days_left": {
                "type": ["integer", "null"],
                "description": "days until the approval ends (negative: ended)",
            },
            "renewal_of": {"type": ["string", "null"], "description": "the PA this one renews"},
            "renewed_by": {"type": ["string", "null"], "description": "a PA renewing this one"},
            "gone": {
                "type": "boolean",
                "description": "the service no longer returns it: effectively deleted",
            },
            "is_epa": {"type": ["boolean", "null"], "description": "ePA or classic (fax)"},
            "page_url": {"type": "string", "description": "the PA's console page"},
            "acknowledged": {"oneOf": [_ref("Acknowledgement"), {"type": "null"}]},
            "other_links": {
                "type": "array",
                "description": "(a PA's page) every link but `url`, named for what it opens",
                "items": {
                    "type": "object",
                    "required": ["href", "label"],
                    "properties": {"href": {"type": "string"}, "label": {"type": "string"}},
                },
            },
            "groups": {
                "type": "object",
                "description": "(a PA's page) each group's words, by key",
                "additionalProperties": {"type": "string"},
            },
        },
    },
    "Attention": {
        "enum": list(ATTENTION_ORDER),
        "description": "why it needs the pharmacist (the worklist's groups, in this order)",
    },
    "Acknowledgement": {
        "type": "object",
        "required": ["at", "by", "attention", "cursor"],
        "properties": {
            "at": {"type": "string", "description": "when (UTC)"},
            "by": {
                "type": "string",
                "description": "who: `token#N` (the N-th `[intake] tokens` entry), or "
                "`console` on loopback with no tokens",
            },
            "attention": {"oneOf": [_ref("Attention"), {"type": "null"}]},
            "cursor": {
                "type": ["string", "null"],
                "description": "the PA's cursor acknowledged: the one the page showed",
            },
        },
    },
    "AcknowledgeAnswer": {
        "type": "object",
        "required": ["pa_id", "acknowledged"],
        "properties": {"pa_id": {"type": "string"}, "acknowledged": _ref("Acknowledgement")},
    },
    "WorklistClaim": {
        "type": "object",
        "required": [
            "key",
            "claim_id",
            "transaction_index",
            "received_at",
            "rx_number",
            "product_id",
            "reject_codes",
            "message",
            "button_label",
            "message_source",
            "pa",
        ],
        "properties": {
            "key": {"type": "string", "description": "claim_id:transaction_index"},
            "claim_id": {"type": "string"},
            "transaction_index": {"type": "integer", "minimum": 0},
            "received_at": {"type": "string"},
            "rx_number": _NULLABLE_STR,
            "product_id": _NULLABLE_STR,
            "reject_codes": {"type": "array", "items": {"type": "string"}},
            "message": _NULLABLE_STR,
            "button_label": {"type": "string"},
            "message_source": {"enum": ["outcomes", "fallback", "payer", None]},
            "fallback_reason": {
                "description": "why the outcomes message is missing, when the answer "
                "recorded it (null otherwise)"
            },
            "pa": {"oneOf": [_ref("WorklistPa"), {"type": "null"}]},
            "pa_via": {
                "enum": ["claim", "claim_key", None],
                "description": "`claim_key`: the PA of the same claim sent earlier",
            },
        },
    },
    "WorklistItem": {
        "type": "object",
        "required": ["attention", "key", "since", "claim", "pa"],
        "properties": {
            "attention": _ref("Attention"),
            "key": {"type": "string", "description": "`claim:<key>` or `pa:<pa_id>`"},
            "since": {"type": ["string", "null"], "description": "received or last changed"},
            "claim": {"oneOf": [_ref("WorklistClaim"), {"type": "null"}]},
            "pa": {"oneOf": [_ref("WorklistPa"), {"type": "null"}]},
            "returned": {
                "type": "boolean",
                "description": "acknowledged before, and back: news since, or another group",
            },
        },
    },
    "StatusGuide": {
        "type": "object",
        "description": "One status the service can report (or an event), in words",
        "required": ["workflow_status", "plan_outcome", "label", "meaning", "next_step", "tone"],
        "properties": {
            "workflow_status": _NULLABLE_STR,
            "plan_outcome": _NULLABLE_STR,
            "event": {"type": "string"},
            "label": {"type": "string"},
            "meaning": {"type": "string"},
            "next_step": {"type": "string"},
            "tone": {"enum": ["ok", "warn", "bad", "info"]},
            "attention": {"oneOf": [_ref("Attention"), {"type": "null"}]},
            "overdue": {
                "type": ["string", "null"],
                "description": "what to do when it has waited too long (null: the general words)",
            },
        },
    },
    "Worklist": {
        "type": "object",
        "description": "What the console shows: no patient names, dates of birth or "
        "cardholder ids, only Rx number, product id and drug name.",
        "required": ["generated_at", "day_start", "counts", "groups", "items", "claims", "pas"],
        "properties": {
            "generated_at": {"type": "string"},
            "day_start": {"type": "string", "description": "local midnight, in UTC"},
            "pending_alert_hours": {"type": "number"},
            "counts": {
                "type": "object",
                "description": "items per group, and `total`",
                "additionalProperties": {"type": "integer"},
            },
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "title", "words", "tone", "count"],
                    "properties": {
                        "key": _ref("Attention"),
                        "title": {"type": "string"},
                        "words": {"type": "string", "description": "the group in a few words"},
                        "tone": {"enum": ["ok", "warn", "bad", "info"]},
                        "count": {"type": "integer"},
                    },
                },
            },
            "items": {
                "type": "array",
                "description": "what needs the pharmacist, most urgent group first",
                "items": _ref("WorklistItem"),
            },
            "claims": {"type": "array", "items": _ref("WorklistClaim")},
            "pas": {"type": "array", "items": _ref("WorklistPa")},
            "guide": {"type": "array", "items": _ref("StatusGuide")},
            "pharmacy": {
                "type": ["string", "null"],
                "description": "the one store shown (a chain), else null",
            },
            "pharmacies": {
                "type": "array",
                "description": "a chain's stores the token may choose between (empty for"
                " a single store)",
                "items": {
                    "type": "object",
                    "required": ["provider_id", "name"],
                    "properties": {
                        "provider_id": {"type": "string"},
                        "name": {"type": ["string", "null"]},
                    },
                },
            },
        },
    },
    "ConsolePa": {
        "type": "object",
        "description": "One PA for its console page. No patient data.",
        "required": ["generated_at", "pa", "claim", "history", "events", "acknowledgements"],
        "properties": {
            "generated_at": {"type": "string"},
            "pa": _ref("WorklistPa"),
            "claim": {
                "type": ["object", "null"],
                "description": "the claim it came from (null for a PA known only from "
                "callbacks); BIN, PCN and group identify the plan, not the patient",
                "properties": {
                    "claim_id": {"type": "string"},
                    "transaction_index": {"type": "integer"},
                    "received_at": {"type": "string"},
                    "rx_number": _NULLABLE_STR,
                    "product_id": _NULLABLE_STR,
                    "reject_codes": {"type": "array", "items": {"type": "string"}},
                    "message": _NULLABLE_STR,
                    "message_source": _NULLABLE_STR,
                    "purged": {"type": "boolean"},
                },
            },
            "history": {"type": "array", "items": {"type": "object"}},
            "events": {"type": "array", "items": {"type": "object"}},
            "acknowledgements": {"type": "array", "items": _ref("Acknowledgement")},
        },
    },
}

_PUBLIC: list[dict[str, list[str]]] = []  # no token needed


def _path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Send the same key again (a UUID, 1-255 printable ASCII characters) when"
    " re-sending the same request: the first request's result is answered again (header"
    " `Idempotent-Replayed: true`) and nothing is done twice. The same key with other"
    " content is a 422 `idempotency_key_reused`.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}

_REPLAYED = {
    "Idempotent-Replayed": {
        "schema": {"enum": ["true"]},
        "description": "present when the answer is a replay for an Idempotency-Key",
    }
}

_REDIRECT = {
    "description": "redirect",
    "headers": {"Location": {"schema": {"type": "string"}, "description": "where to go"}},
}

_PATHS: dict[str, Any] = {
    "/v1/claims": {
        "post": {
            "operationId": "postClaim",
            "summary": "Claim intake: store the exchange and answer what to show",
            "description": "Rejections 70/75/76 ask the outcomes interface first, within "
            "the budget (1500 ms by default); MR/AG/A6 answer at once with the submit-PA "
            "option; every other claim answers at once and is reported asynchronously.",
            "parameters": [_IDEMPOTENCY_KEY],
            "requestBody": {
                "required": True,
                "content": {_JSON: {"schema": _ref("ClaimExchange")}},
            },
            "responses": {
                "200": {
                    **_json(_ref("ClaimAnswer"), "what to show the pharmacist"),
                    "headers": _REPLAYED,
                },
                "400": _error(
                    "malformed claim (with byte offset, segment and field), an exchange"
                    " without what a decision needs (`detail.missing` names it), or body"
                ),
                "403": _error(
                    "`pharmacy_not_allowed`: the token is limited to other pharmacies"
                    " (`detail.provider_id`)"
                ),
                "422": _error(
                    "the Idempotency-Key was used with another request, or"
                    " `unknown_pharmacy`: a chain's claim from a pharmacy it does not list"
                    " (`detail.provider_id`; nothing stored or sent)"
                ),
                "503": _error("the claim could not be stored; send it again"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/v1/claims/{claim_id}": {
        "parameters": [_path_param("claim_id", "the `claim_id` from the intake answer")],
        "get": {
            "operationId": "getClaim",
            "summary": "A claim: the answer given, and its PA(s)",
            "responses": {
                "200": _json(_ref("Claim"), "the claim"),
                "404": _error("unknown claim"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/v1/claims/{claim_id}/pa": {
        "parameters": [_path_param("claim_id", "the `claim_id` from the intake answer")],
        "post": {
            "operationId": "submitPa",
            "summary": "Submit a PA for the claim (a second submit returns the same PA)",
            "description": "The service is called once per claim key: a second submit, on"
            " this claim or on another exchange of the same claim (same BIN, PCN, group, Rx"
            " number, fill number and provider), answers 200 with the PA already held and"
            " sends nothing.",
            "parameters": [_IDEMPOTENCY_KEY],
            "requestBody": {
                "required": False,
                "content": {_JSON: {"schema": _ref("SubmitPa")}},
            },
            "responses": {
                "201": _json(_ref("Pa"), "the PA, created now"),
                "200": {
                    **_json(_ref("Pa"), "the PA created earlier for this claim (or its key)"),
                    "headers": _REPLAYED,
                },
                "400": _error("bad body or transaction index"),
                "404": _error("unknown claim"),
                "409": _error(
                    "the claim was not rejected for a reason that allows a PA, or was reversed"
                ),
                "410": _error("the claim is older than the retention period"),
                "422": _error(
                    "the service says claim data is missing, the Idempotency-Key was used"
                    " with another request, or `unknown_pharmacy` (the claim's pharmacy is not"
                    " configured; nothing sent)"
                ),
                "502": _error("the service answered with an error"),
                "503": _error("the service is unreachable, or storage is unavailable"),
                "504": _error("the service did not answer in time"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/v1/reversals": {
        "post": {
            "operationId": "postReversal",
            "summary": "Forward a B2 so the PA is deleted; never lost",
            "parameters": [_IDEMPOTENCY_KEY],
            "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("Reversal")}}},
            "responses": {
                "200": {
                    **_json(_ref("ReversalAnswer"), "delivered to the service"),
                    "headers": _REPLAYED,
                },
                "202": {
                    **_json(
                        _ref("ReversalAnswer"),
                        "queued: retried until the service takes it, or held until store IT"
                        " fixes pa-bridge's credentials or configuration (then sent by itself)",
                    ),
                    "headers": _REPLAYED,
                },
                "400": _error("malformed, or not a B2"),
                "403": _error("`pharmacy_not_allowed`: the token is limited to other pharmacies"),
                "409": _error("a request with this Idempotency-Key is still being answered"),
                "422": _error(
                    "`reversal_refused`: the service refused it for good (`detail` is the"
                    " ReversalAnswer, status failed; it stays in the queue as failed), the"
                    " Idempotency-Key was used with another request, or `unknown_pharmacy`"
                    " (nothing stored or sent)"
                ),
                "503": _error("could not be stored; send it again"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/v1/pa": {
        "get": {
            "operationId": "listPas",
            "summary": "PAs with their current status, in change order",
            "parameters": [
                {
                    "name": "since",
                    "in": "query",
                    "required": False,
                    "description": "a `cursor` from an earlier answer: only PAs changed after it",
                    "schema": {"type": "string"},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "at most this many (clamped to 1..1000)",
                    "schema": {"type": "integer", "default": 100},
                },
                {
                    "name": "pharmacy",
                    "in": "query",
                    "required": False,
                    "description": "a chain's store: only the PAs of this provider id"
                    " (201-B1); the cursor never skips one of its changes",
                    "schema": {"type": "string"},
                },
                {
                    "name": "claim_id",
                    "in": "query",
                    "required": False,
                    "description": "only this claim's PAs (as in GET /v1/claims/{claim_id});"
                    " `since` and `limit` do not apply",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": _json(_ref("PaList"), "PAs and the cursor to ask from next"),
                "400": _error(
                    "bad limit, or a cursor that was never handed out (not a number,"
                    " negative, or beyond the newest change: `detail.newest_cursor`)"
                ),
                "403": _error("`pharmacy_not_allowed`: the token is limited to other pharmacies"),
                "404": _error("unknown claim (with claim_id)"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/v1/pa/{pa_id}": {
        "parameters": [
            _path_param(
                "pa_id",
                "the PA id, or the provisional `pending-...` id a submit answered before the"
                " PA's first callback (the answer has the PA's own `pa_id`)",
            )
        ],
        "get": {
            "operationId": "getPa",
            "summary": "One PA with its status history",
            "responses": {
                "200": _json(_ref("PaWithHistory"), "the PA"),
                "404": _error("unknown PA"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/v1/pa/{pa_id}/open": {
        "parameters": [_path_param("pa_id", "the PA id, or its provisional id")],
        "get": {
            "operationId": "openPa",
            "summary": "302 to the PA's URL",
            "responses": {
                "302": _REDIRECT,
                "404": _error("unknown PA, or no URL yet"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/v1/dashboard/open": {
        "get": {
            "operationId": "openDashboard",
            "summary": "Log in to the service's dashboard as the pharmacy and redirect there",
            "parameters": [
                {
                    "name": "pharmacy",
                    "in": "query",
                    "required": False,
                    "description": "a chain's store (provider id) to log in as: required"
                    " when several are configured, unless the token is limited to one",
                    "schema": {"type": "string"},
                }
            ],
            "responses": {
                "302": _REDIRECT,
                "400": _error("`missing_pharmacy`: several pharmacies, none named"),
                "403": _error("`pharmacy_not_allowed`: the token is limited to other pharmacies"),
                "422": _error("`unknown_pharmacy`: not a configured pharmacy"),
                "502": _error("the service refused or failed"),
                "503": _error("the service is unreachable"),
                "504": _error("the service did not answer in time"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/v1/console/worklist": {
        "get": {
            "operationId": "consoleWorklist",
            "summary": "The console's data: what needs the pharmacist, today's claims and PAs",
            "description": "`items`: what needs the pharmacist, grouped (`counts`, "
            "`groups`): claims rejected for PA today and not submitted; PAs denied, "
            "deleted, with a failed fax, failed or expired, approved, or without a "
            "decision `intake.pending_alert_hours` after they started, until acknowledged. "
            "`claims`: claims rejected for PA received today (local time of the daemon) "
            "with their replacement message and button label; `pas`: PAs created or "
            "changed today; `guide`: every status in words. The console polls this every 2 s."
            " A chain: `?pharmacy=<provider id>` for one store's; `pharmacies` lists the"
            " stores the token may choose between.",
            "parameters": [
                {
                    "name": "pharmacy",
                    "in": "query",
                    "required": False,
                    "description": "a chain's store (provider id): only its claims and PAs",
                    "schema": {"type": "string"},
                }
            ],
            "responses": {
                "200": _json(_ref("Worklist"), "the worklist"),
                "403": _error("`pharmacy_not_allowed`: the token is limited to other pharmacies"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/v1/console/pa/{pa_id}": {
        "parameters": [_path_param("pa_id", "the PA id")],
        "get": {
            "operationId": "consolePa",
            "summary": "One PA for the console's PA page",
            "description": "Status in words, history, events (DELETE, fax failure), "
            "acknowledgements, the claim it came from (Rx number, product id, drug name "
            "where known) and its links.",
            "responses": {
                "200": _json(_ref("ConsolePa"), "the PA"),
                "404": _error("unknown PA"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/v1/pa/{pa_id}/acknowledge": {
        "parameters": [_path_param("pa_id", "the PA id")],
        "post": {
            "operationId": "acknowledgePa",
            "summary": "The pharmacist has dealt with the PA: it leaves the worklist",
            "description": "Recorded in the audit trail with who and when. The optional"
            " body names the PA's cursor the pharmacist's page showed; without it, the PA's"
            " cursor now. The PA comes back on the worklist with news after that cursor (a"
            " new status or outcome, an event not seen before) or another group"
            " (decision 0014).",
            "requestBody": {
                "required": False,
                "content": {
                    _JSON: {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "cursor": {
                                    "type": "string",
                                    "description": "the PA's `cursor` as the page showed it",
                                }
                            },
                        }
                    }
                },
            },
            "responses": {
                "200": _json(_ref("AcknowledgeAnswer"), "recorded"),
                "400": _error(
                    "`invalid_body`: a body that is not an object, or a cursor that is not one"
                ),
                "404": _error("unknown PA"),
                "503": _error("could not be saved; try again"),
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (text exposition format); no token needed",
            "description": "Claims by decision, outcomes calls by result and their latency, "
            "budget misses, callbacks by result, submit-PA results, queue depth and the "
            "age of its oldest item, dead letters.",
            "security": _PUBLIC,
            "responses": {
                "200": {
                    "description": "the metrics",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/healthz": {
        "get": {
            "operationId": "health",
            "summary": "Liveness and readiness (database, scheduler, queue depth)",
            "security": _PUBLIC,
            "responses": {
                "200": _json(_ref("Health"), "ready"),
                "503": _json(_ref("Health"), "not ready: see which check is false"),
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/": {
        "get": {
            "operationId": "console",
            "summary": "The pharmacist console (HTML); no token needed to load it",
            "description": "When tokens are configured, open `/?token=<intake token>` once "
            "(or type the token into the page's form): the page keeps it in "
            "sessionStorage and sends it on its API calls.",
            "security": _PUBLIC,
            "responses": {
                "200": {"description": "the page", "content": {"text/html": {}}},
                "default": _DEFAULT_ERROR,
            },
        }
    },
    "/console/pa/{pa_id}": {
        "parameters": [_path_param("pa_id", "the PA id")],
        "get": {
            "operationId": "consolePaPage",
            "summary": "A PA's console page (HTML); no token needed to load it",
            "security": _PUBLIC,
            "responses": {
                "200": {"description": "the page", "content": {"text/html": {}}},
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/console/static/{filename}": {
        "parameters": [
            _path_param("filename", "console.js, common.js, pa.js, console.css, favicon.svg, ...")
        ],
        "get": {
            "operationId": "consoleAsset",
            "summary": "The console's script and style",
            "security": _PUBLIC,
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {
                        "text/javascript": {},
                        "text/css": {},
                        "text/html": {},
                        "image/svg+xml": {},
                    },
                },
                "default": _DEFAULT_ERROR,
            },
        },
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": _PUBLIC,
            "responses": {
                "200": {"description": "OpenAPI 3.1", "content": {_JSON: {}}},
                "default": _DEFAULT_ERROR,
            },
        }
    },
}

_PATHS.update(people.openapi_paths(_PUBLIC, _DEFAULT_ERROR))  # sign-in (issue 29)

_WEBHOOKS: dict[str, Any] = {
    "paChanged": {
        "post": {
            "operationId": "paChanged",
            "summary": "A PA changed (sent to `callbacks.forward_url` through the durable queue)",
            "description": "One POST per change, each describing its own change (decision"
            " 0018). With `callbacks.forward_secret` set, signed: `PA-Bridge-Signature:"
            ' t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<the exact body>" with the'
            " secret>`. `PA-Bridge-Delivery` repeats `delivery_id` (the same on every retry)."
            " Answer 2xx when stored; a 4xx other than 408 or 429 fails the delivery for good"
            " (visible in `pa-bridge queue list`), anything else is retried with backoff.",
            "parameters": [
                {
                    "name": "PA-Bridge-Signature",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                },
                {
                    "name": "PA-Bridge-Delivery",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {
                    "name": "PA-Bridge-Event",
                    "in": "header",
                    "required": True,
                    "schema": {"enum": ["pa.changed"]},
                },
            ],
            "requestBody": {
                "required": True,
                "content": {_JSON: {"schema": _ref("WebhookChange")}},
            },
            "responses": {"2XX": {"description": "stored by the dispensing system"}},
        }
    },
    "paExpiring": {
        "post": {
            "operationId": "paExpiring",
            "summary": "A PA's approval ends within `[worklist] expiring_days` (once per PA"
            " and end date): flag the next fill, ask the prescriber to renew",
            "description": "Sent, signed and retried exactly as `paChanged`, with"
            " `event: pa.expiring`, `change.source: expiring` and the PA's `expires_at`"
            " and `expiring: true`; the same change is a feed entry (`GET /v1/pa?since=`).",
            "parameters": [
                {
                    "name": "PA-Bridge-Signature",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                },
                {
                    "name": "PA-Bridge-Delivery",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {
                    "name": "PA-Bridge-Event",
                    "in": "header",
                    "required": True,
                    "schema": {"enum": ["pa.expiring"]},
                },
            ],
            "requestBody": {
                "required": True,
                "content": {_JSON: {"schema": _ref("WebhookChange")}},
            },
            "responses": {"2XX": {"description": "stored by the dispensing system"}},
        }
    },
}

_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "pa-bridge local API",
        "version": __version__,
        "description": "The API the dispensing system and the pharmacy workstations use. "
        'JSON in and out; every error body is `{"error": {"code", "message", '
        '"detail"}}`. When `[intake] tokens` are configured every path except `/`, '
        "`/console/pa/*` (the page shell), `/console/static/*`, `/healthz`, `/metrics` and `/openapi.json` needs "
        "`Authorization: Bearer <token>`; with no tokens (loopback only) none does. "
        "The callback receiver (`POST /callbacks/pharmacy`) is on its own listener and "
        "not described here.",
    },
    "servers": [{"url": "/"}],
    "security": [{"intakeToken": []}, {"personSession": []}, {}],
    "paths": _PATHS,
    "webhooks": _WEBHOOKS,
    "components": {
        "schemas": _SCHEMAS,
        "securitySchemes": {
            "intakeToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "an `[intake] tokens` entry; required only when tokens are configured",
            },
            "personSession": {
                "type": "apiKey",
                "in": "cookie",
                "name": "pa_bridge_session",
                "description": "a person signed in to the console (`/console/sign-in`); the"
                " console's JSON and `/v1/pa/{pa_id}/open` take it instead of a token",
            },
        },
    },
}


def document(max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> dict[str, Any]:
    """The OpenAPI document (a copy: callers may change it), naming ``max_body_bytes``
    as the body limit. Every operation that needs the token declares 401; every one
    that takes a body declares 413."""
    doc = copy.deepcopy(_DOCUMENT)
    for item in doc["paths"].values():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            if op.get("security") != _PUBLIC:
                op["responses"].setdefault("401", copy.deepcopy(_UNAUTHORIZED))
            if "requestBody" in op:
                op["responses"].setdefault("413", _too_large(max_body_bytes))
    return doc


@bp.get("/openapi.json")
def openapi_json() -> Response:
    limit = current_app.config.get("MAX_CONTENT_LENGTH") or DEFAULT_MAX_BODY_BYTES
    resp = jsonify(document(int(limit)))
    resp.headers["Cache-Control"] = "no-cache"
    return resp
