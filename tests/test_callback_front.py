"""The callback listener's own process (decision 0008): it is restarted when it dies,
it goes when the daemon goes, and a listen address in use stops the start. What the
listener answers, and what the daemon commits, is tested on the parts in one process
(tests/test_callbacks.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import NO_SERVICE, DaemonProcess, wait_until


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


def test_listener_runs_in_a_child_process_and_commits_in_the_daemon(make_daemon: Any) -> None:
    d = make_daemon(sandbox={"enabled": False}, service=NO_SERVICE)
    front = d.callback_server
    assert front.pid is not None and front.pid != os.getpid() and front.alive
    r = httpx.post(f"{front.url}/callbacks/pharmacy", content=_callback("PF1", "a-1"))
    assert r.status_code == 200 and r.json() == {"status": "stored", "pa_id": "PF1"}
    assert d.store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 1
    health = httpx.get(f"{d.intake_server.url}/healthz").json()
    assert health["callbacks"] is True and health["status"] == "ok"


def test_a_listener_that_dies_is_restarted_on_the_same_address(make_daemon: Any) -> None:
    d = make_daemon(sandbox={"enabled": False}, service=NO_SERVICE)
    front = d.callback_server
    first, address = front.pid, front.address
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: front.restarts == 1 and front.alive, timeout=20, what="a new listener")
    assert front.pid != first and front.address == address
    r = httpx.post(f"{front.url}/callbacks/pharmacy", content=_callback("PF2", "b-1"))
    assert r.status_code == 200
    assert d.store.query("SELECT pa_id FROM callbacks") == [{"pa_id": "PF2"}]


@pytest.mark.slow
def test_the_listener_goes_when_the_daemon_is_killed(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path).start()
    assert d.proc is not None
    kids = _children(d.proc.pid)
    assert kids, "the daemon has no child process"
    d.kill()
    wait_until(lambda: not any(_alive(k) for k in kids), timeout=10, what="the listener to go")
    # the address is free again: a new daemon on the same ports starts and answers
    again = DaemonProcess(tmp_path)
    again.intake_port, again.callback_port = d.intake_port, d.callback_port
    again.env.update(
        PA_BRIDGE_INTAKE__LISTEN=f"127.0.0.1:{d.intake_port}",
        PA_BRIDGE_CALLBACKS__LISTEN=f"127.0.0.1:{d.callback_port}",
    )
    again.start()
    try:
        r = httpx.post(
            f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy",
            content=_callback("PF3", "c-1"),
        )
        assert r.status_code == 200
    finally:
        assert again.terminate() == 0


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


@pytest.mark.slow
def test_sigterm_to_every_process_stops_both_in_order(tmp_path: Path) -> None:
    """systemd's stop sends SIGTERM to the daemon and its listener at once: the
    listener waits for the daemon to stop it, nothing is restarted or logged as lost."""
    d = DaemonProcess(tmp_path).start()
    assert d.proc is not None
    kids = _children(d.proc.pid)
    assert kids
    for pid in kids:
        os.kill(pid, signal.SIGTERM)
    assert d.terminate() == 0
    wait_until(lambda: not any(_alive(k) for k in kids), timeout=10, what="the listener to go")
    events = [json.loads(line).get("event") for line in d.log_lines() if line.startswith("{")]
    assert "daemon.stopped" in events
    assert "callbacks.listener_exited" not in events
    assert "callbacks.listener_restarted" not in events


def test_a_listener_that_does_not_come_up_in_time_fails_the_start(tmp_path: Path) -> None:
    from pa_bridge.callbacks.supervisor import CallbackFront, CallbackFrontError
    from pa_bridge.config import load_settings

    settings = load_settings(
        storage={"path": str(tmp_path / "db.sqlite3")},
        callbacks={"listen": "127.0.0.1:0"},
        sandbox={"enabled": False},
        service=NO_SERVICE,
    )
    front = CallbackFront(settings, lambda batch: [], start_timeout_s=0.001)
    with pytest.raises(CallbackFrontError, match="did not start within"):
        front.start()
    assert not front.alive
