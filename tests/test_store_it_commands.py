"""Store IT's commands against a serving daemon under load (issue 13).

`pa-bridge backup`, `queue list|retry`, `doctor`, a `sqlite3` shell and a plain
SQLite connection from another process, run again and again while claims, callbacks
and submit-PA clicks go on. Each once broke the daemon: the store opened and closed a
descriptor of the database after SQLite had opened it, which drops every POSIX lock
the process holds on the file, so the next process to close its connection believed
it was the last and deleted the WAL under the daemon. Afterwards every acknowledged
item must be on disk, no request may have had a 5xx, and the WAL must never vanish.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests import builders as b
from tests.support import DaemonProcess, pa_bridge_process

pytestmark = pytest.mark.slow


class Load:
    """Claims (paid and rejected), submit PA on the rejected ones, and callbacks, from
    three threads; records what was acknowledged and every 5xx."""

    def __init__(self, d: DaemonProcess) -> None:
        self.d = d
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.claims: set[str] = set()
        self.pas: set[str] = set()
        self.callback_pas: set[str] = set()
        self.server_errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._claims, daemon=True),
            threading.Thread(target=self._callbacks, daemon=True),
        ]

    def _bad(self, what: str, r: httpx.Response) -> None:
        with self.lock:
            self.server_errors.append(f"{what}: HTTP {r.status_code} {r.text[:200]}")

    def _claims(self) -> None:
        n = 0
        with httpx.Client(base_url=self.d.url, timeout=15) as api:
            while not self.stop.is_set():
                n += 1
                rx = f"{700000 + n}"
                reject = n % 2 == 0
                resp = b.response_bytes([b.REJECT_75] if reject else [b.PAID])
                req = b.request_bytes(rxs=(b.Rx(rx_number=rx),))
                r = api.post("/v1/claims", json=b.exchange_json(req, resp))
                if r.status_code >= 500:
                    self._bad("claim", r)
                    continue
                claim_id = r.json()["claim_id"]
                with self.lock:
                    self.claims.add(claim_id)
                if reject:
                    p = api.post(f"/v1/claims/{claim_id}/pa")
                    if p.status_code >= 500:
                        self._bad("submit", p)
                    elif p.status_code in (200, 201) and p.json().get("pa_id"):
                        with self.lock:
                            self.pas.add(p.json()["pa_id"])

    def _callbacks(self) -> None:
        n = 0
        url = f"http://127.0.0.1:{self.d.callback_port}/callbacks/pharmacy"
        with httpx.Client(timeout=15) as c:
            while not self.stop.is_set():
                n += 1
                pa_id = f"SIT{n:05d}"
                body = {"request": {"id": pa_id, "workflow_status": "New", "events": []}}
                r = c.post(url, content=json.dumps(body))
                if r.status_code >= 500:
                    self._bad("callback", r)
                elif r.status_code == 200:
                    with self.lock:
                        self.callback_pas.add(pa_id)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _other_process_connection(db: Path) -> None:
    """A plain SQLite connection in another process, opened, read and closed: what
    the `sqlite3` shell or a monitoring script does."""
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
        " c.execute('SELECT count(*) FROM exchanges').fetchone(); c.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=60)


def test_commands_while_serving_under_load_lose_nothing(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path, env={"PA_BRIDGE_SANDBOX__STEP_SECONDS": "0.2"}).start()
    db = tmp_path / "var" / "pa-bridge.sqlite3"
    wal = Path(f"{db}-wal")
    shell = shutil.which("sqlite3")
    ran: list[str] = []
    try:
        with Load(d) as load, httpx.Client(base_url=d.url, timeout=15) as api:
            for round_ in range(3):
                commands: list[tuple[str, ...]] = [
                    ("backup", str(tmp_path / f"b{round_}.sqlite3")),
                    ("queue", "list"),
                    ("queue", "list", "--json"),
                    ("queue", "list", "--status", "failed"),
                    ("queue", "retry", "1"),
                    ("doctor",),
                ]
                for args in commands:
                    r = pa_bridge_process(*args, cwd=tmp_path)
                    ran.append(" ".join(args))
                    if args[0] == "backup":
                        assert r.returncode == 0, r.stderr
                        assert "integrity_check: ok" in r.stdout
                    assert "Traceback" not in r.stderr, r.stderr
                    assert wal.exists(), f"the WAL vanished after `pa-bridge {' '.join(args)}`"
                    h = api.get("/healthz")
                    assert h.status_code == 200 and h.json()["database"], h.text
                _other_process_connection(db)
                ran.append("python sqlite3 connection")
                if shell:
                    out = subprocess.run(
                        [shell, str(db), "SELECT count(*) FROM pas;"],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    assert out.returncode == 0, out.stderr
                    ran.append("sqlite3 shell")
                assert wal.exists(), "the WAL vanished after another process's connection"
            # the daemon still takes and keeps work after all of that
            after = api.post(
                "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes())
            )
            assert after.status_code == 200
            load.claims.add(after.json()["claim_id"])
        assert not load.server_errors, load.server_errors[:5]
        assert len(load.claims) > 20 and load.pas and len(load.callback_pas) > 20
    finally:
        assert d.terminate() == 0
    assert "backup" in ran[0]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        claims = {r[0] for r in conn.execute("SELECT id FROM exchanges")}
        pas = {r[0] for r in conn.execute("SELECT id FROM pas")}
    finally:
        conn.close()
    assert not (load.claims - claims), f"{len(load.claims - claims)} acknowledged claims lost"
    assert not (load.pas - pas), f"{len(load.pas - pas)} submitted PAs lost"
    lost = load.callback_pas - pas
    assert not lost, f"{len(lost)} acknowledged callbacks lost"
