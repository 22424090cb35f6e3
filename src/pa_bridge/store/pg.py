"""The PostgreSQL engine: the same :class:`~pa_bridge.store.engine.Store` interface on a
database several daemons share (issue 18).

Each daemon keeps the store's single writer (one write connection, group commit of
the jobs waiting, decision 0004); the daemons' writers run side by side under
PostgreSQL's row locks at READ COMMITTED. What must hold across daemons is done in
the database, never in Python:

- the PA feed's positions come from one counter row, taken by :meth:`next_seq` and
  held until commit, so positions are handed out in commit order (decision 0021);
- a PA submit holds an advisory lock on its claim key (:meth:`claim_lock`);
- a queue item is delivered by the daemon holding its advisory lock
  (:meth:`item_lock`, decision 0020);
- scheduled maintenance runs on one daemon, once per period (:meth:`fleet_once`);
- callbacks are deduplicated by the unique ``dedupe_key`` (``ON CONFLICT DO NOTHING``).

A batch that loses a deadlock to another daemon is rolled back and run again (its
jobs are pure functions of the database).
"""

from __future__ import annotations

import contextlib
import functools
import select
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from . import meta
from . import pg_migrations as schema
from ._db import Database
from ._pg_pipeline import PipelineCursor
from .crypto import Keyring
from .engine import Store, StoreError, StoreUnavailable, _Job, probe_round_trip

__all__ = [
    "PgDatabase",
    "PgReader",
    "PgStore",
    "cannot_connect",
    "connect",
    "redact_url",
    "why",
]

#: advisory lock classes (two-int form); queue items use the one-bigint form, a
#: separate key space
_CLAIM_CLASS = 2
_FLEET_CLASS = 3


@functools.lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    """The table modules' ``?`` placeholders in psycopg's spelling."""
    return sql.replace("%", "%%").replace("?", "%s")


def _execute(raw: psycopg.Connection[Any], sql: str, parameters: Any) -> psycopg.Cursor[Any]:
    """``sql`` with ``?`` placeholders on a psycopg connection."""
    return raw.execute(_pg_sql(sql), list(parameters or ()))


class _PgConn:
    """``execute(sql, params)`` with ``?`` placeholders on a psycopg connection."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: Any = (), /) -> psycopg.Cursor[Any]:
        return _execute(self.raw, sql, parameters)

    def close(self) -> None:
        self.raw.close()

    def executemany(self, sql: str, seq: Any, /) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        cur.executemany(_pg_sql(sql), [list(p) for p in seq])
        return cur


#: what a handle's ``conn`` is: one connection's, or a store's readers'
_C = TypeVar("_C", "_PgConn", "_PooledConn")


class _Handle(Generic[_C]):
    """The handle table functions take (see ``_db.Database``), on PostgreSQL."""

    dialect = "postgresql"
    __slots__ = ("_conn", "keys")
    _conn: _C
    #: the keys PHI columns are sealed with (``store.crypto``); None: written plain
    keys: Any

    @property
    def conn(self) -> _C:
        return self._conn

    def execute(self, sql: str, parameters: Any = ()) -> Any:
        return self._conn.execute(sql, parameters)


class PgDatabase(_Handle[_PgConn]):
    """The handle on one connection (a write job's, a command's)."""

    __slots__ = ()

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self._conn = _PgConn(raw)
        self.keys = None


def _connect_kwargs(url: str, *, timeout_s: float = 10, settings: str = "") -> dict[str, Any]:
    given = psycopg.conninfo.conninfo_to_dict(url)
    options = f"{given.get('options') or ''} {settings}".strip()
    return {
        "autocommit": True,
        "cursor_factory": PipelineCursor,
        "connect_timeout": max(1, int(timeout_s)),
        "options": options,
        "application_name": application_name(url),
    }


def application_name(url: str) -> str:
    """The name pa-bridge's connections to ``url`` go by: the URL's own
    ``application_name``, else ``pa-bridge`` (``pa-bridge restore`` counts them)."""
    return str(psycopg.conninfo.conninfo_to_dict(url).get("application_name") or "pa-bridge")


def connect(
    url: str, *, readonly: bool = False, timeout_s: float = 10, settings: str = ""
) -> psycopg.Connection[Any]:
    """An autocommit connection; ``settings`` (``-c name=value ...``) after the URL's
    own ``options`` (a search_path, say), which are kept, as is its
    ``application_name`` (else ``pa-bridge``)."""
    kwargs = _connect_kwargs(url, timeout_s=timeout_s, settings=settings)
    conn = psycopg.connect(url, **kwargs)
    if readonly:
        _read_only(conn)
    return conn


def _read_only(conn: psycopg.Connection[Any]) -> None:
    """Make a reader's session read-only once it is connected, not in its startup
    ``options``: libpq's ``target_session_attrs=read-write`` (a URL naming a primary and
    its standby) would take such a session for a standby's and refuse every host."""
    conn.execute("SET default_transaction_read_only = on")


