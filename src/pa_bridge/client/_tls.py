"""TLS and connection-failure helpers shared by the client, ``doctor`` and the sandbox.

:func:`verify_context` turns the ``verify`` setting (True, False, or a CA bundle file
or directory) into what httpx and ``http.client`` take; :func:`is_tls_failure` and
:func:`failure_kind` read an exception and its causes.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator

import httpx

__all__ = ["causes", "failure_kind", "is_tls_failure", "verify_context"]


def verify_context(verify: bool | str) -> bool | ssl.SSLContext:
    """``verify`` as httpx takes it: a CA bundle path (file or directory) becomes an
    ``SSLContext`` (httpx 0.28 deprecates ``verify=<path>``); True and False stay."""
    if isinstance(verify, str):
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return verify


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then its ``__cause__`` or ``__context__``, and so on (each once)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def is_tls_failure(exc: BaseException) -> bool:
    """Whether the exception, or one of its causes, is a failed TLS handshake."""
    for cur in causes(exc):
        if isinstance(cur, ssl.SSLError | ssl.CertificateError):
            return True
        text = str(cur)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text:
            return True
    return False


def failure_kind(exc: BaseException) -> str:
    """Why a connection failed, in a few words for store IT ("name not resolved",
    "connection refused", "TLS error: certificate not trusted", "timeout", ...)."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    for cur in causes(exc):
        if isinstance(cur, ssl.SSLCertVerificationError):
            return "TLS error: certificate not trusted"
        if isinstance(cur, ssl.SSLError):
            return "TLS error"
        if isinstance(cur, socket.gaierror):
            return "name not resolved"
        if isinstance(cur, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cur, TimeoutError | socket.timeout):
            return "timeout"
        if isinstance(cur, OSError) and cur.errno is not None:
            return f"cannot connect ({os.strerror(cur.errno).lower()})"
    text = str(exc).lower()
    if "refused" in text:
        return "connection refused"
    if "ssl" in text or "certificate" in text:
        return "TLS error"
    if "name or service" in text or "resolution" in text:
        return "name not resolved"
    return f"cannot connect ({type(exc).__name__})"
