"""Which pharmacy a claim is from, and whose credentials it goes with.

A single store has no ``[[pharmacies]]``: every call uses the client's own
credentials (``[service]``) and every token may act for anything. A chain lists its
stores by service provider id (201-B1); a claim goes to the service with the
credentials of the store in its header and with no other (the service's rule), and a
claim from a store not listed is refused before anything is stored or sent
(decision 0022).

A :data:`Scope` is what an intake token may act for: ``None`` for every pharmacy, else
a set of provider ids (``[[intake.scoped_tokens]]``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..client import Credentials
from ..config import Settings
from ..logs import log_event
from .errors import BridgeError, NotAllowed, Refused

__all__ = [
    "Pharmacies",
    "Pharmacy",
    "Scope",
    "check_scope",
    "in_scope",
    "not_allowed",
    "unknown_pharmacy",
]

#: the provider ids a caller may act for; None: every pharmacy
Scope = frozenset[str] | None


def _pid(provider_id: str | None) -> str:
    """A 201-B1 value as the config lists it: without the field's padding."""
    return (provider_id or "").strip()


def unknown_pharmacy(provider_id: str | None) -> BridgeError:
    """422: the claim's pharmacy is not one this deployment serves (nothing sent)."""
    pid = _pid(provider_id)
    return Refused(
        "unknown_pharmacy",
        f"pharmacy {pid or '(none)'} (201-B1 service provider id) is not configured here;"
        " nothing was sent to the PA service. Store IT adds it under [[pharmacies]]",
        {"provider_id": pid},
    )


def not_allowed(provider_id: str | None) -> BridgeError:
    """403: the intake token is limited to other pharmacies."""
    pid = _pid(provider_id)
    return NotAllowed(
        "pharmacy_not_allowed",
        f"this intake token may not act for pharmacy {pid or '(none)'}",
        {"provider_id": pid},
    )


def in_scope(scope: Scope, provider_id: str | None) -> bool:
    """Whether ``scope`` includes the pharmacy ``provider_id`` (None: every pharmacy)."""
    return scope is None or _pid(provider_id) in scope


def check_scope(scope: Scope, provider_id: str | None) -> None:
    """Raise 403 when ``scope`` does not include ``provider_id``."""
    if not in_scope(scope, provider_id):
        raise not_allowed(provider_id)


@dataclass(frozen=True, slots=True)
class Pharmacy:
    provider_id: str
    name: str | None
    credentials: Credentials


class Pharmacies:
    """The configured stores by provider id (empty: a single store)."""

    def __init__(self, pharmacies: Iterable[Pharmacy] = ()) -> None:
        self._by_id = {p.provider_id: p for p in pharmacies}

    @classmethod
    def from_settings(cls, settings: Settings) -> Pharmacies:
        return cls(
            Pharmacy(p.provider_id, p.name, Credentials(*settings.credentials(p)))
            for p in settings.pharmacies
        )

    def replace(self, other: Pharmacies) -> None:
        """Take ``other``'s stores (a reload): each lookup from now on sees them."""
        self._by_id = other._by_id

    def serves(self, provider_id: str) -> bool:
        """Whether ``provider_id`` is one of the stores listed here."""
        return _pid(provider_id) in self._by_id

    @property
    def chain(self) -> bool:
        """Whether ``[[pharmacies]]`` is configured."""
        return bool(self._by_id)

    def ids(self) -> list[str]:
        return list(self._by_id)

    def all(self) -> list[Pharmacy]:
        return list(self._by_id.values())

    def credentials_for(self, provider_id: str | None) -> Credentials | None:
        """The credentials a claim from ``provider_id`` goes with: None for a single
        store (the client's own); raise 422 ``unknown_pharmacy`` for a chain's claim
        from a store it does not list."""
        if not self._by_id:
            return None
        pid = _pid(provider_id)
        found = self._by_id.get(pid)
        if found is None:
            # a provider id names a store, not a person: store IT needs it to act
            log_event(
                "pharmacy.unknown",
                level=logging.WARNING,
                provider_id=pid,
                configured=len(self._by_id),
            )
            raise unknown_pharmacy(provider_id)
        return found.credentials
