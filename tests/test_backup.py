"""`pa-bridge backup`: an online copy while writes go on, on real files (the command in
process on click's CliRunner; beside a serving daemon in test_store_it_commands.py)."""

from __future__ import annotations

import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pa_bridge.backup import BackupError, backup_database
from pa_bridge.store import Store, now_iso
from tests.conftest import Cli


def _insert(store: Store, tag: str) -> None:
    store.write(
        lambda db: db.execute(
            "INSERT INTO audit (at, action, object_id, detail) VALUES (?, 'test', ?, ?)",
            [now_iso(), tag, "x" * 200],
        )
    )


class Writer:
    """A thread writing through store.write in a loop; ``committed`` counts commits."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.committed = 0
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.stop.is_set():
            _insert(self.store, f"during-{self.committed}")
            with self.cond:
                self.committed += 1
                self.cond.notify_all()

    def wait_for(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.committed >= n, timeout=10)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def filled(sqlite_store: Store) -> Iterator[Store]:
    """A SQLite database with rows (backup and restore are for the file)."""
    store = sqlite_store
    for i in range(300):
        _insert(store, f"before-{i}")
    yield store


def _count(path: Path, where: str = "1") -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM audit WHERE {where}").fetchone()[0])  # noqa: S608
    finally:
        conn.close()


def test_backup_during_concurrent_writes_is_consistent(filled: Store, tmp_path: Path) -> None:
    dest = tmp_path / "copy.sqlite3"
    steps: list[tuple[int, int]] = []
    with Writer(filled) as w:
        w.wait_for(3)

        def progress(done: int, total: int) -> None:
            steps.append((done, total))
            # let the writer commit between every step of the copy
            w.wait_for(w.committed + 2)

        result = backup_database(filled.path, dest, pages=4, progress=progress)
    assert len(steps) > 5
    # one snapshot: the copy never restarted, and its size never changed under it
    assert [d for d, _ in steps] == sorted(d for d, _ in steps)
    assert len({t for _, t in steps}) == 1
    assert result.integrity == "ok" and result.size == dest.stat().st_size
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert _count(dest, "object_id LIKE 'before-%'") == 300
    # the copy is a self-contained file: no WAL, no leftovers next to it
    conn = sqlite3.connect(dest)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    assert sorted(p.name for p in tmp_path.glob("copy*")) == ["copy.sqlite3"]
    # and it opens as a store with a current schema (a restore)
    with Store(dest) as restored:
        assert restored.schema_current()
        assert restored.query("SELECT count(*) AS n FROM audit")[0]["n"] >= 303


def _config(tmp_path: Path, db: Path) -> Path:
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n')
    return cfg


def test_backup_command_while_the_store_is_written(filled: Store, tmp_path: Path, cli: Cli) -> None:
    cfg = _config(tmp_path, filled.path)
    dest = tmp_path / "nightly.sqlite3"
    with Writer(filled) as w:
        w.wait_for(3)
        r = cli("backup", str(dest), "--config", str(cfg))
    assert r.exit_code == 0, r.stderr
    assert f"backup: {dest}" in r.stdout
    assert f"size: {dest.stat().st_size} bytes" in r.stdout
    assert "integrity_check: ok" in r.stdout
    assert "pages (100%)" in r.stderr
    assert _count(dest, "object_id LIKE 'before-%'") == 300
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600

    # an existing file is not overwritten without --force
    before = dest.read_bytes()
    again = cli("backup", str(dest), "--config", str(cfg))
    assert again.exit_code == 1
    assert "exists" in again.stderr and "--force" in again.stderr
    assert dest.read_bytes() == before
    forced = cli("backup", str(dest), "--config", str(cfg), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert _count(dest) >= 303


def test_backup_of_a_missing_database_fails_clearly(tmp_path: Path, cli: Cli) -> None:
    cfg = _config(tmp_path, tmp_path / "nothing-here.sqlite3")
    r = cli("backup", str(tmp_path / "copy.sqlite3"), "--config", str(cfg))
    assert r.exit_code == 1
    assert "no database at" in r.stderr
    assert not (tmp_path / "nothing-here.sqlite3").exists()  # not created by the attempt
    assert not (tmp_path / "copy.sqlite3").exists()


def test_backup_refuses_the_database_itself_and_directories(filled: Store, tmp_path: Path) -> None:
    with pytest.raises(BackupError, match="must not be the database"):
        backup_database(filled.path, filled.path, force=True)
    with pytest.raises(BackupError, match="is a directory"):
        backup_database(filled.path, tmp_path)
    with pytest.raises(BackupError, match="no directory"):
        backup_database(filled.path, tmp_path / "nope" / "copy.sqlite3")
