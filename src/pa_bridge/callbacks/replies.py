"""The callback receiver's answers in the error shape, ``{"error": {"code", "message",
"detail"}}``: made by the receiver's app (401, 413, ...) and by the commit behind it
(503, 500). Plain JSON, so the commit needs nothing of the web."""

from __future__ import annotations

import json

__all__ = ["error_reply", "internal_error_reply", "unavailable_reply"]


def error_reply(status: int, code: str, message: str) -> tuple[int, bytes]:
    """An answer in the error shape: ``(status, {"error": {"code", "message", "detail"}})``."""
    body = {"error": {"code": code, "message": message, "detail": None}}
    return status, json.dumps(body).encode()


def unavailable_reply() -> tuple[int, bytes]:
    """503: the callback was not committed; the service retries."""
    return error_reply(503, "storage_unavailable", "the callback could not be stored; retry later")


def internal_error_reply() -> tuple[int, bytes]:
    """500: a bug, logged by whoever met it."""
    return error_reply(500, "internal_error", "pa-bridge hit an unexpected error; it was logged")
