"""PostgreSQL's side of ``pa-bridge backup`` and ``pa-bridge restore`` (decision 0023):
the backup's lock and mark, the snapshot pg_dump copies, and the checks around a
restore. The commands themselves run Debian's pg_dump and pg_restore (``pg_tools``).

The restore mark (``backup.taken_at``, decision 0009) has to be in the copy and not in
the live database, where a daemon starting would take it for a restore. pg_dump copies
one snapshot, so the backup, holding the backup lock (an advisory lock), commits the
mark, opens a transaction whose snapshot pg_dump then copies (``pg_export_snapshot``),
and deletes the mark again at once. A daemon that starts in between sees the lock
taken and leaves the mark alone (:func:`backup_running`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from . import meta, outbox
from ._db import Database, is_postgres
from .engine import StoreError
from .pg import PgDatabase, application_name, cannot_connect, redact_url, why

__all__ = ["BackupSession", "backup_running", "pa_bridge_sessions", "settle_restored"]

#: advisory lock class of backups (pg.py: 2 claims, 3 fleet jobs; queue items use
#: the one-bigint form, a separate key space)
_BACKUP_CLASS = 4
_APP = "pa-bridge-backup"


def _connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, connect_timeout=10, application_name=_APP, **kw)
    except psycopg.Error as e:
        raise cannot_connect(url, e) from None


def _fail(url: str, e: psycopg.Error) -> StoreError:
    return StoreError(f"{redact_url(url)}: {why(e)}")


def backup_running(db: Database) -> bool:
    """Inside a write job: whether a ``pa-bridge backup`` of this database holds its
    lock now (its mark, if seen, is for the copy). Always False on SQLite, whose copy
    gets the mark written into the copy alone."""
    if not is_postgres(db):
        return False
    row = db.conn.execute(
        "SELECT pg_try_advisory_xact_lock_shared(?, 0)", [_BACKUP_CLASS]
    ).fetchone()
    return not bool(row[0])


class BackupSession:
    """The backup's two connections: one holds the backup lock, the other the
    transaction whose snapshot pg_dump copies. Close it when pg_dump is done."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = _connect(url, autocommit=True)
        self._lock_db = PgDatabase(self._lock)
        self._snap: psycopg.Connection[Any] | None = None
        self._locked = False

    def take_lock(self, wait_s: float) -> bool:
        """The backup lock (one backup at a time); False if another holds it past
        ``wait_s``."""
        try:
            self._lock.execute(f"SET lock_timeout = {int(wait_s * 1000)}")
            self._lock.execute("SELECT pg_advisory_lock(%s, 0)", [_BACKUP_CLASS])
        except pg_errors.LockNotAvailable:
            return False
        except psycopg.Error as e:
            raise _fail(self.url, e) from None
        self._locked = True
        return True

    def schema(self) -> str | None:
        """The schema pa-bridge's tables are in (the URL's search path), or None when
        it does not exist."""
        try:
            row = self._lock.execute("SELECT current_schema()").fetchone()
        except psycopg.Error as e:
            raise _fail(self.url, e) from None
        return None if row is None or row[0] is None else str(row[0])

    def has_table(self, name: str) -> bool:
        try:
            row = self._lock.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()
        except psycopg.Error as e:
            raise _fail(self.url, e) from None
        return bool(row and row[0])

    def snapshot_with_mark(self, key: str, value: str) -> tuple[str, str | None]:
        """(the name of a snapshot that holds the mark, the mark in it). A mark already
        there (a restored copy no daemon has served yet) is kept as it is. Without a
        ``meta`` table (not a pa-bridge database yet) there is no mark."""
        try:
            with_meta = self.has_table("meta")
            mine = False
            existing = None
            if with_meta:
                existing = meta.get(self._lock_db, key)
                if existing is None:
                    meta.add(self._lock_db, key, value)
                    mine = True
            self._snap = _connect(self.url)
            self._snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self._snap.read_only = True
            row = self._snap.execute("SELECT pg_export_snapshot()").fetchone()
            assert row is not None
            if mine:  # the live database never keeps it past this instant
                self._lock.execute("DELETE FROM meta WHERE key = %s AND value = %s", [key, value])
        except psycopg.Error as e:
            raise _fail(self.url, e) from None
        return str(row[0]), (value if mine else existing)

    def close(self) -> None:
        if self._snap is not None:
            with contextlib.suppress(psycopg.Error):
                self._snap.close()  # rolls the snapshot's transaction back
        with contextlib.suppress(psycopg.Error):
            if self._locked:  # now: a closed session's locks go when its backend exits
                self._lock.execute("SELECT pg_advisory_unlock(%s, 0)", [_BACKUP_CLASS])
        with contextlib.suppress(psycopg.Error):
            self._lock.close()


def pa_bridge_sessions(url: str) -> int:
    """Connections of pa-bridge daemons and commands to this database now (not ours):
    by the name they go by, ``pa-bridge`` or the URL's own ``application_name``."""
    with contextlib.closing(_connect(url, autocommit=True)) as conn:
        try:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name IN ('pa-bridge', %s) AND pid <> pg_backend_pid()",
                [application_name(url)],
            ).fetchone()
        except psycopg.Error as e:
            raise _fail(url, e) from None
    return int(row[0]) if row else 0


def settle_restored(url: str, key: str, fallback: str) -> tuple[str, int]:
    """After pg_restore: (the restore mark, undelivered queue items). A copy that has
    no mark (made with pg_dump by hand) gets ``fallback``, so the daemon that serves
    it next treats it as the restore it is."""
    with contextlib.closing(_connect(url, autocommit=True)) as conn:
        db = PgDatabase(conn)
        try:
            meta.add(db, key, fallback)
            mark = meta.get(db, key)
            queued = outbox.to_hold_after_restore(db)
        except psycopg.Error as e:
            raise _fail(url, e) from None
    assert mark is not None
    return mark, queued
