"""Storage: the only importer of sqlite-utils, the only place with SQL, the only writer.

- :mod:`.engine`: connections, the single writer with group commit, checkpoints, the
  health probe (:class:`Store`);
- :mod:`.migrations`: the schema;
- one module per table or read model, each statement a named function over typed
  rows: :mod:`.exchanges`, :mod:`.pas`, :mod:`.pa_history`, :mod:`.outbox` (the queue,
  with its :class:`Kind` and :class:`Status`), :mod:`.callbacks`, :mod:`.audit`,
  :mod:`.meta`, :mod:`.console` (the pharmacist console's reads and acknowledgements);
- :mod:`.retention` (purge and VACUUM) and :mod:`.files` (the database as a file, for
  ``queue``, ``doctor``, ``backup`` and ``restore``).

Write functions take the write job's handle (``store.write(lambda db: ...)``); read
functions take a reader (``store.reader()``). A second engine (PostgreSQL, issue 18)
implements the same functions.
"""

from __future__ import annotations

from . import audit, callbacks, console, exchanges, files, meta, migrations, outbox, pa_history, pas
from . import retention as retention
from .engine import (
    Database,
    DatabaseError,
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

__all__ = [
    "MIGRATIONS",
    "Database",
    "DatabaseError",
    "Kind",
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
    "exchanges",
    "files",
    "meta",
    "migrations",
    "now_iso",
    "outbox",
    "pa_history",
    "parse_iso",
    "pas",
    "retention",
]
