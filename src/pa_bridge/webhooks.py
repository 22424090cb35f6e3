"""The webhook to the dispensing system: one signed POST per PA change (issue 16,
decision 0018).

A callback that changes a PA queues (in its own transaction) a ``webhook`` item
holding the change itself: what the callback said and the PA's status right after it.
The queue delivers it to ``callbacks.forward_url``; the body describes that change,
not the PA as it is when the delivery happens, so three changes give three bodies.

Each POST carries ``delivery_id`` (in the body and in ``PA-Bridge-Delivery``), the same
on every retry of the change, and, with ``callbacks.forward_secret`` set, a signature
as Stripe and GitHub sign theirs::

    PA-Bridge-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>

The receiver recomputes the HMAC over the exact bytes it received, compares in
constant time and refuses old timestamps (:func:`verify` does all three).

A 2xx is delivered. A 401 or 403 is the receiver refusing our signature or access
(``callbacks.forward_secret``, its own access rules): the item is held until the
configuration changes, like a missing ``callbacks.forward_url``. Another 4xx other than
408 and 429 is the receiver refusing this body: retrying the same bytes cannot help,
so the item fails for good (``queue list`` shows it; ``queue retry`` sends it again).
Anything else is retried with backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from . import __version__
from .outbox import DeliveryFailed, Hold

__all__ = [
    "SIGNATURE_HEADER",
    "WebhookSender",
    "change_payload",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "PA-Bridge-Signature"
DELIVERY_HEADER = "PA-Bridge-Delivery"
EVENT_HEADER = "PA-Bridge-Event"
EVENT = "pa.changed"
#: an approval entered the expiring window (issue 28): once per PA and end date
EXPIRING = "pa.expiring"
#: how old a signature's timestamp :func:`verify` accepts by default
TOLERANCE_S = 300


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``PA-Bridge-Signature`` value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    tolerance_s: int = TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` and is recent enough: what a
    receiver does (docs/api.md shows the same in a few lines)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = sign(secret, body, t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def change_payload(
    pa_id: str,
    seq: int,
    received_at: str,
    change: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    event: str = EVENT,
) -> dict[str, Any]:
    """The queue item of one change: ``change`` (what the callback said: status,
    outcome, event time, its events; ``source`` when it was not a callback) and
    ``state`` (the PA right after it: status, outcome, deleted, fax_failed,
    events_json; ``gone`` and ``expiring`` when they are true). ``event``:
    ``pa.changed``, or ``pa.expiring``."""
    item = {
        "pa_id": pa_id,
        "change_seq": seq,
        "received_at": received_at,
        "change": dict(change),
        "state": dict(state),
    }
    if event != EVENT:
        item["event"] = event
    return item


def body_for(payload: Mapping[str, Any], pa_now: Mapping[str, Any]) -> dict[str, Any]:
    """The POST body for a queued change. ``pa_now`` (the PA as stored now) gives what
    does not change (ids, links, Rx number); the change's own fields come from the item.
    Items queued before changes were kept describe the PA as it is now."""
    seq = str(payload.get("change_seq") or pa_now.get("cursor") or "")
    pa = dict(pa_now)
    pa.pop("history", None)
    change: dict[str, Any] = {}
    state = payload.get("state")
    if isinstance(state, Mapping):
        try:
            events = json.loads(state.get("events_json") or "[]")
        except ValueError:
            events = []
        gone = bool(state.get("gone", pa.get("gone")))
        pa.update(
            workflow_status=state.get("workflow_status"),
            status=state.get("workflow_status"),
            plan_outcome=state.get("plan_outcome"),
            deleted=bool(state.get("deleted")) or gone,
            gone=gone,
            fax_failed=bool(state.get("fax_failed")),
            events=events,
            updated_at=payload.get("received_at") or pa.get("updated_at"),
            cursor=seq,
        )
        raw = payload.get("change")
        change = {
            "received_at": payload.get("received_at"),
            "source": "callback",
            **(dict(raw) if isinstance(raw, Mapping) else {}),
        }
        if state.get("expiring"):
            pa["expiring"] = True
    return {
        "delivery_id": f"{pa['pa_id']}@{seq}",
        "event": str(payload.get("event") or EVENT),
        "pa_id": pa["pa_id"],
        "cursor": seq,
        "change": change,
        "pa": pa,
    }


class WebhookSender:
    """POSTs queued changes to ``url``, signed with ``secret`` when there is one."""

    def __init__(self, url: str | None, secret: str | None, *, timeout_s: float = 10.0) -> None:
        self.url = url
        self._secret = secret or None
        self._http = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def deliver(self, payload: Mapping[str, Any], pa_now: Mapping[str, Any]) -> None:
        if not self.url:
            raise DeliveryFailed(
                "callbacks.forward_url is not configured",
                reason="not_configured",
                hold=Hold.CONFIGURATION,
            )
        body = body_for(payload, pa_now)
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"pa-bridge/{__version__}",
            DELIVERY_HEADER: body["delivery_id"],
            EVENT_HEADER: body["event"],
        }
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign(self._secret, raw, int(time.time()))
        try:
            r = self._http.post(self.url, content=raw, headers=headers)
        except httpx.HTTPError as e:
            raise DeliveryFailed(
                f"webhook unreachable: {type(e).__name__}", reason="unreachable"
            ) from None
        if 200 <= r.status_code < 300:
            return
        if r.status_code in (401, 403):
            raise DeliveryFailed(
                f"webhook refused pa-bridge's access: HTTP {r.status_code} (held; check"
                " callbacks.forward_secret and the receiver, then restart or reload)",
                reason="credentials",
                hold=Hold.CONFIGURATION,
            )
        if 400 <= r.status_code < 500 and r.status_code not in (408, 429):
            raise DeliveryFailed(
                f"webhook refused: HTTP {r.status_code} (not retried; fix the receiver,"
                " then pa-bridge queue retry)",
                retryable=False,
                reason="refused",
            )
        raise DeliveryFailed(f"webhook answered HTTP {r.status_code}", reason="http_status")
