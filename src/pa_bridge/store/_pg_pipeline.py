"""The one place pa-bridge reads a private method of psycopg (decision 0046).

In pipeline mode (the PostgreSQL writer's fast attempt, decision 0027) a statement's
result arrives only when something asks for it. psycopg's fetch methods wait for it;
its ``rowcount`` and ``description`` do not, and psycopg has no public way to wait for
one statement's result (``Pipeline.sync`` waits for every pending one and adds a
round trip; an ``UPDATE`` has no rows to fetch). :class:`PipelineCursor` makes the two
wait as the fetch methods do, through ``Cursor._fetch_pipeline``, so the table
functions need not know whether the statements they send are pipelined.
``tests/test_store.py`` fails when psycopg renames or removes the method.
"""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = ["PRIVATE_METHOD", "PipelineCursor"]

#: what this module calls of psycopg's
PRIVATE_METHOD = "_fetch_pipeline"


class PipelineCursor(psycopg.Cursor[Any]):
    """A cursor whose ``rowcount`` and ``description`` are right in pipeline mode too."""

    @property
    def rowcount(self) -> int:
        self._fetch_pipeline()
        return super().rowcount

    @property
    def description(self) -> list[psycopg.Column] | None:
        self._fetch_pipeline()
        return super().description
