"""Callbacks per second and daemon CPU per callback: one daemon on SQLite next to one
daemon on PostgreSQL in the same run, then two and three daemons on one PostgreSQL
database (issue 18). 16 senders spread distinct callbacks over the daemons.

The PostgreSQL server is Debian's, started in a temporary directory as the tests do
(tests/pg_server.py), with its durability on (fsync, synchronous_commit): a commit
is on disk before the callback is acknowledged, as with SQLite's synchronous=FULL.
This machine has 2 CPUs shared by the senders, the daemons and the server, so more
daemons cannot show scaling here: read the CPU per callback, and the closing note's
arithmetic for a chain's peak.

Target: one daemon on PostgreSQL within 0.8x of SQLite's callback throughput.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import Daemon, machine_facts, pct, run_clients
from tests import pg_server

SENDERS = 16
PER_SENDER = 150


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and their children so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def _tree(pid: int) -> list[int]:
    out = [pid]
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def measure(label: str, daemons: list[Daemon], run: str) -> dict[str, float]:
    urls = [f"http://127.0.0.1:{d.callbacks}/callbacks/pharmacy" for d in daemons]
    pids = [p for d in daemons if d.proc is not None for p in _tree(d.proc.pid)]

    def call(c: httpx.Client, i: int) -> None:
        body = {"request": {"id": f"PA{i % 500:04d}", "workflow_status": "New",
                            "delivery_id": f"{run}-{label}-{i}"}}  # fmt: skip
        r = c.post(urls[i % len(urls)], content=json.dumps(body))
        assert r.status_code == 200, r.text

    run_clients(4, 20, call)  # warm up: connections, the interpreter's caches
    cpu0 = _cpu_s(pids)
    lat, wall = run_clients(SENDERS, PER_SENDER, call)
    cpu = _cpu_s(pids) - cpu0
    n = SENDERS * PER_SENDER
    return {"rate": n / wall, "p50": pct(lat, 50), "p99": pct(lat, 99), "cpu_ms": cpu / n * 1e3}


def main() -> None:
    print(machine_facts())
    why = pg_server.missing_reason()
    if why:
        print(f"skipped: {why}")
        return
    run = str(int(time.time()))
    results: list[tuple[str, dict[str, float]]] = []
    with Daemon() as lite:
        results.append(("1 daemon, SQLite", measure("lite", [lite], run)))
    with pg_server.running_server(durable=True) as server:
        url = server.url(server.new_database("bench"))
        for n in (1, 2, 3):
            env = {"PA_BRIDGE_STORAGE__URL": url}
            daemons = [Daemon(env=env) for _ in range(n)]
            try:
                for d in daemons:
                    d.__enter__()
                results.append((f"{n} daemon(s), PostgreSQL", measure(f"pg{n}", daemons, run)))
            finally:
                for d in daemons:
                    d.__exit__(None, None, None)
    base = results[0][1]["rate"]
    print(f"{'':28} {'callbacks/s':>11} {'vs SQLite':>9} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'daemon CPU ms/cb':>16}")  # fmt: skip
    for label, r in results:
        print(f"{label:28} {r['rate']:11.0f} {r['rate'] / base:9.2f} {r['p50']:7.1f} "
              f"{r['p99']:7.1f} {r['cpu_ms']:16.2f}")  # fmt: skip
    ratio = results[1][1]["rate"] / base
    print(f"one daemon on PostgreSQL: {ratio:.2f}x SQLite (target >= 0.8)")


if __name__ == "__main__":
    main()