class _Rows:
    """A read's answer, fetched in full before its connection went back to the pool."""

    __slots__ = ("_rows", "description", "rowcount")

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self.description = cur.description
        self.rowcount = cur.rowcount
        self._rows = iter(cur.fetchall() if cur.description is not None else ())

    def fetchone(self) -> Any:
        return next(self._rows, None)

    def fetchall(self) -> list[Any]:
        return list(self._rows)

    def __iter__(self) -> Iterator[Any]:
        return self._rows


class _PooledConn:
    """A reader's ``execute``: on the connection this thread holds for a lock or a
    snapshot, if any, else on one borrowed from the pool for the one statement
    (readers are autocommit: each statement sees the latest commits anyway)."""

    __slots__ = ("_store",)

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        held: psycopg.Connection[Any] | None = getattr(self._store._local, "held", None)
        if held is not None:
            return _execute(held, sql, parameters)
        with self._store._borrow() as raw:
            return _Rows(_execute(raw, sql, parameters))


class PgReader(_Handle[_PooledConn]):
    """What :meth:`PgStore.reader` gives: each statement on a connection of the pool."""

    __slots__ = ()

    def __init__(self, store: PgStore) -> None:
        self._conn = _PooledConn(store)
        self.keys = None


def redact_url(url: str) -> str:
    """The URL without its password, for logs and health."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]  # one host[:port] or several, as given
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, ""))


#: SQLSTATE classes that mean the database (or the way to it) is failing, not the job:
#: 08 connection, 53 resources (disk full), 57 operator intervention (shutdown),
#: 58 system error, 25006 read-only transaction, 55P03 a lock another session holds
#: past the lock timeout (SQLite's "database is locked")
_FAILING = ("08", "53", "57", "58", "25006", "55P03")
_READ_ONLY = "25006"
#: a read waiting for a pooled connection looks this often whether the database can
#: be reached at all (see PgStore._borrow)
_POOL_SLICE_S = 0.5
#: a batch that hit one of these lost to another daemon's transaction: run it again
_RETRY = ("40001", "40P01")
_IN_ERROR = psycopg.pq.TransactionStatus.INERROR


class PgStore(Store):
    """The store on PostgreSQL (``storage.url``)."""

    dialect = "postgresql"
    _Error = psycopg.Error
    _BEGIN = "BEGIN"

    def __init__(
        self,
        url: str,
        *,
        max_batch: int = 256,
        connect_timeout_s: float = 10.0,
        lock_timeout_ms: int = 5_000,
        claim_wait_ms: int = 30_000,
        max_connections: int = 10,
        pool_timeout_s: float = 30.0,
        keys: Keyring | None = None,
    ) -> None:
        self.keys = keys
        if max_connections < 2:
            raise StoreError("a daemon needs at least 2 connections (a writer and a reader)")
        self.url = url
        #: what messages and logs name (never the password)
        self.location = redact_url(url)
        self.path = Path(self.location)  # the SQLite-file tools refuse it: no such file
        self._connect_timeout = max(1, int(connect_timeout_s))
        #: deferred writes committing in the background (flush() waits for them)
        self._in_background: set[Future[Any]] = set()
        #: how long a write waits for a row or table another session holds before its
        #: batch fails as unavailable (``storage.busy_timeout_ms``, as SQLite's)
        self._lock_timeout_ms = lock_timeout_ms
        #: in the fast attempt: this transaction holds the feed's counter row, and the
        #: last position it handed out / wrote to the row (see next_seq)
        self._fast = False
        self._held_seq: int | None = None
        self._written_seq: int | None = None
        #: the fast attempt sent COMMIT in its pipeline and it succeeded
        self._committed = False
        #: the writer's server refused a write as read-only: connect again
        self._read_only_server = False
        #: why the writer could not connect again (None: it is connected)
        self._cannot_connect: str | None = None
        try:
            self._wconn = self._connect()
        except psycopg.Error as e:
            raise StoreError(f"cannot open the database at {self.location}: {why(e)}") from None
        try:
            schema.apply(self._wconn)
        except psycopg.Error as e:
            self._wconn.close()  # the daemon does not start: nothing else will close it
            raise StoreError(
                f"cannot open the database at {self.location}: {why(e)}{_hint(e)}"
            ) from None
        self._wdb = self._keyed(PgDatabase(self._wconn))
        #: the server the writer is on (a failover moves it)
        self._writer_at = _server(self._wconn)
        self._checkpointer = None
        self.checkpoints = 0
        #: every connection but the writer: readers borrow one per statement, a lock
        #: or a snapshot holds one until it ends (decision 0027)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            kwargs=_connect_kwargs(
                url,
                timeout_s=self._connect_timeout,
                # a second click waits for the first one's service call (claim_lock)
                settings=f"-c lock_timeout={int(claim_wait_ms)}",
            ),
            configure=self._pool_made,
            check=_check_alive,
            reconnect_failed=self._pool_gave_up,
            min_size=1,
            max_size=max_connections - 1,
            timeout=pool_timeout_s,
            num_workers=1,
            name="pa-bridge-readers",
            open=False,
        )
        #: the pool's failed attempts to connect when it last made a connection (more
        #: now: it cannot connect, and reads fail at once, see _borrow)
        self._pool_failed_before = 0
        self._pool_timeout = pool_timeout_s
        self._pool.open()
        self._start_writer(max_batch)
        self._reader: PgReader = self._keyed(PgReader(self))

    def _connect(self, *, readonly: bool = False) -> psycopg.Connection[Any]:
        return connect(
            self.url,
            readonly=readonly,
            timeout_s=self._connect_timeout,
            settings=f"-c lock_timeout={self._lock_timeout_ms}",
        )

    # ---- the writer's hooks ------------------------------------------------------------
    def _ensure_writer(self) -> None:
        """Connect the writer again when its connection was lost, or when the server
        it is on refused a write as read-only (a standby, or a primary being switched
        over): with a URL naming a primary and its standby, libpq then finds the one
        that writes now. The readers' pool is emptied when the writer lands on another
        server (reads follow it there) or lost its connection (the pool's are lost too),
        not when it finds the same read-only server again (issue 32)."""
        if not _lost(self._wconn) and not self._read_only_server:
            return
        self._read_only_server = False
        lost = self._wconn.broken or self._wconn.closed
        with contextlib.suppress(psycopg.Error):
            self._wconn.close()
        try:
            self._wconn = self._connect()
        except psycopg.Error as e:
            # each batch is refused with this (see _attempt) until a connect works
            self._cannot_connect = f"cannot connect: {why(e)}"
            self.last_error = (self._cannot_connect, time.monotonic())
            return
        self._cannot_connect = None
        self._wdb = self._keyed(PgDatabase(self._wconn))
        was, self._writer_at = self._writer_at, _server(self._wconn)
        if lost or self._writer_at != was:
            self._pool.drain()
            self._pool_failed_before = self._pool_failures()  # the server is there

    def _close_writer(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._wconn.close()

    def _must_retry(self, results: list[tuple[_Job, bool, Any]]) -> bool:
        return any(
            not ok and isinstance(v, psycopg.Error) and (v.sqlstate or "") in _RETRY
            for _job, ok, v in results
        )

    def _as_unavailable(self, e: BaseException) -> BaseException:
        if not isinstance(e, psycopg.Error) or isinstance(e, psycopg.errors.PipelineAborted):
            # PipelineAborted: a statement skipped because an earlier one in the
            # pipeline failed; that one's error, not this, says what went wrong
            return e
        state = e.sqlstate or ""
        if not (isinstance(e, psycopg.OperationalError) and not state) and not state.startswith(
            _FAILING
        ):
            return e
        if state == _READ_ONLY:
            self._read_only_server = True  # the next batch connects again
        err = StoreUnavailable(f"cannot write: {why(e)}")
        err.__cause__ = e
        self.last_error = (str(err), time.monotonic())
        return err

    def _attempt(
        self, conn: Any, db: Any, batch: list[_Job], *, savepoints: bool
    ) -> list[tuple[_Job, bool, Any]] | None:
        """The fast attempt (no savepoints) runs in psycopg's pipeline mode: a statement
        whose result no job reads is sent without waiting for its answer, so a batch
        costs a round trip per statement whose result is read, not per statement. A
        failure then shows at a later statement or at the pipeline's end rather than
        where it happened; the fast attempt only needs to know that something failed
        (the batch is rolled back and run again with a savepoint per job, outside the
        pipeline, which names the failing job)."""
        self._held_seq = self._written_seq = None
        self._committed = False
        if self._cannot_connect is not None:
            err = StoreUnavailable(self._cannot_connect)
            for job in batch:
                job.finish(False, err)
            return None
        if savepoints:
            return super()._attempt(conn, db, batch, savepoints=True)
        self._fast = True
        commit = None
        begin_failed = False
        try:
            with conn.pipeline():
                results = super()._attempt(conn, db, batch, savepoints=False)
                # None: BEGIN failed and every job was told so (a lost connection);
                # leaving the pipeline then raises the same failure again
                begin_failed = results is None
                if results is not None and all(ok for _, ok, _ in results):
                    self._write_held_seq(db)
                    # the COMMIT goes with the last statements: one round trip for both
                    # (if one of them failed, the pipeline skips it: nothing commits)
                    commit = conn.execute("COMMIT")
        except psycopg.Error as e:
            if begin_failed:
                return None  # each job has its answer once (issue 32)
            results = [(batch[0], False, self._as_unavailable(e))] if batch else None
        finally:
            self._fast = False
            self._held_seq = None
        if commit is not None and results is not None and all(ok for _, ok, _ in results):
            # PostgreSQL answers COMMIT in a failed transaction with ROLLBACK, no error:
            # a job that swallowed a failed statement. Then the savepoint way finds it.
            self._committed = commit.statusmessage == "COMMIT"
            if not self._committed:
                return [(batch[0], False, _RolledBack("the transaction was rolled back"))]
        failed = [v for _, ok, v in results or () if not ok]
        if failed and isinstance(failed[0], StoreUnavailable):
            # the database is failing (gone, full, a lock held past the timeout): the
            # savepoint run would meet it once per job; the batch fails now, as a
            # batch whose BEGIN fails does
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            for job in batch:
                job.finish(False, failed[0])
            return None
        if results is not None and conn.info.transaction_status == _IN_ERROR:
            # a statement failed and a job swallowed the error: COMMIT would roll back
            # without a word, so the batch goes the savepoint way, which finds the job
            err = StoreUnavailable("a statement of the batch failed")
            return [(batch[0], False, err)] if batch else None
        return results

    def _commit(self, conn: Any) -> None:
        if self._committed:
            self._committed = False
            return
        conn.execute("COMMIT")

    def _write_held_seq(self, db: Any) -> None:
        if self._held_seq is not None and self._held_seq != self._written_seq:
            db.conn.execute("UPDATE feed_clock SET seq = ?", [self._held_seq])
            self._written_seq = self._held_seq

    def next_seq(self, db: Any) -> int:
        """The next position of the PA feed; call only inside a write job.

        The counter row stays locked until this transaction commits, so another
        daemon's change waits here and gets a later position only once this one is
        visible: positions are in commit order and a reader holding a cursor never
        skips a change that commits later (decision 0021). Like SQLite's, a time in
        microseconds that never goes back, above a restore's floor (decision 0009).

        In the fast attempt, once this transaction holds the row, nobody else can move
        it: the next positions are counted here and the row is written once, at the
        end of the batch (one round trip for the batch, not one per change)."""
        now_us = int(time.time() * 1_000_000)
        if self._held_seq is not None:
            self._held_seq = max(self._held_seq + 1, now_us)
            return self._held_seq
        row = db.conn.execute(
            "UPDATE feed_clock SET seq = greatest(seq + 1, ?, coalesce((SELECT CAST(value AS"
            " BIGINT) FROM meta WHERE key = 'feed.seq_floor'), 0)) RETURNING seq",
            [now_us],
        ).fetchone()
        seq = int(row[0])
        if self._fast:
            self._held_seq = self._written_seq = seq
        return seq

    # ---- reading -------------------------------------------------------------------------
    def defer(
        self, fn: Callable[[Database], Any], then: Callable[[bool], None] | None = None
    ) -> None:
        """On PostgreSQL a deferred write is committed at once, in the background, as
        before decision 0025: every daemon of the fleet reads what any of them wrote,
        so a claim's answer must not wait a second to be seen by the daemon that
        answers the dispensing system's next request. :meth:`flush` waits for it."""
        future = self.submit(fn)
        with self._state_lock:
            self._in_background.add(future)

        def settled(f: Future[Any]) -> None:
            with self._state_lock:
                self._in_background.discard(f)
            ok = f.exception() is None
            if not ok:
                self.deferred_lost += 1
            if then is not None:
                then(ok)

        future.add_done_callback(settled)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait for the deferred writes still committing (this daemon's; another
        daemon's reader sees them once they are committed, a few milliseconds on)."""
        with self._state_lock:
            waiting = list(self._in_background)
        if not waiting:
            return True
        done, _ = futures_wait(waiting, timeout=timeout)
        return len(done) == len(waiting) and all(f.exception() is None for f in done)

    def reader(self) -> PgReader:
        """Reads, each statement on a connection borrowed from the pool (or on the one
        this thread holds for a lock or a snapshot)."""
        return self._reader

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool. While the database cannot be reached (the
        writer's last try to connect failed, or the pool's tries failed since it last
        made a connection: a restart, a failover), an error at once instead of holding
        the caller's thread for the pool's timeout, as a write fails (issue 32). The
        pool goes on trying in the background, and a writer that connects again lets
        reads try again."""
        deadline = time.monotonic() + self._pool_timeout
        while True:
            why = self._cannot_connect
            if why is None and self._pool_failures() > self._pool_failed_before:
                why = "cannot connect: the database's connections are being made again"
            if why is not None:
                raise psycopg.OperationalError(why)
            # the wait for a connection in slices, each followed by the look above
            left = deadline - time.monotonic()
            try:
                raw = self._pool.getconn(timeout=max(0.01, min(_POOL_SLICE_S, left)))
            except PoolTimeout:
                if left <= _POOL_SLICE_S:
                    raise
                continue
            break
        try:
            yield raw
        finally:
            self._pool.putconn(raw)

    def _pool_failures(self) -> int:
        return int(self._pool.get_stats().get("connections_errors", 0))

    def _pool_made(self, conn: psycopg.Connection[Any]) -> None:
        """The pool made a connection: make it read-only, and note that the pool can
        connect (see :meth:`_borrow`)."""
        _read_only(conn)
        self._pool_failed_before = self._pool_failures()

    def _pool_gave_up(self, pool: ConnectionPool[Any]) -> None:
        """The pool stopped trying (after its ``reconnect_timeout``): the next reads
        ask it again, which starts new tries."""
        self._pool_failed_before = self._pool_failures()

    @contextlib.contextmanager
    def _held(self) -> Iterator[psycopg.Connection[Any]]:
        """One pooled connection for this thread until the block ends: a session
        advisory lock stays on the connection that took it. Nested blocks share it,
        so a thread holds at most one and the pool cannot deadlock on itself."""
        held: psycopg.Connection[Any] | None = getattr(self._local, "held", None)
        if held is not None:
            yield held
            return
        with self._borrow() as raw:
            self._local.held = raw
            try:
                yield raw
            finally:
                self._local.held = None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PgReader]:
        with self._held() as raw:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield self._reader
            finally:
                raw.execute("COMMIT")

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        cur = self._reader.conn.execute(sql, params)
        cols = [c[0] for c in cur.description] if cur.description else []
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def schema_current(self) -> bool:
        with self._held() as raw:
            return not schema.pending(raw)

    def problem(self, timeout: float = 2.0) -> str | None:
        if self._closed:
            return "the database is closed"
        if not self.writer_alive:
            return "the database writer thread has stopped"
        return probe_round_trip(self, psycopg.Error, why, timeout)

    @property
    def connections(self) -> dict[str, int]:
        """Open connections: the pool's (``pool_size``, of at most ``pool_max``) and
        its borrowers waiting now (``waiting``); the writer is one more."""
        stats = self._pool.get_stats()
        return {k: int(stats.get(k, 0)) for k in ("pool_size", "pool_max", "requests_waiting")}

    def close(self, timeout: float = 10.0) -> None:
        super().close(timeout)
        with contextlib.suppress(psycopg.Error):
            self._pool.close(timeout)

    # ---- coordination between daemons ------------------------------------------------------
    @contextlib.contextmanager
    def claim_lock(self, key: str) -> Iterator[None]:
        """An advisory lock on the claim key, held by this thread's connection: a
        second daemon submitting the same claim waits, then finds the PA stored."""
        args = [_CLAIM_CLASS, key]
        with self._held() as raw:
            try:
                raw.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", args)
            except psycopg.Error as e:
                raise StoreUnavailable(f"cannot lock the claim: {why(e)}") from None
            try:
                yield
            finally:
                with contextlib.suppress(psycopg.Error):
                    raw.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", args)

    @contextlib.contextmanager
    def item_lock(self, item_id: int) -> Iterator[bool]:
        """Try to take queue item ``item_id`` (an advisory lock, released by the
        database if this daemon dies): False when another daemon is delivering it."""
        with self._held() as raw:
            got = _one(raw.execute("SELECT pg_try_advisory_lock(%s)", [item_id]))
            try:
                yield got
            finally:
                if got:
                    with contextlib.suppress(psycopg.Error):
                        raw.execute("SELECT pg_advisory_unlock(%s)", [item_id])

    @contextlib.contextmanager
    def fleet_once(self, name: str, every_s: float) -> Iterator[bool]:
        """True on one daemon, at most once per half ``every_s``: an advisory lock
        while it runs, and when it last ran in ``meta`` (``fleet.<name>``)."""
        args = [_FLEET_CLASS, name]
        with self._held() as raw:
            got = _one(raw.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", args))
            if not got:
                yield False
                return
            try:
                key = f"fleet.{name}"
                last = meta.get(self._reader, key)
                now = time.time()
                if last is not None and now - float(last) < every_s / 2:
                    yield False
                    return
                self.write(lambda db: meta.put(db, key, repr(now)))
                yield True
            finally:
                with contextlib.suppress(psycopg.Error):
                    raw.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", args)

    def vacuum_analyze(self) -> None:
        """VACUUM (ANALYZE) the database, on a pooled connection (it cannot run in a
        transaction and does not block writes)."""
        with self._held() as conn:
            conn.execute("VACUUM (ANALYZE)")


class _RolledBack(Exception):
    """A fast attempt whose COMMIT rolled back (a statement had failed): run it again
    with savepoints."""


def _lost(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has ended this idle connection, found without a round trip:
    an idle session's socket has nothing to read unless the server sent something
    unasked, such as the error that ends a terminated session, or the connection's end
    (a restart, a failover). So a write after a restart reconnects first instead of
    failing, and the pool never lends a connection that is gone (issue 32)."""
    if conn.closed:
        return True
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        # a notice or a setting's change is read and is fine; the end of the session
        # is a message and then the end of the stream, which the second read meets
        poll = select.poll()  # not select(): descriptors above 1024 are common here
        poll.register(conn.fileno(), select.POLLIN)
        for _ in range(4):
            if not poll.poll(0):
                break
            conn.pgconn.consume_input()
    except (OSError, psycopg.Error):
        return True
    return conn.pgconn.status == psycopg.pq.ConnStatus.BAD


def _check_alive(conn: psycopg.Connection[Any]) -> None:
    """The pool's check before it lends a connection (see :func:`_lost`)."""
    if _lost(conn):
        raise psycopg.OperationalError("the connection was ended by the server")


def _server(conn: psycopg.Connection[Any]) -> tuple[str, int]:
    """Which server an open connection is on: its host and port."""
    return conn.info.host, conn.info.port


def _one(cur: psycopg.Cursor[Any]) -> bool:
    row = cur.fetchone()
    return row is not None and bool(row[0])


def why(e: BaseException) -> str:
    """The driver's message, first line (at most 300 characters; the exception's type
    name when it has none), without anything the URL carried."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]


def cannot_connect(url: str, e: BaseException) -> StoreError:
    """The error a command raises when it cannot connect to ``url`` (never its
    password): ``cannot connect to <url>: <why>``."""
    return StoreError(f"cannot connect to {redact_url(url)}: {why(e)}")


def _hint(e: psycopg.Error) -> str:
    """What store IT does about a start that failed on privileges (doctor says more)."""
    if isinstance(e, psycopg.errors.InvalidSchemaName):  # no schema of the search_path
        return (
            " (this user may use no schema of its search_path: GRANT USAGE, CREATE ON SCHEMA"
            " to it, or set the search_path in storage.url; `pa-bridge doctor` tells more)"
        )
    if isinstance(e, psycopg.errors.InsufficientPrivilege):
        return " (`pa-bridge doctor` lists the privileges this user lacks)"
    return ""


# re-exported for web/errors.py, which must not import the driver itself
PgError = psycopg.Error
