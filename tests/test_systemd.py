"""The systemd unit verifies, and the daemon speaks the sd_notify protocol for real:
READY after start, WATCHDOG pings while alive, STOPPING on SIGTERM."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, DaemonProcess

UNIT = ROOT / "systemd" / "pa-bridge.service"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's console script
    exe = Path(sys.executable).parent / "pa-bridge"
    unit = tmp_path / "pa-bridge.service"
    unit.write_text(UNIT.read_text().replace("/opt/pa-bridge/venv/bin/pa-bridge", str(exe)))
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [
        line
        for line in (r.stdout + r.stderr).splitlines()
        if "pa-bridge.service" in line
        and "User" not in line  # the user exists on a store box, not here
    ]
    assert r.returncode == 0 or not problems, r.stdout + r.stderr
    assert not problems, problems


def test_unit_declares_what_store_it_relies_on() -> None:
    text = UNIT.read_text()
    for line in (
        "Type=notify",
        "WatchdogSec=",
        "StateDirectory=pa-bridge",
        "ConfigurationDirectory=pa-bridge",
        "LoadCredential=",
        "Restart=on-failure",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "User=pa-bridge",
        "LimitNOFILE=8192",  # decision 0013: a descriptor per connection
    ):
        assert line in text, line


def test_sd_notify_ready_watchdog_and_stopping(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(20)
    d = DaemonProcess(tmp_path, env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"})
    try:
        d.start()  # returns once /healthz answers
        messages: list[str] = []
        while sum("WATCHDOG=1" in m for m in messages) < 3:
            messages.append(sock.recv(4096).decode())
        assert messages[0].startswith("READY=1")
        assert d.terminate() == 0
        tail = []
        sock.settimeout(5)
        while True:
            tail.append(sock.recv(4096).decode())
            if "STOPPING=1" in tail[-1]:
                break
        assert any("STOPPING=1" in m for m in tail)
    finally:
        d.terminate()
        sock.close()
