"""The callback receiver's listener in the daemon (decision 0045): it serves and
commits, the daemon has no child process, and a listen address in use stops the start.
What the receiver answers, and what the daemon commits, is tested on the parts in one
process (tests/test_callbacks.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import NO_SERVICE, DaemonProcess


def _callback(pa_id: str, delivery: str) -> bytes:
    return json.dumps(
        {"request": {"id": pa_id, "workflow_status": "New", "delivery_id": delivery}}
    ).encode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        kids += [int(k) for k in f.read_text().split()]
    return kids


def test_the_receiver_is_served_by_the_daemon_and_commits(make_daemon: Any) -> None:
    d = make_daemon(sandbox={"enabled": False}, service=NO_SERVICE)
    server = d.callback_server
    assert server.alive
    r = httpx.post(f"{server.url}/callbacks/pharmacy", content=_callback("PF1", "a-1"))
    assert r.status_code == 200 and r.json() == {"status": "stored", "pa_id": "PF1"}
    assert d.store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 1
    health = httpx.get(f"{d.intake_server.url}/healthz").json()
    assert health["callbacks"] is True and health["status"] == "ok"


@pytest.mark.slow
def test_the_daemon_is_one_process(tmp_path: Path) -> None:
    """No child process (decision 0045): the receiver is the daemon's second listener."""
    d = DaemonProcess(tmp_path).start()
    try:
        assert d.proc is not None
        assert _children(d.proc.pid) == []
        r = httpx.post(
            f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy",
            content=_callback("PF3", "c-1"),
        )
        assert r.status_code == 200
    finally:
        assert d.terminate() == 0


@pytest.mark.slow
def test_a_callback_address_in_use_stops_the_start_with_the_key_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "PA_BRIDGE_INTAKE__LISTEN": "127.0.0.1:0",
            "PA_BRIDGE_CALLBACKS__LISTEN": f"127.0.0.1:{port}",
            "PA_BRIDGE_SANDBOX__LISTEN": "127.0.0.1:0",
        }
        done = subprocess.run(
            [sys.executable, "-m", "pa_bridge", "serve"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"callbacks.listen 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
