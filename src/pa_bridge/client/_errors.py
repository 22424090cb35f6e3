"""The client's errors: every failure is a :class:`ServiceError` with a stable
``code``, a ``message`` a pharmacist can act on (plain words, no PHI, no secrets), a
``detail`` for store IT, and ``retryable``."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadClaimError",
    "BadResponseError",
    "CredentialsError",
    "HttpStatusError",
    "InvalidClaimError",
    "MissingClaimDataError",
    "MissingVariablesError",
    "RedirectError",
    "RequestNotFoundError",
    "ServiceError",
    "ServiceTimeoutError",
    "TlsError",
    "UnreachableError",
    "UnrecognizedNdcError",
]

_DETAIL_LIMIT = 500


class ServiceError(Exception):
    """Base of every error of the client.

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


class RequestNotFoundError(ServiceError):
    """404 from the requests resource: the PA is not returned (deleted, or no access
    token left: "inaccessible through the API")."""

    code = "not_found"


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
