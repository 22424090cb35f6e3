"""PostgreSQL beside SQLite (issue 18), in one run:

1. callbacks per second, one daemon on SQLite against one daemon on PostgreSQL, in
   alternating rounds (16 senders spread distinct callbacks over the daemons), with
   the daemon's CPU per callback and the PostgreSQL server's;
2. intake CPU per claim (75-reject and paid, as ``intake_bench`` measures cost:
   process CPU from /proc over sequential claims, a paid claim's queued report
   included) for the same two daemons, in alternating rounds;
3. callbacks per second and CPU per callback for one, two and three daemons on one
   PostgreSQL database.

The PostgreSQL server is Debian's, started in a temporary directory as the tests do
(tests/pg_server.py), with its durability on (fsync, synchronous_commit): a commit
is on disk before the callback is acknowledged, as with SQLite's synchronous=FULL.
This machine has 2 CPUs shared by the senders, the daemons and the server, so more
daemons cannot show scaling here: read the CPU per callback, and docs/operations.md's
arithmetic for a chain's peak. Its load comes from other work too: the figures of
one round swing; the ratio is the median of the per-round ratios.

The daemons reach the server over its Unix socket, as a daemon on the database's own
host would (``--tcp``: over loopback TCP, as a daemon on another host would, with
none of a real network's latency).

Target: one daemon on PostgreSQL within 0.8x of SQLite's callback throughput.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import Daemon, Sandbox, machine_facts, pct, run_clients, tree_cpu_s
from bench.intake_bench import claim_body, cpu_per_claim
from tests import builders as b
from tests import pg_server

SENDERS = 16
PER_SENDER = 100
ROUNDS = 5  # alternating rounds, SQLite and PostgreSQL
FLEET_ROUNDS = 3
CLAIMS = 150  # sequential claims a round, for the CPU per claim
CLAIM_ROUNDS = 3
TARGET = 0.8


def _pids(daemons: list[Daemon]) -> list[int]:
    return [d.proc.pid for d in daemons if d.proc is not None]


def callbacks_round(daemons: list[Daemon], tag: str, server_pid: int | None) -> dict[str, float]:
    """One round of SENDERS x PER_SENDER distinct callbacks spread over ``daemons``:
    callbacks/s, latency, and CPU ms per callback of the daemons (with their
    children) and of the PostgreSQL server (all its processes)."""
    urls = [f"http://127.0.0.1:{d.callbacks}/callbacks/pharmacy" for d in daemons]

    def call(c: httpx.Client, i: int) -> None:
        body = {"request": {"id": f"PA{i % 500:04d}", "workflow_status": "New",
                            "delivery_id": f"{tag}-{i}"}}  # fmt: skip
        r = c.post(urls[i % len(urls)], content=json.dumps(body))
        assert r.status_code == 200, r.text

    pids = _pids(daemons)
    cpu0 = sum(tree_cpu_s(p) for p in pids)
    srv0 = tree_cpu_s(server_pid) if server_pid else 0.0
    lat, wall = run_clients(SENDERS, PER_SENDER, call)
    n = SENDERS * PER_SENDER
    cpu = sum(tree_cpu_s(p) for p in pids) - cpu0
    srv = (tree_cpu_s(server_pid) - srv0) if server_pid else 0.0
    return {
        "rate": n / wall,
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "cpu_ms": cpu / n * 1e3,
        "server_ms": srv / n * 1e3,
    }


def warm(daemons: list[Daemon], tag: str) -> None:
    urls = [f"http://127.0.0.1:{d.callbacks}/callbacks/pharmacy" for d in daemons]

    def call(c: httpx.Client, i: int) -> None:
        body = {"request": {"id": f"PA{i % 500:04d}", "delivery_id": f"{tag}-w{i}"}}
        c.post(urls[i % len(urls)], content=json.dumps(body)).raise_for_status()

    run_clients(4, 25, call)


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _row(label: str, rounds: list[dict[str, float]], base: float | None) -> str:
    rate = _median(rounds, "rate")
    vs = f"{rate / base:9.2f}" if base else f"{'':9}"
    server = _median(rounds, "server_ms")
    return (
        f"{label:28} {rate:11.0f} {vs} {_median(rounds, 'p50'):7.1f} "
        f"{_median(rounds, 'p99'):7.1f} {_median(rounds, 'cpu_ms'):10.2f} "
        f"{(f'{server:10.2f}' if server else f'{chr(45):>10}')}  "
        + " ".join(f"{r['rate']:.0f}" for r in rounds)
    )


def main() -> None:
    print(f"pg_bench: {machine_facts()}")
    why = pg_server.missing_reason()
    if why:
        print(f"skipped: {why}")
        return
    run = str(int(time.time()))
    claims = {
        "reject 75": claim_body([b.REJECT_75]),
        "paid (report queued)": claim_body([b.PAID]),
    }
    lite_rounds: list[dict[str, float]] = []
    pg_rounds: list[dict[str, float]] = []
    fleet: dict[int, list[dict[str, float]]] = {}
    intake: dict[str, dict[str, list[float]]] = {"SQLite": {}, "PostgreSQL": {}}
    intake_server: dict[str, list[float]] = {}
    with (
        Sandbox() as sb,
        pg_server.running_server(durable=True) as server,
    ):
        server_pid = int((server.data / "postmaster.pid").read_text().split()[0])
        url = server.url(server.new_database("bench"), unix="--tcp" not in sys.argv)
        pg_env = {"PA_BRIDGE_STORAGE__URL": url}
        config = sb.service_config()
        with Daemon(config=config) as lite, Daemon(config=config, env=pg_env) as pg1:
            warm([lite], run + "lite")
            warm([pg1], run + "pg")
            for k in range(ROUNDS):
                order = [("lite", lite), ("pg", pg1)]
                for name, d in order if k % 2 == 0 else order[::-1]:
                    r = callbacks_round([d], f"{run}-{name}-{k}", server_pid if d is pg1 else None)
                    (lite_rounds if d is lite else pg_rounds).append(r)
            # intake CPU per claim: as intake_bench's cost, alternating rounds
            daemons = {"SQLite": lite, "PostgreSQL": pg1}
            for case, body in claims.items():
                for d in daemons.values():  # warm-up
                    cpu_per_claim(_pids([d])[0], f"{d.url}/v1/claims", body, 20, d.url)
                for _ in range(CLAIM_ROUNDS):
                    for engine, d in daemons.items():
                        srv0 = tree_cpu_s(server_pid)
                        got = cpu_per_claim(
                            _pids([d])[0], f"{d.url}/v1/claims", body, CLAIMS, d.url
                        )
                        intake[engine].setdefault(case, []).append(got)
                        if d is pg1:  # the server's CPU, the warm-up claim included
                            srv = (tree_cpu_s(server_pid) - srv0) * 1000 / CLAIMS
                            intake_server.setdefault(case, []).append(srv)
        fleet[1] = pg_rounds
        for n in (2, 3):
            daemons_n = [Daemon(env=pg_env) for _ in range(n)]
            try:
                for d in daemons_n:
                    d.__enter__()
                warm(daemons_n, f"{run}-fleet{n}")
                fleet[n] = [
                    callbacks_round(daemons_n, f"{run}-fleet{n}-{k}", server_pid)
                    for k in range(FLEET_ROUNDS)
                ]
            finally:
                for d in daemons_n:
                    d.__exit__(None, None, None)
    print(f"after the run: {machine_facts()}")
    print(f"PostgreSQL over {'loopback TCP' if '--tcp' in sys.argv else 'its Unix socket'}")
    base = _median(lite_rounds, "rate")
    print(
        f"\ncallbacks: {SENDERS} senders x {PER_SENDER} a round; medians of {ROUNDS} alternating"
        f" rounds (fleet: {FLEET_ROUNDS} rounds); CPU ms per callback"
    )
    print(
        f"{'':28} {'callbacks/s':>11} {'vs SQLite':>9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'daemon CPU':>10} {'server CPU':>10}  rounds (callbacks/s)"
    )
    print(_row("1 daemon, SQLite", lite_rounds, base))
    for n, rounds in fleet.items():
        print(_row(f"{n} daemon(s), PostgreSQL", rounds, base))
    ratios = [p["rate"] / s["rate"] for s, p in zip(lite_rounds, pg_rounds, strict=True)]
    ratio = statistics.median(ratios)
    print(
        f"one daemon on PostgreSQL: {ratio:.2f}x SQLite, median of the per-round ratios"
        f" ({' '.join(f'{x:.2f}' for x in ratios)}); target >= {TARGET}:"
        f" {'met' if ratio >= TARGET else 'NOT met'}"
    )
    print(
        f"\nintake: CPU ms per claim (daemon and its child), {CLAIMS} sequential claims a"
        f" round, median of {CLAIM_ROUNDS} alternating rounds"
    )
    print(
        f"{'case':<22} {'SQLite':>7} {'PostgreSQL':>10} {'ratio':>6} {'PG server':>9}"
        "  rounds (SQLite | PostgreSQL)"
    )
    for case in claims:
        lite_v, pg_v = intake["SQLite"][case], intake["PostgreSQL"][case]
        ml, mp = statistics.median(lite_v), statistics.median(pg_v)
        print(
            f"{case:<22} {ml:7.2f} {mp:10.2f} {mp / ml:6.2f}"
            f" {statistics.median(intake_server[case]):9.2f}  "
            f"{' '.join(f'{x:.2f}' for x in lite_v)} | {' '.join(f'{x:.2f}' for x in pg_v)}"
        )


if __name__ == "__main__":
    main()
