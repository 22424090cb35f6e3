"""The sandbox: a simulation of the PA service's pharmacy interfaces with a test payer.

Run it alone with ``pa-bridge sandbox --port N`` or in-process::

    with SandboxServer(SandboxConfig(step_seconds=0.05)) as sb:
        sb.claim_url, sb.outcomes_url, sb.dashboard_url

Credentials (published, not secret): username ``sandbox-pharmacy``, password
``sandbox-password``, api_key ``sandbox-api-key``, api_id ``sandbox-api-id``
(``SANDBOX_USERNAME`` etc.). A chain's
stores' credentials are accepted too when given (``SandboxConfig.pharmacies``), each
only for claims from its own store.

Paths (the real service's shapes, the product's real-service-evidence.md):

=========================================  ==============================================
``POST /cmmimport/`` (and ``/cmmimport``)  claim interface, default format: the URL of
                                           each PA on its own line (CRLF), ``text/html``
``POST /cmmimport/json``                   claim interface, verbose JSON (field names of
                                           our own: the evidence does not show them)
``POST /cmmimport/empty``                  claim interface, empty body (address ours)
``POST /outcomes.json``                    outcomes interface, JSON ``{button_label, message}``
``POST /outcomes.txt``                     outcomes interface, text ``button_label;message``
``GET /outcomes``                          HTML exploration page (``POST /outcomes``: HTML)
``POST /dashboard/login``                  ``username``, ``plaintext_password`` -> token body
``GET /dashboard?token=...``               the pharmacy's dashboard page
``GET /request/view/<id>?token_id=...``    the hosted PA page (status, outcome, history)
``GET /_ping``                             health (``{"status": "ok", ...}``)
``GET /sandbox/pas``                       admin: every PA with its status history (JSON)
``GET /sandbox/claims``                    admin: every claim received, framed or not
``GET /sandbox/calls``                     admin: every call with the username it came
                                           with (claim, outcomes, dashboard login)
``POST /sandbox/callback-url``             admin: register the callback target at runtime
                                           (``url``, ``username``, ``password``; form or JSON)
``GET /requests/<id>?v=1``                 the requests resource: one PA, ``Authorization:
                                           Bearer <api_id>+<token_id>`` (or the parameters)
``POST /requests/search?v=1``              the requests resource: ``token_ids[]`` (form) ->
                                           ``{"requests": [...]}`` (deleted PAs left out)
``GET /requests/_ping``                    the requests resource's health
``POST /sandbox/control``                  admin (JSON): ``drop_callbacks`` (lose them, for
                                           reconciliation drills), ``omit_period`` (callbacks
                                           without ``authorization_period``),
                                           ``requests_status`` (the requests resource answers
                                           this HTTP status; null: normally)
``POST /sandbox/pas/<id>/renew``           admin: a renewal PA of ``<id>`` (``is_renewal``,
                                           ``associated_requests`` both ways)
=========================================  ==============================================

Test payer (PRODUCT.md, "The sandbox's test payer"):

* B1 with the sandbox credentials, framed STX ... ETX or not (both are accepted and
  recorded): a PA per transaction (6-character id, one access token), HTTP 200,
  answered in the format of the address. The same B1 again (same BIN, PCN, group, Rx
  number, fill number, provider): the original PA, answered exactly alike (HTTP 200;
  nothing marks a duplicate, as at the real service).
* group id (301-C1, or the ``group_id`` variable) containing ``DENY`` / ``PEND``: the PA
  ends Unfavorable / Pending; any other group: Favorable.
* after creation the status moves New, PA Request, PA Response (with the outcome),
  ``step_seconds`` apart; one callback per change.
* product id ``00000000000``: 422. Wrong username, password or api_key: 403. Missing
  POST variables: 404 naming each. A claim our ``ncpdp`` cannot parse: 500 with the
  parse error (byte offset, segment, field). Every error is an HTML page with the
  message in ``<p>`` elements.
* B2 for a known claim: the PA is deleted: a DELETE event and a callback (HTTP 200,
  the PA's link in the format of the address).
* outcomes for rejection codes 70, 75, 76: a replacement message and the button label
  ``Submit PA``; other claims: the message unchanged, empty button label. BIN
  ``999997``: 500; ``999998``: answers after 5 s; ``999996``: trickles its answer over 3 s.
  Wrong api_key: 403.

Callbacks: ``POST`` JSON ``{"request": {...}}`` shaped like the real request object
(strings for numbers and booleans, ``html_url``, ``pdf_url``, ``tokens``, ``created_at``
and no ``updated_at``, ``events`` only for a DELETE) to the registered URL, optional
HTTP Basic; any non-200 or connection error is retried with exponential backoff until
delivered; deliveries for one PA go in order. Only synthetic data, and no PHI, is kept
in the sandbox's logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import (
    SANDBOX_API_ID,
    SANDBOX_API_KEY,
    SANDBOX_PASSWORD,
    SANDBOX_USERNAME,
    SandboxConfig,
    SandboxPharmacy,
)

if TYPE_CHECKING:
    from ._state import SandboxState
    from .app import create_sandbox_app, sandbox_state
    from .server import SandboxServer

__all__ = [
    "SANDBOX_API_ID",
    "SANDBOX_API_KEY",
    "SANDBOX_PASSWORD",
    "SANDBOX_USERNAME",
    "SandboxConfig",
    "SandboxPharmacy",
    "SandboxServer",
    "SandboxState",
    "create_sandbox_app",
    "sandbox_state",
]

#: what is imported when first used: a daemon against the real service, and the
#: ``pa-bridge`` command, never load the sandbox's app (issue 31: a quicker start)
_LAZY = {
    "SandboxServer": ".server",
    "SandboxState": "._state",
    "create_sandbox_app": ".app",
    "sandbox_state": ".app",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name], __name__), name)
