"""Drills on PostgreSQL (issue 18): three `pa-bridge serve` processes on one database,
one SIGKILLed part way."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.support import DaemonProcess, wait_until

pytestmark = pytest.mark.slow

#: fewer than the issue's 10,000 so the drill stays within a minute on CI; the figure
#: for 10,000 is in the closing note
TOTAL = 3_000
SENDERS = 16


def _fleet(tmp_path: Path, pg_url: str, n: int = 3) -> list[DaemonProcess]:
    daemons = []
    for k in range(n):
        cwd = tmp_path / f"d{k}"
        cwd.mkdir()
        daemons.append(DaemonProcess(cwd, env={"PA_BRIDGE_STORAGE__URL": pg_url}))
    return [d.start() for d in daemons]


def test_callbacks_spread_over_three_daemons_one_killed_are_stored_once(
    tmp_path: Path, pg_url: str
) -> None:
    daemons = _fleet(tmp_path, pg_url)
    urls = [f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy" for d in daemons]
    acked: list[set[str]] = [set() for _ in range(SENDERS)]
    third = threading.Event()
    killed = threading.Event()

    def post(c: httpx.Client, url: str, body: bytes) -> int | None:
        try:
            return c.post(url, content=body).status_code
        except httpx.HTTPError:
            return None  # that daemon is gone: the load balancer tries the next

    def sender(k: int) -> None:
        with httpx.Client(timeout=10) as c:
            for n in range(k, TOTAL, SENDERS):
                key = f"drill-{n}"
                body = json.dumps(
                    {"request": {"id": f"PA{n % 500:04d}", "workflow_status": "New",
                                 "delivery_id": key}}
                ).encode()  # fmt: skip
                targets = [n % 3, (n + 1) % 3, (n + 2) % 3]
                if n % 10 == 0:  # the service retries on another daemon at once: twice
                    other = threading.Thread(target=post, args=(c, urls[targets[1]], body))
                    other.start()
                for t in targets:
                    status = post(c, urls[t], body)
                    if status is not None:
                        break
                if n % 10 == 0:
                    other.join(10)
                if status == 200:
                    acked[k].add(key)
                if sum(len(a) for a in acked) >= TOTAL // 3:
                    third.set()

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    try:
        wait_until(third.is_set, timeout=120, what="a third of the callbacks acknowledged")
        daemons[0].kill()
        killed.set()
        for t in threads:
            t.join(120)
        all_acked = set().union(*acked)
        assert len(all_acked) > TOTAL * 0.9  # the two others took the rest
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT dedupe_key, count(*) FROM callbacks GROUP BY dedupe_key"
            ).fetchall()
            dup_seq = conn.execute(
                "SELECT count(*) - count(DISTINCT change_seq) FROM pas"
            ).fetchone()
        stored = {k.removeprefix("delivery:"): n for k, n in rows}
        missing = all_acked - stored.keys()
        assert not missing, f"{len(missing)} acknowledged callbacks were lost"
        assert all(n == 1 for n in stored.values())
        assert dup_seq == (0,)
    finally:
        for d in daemons[1:]:
            d.terminate()
