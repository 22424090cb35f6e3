"""`pa-bridge backup` and `pa-bridge restore` with `storage.url` (PostgreSQL, decision
0023): Debian's pg_dump and pg_restore on the tests' real server, and the daemon that
serves a restored database adopting it (decision 0009)."""

from __future__ import annotations

import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from pa_bridge import pg_tools
from pa_bridge.cli import main
from pa_bridge.doctor import check_postgres
from pa_bridge.restore import BACKUP_MARK, FEED_FLOOR, adopt_restored
from pa_bridge.store import PgStore, Store, meta
from pa_bridge.store.pg_backup import BackupSession
from tests import builders as b
from tests import pg_server
from tests.support import free_port


@pytest.fixture
def database(pg: pg_server.PgServer) -> Iterator[str]:
    """A database of its own (a backup is of a whole schema; the other tests' schemas
    share one database); its URL without the password."""
    name = pg.new_database("bk")
    try:
        yield pg.url(name, password=False)
    finally:
        pg.drop_database(name)


@pytest.fixture
def config(tmp_path: Path, database: str) -> Path:
    """A config whose password is in a file of its own, as store IT keeps it."""
    secret = tmp_path / "db-password"
    secret.write_text(pg_server.PASSWORD + "\n")
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\nurl = "{database}"\npassword_file = "{secret}"\n')
    return cfg


def _with_password(url: str) -> str:
    return url.replace(f"{pg_server.SUPERUSER}@", f"{pg_server.SUPERUSER}:{pg_server.PASSWORD}@")


def _daemon(make_daemon: Any, database: str, secret: Path) -> Any:
    gone = f"http://127.0.0.1:{free_port()}"  # the service is down: reports stay queued
    service = {
        "claim_url": f"{gone}/cmmimport/", "outcomes_url": f"{gone}/outcomes.json",
        "dashboard_url": f"{gone}/dashboard", "username": "u", "password": "p",
        "api_key": "k", "timeout_seconds": 1, "probe_seconds": 0,
    }  # fmt: skip
    return make_daemon(
        storage={"url": database, "password_file": str(secret)},
        service=service,
        sandbox={"enabled": False},
    )


def _callback(d: Any, pa_id: str, key: str) -> None:
    r = httpx.post(
        f"{d.callback_server.url}/callbacks/pharmacy",
        json={"request": {"id": pa_id, "workflow_status": "New", "delivery_id": key}},
        timeout=10,
    )
    assert r.status_code == 200


