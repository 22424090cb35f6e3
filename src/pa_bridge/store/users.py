"""The ``users`` and ``sessions`` tables: the people who sign in to the console
(issue 29, decision 0034). A session row is keyed by the sha256 of its cookie's
secret: the secret itself is never stored. A TOTP secret is sealed like PHI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

from ._db import Database, is_postgres
from ._rows import all_rows, first_row
from .crypto import seal_text, unseal_text

__all__ = [
    "SessionRow",
    "UserRow",
    "any_users",
    "end_session",
    "end_sessions_of",
    "get",
    "get_session",
    "insert",
    "list_all",
    "new_session",
    "record_failure",
    "record_success",
    "set_session",
    "touch_session",
    "update",
]


class UserRow(TypedDict):
    name: str
    display_name: str
    source: str
    password_hash: str | None
    totp_secret: str | None
    totp_last_step: int | None
    disabled: int
    failed_count: int
    locked_until: float | None
    created_at: str
    updated_at: str
    last_sign_in_at: str | None


class SessionRow(TypedDict):
    id: str
    user_name: str | None
    stage: str
    display_name: str | None
    created_at: float
    last_seen: float
    remote: str | None
    pending_json: str | None
    ended_at: float | None
    ended_why: str | None


def _open(db: Database, row: dict[str, Any] | None) -> UserRow | None:
    if row is None:
        return None
    row["totp_secret"] = unseal_text(db, row["totp_secret"], "users.totp_secret", row["name"])
    return cast(UserRow, row)


def get(db: Database, name: str) -> UserRow | None:
    return _open(db, first_row(db, "SELECT * FROM users WHERE name = ?", [name]))


def list_all(db: Database) -> list[UserRow]:
    rows = all_rows(
        db,
        "SELECT name, display_name, source, disabled, failed_count, locked_until, created_at,"
        " updated_at, last_sign_in_at, totp_secret IS NOT NULL AS has_totp FROM users"
        " ORDER BY name",
    )
    return cast(list[UserRow], rows)


def any_users(db: Database) -> bool:
    return db.conn.execute("SELECT 1 FROM users LIMIT 1").fetchone() is not None


def insert(
    db: Database,
    name: str,
    display_name: str,
    source: str,
    password_hash: str | None,
    totp_secret: str | None,
    now: str,
) -> None:
    db.conn.execute(
        "INSERT INTO users (name, display_name, source, password_hash, totp_secret,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            name,
            display_name,
            source,
            password_hash,
            seal_text(db, totp_secret, "users.totp_secret", name),
            now,
            now,
        ],
    )


def update(db: Database, name: str, now: str, **values: Any) -> bool:
    """Set the given columns (ours: display_name, password_hash, totp_secret,
    disabled, ...); False for no such user."""
    if "totp_secret" in values:
        values["totp_secret"] = seal_text(db, values["totp_secret"], "users.totp_secret", name)
    sets = ", ".join(f"{k} = ?" for k in values)
    cur = db.conn.execute(
        f"UPDATE users SET {sets}, updated_at = ? WHERE name = ?",  # noqa: S608 - our column names
        [*values.values(), now, name],
    )
    return cur.rowcount > 0


def record_failure(
    db: Database, name: str, lock_for: Callable[[int], float | None], now: str
) -> tuple[int, float | None]:
    """One more failure (a write job): the count after it, and the lock
    ``lock_for(count)`` sets (None: none). A lock already set for longer stays: a guess
    checked at the same time never shortens or lifts one."""
    lock = " FOR UPDATE" if is_postgres(db) else ""
    row = db.conn.execute(
        f"SELECT failed_count, locked_until FROM users WHERE name = ?{lock}",  # noqa: S608 - fixed SQL
        [name],
    ).fetchone()
    if row is None:
        return 0, None
    count = int(row[0]) + 1
    until = lock_for(count)
    keep = None if row[1] is None else float(row[1])
    db.conn.execute(
        "UPDATE users SET failed_count = ?, locked_until = ?, updated_at = ? WHERE name = ?",
        [count, until if until is not None and (keep is None or until > keep) else keep, now, name],
    )
    return count, until


def record_success(db: Database, name: str, now: str, totp_step: int | None = None) -> None:
    db.conn.execute(
        "UPDATE users SET failed_count = 0, locked_until = NULL, last_sign_in_at = ?,"
        " totp_last_step = coalesce(?, totp_last_step), updated_at = ? WHERE name = ?",
        [now, totp_step, now, name],
    )


def take_totp_step(db: Database, name: str, step: int) -> bool:
    """Accept TOTP time step ``step`` for ``name`` once: False when it (or a later
    one) was used already (a code seen on the screen is not good twice)."""
    cur = db.conn.execute(
        "UPDATE users SET totp_last_step = ? WHERE name = ?"
        " AND (totp_last_step IS NULL OR totp_last_step < ?)",
        [step, name, step],
    )
    return cur.rowcount > 0


# ---- sessions ----------------------------------------------------------------------


def new_session(
    db: Database,
    sid: str,
    user_name: str | None,
    stage: str,
    display_name: str | None,
    now: float,
    remote: str | None,
    pending_json: str | None = None,
) -> None:
    db.conn.execute(
        "INSERT INTO sessions (id, user_name, stage, display_name, created_at, last_seen,"
        " remote, pending_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [sid, user_name, stage, display_name, now, now, remote, pending_json],
    )


def get_session(db: Database, sid: str) -> SessionRow | None:
    return cast(SessionRow | None, first_row(db, "SELECT * FROM sessions WHERE id = ?", [sid]))


def touch_session(db: Database, sid: str, now: float) -> None:
    db.conn.execute(
        "UPDATE sessions SET last_seen = ? WHERE id = ? AND ended_at IS NULL AND last_seen < ?",
        [now, sid, now],
    )


def set_session(db: Database, sid: str, **values: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in values)
    db.conn.execute(
        f"UPDATE sessions SET {sets} WHERE id = ?",  # noqa: S608 - our column names
        [*values.values(), sid],
    )


def end_session(db: Database, sid: str, now: float, why: str) -> bool:
    """End a session not ended yet; whether it was live."""
    cur = db.conn.execute(
        "UPDATE sessions SET ended_at = ?, ended_why = ? WHERE id = ? AND ended_at IS NULL",
        [now, why, sid],
    )
    return cur.rowcount > 0


def end_sessions_of(db: Database, name: str, now: float, why: str) -> int:
    cur = db.conn.execute(
        "UPDATE sessions SET ended_at = ?, ended_why = ? WHERE user_name = ? AND ended_at IS NULL",
        [now, why, name],
    )
    return cur.rowcount


def purge_sessions(db: Database, before: float) -> int:
    """Sessions ended, or started, before ``before`` (retention of the table)."""
    cur = db.conn.execute("DELETE FROM sessions WHERE coalesce(ended_at, created_at) < ?", [before])
    return cur.rowcount
