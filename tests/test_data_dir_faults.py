"""The data directory made read-only (issue 32): `chattr +i` on it, which holds even for
root (the tests' user) as a read-only remount would: nothing can be created or removed
in it, while the files already there stay writable.

A daemon that runs on keeps acknowledging and keeping claims and callbacks (SQLite
writes only into the files it has open), stops, and starts again (its -wal and -shm
were left). One that must create them refuses to start, naming the file, with no
traceback; doctor FAILs the directory."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.store import Store, meta
from tests import builders as b
from tests.support import pa_bridge_process


def _can_make_immutable(where: Path) -> bool:
    probe = where / "probe"
    probe.mkdir()
    try:
        return subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
        probe.rmdir()


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("chattr") is None or not _can_make_immutable(tmp_path):
        pytest.skip("chattr +i is not available here (needs root and ext4 or tmpfs)")
    d = tmp_path / "data"
    d.mkdir()
    try:
        yield d
    finally:
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)


def _read_only(d: Path, on: bool = True) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(d)], check=True)


def _traffic(d: Any, tag: str, n: int) -> tuple[list[str], list[str], list[int]]:
    """``n`` paid claims and ``n`` callbacks: (claims acknowledged, callbacks
    acknowledged, every status)."""
    claims, callbacks, statuses = [], [], []
    with httpx.Client(timeout=10) as c:
        for i in range(n):
            body = {
                "request": b.request_bytes(rxs=(b.Rx(rx_number=f"{tag}{i:06d}"),)).decode(
                    "latin-1"
                ),
                "response": b.response_bytes([b.PAID]).decode("latin-1"),
            }
            r = c.post(f"{d.intake_server.url}/v1/claims", json=body)
            statuses.append(r.status_code)
            if r.status_code == 200:
                claims.append(r.json()["claim_id"])
            pa = f"RO{tag}{i:03d}"
            cb = c.post(f"{d.callback_server.url}/callbacks/pharmacy",
                        json={"request": {"id": pa, "workflow_status": "New"}})  # fmt: skip
            statuses.append(cb.status_code)
            if cb.status_code == 200:
                callbacks.append(pa)
    return claims, callbacks, statuses


def test_a_daemon_whose_data_directory_turns_read_only_serves_on_and_starts_again(
    data: Path, make_daemon: Any
) -> None:
    db = data / "pa-bridge.sqlite3"
    d1 = make_daemon(storage={"path": str(db)})
    acked = [_traffic(d1, "1", 5)]
    _read_only(data)
    acked.append(_traffic(d1, "2", 20))
    with httpx.Client(base_url=d1.intake_server.url, timeout=10) as api:
        assert api.get("/healthz").json()["status"] == "ok"
    d1.stop()  # SQLite cannot remove its -wal and -shm now: they stay
    d2 = make_daemon(storage={"path": str(db)})  # and so it starts again
    acked.append(_traffic(d2, "3", 5))
    d2.stop()
    _read_only(data, on=False)
    assert all(s == 200 for _c, _cb, statuses in acked for s in statuses)
    with Store(db) as s:
        claims = {r["id"] for r in s.query("SELECT id FROM exchanges")}
        pas = {r["id"] for r in s.query("SELECT id FROM pas")}
    assert {c for got, _cb, _s in acked for c in got} <= claims
    assert {p for _c, got, _s in acked for p in got} <= pas
    assert len(claims) == 30


def test_a_daemon_that_must_create_its_wal_in_a_read_only_directory_says_so(
    data: Path, tmp_path: Path
) -> None:
    db = data / "pa-bridge.sqlite3"
    with Store(db) as s:  # stopped cleanly: no -wal, no -shm
        s.write(lambda d: meta.put(d, "drill", "1"))
    for lock in (False, True):  # with the daemon's lock file there already, and without
        if lock:
            _read_only(data, on=False)
            Path(f"{db}.lock").touch()
        _read_only(data)
        env = {"PATH": "/usr/bin:/bin", "PA_BRIDGE_STORAGE__PATH": str(db),
               "PA_BRIDGE_INTAKE__LISTEN": "127.0.0.1:0", "PA_BRIDGE_CALLBACKS__LISTEN":
               "127.0.0.1:0", "PA_BRIDGE_SANDBOX__LISTEN": "127.0.0.1:0",
               "PA_BRIDGE_SANDBOX__PERSIST": "false"}  # fmt: skip
        served = pa_bridge_process("serve", cwd=tmp_path, env=env)
        assert served.returncode == 2, served.stderr[-2000:]  # the path is ours to fix
        assert "Traceback" not in served.stderr
        said = [ln for ln in served.stderr.splitlines() if ln.startswith("error: cannot start")]
        assert said and str(data) in said[0], served.stderr[-2000:]
    doctor = pa_bridge_process("doctor", cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                               "PA_BRIDGE_STORAGE__PATH": str(db)})  # fmt: skip
    assert doctor.returncode == 1
    assert any(
        ln.startswith("FAIL  database directory") and "not writable" in ln
        for ln in doctor.stdout.splitlines()
    ), doctor.stdout