def _feed(d: Any, since: str = "") -> dict[str, Any]:
    r = httpx.get(f"{d.intake_server.url}/v1/pa", params={"since": since}, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_backup_then_restore_is_adopted_by_the_next_daemon(
    make_daemon: Any, database: str, config: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "db-password"
    d = _daemon(make_daemon, database, secret)
    r = httpx.post(
        f"{d.intake_server.url}/v1/claims",
        json={
            "request": b.request_bytes().decode("latin-1"),
            "response": b.response_bytes([b.PAID]).decode("latin-1"),
        },
        timeout=10,
    )
    assert r.status_code == 200  # its outcome report stays queued: the service is down
    _callback(d, "PABEFORE", "before-1")

    dump = tmp_path / "backups" / "pa-bridge.dump"
    dump.parent.mkdir()
    runner = CliRunner()
    r = runner.invoke(main, ["backup", str(dump), "--config", str(config)])
    assert r.exit_code == 0, r.output
    assert "backup: dumped table public.outbox" in r.output  # progress, table by table
    assert "restore mark: 20" in r.output
    assert pg_server.PASSWORD not in r.output
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600
    assert not list(dump.parent.glob("*.partial"))
    with psycopg.connect(_with_password(database)) as conn:  # the live database: no mark
        assert (
            conn.execute("SELECT value FROM meta WHERE key = %s", [BACKUP_MARK]).fetchone() is None
        )
    again = runner.invoke(main, ["backup", str(dump), "--config", str(config)])
    assert again.exit_code == 1 and "exists; choose another name or pass --force" in again.output

    _callback(d, "PAAFTER", "after-1")  # after the backup: the restore loses it
    cursor = _feed(d)["cursor"]  # a client holds a cursor from after the backup
    busy = runner.invoke(main, ["restore", str(dump), "--yes", "--config", str(config)])
    assert busy.exit_code == 1 and "pa-bridge connection(s)" in busy.output
    assert "stop every daemon" in busy.output
    d.stop()

    r = runner.invoke(main, ["restore", str(dump), "--yes", "--config", str(config)])
    assert r.exit_code == 0, r.output
    assert "held for review when a daemon starts: 1 queue item(s)" in r.output
    assert "restore: table public.pas" in r.output and pg_server.PASSWORD not in r.output
    before = next(tmp_path.joinpath("backups").glob("pa-bridge-before-restore-*.dump"))
    assert stat.S_IMODE(before.stat().st_mode) == 0o600  # the replaced database, kept

    checks = {c.name: c for c in check_postgres(_with_password(database))}
    assert checks["database restore"].status == "warn"  # doctor sees a copy not yet served
    assert "restored and not yet served" in checks["database restore"].message

    d2 = _daemon(make_daemon, database, secret)
    assert "database restore" not in {c.name for c in check_postgres(_with_password(database))}
    health = httpx.get(f"{d2.intake_server.url}/healthz", timeout=10).json()
    assert health["queue"] == {"pending": 0, "failed": 0, "held": 1}
    assert "queue_held_after_restore" in health["degraded"]
    assert [p["pa_id"] for p in _feed(d2)["pas"]] == ["PABEFORE"]  # the backup's state
    # the cursor from after the backup is not "beyond the newest change": the floor
    assert _feed(d2, cursor)["pas"] == []
    _callback(d2, "PANEW", "new-1")
    # the cursor handed out before the restore still works and skips nothing after it
    assert [p["pa_id"] for p in _feed(d2, cursor)["pas"]] == ["PANEW"]
    with psycopg.connect(_with_password(database)) as conn:
        assert (
            conn.execute("SELECT value FROM meta WHERE key = %s", [BACKUP_MARK]).fetchone() is None
        )
        (audits,) = conn.execute(
            "SELECT count(*) FROM audit WHERE action = 'database.restored'"
        ).fetchone()  # fmt: skip
        assert audits == 1

    # the previous database, restored in turn, brings back the PA made after the backup
    d2.stop()
    r = runner.invoke(main, ["restore", str(before), "--yes", "--config", str(config)])
    assert r.exit_code == 0, r.output
    d3 = _daemon(make_daemon, database, secret)
    assert {p["pa_id"] for p in _feed(d3)["pas"]} == {"PABEFORE", "PAAFTER"}


def test_a_daemon_starting_during_a_backup_leaves_the_mark_to_the_copy(database: str) -> None:
    url = _with_password(database)
    PgStore(url).close()  # a pa-bridge database
    session = BackupSession(url)
    store = PgStore(url)
    try:
        assert session.take_lock(1)
        with psycopg.connect(url, autocommit=True) as conn:  # the instant the mark is live
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (%s, '2026-11-25T08:00:00.000Z')",
                [BACKUP_MARK],
            )
        assert store.write(lambda db: adopt_restored(db, 0.0)) is None  # not a restore
        assert meta.get(store.reader(), BACKUP_MARK) is not None
        other = BackupSession(url)
        try:
            assert not other.take_lock(0.2)  # one backup at a time
        finally:
            other.close()
    finally:
        session.close()
    # without the backup's lock the same mark means a restored copy
    try:
        note = store.write(lambda db: adopt_restored(db, 0.0))
    finally:
        store.close()
    assert note is not None and note["backup_taken_at"] == "2026-11-25T08:00:00.000Z"


def test_three_daemons_starting_on_a_restored_copy_adopt_it_once(database: str) -> None:
    url = _with_password(database)
    stores = [PgStore(url) for _ in range(3)]
    try:
        stores[0].write(lambda db: meta.put(db, BACKUP_MARK, "2026-11-25T08:00:00.000Z"))
        go = threading.Barrier(3)
        notes: list[Any] = []

        def adopt(s: PgStore) -> None:
            go.wait()
            notes.append(s.write(lambda db: adopt_restored(db, 0.0)))

        threads = [threading.Thread(target=adopt, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(notes) == 3 and sum(n is not None for n in notes) == 1
        assert meta.get(stores[0].reader(), FEED_FLOOR) is not None
    finally:
        for s in stores:
            s.close()


def test_a_dump_made_by_hand_is_marked_as_a_restore(
    database: str, config: Path, tmp_path: Path
) -> None:
    import os
    import subprocess

    url = _with_password(database)
    PgStore(url).close()
    dump = tmp_path / "by-hand.dump"
    subprocess.run(
        [str(pg_tools.find_tool("pg_dump")), "--format=custom", f"--file={dump}", f"--dbname={database}"],
        check=True, env={**os.environ, "PGPASSWORD": pg_server.PASSWORD}, capture_output=True,
    )  # fmt: skip
    r = CliRunner().invoke(main, ["restore", str(dump), "--yes", "--config", str(config)])
    assert r.exit_code == 0, r.output
    store = PgStore(url)
    try:
        assert store.write(lambda db: adopt_restored(db, 0.0)) is not None
    finally:
        store.close()


def test_restore_refuses_a_file_that_is_not_a_pa_bridge_backup(
    database: str, config: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"not an archive")
    r = CliRunner().invoke(main, ["restore", str(junk), "--yes", "--config", str(config)])
    assert r.exit_code == 1 and "is not a pg_dump archive" in r.output
    r = CliRunner().invoke(
        main, ["restore", str(tmp_path / "none"), "--yes", "--config", str(config)]
    )
    assert r.exit_code == 1 and "no backup file at" in r.output


def test_restore_names_a_backup_of_the_other_engine(
    database: str, config: Path, tmp_path: Path
) -> None:
    """Store IT gives a SQLite backup to a PostgreSQL config, or a pg_dump archive to
    a SQLite config: the error says which engine the file is for, not "file is not a
    database"."""
    store = Store(tmp_path / "sq" / "pa.sqlite3")
    store.close()
    sq_backup = tmp_path / "sq.bak"
    runner = CliRunner()
    sq_cfg = tmp_path / "sq.toml"
    sq_cfg.write_text(f'[storage]\npath = "{tmp_path / "sq" / "pa.sqlite3"}"\n')
    r = runner.invoke(main, ["backup", str(sq_backup), "--config", str(sq_cfg)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["restore", str(sq_backup), "--yes", "--config", str(config)])
    assert r.exit_code == 1 and "SQLite" in r.output and "storage.url" in r.output, r.output

    PgStore(_with_password(database)).close()  # migrates
    pg_backup = tmp_path / "pg.dump"
    r = runner.invoke(main, ["backup", str(pg_backup), "--config", str(config)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["restore", str(pg_backup), "--yes", "--config", str(sq_cfg)])
    assert r.exit_code == 1 and "PostgreSQL" in r.output and "storage.path" in r.output, r.output


def test_backup_without_pg_dump_says_what_to_install(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pg_tools, "DEBIAN_BINS", str(tmp_path / "none" / "*" / "bin"))
    r = CliRunner().invoke(main, ["backup", str(tmp_path / "x.dump"), "--config", str(config)])
    assert r.exit_code == 1
    assert "pg_dump is not installed" in r.output and "postgresql-client" in r.output


def test_a_wrong_password_is_reported_without_it(database: str, tmp_path: Path) -> None:
    cfg = tmp_path / "wrong.toml"
    secret = tmp_path / "wrong-password"
    secret.write_text("not-the-password-42\n")
    cfg.write_text(f'[storage]\nurl = "{database}"\npassword_file = "{secret}"\n')
    r = CliRunner().invoke(main, ["backup", str(tmp_path / "x.dump"), "--config", str(cfg)])
    assert r.exit_code == 1 and "cannot connect" in r.output
    assert "not-the-password-42" not in r.output


def test_the_password_goes_to_the_tools_in_the_environment_only() -> None:
    bare, env = pg_tools._login("postgresql://u:s%40cret@db.example:5433/pa?sslmode=require")
    assert bare == "postgresql://u@db.example:5433/pa?sslmode=require"
    assert env["PGPASSWORD"] == "s@cret"
    bare, env = pg_tools._login("postgresql://u@db/pa?password=s%26cret&options=-csearch_path%3Dx")
    assert bare == "postgresql://u@db/pa?options=-csearch_path%3Dx"
    assert env["PGPASSWORD"] == "s&cret"
    bare, env = pg_tools._login("postgresql://u:s%40cret@db1:5432,db2:5433/pa")  # two hosts
    assert bare == "postgresql://u@db1:5432,db2:5433/pa"
    assert env["PGPASSWORD"] == "s@cret"


def test_a_deployment_in_a_schema_of_its_own_is_backed_up_and_restored_there(
    pg: pg_server.PgServer, pg_url: str, tmp_path: Path
) -> None:
    """storage.url's search_path names the schema: pg_dump copies that one alone (the
    database's other schemas are someone else's) and pg_restore puts it back there."""
    store = PgStore(pg_url)
    store.write(lambda db: meta.put(db, "drill.value", "at the backup"))
    store.close()
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\nurl = "{pg_url}"\n')  # the password in the URL
    dump = tmp_path / "schema.dump"
    runner = CliRunner()
    r = runner.invoke(main, ["backup", str(dump), "--config", str(cfg)])
    schema = pg_url.rsplit("%3D", 1)[1]
    assert r.exit_code == 0, r.output
    assert f"schema {schema}" in r.output and pg_server.PASSWORD not in r.output
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = 'later' WHERE key = 'drill.value'")
    r = runner.invoke(main, ["restore", str(dump), "--yes", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert rows["drill.value"] == "at the backup" and BACKUP_MARK in rows

    other = pg.new_schema()  # another deployment's schema: not restored into
    try:
        cfg.write_text(f'[storage]\nurl = "{other}"\n')
        r = runner.invoke(main, ["restore", str(dump), "--yes", "--config", str(cfg)])
        assert r.exit_code == 1 and f"the backup holds schema {schema}" in r.output
    finally:
        pg.drop_schema(other)


def test_a_backup_put_back_by_hand_with_pg_restore_carries_its_mark(
    database: str, config: Path, tmp_path: Path
) -> None:
    import os
    import subprocess

    url = _with_password(database)
    PgStore(url).close()
    dump = tmp_path / "pa-bridge.dump"
    r = CliRunner().invoke(main, ["backup", str(dump), "--config", str(config)])
    assert r.exit_code == 0, r.output
    taken_at = r.output.rsplit("restore mark: ", 1)[1].strip()
    subprocess.run(
        [str(pg_tools.find_tool("pg_restore")), "--clean", "--if-exists", "--single-transaction",
         f"--dbname={database}", str(dump)],
        check=True, env={**os.environ, "PGPASSWORD": pg_server.PASSWORD}, capture_output=True,
    )  # fmt: skip
    store = PgStore(url)
    try:
        note = store.write(lambda db: adopt_restored(db, 0.0))
    finally:
        store.close()
    assert note is not None and note["backup_taken_at"] == taken_at


def test_restore_counts_daemons_that_go_by_the_urls_application_name(database: str) -> None:
    """A ``storage.url`` may name its connections (``application_name=``); the daemons
    then go by that name, and ``restore`` must still see them."""
    from pa_bridge.store.pg import connect
    from pa_bridge.store.pg_backup import pa_bridge_sessions

    named = (
        _with_password(database) + ("&" if "?" in database else "?") + "application_name=pharmacy-7"
    )
    assert pa_bridge_sessions(named) == 0
    with connect(named):  # as the daemon's writer and pool connect
        assert pa_bridge_sessions(named) == 1
    with connect(_with_password(database)):
        assert pa_bridge_sessions(named) == 1  # a daemon on the plain URL counts too


def test_the_copy_a_restore_kept_can_be_restored_within_the_same_second(
    database: str, tmp_path: Path
) -> None:
    """Restoring the ``pa-bridge-before-restore-<time>.dump`` a restore just kept, in
    the same second (the clock fixed here), keeps the database it replaces beside it
    under a name of its own instead of refusing: the name was taken by the very file
    being restored."""
    url = _with_password(database)
    with PgStore(url):
        pass  # pa-bridge's tables
    dump = tmp_path / "pa-bridge.dump"
    pg_tools.dump_database(url, dump, mark=(BACKUP_MARK, "2026-11-27T00:00:00Z"))
    second = 1_800_000_000.0  # one fixed second for both restores
    first = pg_tools.restore_dump(url, dump, mark_key=BACKUP_MARK, clock=lambda: second)
    assert first.before is not None and first.before.name.endswith("Z.dump")
    again = pg_tools.restore_dump(url, first.before, mark_key=BACKUP_MARK, clock=lambda: second)
    assert again.before is not None and again.before != first.before
    assert again.before.name.endswith("Z-2.dump") and first.before.is_file()
