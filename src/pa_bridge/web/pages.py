"""What every page and every redirect of the web layer sends about itself: the
console's pages under one Content-Security-Policy, and redirects that carry a token
(a PA's link, the dashboard, the identity provider) never cached nor referred on."""

from __future__ import annotations

from pathlib import Path

from flask import Response, redirect, send_from_directory
from werkzeug.wrappers import Response as BaseResponse

__all__ = ["STATIC_DIR", "page", "private_redirect"]

STATIC_DIR = Path(__file__).resolve().parent / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def page(name: str, *, cache: str) -> Response:
    """A static page of the console, with its security headers; ``cache``: its
    Cache-Control."""
    resp = send_from_directory(STATIC_DIR, name)
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["Referrer-Policy"] = "no-referrer"  # a ?token= never leaks onwards
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = cache
    return resp


def private_redirect(url: str) -> BaseResponse:
    """A 302 to ``url`` (which may carry a token): not cached, no Referer onwards."""
    resp = redirect(url, code=302)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp
