"""The handle every table function takes, whichever engine is behind it.

SQLite's is sqlite-utils' ``Database`` (``db.conn`` is a :class:`sqlite3.Connection`);
PostgreSQL's is :class:`pa_bridge.store.pg.PgDatabase`, whose ``conn.execute`` takes
the same ``?`` placeholders. A statement that differs between the engines asks
:func:`is_postgres` and has both spellings side by side in its table module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "Database", "is_postgres"]


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...


class Database(Protocol):
    """What a write job or a reader gets: ``db.conn.execute(sql, params)``."""

    @property
    def conn(self) -> Connection: ...

    def execute(self, sql: str, parameters: Any = ...) -> Cursor: ...


def is_postgres(db: Database) -> bool:
    return getattr(db, "dialect", "sqlite") == "postgresql"
