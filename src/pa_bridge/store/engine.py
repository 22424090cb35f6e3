"""The engine: connections, the single writer, group commit, checkpoints, health.

One writer thread owns the write connection. Callers hand it small functions
(``store.write(fn)``); it runs every job that is waiting in ONE transaction, each
job inside its own savepoint, commits once (WAL, synchronous=FULL: one fsync for the
whole batch) and only then resolves each caller's future. A caller that got a result
therefore knows its rows are on disk; a caller whose job raised, or whose batch
could not commit, gets the exception. Readers use their own connections and never
block the writer (WAL).
"""

from __future__ import annotations

import calendar
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlite_utils import Database as SqliteDatabase

from . import meta
from ._db import Database
from .crypto import Keyring
from .migrations import MIGRATIONS

__all__ = [
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoreMissing",
    "DatabaseError",
    "create_private",
    "SqliteDatabase",
    "now_iso",
    "parse_iso",
]

#: what a failing statement raises, for callers that map it (web/errors.py) without
#: importing the driver themselves
DatabaseError = sqlite3.Error

T = TypeVar("T")


def now_iso(t: float | None = None) -> str:
    """UTC ISO 8601 with milliseconds, sortable as text."""
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def parse_iso(text: str) -> float:
    """The inverse of :func:`now_iso`, to the second: epoch seconds (UTC)."""
    return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))


class StoreError(Exception):
    """A storage failure."""


class StoreUnavailable(StoreError):
    """The write could not be committed (disk full, read-only, locked, writer stopped)."""


class StoreMissing(StoreError):
    """The database a command was pointed at does not exist (it is never created)."""


def create_private(path: Path) -> None:
    """Create a missing database file with mode 0600 before SQLite opens it.

    Never open (and so never close) a descriptor of a file SQLite may already have
    open in this process: closing ANY descriptor of a file drops every POSIX lock the
    process holds on it (SQLite's "How To Corrupt An SQLite Database File", section
    2.2). Another process (``pa-bridge backup``, a ``sqlite3`` shell) then believes it
    is the last connection when it closes and deletes the WAL under the daemon. So the
    file is created with ``O_EXCL`` only when it does not exist (no connection can
    hold a lock on a file that did not exist), and modes are set by path, which opens
    nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    _tighten_modes(path)


def _tighten_modes(path: Path) -> None:
    """chmod 0600 the database, its -wal and -shm, by path (no descriptor opened)."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.chmod(p, 0o600)


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA foreign_keys = ON")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    return conn


#: SQLite result codes (by name, extended codes included) that mean the database
#: itself is failing rather than the statement
_FAILING_DATABASE = (
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
    "SQLITE_CANTOPEN",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_READONLY",
    "SQLITE_PROTOCOL",
    "SQLITE_NOMEM",
)


_PENDING, _RUNNING, _CANCELLED = 0, 1, 2


class _Job:
    """A write function and, once run, its outcome. Only submit() jobs carry a Future
    (a Condition and an RLock each): a write() caller reads the outcome after taking
    the write lock, when it is already there.

    ``state`` moves from pending to running (a writer took it into a batch) or to
    cancelled (its caller gave up waiting before any writer took it), never both, under
    the store's ``_state_lock``: a caller told "not stored" can rely on it."""

    __slots__ = ("done", "fn", "future", "ok", "state", "then", "value")

    def __init__(self, fn: Callable[[Database], Any], *, with_future: bool) -> None:
        self.fn = fn
        self.then: Callable[[bool], None] | None = None
        self.future: Future[Any] | None = Future() if with_future else None
        self.done = False
        self.ok = False
        self.value: Any = None
        self.state = _PENDING

    def finish(self, ok: bool, value: Any) -> None:
        self.ok, self.value, self.done = ok, value, True
        if self.future is not None:
            if ok:
                self.future.set_result(value)
            else:
                self.future.set_exception(value)


def _nothing(db: Database) -> None:
    """The job :meth:`Store.flush` commits the deferred jobs with."""


