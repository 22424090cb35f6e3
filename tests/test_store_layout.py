"""Storage owns all SQL (issue 15): the statements, sqlite-utils and the driver live in
``pa_bridge.store``; the queue's kinds and statuses are enums whose values are what
the table stores."""

from __future__ import annotations

import re
from pathlib import Path

from pa_bridge.store import Kind, Status, Store, migrations, pas
from pa_bridge.store import outbox as queue_table

SRC = Path(__file__).resolve().parents[1] / "src" / "pa_bridge"
#: the simulated PA service keeps its own state: it is not pa-bridge's database
OUTSIDE_STORE = [
    p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in ("store", "sandbox")
]
SQL = re.compile(
    r"""["'](?:\s*)(SELECT\s|INSERT\s|UPDATE\s\w+\sSET|DELETE\sFROM|PRAGMA\s|CREATE\s|ALTER\s|BEGIN|COMMIT)"""
)
DRIVER = re.compile(
    r"^\s*(?:import|from)\s+(sqlite3|sqlite_utils|psycopg|psycopg_pool)\b", re.MULTILINE
)


def test_no_sql_text_outside_the_store() -> None:
    found = [
        f"{p.relative_to(SRC)}: {m.group(1)}"
        for p in OUTSIDE_STORE
        for m in SQL.finditer(p.read_text())
    ]
    assert found == []


def test_only_the_store_imports_the_driver() -> None:
    found = [str(p.relative_to(SRC)) for p in OUTSIDE_STORE if DRIVER.search(p.read_text())]
    assert found == []


def test_queue_enums_are_the_stored_values(store: Store) -> None:
    item = store.write(lambda db: queue_table.enqueue(db, Kind.WEBHOOK, {"pa_id": "x"}))
    (found,) = store.query("SELECT kind, status FROM outbox WHERE id = ?", [item])
    row = (found["kind"], found["status"])
    assert row == ("webhook", "pending")
    assert Kind(row[0]) is Kind.WEBHOOK and Status(row[1]) is Status.PENDING
    assert set(queue_table.QUEUE_STATUSES) == {s.value for s in Status}


def test_cli_offers_every_queue_status() -> None:
    from pa_bridge.cli_daemon import queue_list

    status = next(p for p in queue_list.params if p.name == "status")
    assert list(status.type.choices) == list(queue_table.QUEUE_STATUSES)  # type: ignore[attr-defined]


def test_migrations_applied_and_known(sqlite_store: Store) -> None:
    store = sqlite_store
    applied = migrations.applied(store.reader())
    assert applied == migrations.known()
    assert applied[0] == "m001_initial"


def test_pa_rows_are_typed_dicts_of_every_column(store: Store) -> None:
    columns = _columns(store, "pas")
    assert sorted(pas.PaRow.__annotations__) == sorted(columns)


def _columns(store: Store, table: str) -> list[str]:
    """The table's columns in order, on either engine."""
    if store.dialect == "postgresql":
        rows = store.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
            " AND table_schema = current_schema() ORDER BY ordinal_position",
            [table],
        )
        return [r["column_name"] for r in rows]
    return [r["name"] for r in store.query("SELECT name FROM pragma_table_info(?)", [table])]


def test_both_engines_have_the_same_tables_columns_and_steps(
    sqlite_store: Store, pg_url: str
) -> None:
    """The parallel migrations (decision 0019) cannot drift: same steps by name, same
    tables, same columns in the same order."""
    from pa_bridge.store import PgStore, pg_migrations
    from pa_bridge.store.pg import connect

    pg = PgStore(pg_url)
    try:
        assert pg_migrations.known() == migrations.known()
        with connect(pg_url) as conn:
            assert pg_migrations.applied(conn) == migrations.known()
        assert pg.schema_current()
        lite_tables = {
            r["name"]
            for r in sqlite_store.query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'"
            )
        }
        pg_tables = {
            r["table_name"]
            for r in pg.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        } - set(pg_migrations.PG_ONLY_TABLES)
        assert pg_tables == lite_tables
        for table in sorted(lite_tables):
            assert _columns(pg, table) == _columns(sqlite_store, table), table
    finally:
        pg.close()
