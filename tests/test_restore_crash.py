"""A `pa-bridge restore` killed at each of its steps (issue 32): the daemon and doctor
refuse to go on over the half-done restore and say how to finish it; running the same
restore again finishes it; nothing of the database it replaced is lost, its WAL
included."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pa_bridge.config import load_settings
from pa_bridge.restore import RestoreError, interrupted_restore
from pa_bridge.runtime import Daemon
from tests.support import Cli, pa_bridge_process

pytestmark = pytest.mark.slow

#: a daemon's writes, then SIGKILL: the database is left with its -wal and -shm
_CRASHED_DAEMON = """
import os, signal, sys
from pa_bridge.store import Store, meta
s = Store(sys.argv[1])
s.write(lambda db: meta.put(db, "drill.live", "in the wal"))
os.kill(os.getpid(), signal.SIGKILL)
"""

#: `pa-bridge restore`, SIGKILLed at its Nth rename (os.replace): nothing after it runs
_KILLED_RESTORE = """
import os, signal, sys
real, calls = os.replace, [0]
def replace(src, dst):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
os.replace = replace
from pa_bridge.cli import main
main(["restore", sys.argv[2], "--yes"], standalone_mode=False)
"""


def _python(script: str, *args: str, env: dict[str, str] | None = None) -> int:
    import os

    run = subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        timeout=120,
    )
    return run.returncode


def _value(db: Path, key: str) -> str | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


@pytest.fixture
def backup(tmp_path: Path, cli: Cli) -> Path:
    """A `pa-bridge backup` of another database, with a row of its own."""
    from pa_bridge.store import Store, meta

    other = tmp_path / "other.sqlite3"
    with Store(other) as s:
        s.write(lambda db: meta.put(db, "drill.backup", "from the backup"))
    copy = tmp_path / "nightly.sqlite3"
    r = cli("backup", str(copy), env={"PA_BRIDGE_STORAGE__PATH": str(other)})
    assert r.exit_code == 0, r.output
    return copy


@pytest.mark.parametrize("killed_at", [1, 2, 3, 4, 5])
def test_a_restore_killed_at_each_step_is_refused_then_finished(
    tmp_path: Path, backup: Path, cli: Cli, make_daemon: Any, killed_at: int
) -> None:
    db = tmp_path / "live" / "pa-bridge.sqlite3"
    db.parent.mkdir()
    assert _python(_CRASHED_DAEMON, str(db)) == -9
    assert Path(f"{db}-wal").exists()  # the live row is only in the WAL
    env = {"PA_BRIDGE_STORAGE__PATH": str(db)}

    assert _python(_KILLED_RESTORE, str(db), str(backup), str(killed_at), env=env) == -9

    half_done = interrupted_restore(db)
    if half_done is None:  # killed before anything was moved: the database is whole
        assert _value(db, "drill.live") == "in the wal"
    else:
        assert str(backup) in str(half_done)
        daemon = Daemon(load_settings(storage={"path": str(db)}))
        try:
            with pytest.raises(RestoreError, match="was interrupted") as refused:
                daemon.start()  # as `pa-bridge serve` does: it exits 1 with this
            assert "pa-bridge restore" in str(refused.value)
        finally:
            daemon.stop()
        assert not db.exists() or _value(db, "drill.live") == "in the wal"  # not touched
        r = cli("doctor", env=env)
        assert r.exit_code == 1
        failed = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL  database restore")]
        assert failed and "pa-bridge restore" in failed[0] and str(backup) in failed[0]

    r = cli("restore", str(backup), "--yes", env=env)  # the same file again
    assert r.exit_code == 0, r.output
    assert interrupted_restore(db) is None
    left = sorted(p.name for p in db.parent.iterdir() if "before-restore" not in p.name)
    # the audit log's anchors (decision 0035) live beside the database too
    assert [n for n in left if n != "audit-anchors.jsonl"] == [
        "pa-bridge.sqlite3",
        "pa-bridge.sqlite3.lock",
    ]
    assert _value(db, "drill.backup") == "from the backup"
    aside = [p for p in db.parent.glob("*.before-restore-*") if p.name.endswith("Z")]
    kept = [_value(p, "drill.live") for p in aside]
    assert kept == ["in the wal"], "the replaced database (with its WAL) was not kept whole"
    d = make_daemon(storage={"path": str(db)})
    assert d.store is not None and _value(db, "drill.backup") == "from the backup"


def test_the_command_to_finish_names_the_config_given(
    tmp_path: Path, backup: Path, cli: Cli
) -> None:
    """`serve --config FILE` and `doctor --config FILE` over a half-done restore give the
    command to finish it with that FILE (they said `--config <config>`: pasted, it
    failed), and without --config none."""
    db = tmp_path / "live" / "pa-bridge.sqlite3"
    db.parent.mkdir()
    assert _python(_CRASHED_DAEMON, str(db)) == -9
    env = {"PA_BRIDGE_STORAGE__PATH": str(db)}
    assert _python(_KILLED_RESTORE, str(db), str(backup), "2", env=env) == -9
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f'[storage]\npath = "{db}"\n[intake]\nlisten = "127.0.0.1:0"\n'
        '[callbacks]\nlisten = "127.0.0.1:0"\n[sandbox]\nlisten = "127.0.0.1:0"\n'
    )
    finish = f"`pa-bridge restore --config {cfg} {backup}`"
    served = pa_bridge_process("serve", "--config", str(cfg), cwd=tmp_path)
    assert served.returncode == 1 and finish in served.stderr, served.stderr
    r = cli("doctor", "--config", str(cfg))
    assert finish in r.stdout, r.stdout
    r = cli("doctor", env=env)
    assert f"`pa-bridge restore {backup}`" in r.stdout, r.stdout
    assert "<config>" not in r.stdout


def test_putting_back_the_database_just_moved_aside_in_the_same_second(tmp_path: Path) -> None:
    """Store IT restores a backup, sees it was the wrong one and puts the database it
    replaced back at once: the second restore's aside gets its own name (it took the
    first's, then refused: both files 'exist')."""
    from pa_bridge.backup import backup_database
    from pa_bridge.restore import restore_database
    from pa_bridge.store import Store

    db = tmp_path / "pa.sqlite3"
    with Store(db) as store:
        assert store.schema_current()
    backup = tmp_path / "copy.sqlite3"
    backup_database(db, backup)
    noon = 1_795_780_800.0  # one fixed second for both restores
    first = restore_database(backup, db, clock=lambda: noon)
    assert first.moved_aside is not None and first.moved_aside.exists()
    second = restore_database(first.moved_aside, db, clock=lambda: noon)
    assert second.moved_aside is not None
    assert second.moved_aside != first.moved_aside and second.moved_aside.name.endswith("-2")
    assert second.moved_aside.exists() and db.exists()
    assert first.moved_aside.exists()  # the backup restored is copied, never moved
