"""The systemd unit verifies, and the daemon speaks the sd_notify protocol for real:
READY after start, WATCHDOG pings while alive, STOPPING on SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, DaemonProcess

UNIT = ROOT / "systemd" / "pa-bridge.service"


def _documented_install() -> dict[str, str]:
    """Where docs/operations.md's install steps put the program, the docs and the unit."""
    text = (ROOT / "docs" / "operations.md").read_text()
    steps = text[text.index("## Installing in a store") :]
    venv = re.search(r"sudo python3 -m venv (\S+)", steps)
    docs = re.search(r"sudo cp -r docs (\S+)", steps)
    unit = re.search(r"sudo cp systemd/pa-bridge.service ([^\s`]+)", steps)
    assert venv and docs and unit, "the install steps moved: update this test"
    return {"venv": venv[1], "docs": docs[1], "unit_dir": unit[1]}


def test_the_unit_names_what_the_documented_install_creates() -> None:
    where = _documented_install()
    text = UNIT.read_text()
    assert f"ExecStart={where['venv']}/bin/pa-bridge serve --config " in text
    assert "ExecReload=/bin/kill -HUP $MAINPID" in text  # systemctl reload: SIGHUP
    docs = re.findall(r"^Documentation=(\S+)", text, flags=re.M)
    assert docs == [f"file://{where['docs']}/operations.md"]
    assert where["unit_dir"] == "/etc/systemd/system/"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_unit_passes_systemd_analyze_verify_installed_as_documented() -> None:
    """`systemd-analyze verify` checks that ExecStart exists. The documented install
    is made where the unit looks for it (/opt/pa-bridge), in a mount namespace of its
    own so that nothing on this machine changes: the program (this checkout's console
    script stands for the venv's) and the docs; the unit itself is not edited."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to make /opt/pa-bridge in a mount namespace")
    where = _documented_install()
    exe = Path(sys.executable).parent / "pa-bridge"
    opt = str(Path(where["venv"]).parent)
    script = (
        f"mount -t tmpfs tmpfs {Path(opt).parent} && mkdir -p {where['venv']}/bin"
        f" && ln -s {exe} {where['venv']}/bin/pa-bridge"
        f" && mkdir -p {where['docs']} && mount --bind {ROOT / 'docs'} {where['docs']}"
        f" && test -f {where['docs']}/operations.md"
        f" && systemd-analyze verify --man=no {UNIT}"
    )
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0 and "unshare failed" in r.stderr:
        pytest.skip(f"no mount namespace here: {r.stderr.strip()}")
    problems = [
        line
        for line in (r.stdout + r.stderr).splitlines()
        if "pa-bridge.service" in line
        and "User" not in line  # the user exists on a store box, not here
    ]
    assert not problems, problems
    assert r.returncode == 0, r.stdout + r.stderr


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
