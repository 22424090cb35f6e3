"""Errors that say where to look (issue 27): an unwritable database path, a busy
sandbox port, a missing secret reported once, where a relative secret file was
looked for, the environment variable behind a bad value, and a start-up failure
that is also a JSON log line."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pa_bridge.config import ConfigError, load_settings, parse_listen
from tests.support import Cli


def _problems(**sections: Any) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_settings(**sections)
    return ei.value.problems


# ---- the configuration ------------------------------------------------------------------
def test_an_unreadable_secret_is_reported_once_not_with_what_it_causes(tmp_path: Path) -> None:
    """Before: the secret's own line, then "required when the sandbox is not enabled",
    "give both or neither", "lacks password", "intake.tokens: required"."""
    nope = str(tmp_path / "nope")
    service = {
        "claim_url": "https://claims.pa.invalid/cmmimport/",
        "outcomes_url": "https://pa.invalid/outcomes",
        "username": "u",
        "password_file": nope,
        "api_key": "k",
    }
    (line,) = _problems(service=service)
    assert line.startswith(f"service.password_file: cannot read {nope}: ")
    (line,) = _problems(callbacks={"username": "svc", "password_file": nope})
    assert line.startswith("callbacks.password_file: cannot read")
    store = {"provider_id": "1234567", "username": "s", "password_file": nope, "api_key": "k"}
    (line,) = _problems(pharmacies=[store])
    assert line.startswith("pharmacies (provider id 1234567): password_file: cannot read")
    (line,) = _problems(intake={"listen": "0.0.0.0:8470", "tokens_file": nope})
    assert line.startswith("intake.tokens_file: cannot read")


def test_an_empty_secret_file_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    """`printf %s "$PW" > file` with $PW unset writes an empty file. Before, an empty
    [service] password file started the daemon (every call then sent an empty
    password) while `doctor` said FAIL; a store's was "lacks password"."""
    empty = tmp_path / "service-password"
    empty.write_text("\n")
    service = {
        "claim_url": "https://claims.pa.invalid/cmmimport/",
        "outcomes_url": "https://pa.invalid/outcomes",
        "username": "u",
        "password_file": str(empty),
        "api_key": "k",
    }
    (line,) = _problems(service=service)
    assert line == f"service.password_file: {empty} is empty"
    store = {"provider_id": "1234567", "username": "s", "password": "p", "api_key_file": str(empty)}
    (line,) = _problems(pharmacies=[store])
    assert line == f"pharmacies (provider id 1234567): api_key_file: {empty} is empty"


def test_a_relative_secret_file_says_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    (line,) = _problems(callbacks={"username": "svc", "password_file": "callback-password"})
    assert f"cannot read {tmp_path / 'callback-password'}" in line
    assert "$CREDENTIALS_DIRECTORY is not set" in line and "absolute path" in line
    creds = tmp_path / "creds"
    creds.mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    (line,) = _problems(callbacks={"username": "svc", "password_file": "callback-password"})
    assert f"cannot read {creds / 'callback-password'} (in $CREDENTIALS_DIRECTORY)" in line


def test_a_bad_value_from_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PA_BRIDGE_INTAKE__LISTEN", "nowhere")
    monkeypatch.setenv("PA_BRIDGE_CALLBACKS__USERNAME", "svc")
    monkeypatch.setenv("PA_BRIDGE_CALLBACKS__PASSWORD_FILE", str(tmp_path / "nope"))
    with pytest.raises(ConfigError) as ei:
        load_settings()
    (listen,) = ei.value.problems
    assert listen.startswith("intake.listen (from PA_BRIDGE_INTAKE__LISTEN): ")
    monkeypatch.delenv("PA_BRIDGE_INTAKE__LISTEN")
    (secret,) = _problems()
    assert secret.startswith(
        "callbacks.password_file (from PA_BRIDGE_CALLBACKS__PASSWORD_FILE): cannot read"
    )


