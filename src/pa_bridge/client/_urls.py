"""Links in the service's answers: which PA a link names, and which links to keep.

Also :func:`origin`, the scheme, host and port of a configured address (never its
path, query or user info, which may carry secrets), for checks that reach a host.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import httpx

__all__ = ["best_urls", "dedup", "is_http", "origin", "pa_id_from_url"]

#: Path shapes that name the PA: the hosted page ``/request/view/{id}`` (interface
#: description), the request page ``/requests/{id}`` and its PDF
#: ``/api/requests/{id}/download`` (the callbacks' ``html_url`` and ``pdf_url``).
_PA_PATH_RES = (
    re.compile(r"/request/view/([A-Za-z0-9_-]+)/?$"),
    re.compile(r"/requests/([A-Za-z0-9_-]+)(?:/download)?/?$"),
)
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{2,64}$")


def dedup(urls: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for u in urls:
        seen.setdefault(u, None)
    return tuple(seen)


def is_http(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def pa_id_from_url(url: str) -> str | None:
    """The PA id a link names: the hosted page ``{portal}/request/view/{id}?token_id=``,
    the request page ``/requests/{id}``, its PDF ``/api/requests/{id}/download``, or a
    ``request={id}`` query parameter (thumbnails). None for any other link."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    for pattern in _PA_PATH_RES:
        m = pattern.search(parts.path)
        if m and _ID_RE.match(m.group(1)) and m.group(1) not in ("tokens", "search"):
            return m.group(1)
    for key, value in parse_qsl(parts.query):
        if key == "request" and _ID_RE.match(value):
            return value
    return None


def _url_rank(url: str) -> int:
    """Lower is better: the hosted page with its token, the hosted page, any page with a
    token, the request page, anything else; API, PDF and thumbnail links last."""
    parts = urlsplit(url)
    path = parts.path.lower()
    has_token = any(k == "token_id" for k, _ in parse_qsl(parts.query))
    if "/request/view/" in path:
        return 0 if has_token else 1
    if "thumbnail" in path or path.endswith("/download") or path.endswith(".pdf"):
        return 9
    if parts.netloc.lower().startswith("api.") or "/requests/tokens/" in path:
        return 8
    if has_token:
        return 2
    if pa_id_from_url(url):
        return 3
    return 5


def best_urls(urls: list[str]) -> tuple[str, ...]:
    """The links of the best kind present (see :func:`_url_rank`), in their order:
    several PAs give several links of the same kind, and all of them are kept."""
    unique = dedup(urls)
    if not unique:
        return ()
    best = min(_url_rank(u) for u in unique)
    return tuple(u for u in unique if _url_rank(u) == best)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (raises ``httpx.InvalidURL``)."""
    u = httpx.URL(url)
    return str(
        u.copy_with(path="/", query=None, fragment=None, username=None, password=None)
    ).rstrip("/")
