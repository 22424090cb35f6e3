"""The PA service's pharmacy interfaces as data: the variables each one takes.

The tables are the contract (pa-service-interface.md): the sandbox checks what it
receives against them, the mapping fills them, and :class:`ClaimMetadata` is derived
from :data:`OPTIONAL_CLAIM_VARIABLES`, so a new optional variable is one line here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL_CLAIM_VARIABLES",
    "CLAIM_FRAMINGS",
    "CLAIM_VARIABLES",
    "DASHBOARD_LOGIN_VARIABLES",
    "OPTIONAL_CLAIM_VARIABLES",
    "OUTCOME_VARIABLES",
    "ClaimMetadata",
    "Credentials",
    "dashboard_login_url",
]


@dataclass(frozen=True, slots=True)
class Credentials:
    """One pharmacy's credentials at the service: ``username`` and ``password`` (claim
    interface, dashboard login) and ``api_key`` (claim and outcomes interfaces). The
    service's rule: a claim goes with the submitting pharmacy's own credentials."""

    username: str
    password: str
    api_key: str

    def __repr__(self) -> str:  # never a secret
        return f"Credentials(username={self.username!r}, password=<set>, api_key=<set>)"


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

ALL_CLAIM_VARIABLES: tuple[str, ...] = CLAIM_VARIABLES + OPTIONAL_CLAIM_VARIABLES

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

#: Variables of the dashboard login.
DASHBOARD_LOGIN_VARIABLES: tuple[str, ...] = ("username", "plaintext_password")

#: Values of ``service.claim_framing``.
CLAIM_FRAMINGS: tuple[str, ...] = ("stx_etx", "none")

_OPTIONAL = frozenset(OPTIONAL_CLAIM_VARIABLES)


def dashboard_login_url(dashboard_url: str) -> str:
    """The dashboard login's address when none is configured: ``{dashboard}/login``."""
    return dashboard_url.rstrip("/") + "/login"


class ClaimMetadata:
    """The optional metadata variables of the claim interface ("" means not sent).

    Derived from :data:`OPTIONAL_CLAIM_VARIABLES`: each variable is a keyword of the
    constructor and a ``str`` attribute (``md.physician_npi``); any other name is a
    ``TypeError`` (constructor) or an ``AttributeError`` (attribute). Immutable.
    """

    __slots__ = ("_values",)
    _values: dict[str, str]

    def __init__(self, **values: str) -> None:
        unknown = [k for k in values if k not in _OPTIONAL]
        if unknown:
            raise TypeError(f"ClaimMetadata has no variable {', '.join(sorted(unknown))}")
        object.__setattr__(self, "_values", {k: v for k, v in values.items() if v != ""})

    def __getattr__(self, name: str) -> str:
        if name in _OPTIONAL:
            return self._values.get(name, "")
        raise AttributeError(f"ClaimMetadata has no variable {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ClaimMetadata is immutable")

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """(variable, value) for every variable, in the interface's order."""
        for name in OPTIONAL_CLAIM_VARIABLES:
            yield name, self._values.get(name, "")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClaimMetadata):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self if v)
        return f"ClaimMetadata({inner})"

    def as_form(self) -> dict[str, str]:
        """The non-empty variables, in the interface's order."""
        out: dict[str, str] = {}
        for name, value in self:
            value = value.strip()
            if value:
                out[name] = value
        return out

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> ClaimMetadata:
        """Known variable names only; other keys are ignored."""
        return cls(**{k: str(v) for k, v in values.items() if k in _OPTIONAL})
