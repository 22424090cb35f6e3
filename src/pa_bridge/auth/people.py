"""People signing in to the console (issue 29, decision 0034): passwords (argon2id),
a TOTP second factor, lock-out with back-off, sessions that end when idle, at a
fixed maximum, or when signed out. No Flask here: the web layer hands over what the
browser sent and sets the cookie this answers.

A session is a random secret in a cookie; the database keeps only its sha256, so a
copy of the database signs no one in. Every sign-in, failure, lock-out, sign-out and
ended session is an audit entry (actor ``user:<name>``, or ``unknown`` for a name
that does not exist: a password typed into the name field is never recorded).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import argon2
import pyotp

from ..config import Settings, is_loopback, parse_listen
from ..logs import log_event
from ..store import Database, Store, StoreUnavailable, audit, now_iso, users
from ..store.users import SessionRow, UserRow

__all__ = [
    "MIN_PASSWORD",
    "Person",
    "People",
    "SessionEnded",
    "SignInRefused",
    "Step",
    "hash_password",
    "new_totp_secret",
    "session_id",
    "totp_uri",
]

#: the shortest password ``users add`` and ``users reset`` take
MIN_PASSWORD = 12
#: the longest a lock-out lasts, however often it doubled
MAX_LOCK_S = 3600.0
#: a session's last activity is written at most this often (a poll is not activity)
TOUCH_EVERY_S = 15.0
#: how long a half-done sign-in (password given, code next; or at the provider) lasts
PENDING_S = 300.0

_HASHER = argon2.PasswordHasher()  # argon2id, the library's current parameters


@functools.cache
def _dummy_hash() -> str:
    """Verified against for a name that does not exist, so the answer takes as long.
    Made at the first such sign-in, not at import: hashing holds 64 MiB and a CPU for
    about 0.15 s, which every start of the daemon and of every command paid (issue 31)."""
    return _HASHER.hash(secrets.token_urlsafe(16))


#: passwords checked at once in this process: each check holds 64 MiB and a CPU for
#: a while, so a burst of sign-ins (16 at once made the daemon 1.1 GB, and a claim
#: wait 1.2 s) is told to try again instead, and a lock-out is reached after at most
#: one guess more than it allows
VERIFY_SLOTS = 2
_VERIFYING = threading.BoundedSemaphore(VERIFY_SLOTS)


@contextlib.contextmanager
def _verifying() -> Iterator[None]:
    """A slot to check a password in, or :class:`SignInRefused` (503) at once: a
    request never waits for one, so the intake threads stay free for claims."""
    if not _VERIFYING.acquire(blocking=False):
        raise SignInRefused(503, "sign_in_busy", "too many sign-ins at once: try again", 1)
    try:
        yield
    finally:
        _VERIFYING.release()


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def new_totp_secret() -> str:
    return pyotp.random_base32()


def totp_uri(secret: str, name: str, issuer: str = "pa-bridge") -> str:
    """The ``otpauth://`` URI an authenticator app takes (as a QR code or typed)."""
    return pyotp.TOTP(secret).provisioning_uri(name=name, issuer_name=issuer)


def session_id(token: str) -> str:
    """What the database keeps of a session's secret."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Person:
    """Who a request comes from: the sign-in name and the name shown to others."""

    name: str
    display_name: str
    session: str  # the session's id (a hash), for sign-out

    @property
    def actor(self) -> str:
        return f"user:{self.name}"


@dataclass(frozen=True)
class Step:
    """What a sign-in step answers: ``stage`` "totp" (a code is next) or "active"
    (signed in), and the cookie's new secret."""

    stage: str
    token: str
    person: Person | None = None


