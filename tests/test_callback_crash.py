"""Crash drill: 16 senders post 10,000 distinct callbacks; the daemon is SIGKILLed part
way. Every callback that got a 200 must be in the database exactly once afterwards."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest

from tests.support import DaemonProcess, wait_until

pytestmark = pytest.mark.slow

TOTAL = 10_000
SENDERS = 16


def test_every_acknowledged_callback_survives_sigkill(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path).start()
    cb_url = f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy"
    acked: list[set[str]] = [set() for _ in range(SENDERS)]
    sent = [0] * SENDERS
    halfway = threading.Event()

    def sender(k: int) -> None:
        with httpx.Client(timeout=5) as c:
            for n in range(k, TOTAL, SENDERS):
                key = f"drill-{n}"
                body = {
                    "request": {
                        "id": f"PA{n % 700:04d}",
                        "workflow_status": "New",
                        "delivery_id": key,
                    }
                }
                try:
                    r = c.post(cb_url, content=json.dumps(body))
                except httpx.HTTPError:
                    return  # the daemon is gone
                sent[k] += 1
                if r.status_code == 200:
                    acked[k].add(key)
                if sum(len(a) for a in acked) >= TOTAL // 3:
                    halfway.set()

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    wait_until(halfway.is_set, timeout=120, what="a third of the callbacks acknowledged")
    d.kill()
    for t in threads:
        t.join(30)
    all_acked = set().union(*acked)
    assert TOTAL // 3 <= len(all_acked) < TOTAL  # killed part way

    db = tmp_path / "var" / "pa-bridge.sqlite3"
    d2 = DaemonProcess(tmp_path).start()  # restart: recovery of the WAL, migrations
    try:
        conn = sqlite3.connect(db)
        try:
            rows = conn.execute(
                "SELECT dedupe_key, count(*) FROM callbacks GROUP BY dedupe_key"
            ).fetchall()
        finally:
            conn.close()
        stored = {k.removeprefix("delivery:"): n for k, n in rows}
        missing = all_acked - stored.keys()
        assert not missing, f"{len(missing)} acknowledged callbacks were lost"
        assert all(n == 1 for n in stored.values())
        r = httpx.get(f"{d2.url}/v1/pa", params={"limit": 1000})
        assert r.status_code == 200 and len(r.json()["pas"]) > 0
    finally:
        d2.terminate()
