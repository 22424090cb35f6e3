"""The ``Idempotency-Key`` header (issue 16, decision 0017).

A dispensing system that re-sends a request (its own retry after a timeout, a second
click) sends the same key again. The first request with a key records, in the same
transaction as its work, what it made (the claim, the PA, the reversal) and a
fingerprint of what was sent; a later request with the key and the same content gets
that object back, and nothing is done twice (no second claim, no second call to the
service). The same key with other content is a mistake: 422.

A key is one request's: the same key on another path (``claims``, ``submit``,
``reversals``) is a mistake too (422). A replay answers the status the first answer
had (a submit that created its PA says so again). Keys are kept with the database (no PHI in
them: the fingerprint is a SHA-256) and purged with the rows they name.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..store import Database, Store, now_iso
from ..store import idempotency as idempotency_keys
from .bodies import ClaimAnswer, Pa, ReversalAnswer
from .errors import BridgeError, Refused

__all__ = [
    "IdempotencyConflict",
    "KeyTaken",
    "Replayed",
    "ReplayedClaimAnswer",
    "ReplayedPa",
    "ReplayedReversalAnswer",
    "check_key",
    "earlier",
    "fingerprint",
    "key_reused",
    "lookup",
    "record",
]

#: printable ASCII without blanks at either end, like Stripe's (255) and the IETF draft
MAX_KEY_CHARS = 255


class Replayed:
    """Marks an answer given again for a key used before (the web layer says so in the
    ``Idempotent-Replayed`` header)."""


class ReplayedClaimAnswer(ClaimAnswer, Replayed):
    """A claim's answer, again."""


class ReplayedPa(Pa, Replayed):
    """A submit's PA, again."""


class ReplayedReversalAnswer(ReversalAnswer, Replayed):
    """A reversal's answer, again."""


def key_reused() -> BridgeError:
    return Refused(
        "idempotency_key_reused",
        "this Idempotency-Key was used before with another request; use a new key for new content",
    )


class IdempotencyConflict(Exception):
    """The key was used before with other content."""


class KeyTaken(Exception):
    """Raised inside a write job: another request recorded the key first."""

    def __init__(self, object_id: str) -> None:
        super().__init__(object_id)
        self.object_id = object_id


def check_key(raw: str | None) -> str | None:
    """The header's value, or None when absent; ValueError when it is not a usable key."""
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_KEY_CHARS or not all(32 < ord(c) < 127 for c in key):
        raise ValueError(
            f"'Idempotency-Key' must be 1-{MAX_KEY_CHARS} printable ASCII characters"
            " without blanks (a UUID is a good key)"
        )
    return key


def fingerprint(*parts: Any) -> str:
    """SHA-256 of the request's content, canonical JSON (key order does not matter)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def lookup(store: Store, scope: str, key: str, fp: str) -> str | None:
    """The object a key made before (None when the key is new). Raises
    :class:`IdempotencyConflict` when it was used with other content or on another
    path."""
    found = earlier(store, scope, key, fp)
    return None if found is None else found.object_id


def earlier(store: Store, scope: str, key: str, fp: str) -> idempotency_keys.KeyRow | None:
    """:func:`lookup`'s record, with what the first answer said (``created``)."""
    found = idempotency_keys.get(store.reader(), key)
    if found is None:
        return None
    if found.scope != scope or found.fingerprint != fp:
        raise IdempotencyConflict(scope)
    return found


def record(
    db: Database, scope: str, key: str, fp: str, object_id: str, created: bool | None = None
) -> None:
    """Record the key inside the write job that does the work (``created``: whether it
    made the object now, when a replay must say it again); raises :class:`KeyTaken` (so the
    job undoes its part) when a concurrent request recorded it first, or
    :class:`IdempotencyConflict` when that one had other content or another path."""
    found = idempotency_keys.get(db, key)
    if found is not None:
        if found.scope != scope or found.fingerprint != fp:
            raise IdempotencyConflict(scope)
        raise KeyTaken(found.object_id)
    idempotency_keys.insert(db, scope, key, fp, object_id, now_iso(), created)