def probe_round_trip(
    store: Any,
    driver_error: type[Exception],
    why: Callable[[BaseException], str],
    timeout: float,
) -> str | None:
    """The health probe both engines share: a real one-row write of ``meta``'s
    ``health.probe_at`` and a read of it back; what failed, or ``None``."""
    at = now_iso()
    try:
        store.write(lambda db: meta.put(db, "health.probe_at", at), timeout=timeout)
    except StoreError as e:
        return str(e)
    except driver_error as e:
        return f"cannot write: {why(e)}"
    try:
        meta.get(store.reader(), "health.probe_at")
    except driver_error as e:
        return f"cannot read: {why(e)}"
    return None


class Store:
    """The database: migrations at open, one writer thread, per-thread readers."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_batch: int = 256,
        busy_timeout_ms: int = 5000,
        checkpoint_seconds: float = 1.0,
        defer_seconds: float = 1.0,
        keys: Keyring | None = None,
    ) -> None:
        self.path = Path(path)
        self.keys = keys
        self.defer_seconds = defer_seconds
        old_umask = os.umask(0o077)  # -wal and -shm files are created 0600 too
        self._wconn: Any = None  # PgStore's is psycopg's
        try:
            create_private(self.path)
            self._wconn = _connect(self.path)
            mode = self._wconn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"could not switch {self.path} to WAL (got {mode})")
            self._wconn.execute("PRAGMA synchronous = FULL")
            self._wconn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            # Checkpoints run on their own thread (see _checkpoint_loop), not inside
            # the commit that happens to cross the WAL's size threshold.
            self._wconn.execute("PRAGMA wal_autocheckpoint = 0")
            self._wdb: Database = self._keyed(SqliteDatabase(self._wconn))
            MIGRATIONS.apply(SqliteDatabase(self._wconn))
        except (sqlite3.Error, OSError) as e:  # a start names the file, no traceback
            if self._wconn is not None:
                self._wconn.close()
            why = e.strerror if isinstance(e, OSError) else str(e)
            raise StoreError(
                f"cannot open the database at {self.path}: {why} (the service user must be"
                " able to write the file and its directory, where SQLite keeps the -wal and"
                " -shm files: `pa-bridge doctor` checks both)"
            ) from None
        finally:
            os.umask(old_umask)
        _tighten_modes(self.path)
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)
        self._start_writer(max_batch)
        self.checkpoints = 0
        self.wal_truncations = 0
        self._checkpoint_seconds = checkpoint_seconds
        self._checkpointer: threading.Thread | None = threading.Thread(
            target=self._checkpoint_loop, name="pa-bridge-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _start_writer(self, max_batch: int) -> None:
        """The state and threads both engines share; the write connection is open."""
        #: the last write failure (message, monotonic time); cleared by a good commit
        self.last_error: tuple[str, float] | None = None
        self._max_batch = max_batch
        self._seq: int | None = None
        self._claim_locks: dict[str, threading.Lock] = {}
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: deferred jobs (:meth:`defer`), and how many are not committed yet
        self._later: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._later_pending = 0
        #: deferred jobs that failed or whose batch could not commit (lost)
        self.deferred_lost = 0
        self._local = threading.local()
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()
        self.last_commit_at = time.monotonic()
        self.commits = 0
        self._closing = threading.Event()
        self._wlock = threading.Lock()
        self._state_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pa-bridge-writer", daemon=True)
        self._thread.start()

    #: the longest a deferred job (:meth:`defer`) waits for a commit when nothing else
    #: is written
    defer_seconds: float = 1.0
    #: the keys PHI columns are sealed with (``store.crypto``, decision 0033); None:
    #: written plain (tools and tests that never saw a key)
    keys: Keyring | None = None

    def _keyed(self, db: Any) -> Any:
        """``db`` with this store's keys, for the table modules (``crypto.keys_of``)."""
        db.keys = self.keys
        return db

    #: which engine (the table modules ask through the handle, see ``_db.is_postgres``)
    dialect = "sqlite"
    #: what the driver raises
    _Error: type[Exception] = sqlite3.Error
    _BEGIN = "BEGIN IMMEDIATE"

    @property
    def _closed(self) -> bool:
        return self._closing.is_set()

    # ---- writing -------------------------------------------------------------
    # Flat combining: whoever holds the write lock commits every job waiting in the
    # queue, its own and other callers', as one batch. A caller of write() takes the
    # lock itself (no hand-off to another thread when it is alone); the writer thread
    # does the same for jobs queued with submit() that nobody waits on.
    def submit(self, fn: Callable[[Database], T]) -> Future[T]:
        """Queue ``fn``; the future resolves after the commit (the writer thread runs it
        unless a write() caller gets there first)."""
        job = _Job(fn, with_future=True)
        assert job.future is not None
        if self._closed:
            job.future.set_exception(StoreUnavailable("the database is closed"))
            return job.future
        self._jobs.put(job)
        self._wake.set()
        return job.future

    def defer(
        self, fn: Callable[[Database], Any], then: Callable[[bool], None] | None = None
    ) -> None:
        """Queue ``fn`` for the next commit without waking anyone (decision 0025): it
        rides in the next batch any caller commits, or the writer thread commits it
        after at most ``defer_seconds``. Only for writes a power cut may lose (the
        answer's record of the last second), never for what a caller was promised is
        stored. A reader that must see it calls :meth:`flush` first. ``then`` is told
        whether it was committed, once its batch is over (on the committing thread)."""
        if self._closed:
            self.deferred_lost += 1
            if then is not None:
                then(False)
            return
        job = _Job(fn, with_future=False)
        job.then = then
        with self._state_lock:
            self._later_pending += 1
        self._later.put(job)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Commit the deferred jobs not committed yet (nothing when there are none), so
        a read that follows sees them; waits for a batch already committing them. False
        when they could not be committed: the reader then sees what is stored."""
        if not self._later_pending or self._closed:
            return True
        try:
            self.write(_nothing, timeout=timeout)
        except StoreError:
            return False
        return True

    def write(self, fn: Callable[[Database], T], timeout: float | None = 10.0) -> T:
        """Run ``fn`` in a write transaction and return once it is committed."""
        ((ok, value),) = self.write_all([fn], timeout=timeout)
        if not ok:
            raise value
        result: T = value
        return result

    def write_all(
        self, fns: list[Callable[[Database], Any]], timeout: float | None = 10.0
    ) -> list[tuple[bool, Any]]:
        """Run every function in ``fns`` (in one commit when they fit in one batch) and
        return once committed: ``(True, value)`` or ``(False, exception)`` per
        function, in order. A function that raises undoes only its own part."""

        def refused(why: str) -> list[tuple[bool, Any]]:
            return [(False, StoreUnavailable(why))] * len(fns)

        if self._closed:
            return refused("the database is closed")
        jobs = [_Job(fn, with_future=False) for fn in fns]
        for job in jobs:
            self._jobs.put(job)
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            # Jobs no writer has taken yet are cancelled: "not stored" is then true.
            # A job a writer already took is in a batch that is committing (or failing):
            # wait for that outcome rather than guess (issue 19).
            self._wake.set()
            out: list[tuple[bool, Any]] = []
            for job in jobs:
                with self._state_lock:
                    if job.state == _PENDING:
                        job.state = _CANCELLED
                if job.state == _CANCELLED:
                    out.append((False, StoreUnavailable("the database did not commit in time")))
                    continue
                while not job.done:
                    time.sleep(0.005)
                out.append((job.ok, job.value))
            return out
        try:
            if not all(job.done for job in jobs):
                if self._closed:
                    return refused("the database is closed")
                self._drain()
        finally:
            self._wlock.release()
        return [(job.ok, job.value) for job in jobs]

    def exclusive(self, fn: Callable[[sqlite3.Connection], T], timeout: float | None = 60.0) -> T:
        """Run ``fn`` on the write connection outside any transaction while no other
        write can start: for statements that cannot run in a transaction (VACUUM).
        Jobs already queued are committed first; writes arriving meanwhile wait."""
        if self._closed:
            raise StoreUnavailable("the database is closed")
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            raise StoreUnavailable("the write path did not become free in time")
        try:
            if self._closed:
                raise StoreUnavailable("the database is closed")
            self._drain()
            return fn(self._wconn)
        finally:
            self._wlock.release()
            self._wake.set()  # jobs submitted meanwhile

    def _drain(self, *, deferred_alone: bool = False) -> None:
        """Run everything queued, in batches; call holding the write lock. Deferred jobs
        ride in a batch of other jobs; only with ``deferred_alone`` (the idle writer,
        close) are they committed by themselves."""
        self._ensure_writer()
        conn, db = self._wconn, self._wdb
        while True:
            batch: list[_Job] = []
            while len(batch) < self._max_batch:
                try:
                    batch.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            if not batch and not (deferred_alone and self._later_pending):
                return
            later = 0
            while later < self._max_batch:
                try:
                    batch.insert(later, self._later.get_nowait())
                except queue.Empty:
                    break
                later += 1
            if not batch:
                return
            try:
                self._run_batch(conn, db, batch)
            finally:
                if later:
                    lost = sum(1 for job in batch[:later] if not job.ok)
                    with self._state_lock:
                        self._later_pending -= later
                        self.deferred_lost += lost
                    for job in batch[:later]:
                        if job.then is not None:
                            with contextlib.suppress(Exception):  # never stop the writer
                                job.then(job.ok)

    def _run(self) -> None:
        while True:
            # idle, it still wakes every defer_seconds to commit deferred jobs
            if not self._wake.wait(self.defer_seconds) and not self._later_pending:
                continue
            self._wake.clear()
            with self._wlock:
                self._drain(deferred_alone=True)
                if self._closed:
                    self._close_writer()
                    return

    def _ensure_writer(self) -> None:
        """Reconnect a write connection that was lost (PostgreSQL); SQLite: nothing."""

    def _close_writer(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._wconn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._wconn.close()

    def _must_retry(self, results: list[tuple[_Job, bool, Any]]) -> bool:
        """Whether a batch lost to a concurrent transaction (PostgreSQL: a deadlock or
        a serialization failure) and is to be run again; SQLite has one writer."""
        return False

    def _run_batch(self, conn: Any, db: Database, batch: list[_Job]) -> None:
        """One transaction for the whole batch. Fast path: no savepoints. If any job
        raises, the transaction is rolled back and the batch is run again with one
        savepoint per job, so a failing job undoes only its own part. Jobs are pure
        functions of the database, so running one twice is safe."""
        for _ in range(5):
            results = self._attempt(conn, db, batch, savepoints=False)
            if results is not None and not all(ok for _, ok, _ in results):
                with contextlib.suppress(self._Error):
                    conn.execute("ROLLBACK")
                self._seq = None
                if self._must_retry(results):
                    continue
                results = self._attempt(conn, db, batch, savepoints=True)
                if results is not None and self._must_retry(results):
                    with contextlib.suppress(self._Error):
                        conn.execute("ROLLBACK")
                    continue
            break
        if results is None:
            return
        try:
            self._commit(conn)
        except self._Error as e:
            with contextlib.suppress(self._Error):
                conn.execute("ROLLBACK")
            self._seq = None
            err = StoreUnavailable(f"cannot commit: {e}")
            self.last_error = (str(err), time.monotonic())
            for job, _ok, _v in results:
                job.finish(False, err)
            return
        self.last_commit_at = time.monotonic()
        self.last_error = None
        self.commits += 1
        for job, ok, value in results:
            job.finish(ok, value)

    def _commit(self, conn: Any) -> None:
        """Commit the batch's transaction (PostgreSQL: unless its fast attempt sent the
        COMMIT already, with its last statements)."""
        conn.execute("COMMIT")

    def _attempt(
        self, conn: Any, db: Database, batch: list[_Job], *, savepoints: bool
    ) -> list[tuple[_Job, bool, Any]] | None:
        try:
            conn.execute(self._BEGIN)
        except self._Error as e:
            err = StoreUnavailable(f"cannot begin a write: {e}")
            self.last_error = (str(err), time.monotonic())
            for job in batch:
                job.finish(False, err)
            return None
        results: list[tuple[_Job, bool, Any]] = []
        for job in batch:
            if job.state != _RUNNING:
                with self._state_lock:
                    if job.state == _CANCELLED:
                        continue  # its caller was told it was not stored
                    job.state = _RUNNING
            try:
                if savepoints:
                    conn.execute("SAVEPOINT job")
                value = job.fn(db)
                if savepoints:
                    conn.execute("RELEASE SAVEPOINT job")
                results.append((job, True, value))
            except BaseException as exc:
                failure = self._as_unavailable(exc)
                if not savepoints:
                    return [(job, False, failure)]  # caller rolls back, retries with savepoints
                with contextlib.suppress(self._Error):
                    conn.execute("ROLLBACK TO SAVEPOINT job")
                    conn.execute("RELEASE SAVEPOINT job")
                results.append((job, False, failure))
        return results

    def _as_unavailable(self, e: BaseException) -> BaseException:
        """A job that failed because the database did (I/O error, full disk, corrupt or
        read-only file, lock) fails with :class:`StoreUnavailable` naming SQLite's
        message, and the store remembers it for health; a job's own errors (a
        constraint, a missing table, a bug) pass as they are."""
        if not isinstance(e, sqlite3.Error):
            return e
        name = str(getattr(e, "sqlite_errorname", "") or "")
        if not name.startswith(_FAILING_DATABASE):
            return e
        err = StoreUnavailable(f"cannot write: {e} ({name})")
        err.__cause__ = e
        self.last_error = (str(err), time.monotonic())
        return err

    #: the WAL's size past which a checkpoint makes the writer wait for it and starts the
    #: WAL again from nothing (see _checkpoint_loop)
    wal_limit_bytes: int = 16 * 1024 * 1024
    #: how long that checkpoint waits for readers still in the old WAL (the writer
    #: waits meanwhile); past it, it tries again at the next round
    _TRUNCATE_WAIT_MS = 200

    def _checkpoint_loop(self) -> None:
        """Copy committed pages from the WAL into the database file every
        ``checkpoint_seconds`` when something was committed meanwhile. PASSIVE: it never
        blocks the writer or readers. Durability does not depend on it: a commit is on
        disk once its WAL frames are (FULL).

        The writer reuses the WAL from its start only when it begins a transaction just
        as a checkpoint has caught up and no reader is in the WAL; under sustained
        writes with readers that never happens, and the WAL grew without bound (370 MB
        in 21 s, kept until restart: issue 32). So when the WAL is past
        ``wal_limit_bytes`` after a round, the next checkpoint holds the write path
        (writes wait, as for VACUUM), waits up to ``_TRUNCATE_WAIT_MS`` for readers to
        leave the WAL, and truncates it (TRUNCATE): the WAL stays within about the
        limit plus one round of writes, and shrinks back after a burst."""
        try:
            conn = _connect(self.path)
            conn.execute(f"PRAGMA busy_timeout = {self._TRUNCATE_WAIT_MS}")
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        except sqlite3.Error:  # the writer reports what is wrong with the file
            return
        try:
            done_at = self.commits
            while not self._closing.wait(self._checkpoint_seconds):
                if self.commits == done_at:
                    continue
                done_at = self.commits
                with contextlib.suppress(sqlite3.Error):
                    _busy, frames, _copied = conn.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchone()
                    self.checkpoints += 1
                    if frames * page_size > self.wal_limit_bytes:
                        self._truncate_wal(conn)
        finally:
            conn.close()

    def _truncate_wal(self, conn: sqlite3.Connection) -> None:
        """A TRUNCATE checkpoint while no write runs (see :meth:`_checkpoint_loop`)."""
        if not self._wlock.acquire(timeout=1.0):  # busy writers: the next round
            return
        try:
            if not self._closed:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                self.wal_truncations += 1
        finally:
            self._wlock.release()
            self._wake.set()  # jobs submitted meanwhile

    def next_seq(self, db: Database) -> int:
        """The next change_seq of the PA feed; call only inside a write job.

        A time in microseconds that never goes backwards: the larger of the last
        sequence + 1, the clock, and the floor a restore set (``feed.seq_floor``). So a
        database restored from a backup hands out cursors after every one handed out
        before the restore, and a client holding a later cursor misses nothing new
        (decision 0009). Fits in 53 bits (JSON-safe) until the year 2255."""
        if self._seq is None:
            row = db.execute(
                "SELECT coalesce(max(change_seq), 0),"
                " coalesce((SELECT CAST(value AS INTEGER) FROM meta"
                " WHERE key = 'feed.seq_floor'), 0) FROM pas"
            ).fetchone()
            self._seq = max(int(row[0]), int(row[1]))
        self._seq = max(self._seq + 1, int(time.time() * 1_000_000))
        return self._seq

    # ---- coordination between daemons (one daemon per SQLite file: in-process) ---------
    @contextlib.contextmanager
    def claim_lock(self, key: str) -> Iterator[None]:
        """Held while a PA is submitted for the claim with ``key``: two clicks on the
        same claim send it once. SQLite has one daemon per file, so a lock in this
        process; PostgreSQL locks it in the database, across daemons."""
        with self._state_lock:
            lock = self._claim_locks.setdefault(key, threading.Lock())
        with lock:
            yield

    @contextlib.contextmanager
    def item_lock(self, item_id: int) -> Iterator[bool]:
        """Whether this daemon may deliver queue item ``item_id`` now (False: another
        daemon is delivering it). One daemon per SQLite file: always True."""
        yield True

    @contextlib.contextmanager
    def fleet_once(self, name: str, every_s: float) -> Iterator[bool]:
        """Whether this daemon runs the scheduled job ``name`` now: with several
        daemons on one database, one of them, once per ``every_s``. SQLite: True."""
        yield True

    @property
    def writer_alive(self) -> bool:
        return self._thread.is_alive()

    def problem(self, timeout: float = 2.0) -> str | None:
        """None when the database takes writes and reads, else what is wrong, in words
        fit for a log line and the health answer (no data in it). Probes with a real
        one-row write (a commit of nothing proves nothing about the disk)."""
        if self._closed:
            return "the database is closed"
        if not self.writer_alive:
            return "the database writer thread has stopped"
        try:
            st = os.stat(self.path)
        except OSError:
            return f"{self.path} was removed while the daemon has it open"
        if (st.st_dev, st.st_ino) != self._identity:
            return f"{self.path} was replaced while the daemon has it open"
        if not os.path.exists(f"{self.path}-wal"):
            return f"{self.path}-wal was removed while the daemon has it open"
        return probe_round_trip(self, sqlite3.Error, str, timeout)

    # ---- reading -------------------------------------------------------------
    def reader(self) -> Database:
        """This thread's read-only connection."""
        db: Database | None = getattr(self._local, "db", None)
        if db is None:
            conn = _connect(self.path, readonly=True)
            with self._readers_lock:
                self._readers.append(conn)
            db = self._keyed(SqliteDatabase(conn))
            self._local.db = db
        return db

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Database]:
        """A consistent read transaction."""
        db = self.reader()
        db.conn.execute("BEGIN")
        try:
            yield db
        finally:
            db.conn.execute("COMMIT")

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        cur = self.reader().conn.execute(sql, params)
        cols = [c[0] for c in cur.description] if cur.description else []
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def schema_current(self) -> bool:
        return not MIGRATIONS.pending(cast(SqliteDatabase, self.reader()))

    # ---- lifecycle -----------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Finish queued writes, checkpoint, close every connection."""
        if self._closed:
            return
        self._closing.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout)
        self._wake.set()
        self._thread.join(timeout)
        with self._readers_lock:
            for c in self._readers:
                with contextlib.suppress(self._Error):
                    c.close()
            self._readers.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
