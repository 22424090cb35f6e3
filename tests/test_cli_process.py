"""`pa-bridge` as a real process: the console script and `python -m pa_bridge`, for what
only a process shows (exit statuses as the shell sees them, raw bytes on the real stdin
and stdout, nothing created in the working directory). Every other CLI test runs in
process on click's CliRunner (the ``cli`` fixture); `serve`, signals and the commands
beside a serving daemon are in test_daemon_e2e.py, test_systemd.py, test_sandbox.py and
test_store_it_commands.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import builders as b
from tests.support import pa_bridge_process

PA_BRIDGE = Path(sys.executable).with_name("pa-bridge")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PA_BRIDGE_")}


def _script(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(PA_BRIDGE), *args], input=stdin, capture_output=True, timeout=60, env=_env()
    )


def test_claim_bytes_through_the_console_scripts_stdin_and_stdout() -> None:
    framed = b"\x02" + b.response_bytes([b.REJECT_MR]) + b"\x03\r\n"
    strict = _script("claim", "parse", "-", stdin=framed)
    assert strict.returncode == 2 and strict.stdout == b""
    assert len(strict.stderr.decode().splitlines()) == 1
    assert strict.stderr.startswith(b"error: ")
    lenient = _script("claim", "parse", "--lenient", "-", stdin=framed)
    assert lenient.returncode == 0, lenient.stderr
    assert "STX framing before the header" in json.loads(lenient.stdout)["tolerated"]
    formatted = _script("claim", "format", "-", stdin=lenient.stdout)
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout == framed


def test_module_entry_point_exit_statuses_and_no_files(tmp_path: Path) -> None:
    def module(*args: str) -> subprocess.CompletedProcess[str]:
        return pa_bridge_process(*args, cwd=tmp_path, env=_env())

    version = module("--version")
    assert version.returncode == 0 and version.stdout.startswith("pa-bridge, version ")
    # the embedded default: all ok (its ports picked at start, so that a pa-bridge on
    # this machine holding 8470, 8471 and 8480 does not fail it)
    ports = {f"PA_BRIDGE_{k}__LISTEN": "127.0.0.1:0" for k in ("INTAKE", "CALLBACKS", "SANDBOX")}
    ok = pa_bridge_process("doctor", cwd=tmp_path, env=_env() | ports)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1].endswith("0 FAIL, 0 warn")
    missing = module("queue", "list")  # no database yet: an error, not an empty queue
    assert missing.returncode == 1 and "no database at" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[storage]\nretention_days = 0\n")
    config_error = module("queue", "list", "--config", str(bad))
    assert config_error.returncode == 2
    assert "storage.retention_days" in config_error.stderr
    assert "Traceback" not in ok.stderr + missing.stderr + config_error.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # nothing created


def test_reconcile_without_a_database_says_where_it_looked_and_creates_none(
    tmp_path: Path,
) -> None:
    """Run where no daemon ever ran (store IT's home directory, a wrong storage.path):
    it was a traceback (no ./var), or a new empty database and "0 of 0 PAs read",
    exit 0 (./var there)."""

    def module(*args: str) -> subprocess.CompletedProcess[str]:
        return pa_bridge_process(*args, cwd=tmp_path, env=_env())

    for _ in range(2):
        r = module("reconcile")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        where = tmp_path / "var" / "pa-bridge.sqlite3"
        assert f"no database at {where}" in r.stderr and "no --config" in r.stderr
        (tmp_path / "var").mkdir(exist_ok=True)  # the second time: ./var is there
    assert list((tmp_path / "var").iterdir()) == []  # nothing created
