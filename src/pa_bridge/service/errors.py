"""What a use case raises when it does not succeed: a kind of failure (the class), a
stable ``code``, a ``message`` a pharmacist or store IT can act on, and ``detail``
(never PHI, never secrets). No HTTP here: the web layer says each kind in its status
(``web/errors.py``)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "BridgeError",
    "Conflict",
    "Gone",
    "InvalidRequest",
    "NotAllowed",
    "NotFound",
    "Refused",
    "ServiceFailed",
    "ServiceTimeout",
    "Unavailable",
]


class BridgeError(Exception):
    """A use case's answer other than success (one of the kinds below)."""

    def __init__(self, code: str, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


class InvalidRequest(BridgeError):
    """What was sent cannot be used: a body, an NCPDP exchange, a cursor, a limit."""


class NotAllowed(BridgeError):
    """The caller may not act for that pharmacy (a scoped token)."""


class NotFound(BridgeError):
    """No claim, PA or link with that id (for this caller)."""


class Conflict(BridgeError):
    """Not in the state it is in: not PA eligible, reversed, still being answered."""


class Gone(BridgeError):
    """It was there and is no more (purged by retention)."""


class Refused(BridgeError):
    """Well-formed but refused: a key used for something else, a pharmacy not
    configured, claim data the service needs, a reversal it refused for good."""


class ServiceFailed(BridgeError):
    """The PA service answered with an error (or over a connection that failed TLS)."""


class Unavailable(BridgeError):
    """The database, or the PA service, cannot be used right now: try again."""


class ServiceTimeout(BridgeError):
    """The PA service did not answer in time."""
