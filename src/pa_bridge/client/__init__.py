"""The client of the PA service's pharmacy interfaces.

Three interfaces, on one ``httpx.Client`` (one TLS setup, the environment's proxy
settings, each call on a connection of its own; decision 0043):

* the pharmacy **claim interface** (:meth:`PaServiceClient.submit_claim`): B1 starts a
  PA, B2 deletes it. Both are **safe to retry**: the service answers a duplicate B1 or
  B2 with the response for the original PA and never creates a second one, so a caller
  that did not get an answer (timeout, connection reset) may send the same claim again.
  Errors say whether a retry can help (``ServiceError.retryable``);
* the **outcomes interface** (:meth:`PaServiceClient.outcomes`): never raises, and
  returns within a hard total deadline (``_outcomes``, decision 0002);
* the **dashboard login** (:meth:`PaServiceClient.dashboard_login`);
* the **requests resource**, read back (:class:`RequestsResource`: ``GET
  /requests/{id}``, ``POST /requests/search``), for reconciliation (issue 28).

Every failure is one of our own :class:`ServiceError` subclasses, with a stable
``code``, a ``message`` a pharmacist can act on (plain words, no PHI, no secrets), a
``detail`` for store IT, and ``retryable``.

One concern a module, each importing only those above it in this list:

* ``_contract``: the interfaces' variable tables; :class:`ClaimMetadata` derived
  from them;
* ``_errors``: the error taxonomy;
* ``_tls``: the ``verify`` setting as an SSL context, reading connection failures;
* ``_urls``: which PA a link names, which links to keep, a URL's origin;
* ``_mapping``: NCPDP claim exchange to variables, the payer-sheet minimum, framing
  (pure functions);
* ``_answers``: the success bodies, the error pages, the outcomes body;
* ``_outcomes``: the outcomes call and its deadline;
* ``_client``: :class:`PaServiceClient`;
* ``_requests``: :class:`RequestsResource`.

Logging: status codes, PA ids, elapsed times and error codes only. Never claim
content, patient data, cardholder ids, the password, the api_key or a dashboard token.
"""

from ._answers import (
    FALLBACK_REASONS,
    ClaimResult,
    OutcomeResult,
    error_text,
    fallback_reason,
    missing_variables,
    read_claim_body,
)
from ._client import PaServiceClient
from ._contract import (
    CLAIM_FRAMINGS,
    CLAIM_VARIABLES,
    DASHBOARD_LOGIN_VARIABLES,
    OPTIONAL_CLAIM_VARIABLES,
    OUTCOME_VARIABLES,
    ClaimMetadata,
    Credentials,
    dashboard_login_url,
)
from ._errors import (
    BadClaimError,
    BadResponseError,
    CredentialsError,
    HttpStatusError,
    InvalidClaimError,
    MissingClaimDataError,
    MissingVariablesError,
    RedirectError,
    RequestNotFoundError,
    ServiceError,
    ServiceTimeoutError,
    TlsError,
    UnreachableError,
    UnrecognizedNdcError,
)
from ._mapping import (
    claim_metadata,
    claim_minimum_missing,
    frame_claim,
    is_framed,
    outcome_variables,
    patient_age,
)
from ._outcomes import OutcomesCall
from ._requests import RequestsResource
from ._tls import failure_kind, verify_context
from ._urls import best_urls, origin, pa_id_from_url

__all__ = [
    "CLAIM_FRAMINGS",
    "CLAIM_VARIABLES",
    "FALLBACK_REASONS",
    "DASHBOARD_LOGIN_VARIABLES",
    "OPTIONAL_CLAIM_VARIABLES",
    "OUTCOME_VARIABLES",
    "BadClaimError",
    "BadResponseError",
    "ClaimMetadata",
    "ClaimResult",
    "Credentials",
    "CredentialsError",
    "HttpStatusError",
    "InvalidClaimError",
    "MissingClaimDataError",
    "MissingVariablesError",
    "OutcomeResult",
    "OutcomesCall",
    "PaServiceClient",
    "RedirectError",
    "RequestNotFoundError",
    "RequestsResource",
    "ServiceError",
    "ServiceTimeoutError",
    "TlsError",
    "UnreachableError",
    "UnrecognizedNdcError",
    "best_urls",
    "claim_metadata",
    "claim_minimum_missing",
    "dashboard_login_url",
    "error_text",
    "failure_kind",
    "fallback_reason",
    "frame_claim",
    "is_framed",
    "missing_variables",
    "origin",
    "outcome_variables",
    "pa_id_from_url",
    "patient_age",
    "read_claim_body",
    "verify_context",
]
