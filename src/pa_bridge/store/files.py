"""The database as a file, for the commands store IT runs beside (or instead of) the
daemon: ``queue``, ``doctor``, ``backup``, ``restore``. Nothing here creates a
database or migrates one.

The live database is only ever opened through SQLite here: opening and closing a
descriptor of it ourselves would drop the daemon's POSIX locks if this ran in the
daemon's process (see :func:`create_private`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from . import meta
from . import outbox as queue_table
from .engine import StoreError, StoreMissing
from .migrations import MIGRATIONS
from .pg import PgDatabase

__all__ = [
    "BackupCopy",
    "CannotOpen",
    "CopyFacts",
    "FileFacts",
    "connect_existing",
    "copy_facts",
    "destination_problem",
    "inspect_file",
    "mark_file",
    "open_database",
    "open_url",
    "PgFacts",
    "pg_facts",
    "Snapshot",
    "staged",
    "starts_with",
    "transaction",
]

_Progress = Callable[[int, int], None]


def destination_problem(dest: Path, *, force: bool) -> str | None:
    """Why a backup cannot be written to ``dest`` (a directory, a file that exists and
    no ``force``, a directory that does not exist), or None: the same words for the
    SQLite copy and the PostgreSQL dump."""
    if dest.is_dir():
        return f"{dest} is a directory; give a file name"
    if dest.exists() and not force:
        return f"{dest} exists; choose another name or pass --force"
    if not dest.parent.is_dir():
        return f"no directory {dest.parent}"
    return None


@contextlib.contextmanager
def staged(dest: Path, *, force: bool, error: Callable[[str], Exception]) -> Iterator[Path]:
    """The private file (``dest.partial``, umask 077) a backup is written to in the
    block. When the block ends well it is put in place at ``dest`` with mode 0600
    (:func:`_publish`; ``error`` of why not); on any failure it is removed. The same
    for the SQLite copy and the dump."""
    tmp = dest.with_name(dest.name + ".partial")
    old_umask = os.umask(0o077)
    try:
        yield tmp
        os.chmod(tmp, 0o600)
        problem = _publish(tmp, dest, force=force)
        if problem is not None:
            raise error(problem)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.umask(old_umask)


def _publish(tmp: Path, dest: Path, *, force: bool) -> str | None:
    """Put a finished backup ``tmp`` in place at ``dest``: replacing it with ``force``,
    else never over a file someone created meanwhile (a hard link, or a plain rename
    where the file system has none). None when done, else why not."""
    exists = f"{dest} exists; choose another name or pass --force"
    try:
        if force:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)  # fails if someone created dest meanwhile
            tmp.unlink()
    except FileExistsError:
        return exists
    except OSError as e:
        if force or e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            return f"cannot write {dest}: {e.strerror}"
        # no hard links on this file system
        if dest.exists():
            return exists
        os.replace(tmp, dest)
    return None


def starts_with(file: Path, magic: bytes) -> bool:
    """Whether ``file`` begins with ``magic`` (False when it cannot be read): a backup's
    format by its first bytes."""
    try:
        with open(file, "rb") as fh:
            return fh.read(len(magic)) == magic
    except OSError:
        return False


def connect_existing(path: str | os.PathLike[str], *, write: bool = False) -> sqlite3.Connection:
    """A connection to an existing pa-bridge database, for the commands store IT runs
    beside the daemon (``queue``, ``restore``): never creates the file, never migrates,
    read-only unless ``write``. Raises :class:`StoreMissing` or :class:`StoreError`
    with a message that says what to check."""
    p = Path(path)
    if not p.exists():
        raise StoreMissing(
            f"no database at {p} (check storage.path in the config; has the daemon run?)"
        )
    if not p.is_file():
        raise StoreError(f"{p} is not a file (check storage.path)")
    try:
        conn = sqlite3.connect(
            f"file:{p}?mode=rw", uri=True, isolation_level=None, timeout=10.0,
            check_same_thread=False,
        )  # fmt: skip
        conn.execute("PRAGMA busy_timeout = 10000")
        if not write:
            conn.execute("PRAGMA query_only = ON")
        names = _tables(conn)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {p}: {e}") from None
    if "outbox" not in names or "_sqlite_migrations" not in names:
        conn.close()
        raise StoreError(f"{p} is not a pa-bridge database (no outbox table)")
    return conn


def open_database(path: str | os.PathLike[str], *, write: bool = False) -> Database:
    """:func:`connect_existing` as the handle the table modules take."""
    return Database(connect_existing(path, write=write))


def open_url(url: str, *, write: bool = False) -> PgDatabase:
    """A connection to an existing pa-bridge database on PostgreSQL (``storage.url``),
    for ``queue``: never migrates, read-only unless ``write``. Raises
    :class:`StoreError` saying what to check."""
    import psycopg

    from . import pg_migrations
    from .pg import cannot_connect, connect, redact_url

    try:
        raw = connect(url, readonly=not write)
    except psycopg.Error as e:
        raise cannot_connect(url, e) from None
    try:
        problem = _pg_schema_problem(raw)
        if problem is not None:
            raise StoreError(f"{redact_url(url)}: {problem} (`pa-bridge doctor` tells more)")
        if not pg_migrations.applied(raw):
            raise StoreError(f"{redact_url(url)} is not a pa-bridge database (has the daemon run?)")
    except psycopg.errors.InsufficientPrivilege:
        raw.close()
        raise StoreError(
            f"{redact_url(url)}: this user may not read pa-bridge's tables"
            " (`pa-bridge doctor` lists the privileges it lacks)"
        ) from None
    except StoreError:
        raw.close()
        raise
    return PgDatabase(raw)


@dataclass(frozen=True)
class PgFacts:
    """What doctor reads from a PostgreSQL database (``storage.url``)."""

    server_version: int  # e.g. 150018
    applied: list[str] | None  # migrations applied, in order (None: may not read them)
    missing_privileges: list[str]  # "table: PRIVILEGE" this user lacks
    can_create: bool  # may create tables in its schema (needed for pending migrations)
    failed: int  # queue items failed for good
    restore_mark: str | None = None  # a restored copy no daemon has served yet
    # why this user has no schema to work in (its search_path names none it may use)
    schema_problem: str | None = None
    #: held queue items by why they wait (``outbox.held_counts``)
    held: dict[str, int] = field(default_factory=dict)


#: what the daemon does to each table
_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def _pg_schema_problem(raw: Any) -> str | None:
    """None when the search_path gives this user a schema (``current_schema()``);
    else why not: a schema it names lacks USAGE for this user, or none exists."""
    row = raw.execute("SELECT current_schema(), current_setting('search_path')").fetchone()
    if row is None or row[0] is not None:
        return None
    path = str(row[1])
    for name in (n.strip().strip('"') for n in path.split(",")):
        if not name or name == "$user":
            continue
        found = raw.execute(
            "SELECT has_schema_privilege(current_user, oid, 'USAGE') FROM pg_namespace"
            " WHERE nspname = %s",
            [name],
        ).fetchone()
        if found is not None and not found[0]:
            return f"this user may not use schema {name} (no USAGE privilege on it)"
    return f"no schema of its search_path ({path}) exists"


def pg_facts(url: str, mark_key: str | None = None) -> PgFacts:
    """Read-only checks of a PostgreSQL database (``mark_key``: the restore mark to
    look for in ``meta``). Raises :class:`StoreError` naming the (password-less) URL
    when it cannot connect."""
    import psycopg

    from . import pg_migrations
    from .pg import cannot_connect, connect

    try:
        raw = connect(url, readonly=True)
    except psycopg.Error as e:
        raise cannot_connect(url, e) from None
    try:
        version = int(raw.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
        problem = _pg_schema_problem(raw)
        if problem is not None:  # every read below would look at nothing
            return PgFacts(version, None, [], False, 0, None, problem)
        missing = []
        tables = [
            r[0]
            for r in raw.execute(
                # pg_class, not information_schema: that one hides the tables this
                # user has no privilege on, which are the ones to report
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
                " ORDER BY c.relname"
            )
        ]
        for table in tables:
            for priv in _PRIVILEGES:
                row = raw.execute(
                    "SELECT has_table_privilege(current_user, quote_ident(%s), %s)",
                    [table, priv],
                ).fetchone()
                if row is None or not row[0]:
                    missing.append(f"{table}: {priv}")
        # a table this user may not read is reported above, not read (that would fail)
        readable = {t for t in tables if f"{t}: SELECT" not in missing}
        unreadable = "pa_bridge_migrations" in tables and "pa_bridge_migrations" not in readable
        applied = None if unreadable else pg_migrations.applied(raw)
        row = raw.execute(
            "SELECT has_schema_privilege(current_user, current_schema(), 'CREATE')"
        ).fetchone()
        failed = 0
        if "outbox" in readable:
            failed = queue_table.count_failed(PgDatabase(raw))
        mark = None
        if mark_key is not None and "meta" in readable:
            mark = meta.get(PgDatabase(raw), mark_key)
        held = queue_table.held_counts(PgDatabase(raw)) if "outbox" in readable else {}
        return PgFacts(version, applied, missing, bool(row and row[0]), failed, mark, held=held)
    finally:
        raw.close()


@contextlib.contextmanager
def transaction(db: Database | PgDatabase) -> Iterator[Database | PgDatabase]:
    """One write transaction on a database opened with :func:`open_database` (immediate:
    it takes SQLite's write lock at once) or :func:`open_url`."""
    db.conn.execute("BEGIN" if isinstance(db, PgDatabase) else "BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        with contextlib.suppress(Exception):
            db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# ---- doctor ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FileFacts:
    """What doctor reads from a database file."""

    applied: list[str]  # migrations applied, in order
    backup_taken_at: str | None  # the mark of a backup copy not yet served
    failed: int  # queue items failed for good
    #: held queue items by why they wait (``outbox.held_counts``)
    held: dict[str, int] = field(default_factory=dict)


def inspect_file(path: Path, backup_mark: str) -> FileFacts:
    """Read a database without changing anything next to it. With no -wal file the
    daemon is not running: it is opened immutable so that nothing (not even a -shm) is
    created. Raises :data:`DatabaseError` when it cannot be read."""
    wal = Path(f"{path}-wal")
    shm = Path(f"{path}-shm")
    mode = "mode=ro" if wal.exists() and shm.exists() else "mode=ro&immutable=1"
    conn = sqlite3.connect(f"file:{path}?{mode}", uri=True, timeout=5)
    try:
        conn.execute("PRAGMA query_only = ON")
        tables = _tables(conn)
        db = Database(conn)
        applied = [m.name for m in MIGRATIONS.applied(db)]
        taken_at = meta.get(db, backup_mark) if "meta" in tables else None
        failed = queue_table.count_failed(db) if "outbox" in tables else 0
        held = queue_table.held_counts(db) if "outbox" in tables else {}
    finally:
        conn.close()
    return FileFacts(applied, taken_at, failed, held)


# ---- backup and restore ------------------------------------------------------------------
@dataclass(frozen=True)
class BackupCopy:
    pages: int
    integrity: str  # "ok", or what integrity_check found


class Snapshot:
    """One read transaction on the live database, held for the whole copy: every step
    of SQLite's backup API reads the same snapshot (WAL: the daemon's writes go on
    meanwhile and are simply not in the copy) and the copy never restarts."""

    def __init__(self, src: Path, cannot_read: Callable[[str], Exception]) -> None:
        """Raises ``cannot_read(message)`` when ``src`` is missing or unreadable."""
        if not src.exists():
            raise cannot_read(f"no database at {src} (check storage.path; has the daemon run?)")
        if not src.is_file():
            raise cannot_read(f"{src} is not a file")
        try:
            # a plain connection (it may need to create the -shm of a WAL database);
            # query_only: this command never writes to the live database
            conn = sqlite3.connect(
                f"file:{src}?mode=rw", uri=True, isolation_level=None, timeout=10
            )
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA query_only = ON")
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as e:
            raise cannot_read(f"cannot read {src}: {e}") from None
        self._conn = conn

    def copy_to(
        self, tmp: Path, *, pages: int, progress: _Progress | None, mark: tuple[str, str]
    ) -> BackupCopy:
        """Copy into the new file ``tmp``, write the ``mark`` (key, value) into its
        ``meta``, switch it to a single self-contained file (``journal_mode=DELETE``)
        and check it. Raises :data:`DatabaseError`."""
        target = sqlite3.connect(str(tmp), isolation_level=None)
        try:

            def step(status: int, remaining: int, total: int) -> None:
                if progress is not None:
                    progress(total - remaining, total)

            self._conn.backup(target, pages=pages, progress=step)
            total = int(target.execute("PRAGMA page_count").fetchone()[0])
            _mark(target, *mark)
            target.execute("PRAGMA journal_mode = DELETE").fetchone()
            rows = target.execute("PRAGMA integrity_check").fetchall()
        finally:
            target.close()
        return BackupCopy(total, "; ".join(str(r[0]) for r in rows))

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("COMMIT")
        self._conn.close()


def _mark(conn: sqlite3.Connection, key: str, value: str) -> None:
    if "meta" in _tables(conn):
        meta.put(Database(conn), key, value)


def mark_file(path: Path, key: str, value: str) -> None:
    """Write ``key`` = ``value`` into the ``meta`` of a copy no daemon serves."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        _mark(conn, key, value)
    finally:
        conn.close()


@dataclass(frozen=True)
class CopyFacts:
    integrity: str
    is_pa_bridge: bool
    mark: str | None
    undelivered: int  # queue items the daemon holds for review when it serves the copy


class CannotOpen(StoreError):
    """SQLite could not open the file at all."""


def copy_facts(path: Path, mark_key: str) -> CopyFacts:
    """Check a backup copy, read-only. Raises :class:`CannotOpen`, or
    :data:`DatabaseError` when it cannot be read."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise CannotOpen(str(e)) from None
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        integrity = "; ".join(str(r[0]) for r in rows)
        if integrity != "ok":
            return CopyFacts(integrity, False, None, 0)
        if not {"outbox", "meta", "pas"} <= _tables(conn):
            return CopyFacts(integrity, False, None, 0)
        db = Database(conn)
        undelivered = queue_table.to_hold_after_restore(db)
        return CopyFacts(integrity, True, meta.get(db, mark_key), undelivered)
    finally:
        conn.close()
