"""Storage: the only importer of sqlite-utils, the only place with SQL, the only writer.

- :mod:`.engine`: SQLite (``storage.path``, the embedded default): connections, the single writer with group commit, checkpoints, the
  health probe (:class:`Store`);
- :mod:`.pg`: PostgreSQL (``storage.url``), the same interface for several daemons on
  one database (issue 18), and :mod:`.pg_migrations`, its parallel schema steps;
- :mod:`.migrations`: the schema;
- one module per table or read model, each statement a named function over typed
  rows: :mod:`.exchanges`, :mod:`.pas`, :mod:`.pa_history`, :mod:`.outbox` (the queue,
  with its :class:`Kind` and :class:`Status`), :mod:`.callbacks`, :mod:`.audit`,
  :mod:`.meta`, :mod:`.idempotency`, :mod:`.console` (the pharmacist console's reads
  and acknowledgements), :mod:`.expiry` (approvals that lapse, renewals) and
  :mod:`.reconcile` (what reconciliation reads and a PA no longer returned);
- :mod:`.retention` (purge and VACUUM) and :mod:`.files` (the database as a file, for
  ``queue``, ``doctor``, ``backup`` and ``restore``).

Write functions take the write job's handle (``store.write(lambda db: ...)``); read
functions take a reader (``store.reader()``); either is a :class:`Database` (``_db``)
whose ``conn.execute`` takes ``?`` placeholders on both engines. The few statements
that differ ask ``_db.is_postgres(db)`` and keep both spellings side by side.
"""

from __future__ import annotations

from . import (
    audit,
    callbacks,
    console,
    crypto,
    exchanges,
    expiry,
    files,
    idempotency,
    meta,
    migrations,
    outbox,
    pa_history,
    pas,
    reconcile,
    users,
)
from . import retention as retention
from ._db import Database
from .engine import (
    DatabaseError,
    SqliteDatabase,
    Store,
    StoreError,
    StoreMissing,
    StoreUnavailable,
    create_private,
    now_iso,
    parse_iso,
)
from .files import connect_existing
from .migrations import MIGRATIONS
from .outbox import Kind, Status
from .pg import PgError, PgStore, redact_url

__all__ = [
    "MIGRATIONS",
    "Database",
    "DatabaseError",
    "Kind",
    "PgError",
    "PgStore",
    "SqliteDatabase",
    "Status",
    "Store",
    "StoreError",
    "StoreMissing",
    "StoreUnavailable",
    "audit",
    "callbacks",
    "connect_existing",
    "console",
    "create_private",
    "crypto",
    "exchanges",
    "expiry",
    "files",
    "idempotency",
    "meta",
    "migrations",
    "now_iso",
    "outbox",
    "pa_history",
    "parse_iso",
    "redact_url",
    "pas",
    "reconcile",
    "retention",
    "users",
]
