"""The error every use case answers with when it does not succeed."""

from __future__ import annotations

from typing import Any

__all__ = ["BridgeError"]


class BridgeError(Exception):
    """An answer other than success: HTTP ``status``, stable ``code``, a ``message`` a
    pharmacist or store IT can act on, and ``detail`` (never PHI, never secrets)."""

    def __init__(self, status: int, code: str, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