def test_a_config_error_at_start_is_also_a_json_log_line(tmp_path: Path, cli: Cli) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[intake]\nlisten = "nowhere"\n')
    r = cli("serve", "--config", str(cfg))
    assert r.exit_code == 2
    assert "config error: intake.listen: " in r.stderr
    (logged,) = [json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")]
    assert logged["event"] == "daemon.start_failed" and logged["level"] == "error"
    assert logged["problems"][0].startswith("intake.listen: ")


# ---- the database path ------------------------------------------------------------------
@pytest.fixture
def not_mine(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A directory this process may not write, and the command prefix that makes it
    so: as root, root without its power to override file modes (setpriv drops
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH) and the directory owned by ``nobody``;
    otherwise the directory made read-only."""
    d = tmp_path / "state"
    d.mkdir()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root this needs setpriv(1) (util-linux) to drop CAP_DAC_OVERRIDE")
        nobody = pwd.getpwnam("nobody")
        os.chown(d, nobody.pw_uid, nobody.pw_gid)
        os.chmod(d, 0o755)  # noqa: S103 - readable by all, writable by nobody only
        yield d, ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
    else:
        os.chmod(d, 0o555)  # noqa: S103 - read-only for its owner too
        yield d, []
        os.chmod(d, 0o700)


def _serve(prefix: list[str], cfg: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pa_bridge", "serve", "--config", str(cfg)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PA_BRIDGE_")},
    )


def _listen_anywhere(db: Path) -> str:
    return (
        f'[storage]\npath = "{db}"\n[intake]\nlisten = "127.0.0.1:0"\n'
        '[callbacks]\nlisten = "127.0.0.1:0"\n[sandbox]\nlisten = "127.0.0.1:0"\n'
    )


def test_a_database_directory_it_cannot_write_stops_it_naming_the_path(
    tmp_path: Path, not_mine: tuple[Path, list[str]]
) -> None:
    """Before: "error: cannot start: Permission denied" (no path), exit 1."""
    d, prefix = not_mine
    cfg = tmp_path / "c.toml"
    cfg.write_text(_listen_anywhere(d / "pa-bridge.sqlite3"))
    r = _serve(prefix, cfg, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: cannot start: storage.path: the directory {d} is not writable")
    assert f"chown {pwd.getpwuid(os.geteuid()).pw_name} {d}" in line and "User=" in line
    logged = [json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")]
    failed = [e for e in logged if e["event"] == "daemon.start_failed"]
    assert failed and failed[0]["key"] == "storage.path" and str(d) in failed[0]["error"]
    assert list(d.iterdir()) == []


def test_a_database_file_it_cannot_write_stops_it_naming_the_file(
    tmp_path: Path, not_mine: tuple[Path, list[str]]
) -> None:
    """Before: a traceback (sqlite3.OperationalError: unable to open database file)."""
    _, prefix = not_mine
    writable = tmp_path / "writable"
    writable.mkdir()
    db = writable / "pa-bridge.sqlite3"
    db.write_bytes(b"")
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(db, nobody.pw_uid, nobody.pw_gid)
        os.chmod(db, 0o600)
    else:
        os.chmod(db, 0o444)
    cfg = tmp_path / "c.toml"
    cfg.write_text(_listen_anywhere(db))
    r = _serve(prefix, cfg, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert f"storage.path: {db} is not readable and writable by user" in line
    assert "chown" in line


# ---- ports -------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["directory", "text file"])
def test_a_storage_path_that_is_no_database_stops_it_naming_the_path(
    tmp_path: Path, what: str
) -> None:
    """storage.path naming a directory, or a file that is not SQLite's (the config
    file, a file of another program): before, a traceback (sqlite3.OperationalError:
    unable to open database file / sqlite3.DatabaseError: file is not a database),
    exit 1, and a log line saying only "DatabaseError"."""
    db = tmp_path / "pa-bridge.sqlite3"
    if what == "directory":
        db.mkdir()
    else:
        db.write_text("[storage]\npath = 'the config, given as the database'\n")
    before = db.read_text() if what != "directory" else None
    cfg = tmp_path / "c.toml"
    cfg.write_text(_listen_anywhere(db))
    r = _serve([], cfg, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: cannot start: storage.path: {db} is ")
    assert "storage.path" in line and ("directory" in line or "not an SQLite database" in line)
    logged = [json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")]
    (failed,) = [e for e in logged if e["event"] == "daemon.start_failed"]
    assert failed["key"] == "storage.path" and str(db) in failed["error"]
    if before is not None:
        assert db.read_text() == before  # untouched


def test_a_busy_sandbox_port_names_its_key(make_daemon: Any) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = f"127.0.0.1:{busy.getsockname()[1]}"
    try:
        with pytest.raises(OSError, match=rf"sandbox.listen {taken}: .*set sandbox.listen"):
            make_daemon(sandbox={"listen": taken})
    finally:
        busy.close()


def test_the_sandbox_command_does_not_take_the_embedded_sandboxs_port(cli: Cli) -> None:
    from pa_bridge.config import SandboxSettings
    from pa_bridge.sandbox.cli import sandbox

    (port,) = [p for p in sandbox.params if p.name == "port"]
    assert port.default != parse_listen(SandboxSettings().listen)[1]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    try:
        r = cli("sandbox", "--port", str(taken))
    finally:
        busy.close()
    assert r.exit_code == 1
    assert f"error: --port {taken} (127.0.0.1): " in r.stderr
    assert "Traceback" not in r.output