class SignInRefused(Exception):
    """A sign-in step that failed: ``code`` for the page, ``status`` for HTTP,
    ``retry_after`` seconds for a lock-out."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class SessionEnded(Exception):
    """The cookie names no live session: ``why`` is idle, max_age, signed_out,
    disabled, reset, or unknown."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class People:
    """The sign-in use case on a store (one per intake app)."""

    def __init__(
        self, store: Store, settings: Settings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        c = settings.console
        self.idle_s = c.idle_minutes * 60
        self.max_s = c.session_max_hours * 3600
        host, _ = parse_listen(settings.intake.listen)
        #: the listener others can reach: sign-in is required whether or not anyone
        #: was added yet
        self.exposed = not is_loopback(host)
        self.totp_required = c.totp == "required" or (c.totp == "auto" and self.exposed)
        self._any: tuple[float, bool] = (0.0, False)
        self._lock = threading.Lock()
        #: the lock (its end) whose refusals the audit log has an entry for, per name:
        #: one entry per lock, not one per refused attempt
        self._locked_said: dict[str, float] = {}

    # ---- whether the console asks for a person -------------------------------------
    def required(self) -> bool:
        """Sign-in is required on a listener others can reach, and on loopback once
        anyone was added (``pa-bridge users add``); read at most every 2 s."""
        if self.exposed:
            return True
        now = time.monotonic()
        at, found = self._any
        if now - at > 2.0 or not found:
            found = users.any_users(self.store.reader())
            self._any = (now, found)
        return found

    # ---- signing in -------------------------------------------------------------------
    def _audit(self, actor: str, action: str, detail: str | None, remote: str | None) -> None:
        at = now_iso(self.clock())
        try:
            self.store.write(
                lambda db: audit.add(db, actor, action, None, detail, at=at, remote=remote)
            )
        except StoreUnavailable:
            raise SignInRefused(503, "storage_unavailable", "try again in a moment") from None

    def _refuse_locked(self, row: UserRow, now: float, remote: str | None) -> None:
        until = row["locked_until"]
        if until is not None and until > now:
            wait = int(until - now) + 1
            with self._lock:  # once per lock: a request holding an older read of the
                # row (an earlier lock that a guess in flight has lengthened) says nothing
                said = until <= self._locked_said.get(row["name"], 0.0)
                if not said:
                    self._locked_said[row["name"]] = until
            if not said:
                self._audit(f"user:{row['name']}", "sign_in.locked", f"{wait} s left", remote)
            raise SignInRefused(
                429,
                "locked",
                f"too many failed sign-ins: try again in {max(1, round(wait / 60))} minute(s)",
                wait,
            )

    def _failed(self, row: UserRow, now: float, remote: str | None, what: str) -> SignInRefused:
        """Count a failure; lock the name after ``lockout_after`` in a row, for
        ``lockout_minutes`` doubled with each further failure (at most an hour). The
        count is the database's, read in the write: failures checked at the same time
        each count."""
        c = self.settings.console

        def lock_for(count: int) -> float | None:
            if count < c.lockout_after:
                return None
            return now + min(
                MAX_LOCK_S, float(c.lockout_minutes * 60 * 2 ** (count - c.lockout_after))
            )

        at = now_iso(now)

        def job(db: Database) -> None:
            count, until = users.record_failure(db, row["name"], lock_for, at)
            detail = f"{what}; {count} in a row" + ("; locked" if until else "")
            audit.add(
                db, f"user:{row['name']}", "sign_in.failed", None, detail, at=at, remote=remote
            )

        self.store.write(job)
        return SignInRefused(401, "sign_in_failed", "the name, password or code is not right")

    def begin(self, name: str, password: str, remote: str | None) -> Step:
        """The name and password. A wrong one, an unknown name, a disabled or locked
        one: :class:`SignInRefused` (the same words for all but the lock-out)."""
        now = self.clock()
        row = users.get(self.store.reader(), name.strip()) if name.strip() else None
        if row is None or row["source"] != "local" or not row["password_hash"]:
            with _verifying():
                try:
                    _HASHER.verify(_dummy_hash(), password or "-")
                except argon2.exceptions.VerificationError:
                    pass
            self._audit("unknown", "sign_in.failed", "no such name", remote)
            raise SignInRefused(401, "sign_in_failed", "the name, password or code is not right")
        if row["disabled"]:
            self._audit(f"user:{row['name']}", "sign_in.refused", "disabled", remote)
            raise SignInRefused(401, "sign_in_failed", "the name, password or code is not right")
        self._refuse_locked(row, now, remote)
        with _verifying():
            # read again in the slot: a guess checked meanwhile may have locked the name
            fresh = users.get(self.store.reader(), row["name"])
            pw_hash = None if fresh is None or fresh["disabled"] else fresh["password_hash"]
            if fresh is None or pw_hash is None:
                raise SignInRefused(
                    401, "sign_in_failed", "the name, password or code is not right"
                )
            row = fresh
            self._refuse_locked(row, now, remote)
            try:
                _HASHER.verify(pw_hash, password)
            except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
                raise self._failed(row, now, remote, "wrong password") from None
        rehash = _HASHER.check_needs_rehash(pw_hash)
        if self.totp_required:
            token = secrets.token_urlsafe(32)
            self.store.write(
                lambda db: users.new_session(
                    db, session_id(token), row["name"], "totp", row["display_name"], now, remote
                )
            )
            return Step("totp", token)
        return self._activate(
            row, now, remote, None, new_hash=hash_password(password) if rehash else None
        )

    def second_factor(self, token: str, code: str, remote: str | None) -> Step:
        """The code from the authenticator, for the session :meth:`begin` started."""
        now = self.clock()
        sid = session_id(token)
        s = users.get_session(self.store.reader(), sid)
        if (
            s is None
            or s["stage"] != "totp"
            or s["ended_at"] is not None
            or now - s["created_at"] > PENDING_S
        ):
            raise SignInRefused(401, "sign_in_expired", "start again with your name and password")
        row = users.get(self.store.reader(), str(s["user_name"]))
        if row is None or row["disabled"]:
            raise SignInRefused(401, "sign_in_failed", "the name, password or code is not right")
        self._refuse_locked(row, now, remote)
        step = self._totp_step(row, code.strip().replace(" ", ""), now)
        if step is None:
            raise self._failed(row, now, remote, "wrong code")
        if not self.store.write(lambda db: users.take_totp_step(db, row["name"], step)):
            raise self._failed(row, now, remote, "code used already")
        self.store.write(lambda db: users.end_session(db, sid, now, "second_factor"))
        return self._activate(row, now, remote, step)

    @staticmethod
    def _totp_step(row: UserRow, code: str, now: float) -> int | None:
        """The time step whose code ``code`` is (the one before and after are taken
        too, for a clock a little off); None when it is none of them."""
        secret = row["totp_secret"]
        if not secret or not code.isdigit():
            return None
        totp = pyotp.TOTP(secret)
        here = totp.timecode(datetime.fromtimestamp(now, tz=UTC))
        for step in (here, here - 1, here + 1):
            if hmac.compare_digest(totp.generate_otp(step), code):
                return step
        return None

    def _activate(
        self,
        row: UserRow,
        now: float,
        remote: str | None,
        totp_step: int | None,
        *,
        new_hash: str | None = None,
        how: str = "password",
    ) -> Step:
        token = secrets.token_urlsafe(32)
        sid = session_id(token)
        at = now_iso(now)
        detail = how + (" and code" if totp_step is not None else "")

        def job(db: Database) -> None:
            users.record_success(db, row["name"], at, totp_step)
            if new_hash is not None:
                users.update(db, row["name"], at, password_hash=new_hash)
            users.new_session(db, sid, row["name"], "active", row["display_name"], now, remote)
            audit.add(db, f"user:{row['name']}", "sign_in", None, detail, at=at, remote=remote)

        self.store.write(job)
        return Step("active", token, Person(row["name"], row["display_name"], sid))

    def activate_external(self, name: str, display_name: str, remote: str | None, how: str) -> Step:
        """Sign in a person an identity provider vouched for (OpenID Connect): their
        row is created or its display name updated; a disabled one is refused."""
        now = self.clock()
        at = now_iso(now)
        row = users.get(self.store.reader(), name)
        if row is not None and (row["disabled"] or row["source"] != "oidc"):
            why = "disabled" if row["disabled"] else "name belongs to a local user"
            self._audit(f"user:{name}", "sign_in.refused", f"{how}: {why}", remote)
            raise SignInRefused(401, "sign_in_failed", "this account may not sign in here")

        def job(db: Database) -> None:
            if row is None:
                users.insert(db, name, display_name, "oidc", None, None, at)
            elif row["display_name"] != display_name:
                users.update(db, name, at, display_name=display_name)

        self.store.write(job)
        fresh = users.get(self.store.reader(), name)
        assert fresh is not None
        return self._activate(fresh, now, remote, None, how=how)

    # ---- a request's session -----------------------------------------------------------
    def session(self, token: str, *, activity: bool, remote: str | None) -> Person:
        """The person a cookie's secret signs in, or :class:`SessionEnded`. A session
        idle longer than ``idle_minutes``, or older than ``session_max_hours``, is ended
        here (and audited). ``activity``: the person did something (a poll is not)."""
        now = self.clock()
        sid = session_id(token)
        s = users.get_session(self.store.reader(), sid)
        if s is None or s["stage"] != "active":
            raise SessionEnded("unknown")
        if s["ended_at"] is not None:
            raise SessionEnded(str(s["ended_why"] or "signed_out"))
        why = None
        if now - s["last_seen"] > self.idle_s:
            why = "idle"
        elif now - s["created_at"] > self.max_s:
            why = "max_age"
        if why is not None:
            self._end(s, now, why, remote)
            raise SessionEnded(why)
        if activity and now - s["last_seen"] >= TOUCH_EVERY_S:
            try:
                self.store.write(lambda db: users.touch_session(db, sid, now))
            except StoreUnavailable:
                pass  # the next request touches it
        return Person(str(s["user_name"]), str(s["display_name"] or s["user_name"]), sid)

    def _end(self, s: SessionRow, now: float, why: str, remote: str | None) -> None:
        at = now_iso(now)

        def job(db: Database) -> None:
            if users.end_session(db, s["id"], now, why):
                action = "sign_out" if why == "signed_out" else "session.ended"
                audit.add(db, f"user:{s['user_name']}", action, None, why, at=at, remote=remote)

        try:
            self.store.write(job)
        except StoreUnavailable:
            pass

    def sign_out(self, token: str, remote: str | None) -> bool:
        """End the session of this secret; whether there was a live one."""
        s = users.get_session(self.store.reader(), session_id(token))
        if s is None or s["ended_at"] is not None:
            return False
        self._end(s, self.clock(), "signed_out", remote)
        return True

    def state(self, person: Person) -> dict[str, Any]:
        """What the console shows of the session (no secret)."""
        s = users.get_session(self.store.reader(), person.session)
        now = self.clock()
        idle_left = max(0, int(self.idle_s - (now - s["last_seen"]))) if s else 0
        return {
            "signed_in": True,
            "name": person.name,
            "display_name": person.display_name,
            "idle_minutes": self.settings.console.idle_minutes,
            "idle_seconds_left": idle_left,
        }

    def record(
        self, actor: str, action: str, object_id: str | None, detail: str | None = None
    ) -> None:
        """An audit entry for what a request did (``actor`` may carry ``@address``);
        a database that takes no write is logged, not raised: what was done is done."""
        at = now_iso(self.clock())
        try:
            self.store.write(lambda db: audit.add(db, actor, action, object_id, detail, at=at))
        except StoreUnavailable:
            log_event("audit.unavailable", level=logging.ERROR, action=action)

    # ---- OpenID Connect's half-done sign-ins -------------------------------------------
    def pending(self, token: str, pending: dict[str, Any], remote: str | None) -> None:
        now = self.clock()
        self.store.write(
            lambda db: users.new_session(
                db, session_id(token), None, "oidc", None, now, remote, json.dumps(pending)
            )
        )

    def take_pending(self, token: str) -> dict[str, Any] | None:
        """The state of an OIDC sign-in under way (once: it is ended here)."""
        now = self.clock()
        sid = session_id(token)
        s = users.get_session(self.store.reader(), sid)
        if s is None or s["stage"] != "oidc" or s["ended_at"] is not None:
            return None
        if not self.store.write(lambda db: users.end_session(db, sid, now, "returned")):
            return None
        if now - s["created_at"] > PENDING_S:
            return None
        found: dict[str, Any] = json.loads(s["pending_json"] or "{}")
        return found


# ---- opening a PA on the service's hosted page -------------------------------------


def with_remote_user(url: str, display_name: str | None, phone: str | None, fax: str | None) -> str:
    """The hosted page's URL with ``remote_user[display_name]``, ``[phone_number]`` and
    ``[fax_number]`` (pa-service-interface.md: saved in the PA's history), each only
    when known."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    extra = [
        (f"remote_user[{k}]", v)
        for k, v in (("display_name", display_name), ("phone_number", phone), ("fax_number", fax))
        if v
    ]
    if not extra:
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(extra)) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def pharmacy_contact(settings: Settings, provider_id: str | None) -> tuple[str | None, str | None]:
    """(phone, fax) of the PA's store: its ``[[pharmacies]]`` entry's, else ``[console]``'s."""
    c = settings.console
    for p in settings.pharmacies:
        if provider_id is not None and p.provider_id == provider_id.strip():
            return p.phone_number or c.phone_number, p.fax_number or c.fax_number
    return c.phone_number, c.fax_number
