"""The retention policy's statements (see maintenance.py for the policy in words) and
the VACUUM.

Chunks: candidates are found on a read connection (which never blocks the writer,
WAL), then purged by key (SQLite's rowid, PostgreSQL's primary key), at most ``chunk`` rows per ``store.write`` job, each its
own short transaction; the conditions are checked again inside the write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ._db import Database
from .engine import Store

__all__ = ["page_counts", "purge", "vacuum"]

# exchanges the durable queue still needs (outcome reports and reversals name them)
_QUEUED_EXCHANGES = (
    "SELECT claim_id FROM outbox WHERE status IN ('pending', 'failed') AND claim_id IS NOT NULL"
)


# PAs a webhook still has to forward
def _queued_pas(pg: bool) -> str:
    pa_id = "(payload_json::jsonb ->> 'pa_id')" if pg else "json_extract(payload_json, '$.pa_id')"
    return (
        f"SELECT {pa_id} FROM outbox"  # noqa: S608 - fixed SQL
        " WHERE kind = 'webhook' AND status IN ('pending', 'failed')"
        f" AND {pa_id} IS NOT NULL"
    )


def _key(store: Store, table: str = "") -> str:
    """The column (or expression) rows are chunked by: SQLite's rowid; PostgreSQL's
    primary key (``idempotency_keys`` has a two-column one: both, as one text)."""
    if store.dialect != "postgresql":
        return "rowid"
    return "(scope || ' ' || key)" if table == "idempotency_keys" else "id"


#: where a chunked scan starts (PostgreSQL's exchanges and PAs have text keys)
def _start(store: Store, table: str) -> Any:
    if store.dialect == "postgresql" and table in ("exchanges", "pas", "idempotency_keys"):
        return ""
    return -(2**63)


_RAW_NULL = "UPDATE exchanges SET request_raw = NULL, response_raw = NULL, metadata_json = NULL,"
_NEWEST_PA_KEPT = "updated_at < ? AND change_seq < (SELECT max(change_seq) FROM pas)"
_NO_PA = "NOT EXISTS (SELECT 1 FROM pas WHERE pas.claim_id = exchanges.id)"

#: counts per purge step (and ``chunks``), added up by the caller
Counts = dict[str, int]


def _candidates(
    store: Store, table: str, where: str, params: list[Any], chunk: int
) -> Iterator[list[Any]]:
    """Keys matching ``where``, ``chunk`` at a time, read without the write lock."""
    last = _start(store, table)
    k = _key(store, table)
    while True:
        rows = (
            store.reader()
            .conn.execute(
                f"SELECT {k} FROM {table} WHERE ({where}) AND {k} > ? ORDER BY {k} LIMIT ?",  # noqa: S608 - fixed SQL
                [*params, last, chunk],
            )
            .fetchall()
        )
        if not rows:
            return
        ids = [r[0] for r in rows]
        yield ids
        last = ids[-1]
        if len(ids) < chunk:
            return


def _run_step(
    store: Store,
    counts: Counts,
    name: str,
    table: str,
    where: str,
    params: list[Any],
    apply: Callable[[Database, str, list[Any]], int | dict[str, int]],
    chunk: int,
) -> None:
    """Find candidates in ``table``, then apply the change one chunk per write job. A
    job may run twice (the store retries a failed batch), so it returns its counts
    instead of adding them up itself."""
    for ids in _candidates(store, table, where, params, chunk):
        marks = ",".join("?" * len(ids))

        def job(db: Database, ids: list[Any] = ids, marks: str = marks) -> int | dict[str, int]:
            return apply(db, marks, ids)

        n = store.write(job)
        counts["chunks"] = counts.get("chunks", 0) + 1
        for k, v in (n if isinstance(n, dict) else {name: n}).items():
            counts[k] = counts.get(k, 0) + v


def purge(store: Store, *, raw_cut: str, meta_cut: str, stamp: str, chunk: int) -> Counts:
    """Raw content older than ``raw_cut``, rows older than ``meta_cut``; ``stamp`` is
    when (``raw_purged_at``). The counts by step."""
    counts: Counts = {}
    k = _key(store)
    queued_pas = _queued_pas(store.dialect == "postgresql")

    # ---- raw content -------------------------------------------------------------
    ex_raw = f"received_at < ? AND raw_purged_at IS NULL AND id NOT IN ({_QUEUED_EXCHANGES})"

    def purge_raw(db: Database, marks: str, ids: list[Any]) -> int:
        return db.execute(
            _RAW_NULL + f" raw_purged_at = ? WHERE {k} IN ({marks}) AND {ex_raw}",
            [stamp, *ids, raw_cut],
        ).rowcount

    _run_step(store, counts, "raw_exchanges", "exchanges", ex_raw, [raw_cut], purge_raw, chunk)

    cb_raw = "received_at < ? AND body_purged_at IS NULL"

    def purge_bodies(db: Database, marks: str, ids: list[Any]) -> int:
        return db.execute(
            f"UPDATE callbacks SET body = NULL, body_purged_at = ? WHERE {k} IN ({marks}) AND {cb_raw}",  # noqa: S608
            [stamp, *ids, raw_cut],
        ).rowcount

    _run_step(store, counts, "callback_bodies", "callbacks", cb_raw, [raw_cut], purge_bodies, chunk)

    def delete(table: str, where: str, cut: str) -> Callable[[Database, str, list[Any]], int]:
        def job(db: Database, marks: str, ids: list[Any]) -> int:
            return db.execute(
                f"DELETE FROM {table} WHERE {_key(store, table)} IN ({marks}) AND ({where})",  # noqa: S608
                [*ids, cut],
            ).rowcount

        return job

    def step(name: str, where: str, cut: str) -> None:
        _run_step(store, counts, name, name, where, [cut], delete(name, where, cut), chunk)

    step("dead_letters", "received_at < ?", raw_cut)
    step("idempotency_keys", "created_at < ?", raw_cut)  # decision 0017

    # ---- metadata ----------------------------------------------------------------
    # PAs first (exchanges are referenced by pas.claim_id), each with its history
    pa_where = _NEWEST_PA_KEPT + f" AND id NOT IN ({queued_pas})"

    def delete_pas(db: Database, marks: str, ids: list[Any]) -> dict[str, int]:
        rows = db.execute(
            f"SELECT id FROM pas WHERE {k} IN ({marks}) AND {pa_where}",  # noqa: S608
            [*ids, meta_cut],
        ).fetchall()
        pa_ids = [row[0] for row in rows]
        if not pa_ids:
            return {}
        pm = ",".join("?" * len(pa_ids))
        history = db.execute(
            f"DELETE FROM pa_history WHERE pa_id IN ({pm})",  # noqa: S608
            pa_ids,
        ).rowcount
        pas = db.execute(f"DELETE FROM pas WHERE id IN ({pm})", pa_ids).rowcount  # noqa: S608
        return {"pas": pas, "pa_history": history}

    _run_step(store, counts, "pas", "pas", pa_where, [meta_cut], delete_pas, chunk)

    step("pa_history", "received_at < ?", meta_cut)
    step(
        "exchanges",
        f"received_at < ? AND id NOT IN ({_QUEUED_EXCHANGES}) AND {_NO_PA}",
        meta_cut,
    )
    step("outbox", "status = 'delivered' AND coalesce(delivered_at, updated_at) < ?", meta_cut)
    # the audit log keeps its own period, its chain's floor following (audit_trail.purge)
    step("callbacks", "received_at < ?", meta_cut)
    return counts


def page_counts(store: Store) -> tuple[int, int]:
    """(pages, free pages) of the database file. PostgreSQL: the tables' 8 kB pages,
    and the share of them its statistics count as dead rows."""
    if store.dialect == "postgresql":
        row = (
            store.reader()
            .conn.execute(
                "SELECT coalesce(sum(pg_table_size(relid)), 0) / 8192,"
                " coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup + n_dead_tup), 0)"
                " FROM pg_stat_user_tables"
            )
            .fetchone()
        )
        pages, dead, rows = int(row[0]), int(row[1]), int(row[2])
        return pages, (pages * dead // rows if rows else 0)
    reader = store.reader().conn
    pages = int(reader.execute("PRAGMA page_count").fetchone()[0])
    free = int(reader.execute("PRAGMA freelist_count").fetchone()[0])
    return pages, free


def vacuum(store: Store) -> int:
    """VACUUM, then truncate the WAL, holding the write path; the pages after.
    PostgreSQL: VACUUM (ANALYZE), which does not block writes."""
    if store.dialect == "postgresql":
        from .pg import PgStore

        assert isinstance(store, PgStore)
        store.vacuum_analyze()
        return page_counts(store)[0]

    def run(conn: sqlite3.Connection) -> int:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return int(conn.execute("PRAGMA page_count").fetchone()[0])

    return store.exclusive(run)
