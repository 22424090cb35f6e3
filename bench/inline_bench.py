"""Inline mode's added latency (issue 30): what pa-bridge adds to a claim's round trip
beyond the outcomes call, against a bare TCP relay measured in the same run.

Processes, each on its own: the sandbox with its switch (`pa-bridge sandbox
--switch-port`, answering at once so that only the relays' time is measured); a bare
TCP relay (asyncio, one upstream connection per client connection, bytes piped both
ways, nothing parsed: the floor of any relay); and `pa-bridge serve` with `[inline]`
in front of the same switch and `[service]` on the same sandbox (SQLite, fsync on,
logs at INFO). A test dispensing system (tests/dispensing.py) runs `--clients`
workstations in an open loop (latency from when each claim was due), each with a
connection to the relay and one to pa-bridge, sending a claim to each in turn, half an
interval apart, `--rate` claims a second to each side: the shared machine's hiccups
fall on both alike. The mix: 80% paid, 10% MR rejects (answered at once, taken in
after), 10% 75 rejects (answered after the outcomes call: its own time, read from the
stored answer, is taken off before comparing). The sandbox's outcomes interface takes
`--outcomes-ms` (100) to answer, as a real one far away does: the exchange's commit
then runs inside the call, as it would in a store.

Target: p99 of the added latency under 5 ms at a busy store's peak rate. A busy store
sends about 1,000 claims a day, 15% in its peak hour: 150 an hour; the default rate,
20 a second to each side from 4 workstations, is some 500 times that.

    .venv/bin/python bench/inline_bench.py [--rate 20] [--seconds 20] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import answers_200, free_port, machine_facts, pct, tree_cpu_s
from pa_bridge.sandbox import SANDBOX_API_KEY, SANDBOX_PASSWORD, SANDBOX_USERNAME
from tests import builders as b
from tests.dispensing import DispensingClient

MIX = ["SYNPCN"] * 8 + ["REJMR", "REJ75"]


# ---- the bare relay (run as its own process: --relay LISTEN SWITCH) -------------------
async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65_536):
            writer.write(data)
    except OSError:
        pass
    finally:
        writer.close()


async def _relay(listen: int, switch: int) -> None:
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", switch)
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    server = await asyncio.start_server(one, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


# ---- the run -----------------------------------------------------------------------------
def _wait_port(port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def next(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


def run_round(
    ports: tuple[int, int], clients: int, rate: float, seconds: float, counter: Counter
) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """One open-loop round through both relays at once: each workstation sends the
    same mix to the bare relay and to pa-bridge, a claim to each in turn, half an
    interval apart, so that the machine's hiccups fall on both alike. Each side gets
    ``rate`` claims a second. (pcn, rx number, latency ms) per claim, per side."""
    interval = clients / rate
    per_client = max(1, int(seconds * rate / clients))
    out: list[list[list[tuple[str, str, float]]]] = [[[], []] for _ in range(clients)]
    ready = threading.Barrier(clients + 1)
    start: list[float] = []

    def worker(k: int) -> None:
        sides = [DispensingClient(("127.0.0.1", p), timeout=30) for p in ports]
        try:
            for c in sides:
                c.exchange(b.request_bytes(rxs=(b.Rx(rx_number=f"{counter.next():012d}"),)))
            ready.wait()
            for i in range(per_client):
                pcn = MIX[(i + k) % len(MIX)]
                for side, c in enumerate(sides):
                    rx = f"{counter.next():012d}"
                    request = b.request_bytes(pcn=pcn, rxs=(b.Rx(rx_number=rx),))
                    due = start[0] + (i + k / clients + side / 2) * interval
                    pause = due - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    c.exchange(request)
                    out[k][side].append((pcn, rx, (time.perf_counter() - due) * 1000))
        finally:
            for c in sides:
                c.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.append(time.perf_counter() + 0.5)
    ready.wait()
    for t in threads:
        t.join()
    relay = [x for part in out for x in part[0]]
    bridge = [x for part in out for x in part[1]]
    return relay, bridge


def outcomes_ms(db: Path) -> dict[str, float]:
    """Rx number -> the outcomes call's time, of each 75 reject pa-bridge stored."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT request_raw, answer_json FROM exchanges WHERE reject_codes = '75'"
        ).fetchall()
    finally:
        conn.close()
    import ncpdp

    got = {}
    for raw, answer in rows:
        if not answer:
            continue
        rx = (ncpdp.parse(bytes(raw)).as_request().transactions[0].rx_number or "").lstrip("0")
        elapsed = json.loads(answer).get("outcomes_elapsed_ms")
        if elapsed is not None:
            got[rx] = float(elapsed)
    return got


def summary(values: list[float]) -> str:
    return f"p50 {pct(values, 50):7.2f}  p99 {pct(values, 99):7.2f}  max {max(values):7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=20.0, help="claims a second, all clients")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0, help="per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (each printed)")
    ap.add_argument(
        "--outcomes-ms",
        type=float,
        default=100.0,
        help="how long the sandbox's outcomes interface takes (a real one is far away)",
    )
    ap.add_argument("--quick", action="store_true", help="one round of 8 s each")
    ap.add_argument("--relay", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        asyncio.run(_relay(*args.relay))
        return
    if args.quick:
        args.rounds, args.seconds = 1, 8.0

    work = Path(tempfile.mkdtemp(prefix="inline-bench-"))
    sandbox_port, switch_port = free_port(), free_port()
    relay_port, inline_port, intake_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    py = sys.executable
    try:
        procs.append(
            subprocess.Popen(
                [
                    *(py, "-m", "pa_bridge", "sandbox"),
                    *("--port", str(sandbox_port), "--switch-port", str(switch_port)),
                    *("--outcomes-delay", str(args.outcomes_ms / 1000)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_port(switch_port)
        procs.append(subprocess.Popen([py, __file__, "--relay", str(relay_port), str(switch_port)]))
        sb = f"http://127.0.0.1:{sandbox_port}"
        config = f"""
[service]
claim_url = "{sb}/cmmimport/"
outcomes_url = "{sb}/outcomes.json"
dashboard_url = "{sb}/dashboard"
username = "{SANDBOX_USERNAME}"
password = "{SANDBOX_PASSWORD}"
api_key = "{SANDBOX_API_KEY}"
probe_seconds = 0

[intake]
listen = "127.0.0.1:{intake_port}"

[callbacks]
listen = "127.0.0.1:{free_port()}"

[storage]
path = "{work}/pa-bridge.sqlite3"

[inline]
listen = "127.0.0.1:{inline_port}"
switch = "127.0.0.1:{switch_port}"
switch_tls = false
"""
        (work / "pa-bridge.toml").write_text(config)
        with open(work / "daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                [py, "-m", "pa_bridge", "serve", "--config", str(work / "pa-bridge.toml")],
                cwd=work,
                stdout=log,
                stderr=log,
            )
        procs.append(daemon)
        if not answers_200(f"http://127.0.0.1:{intake_port}/healthz"):
            raise RuntimeError((work / "daemon.log").read_text()[-2000:])
        _wait_port(relay_port)
        _wait_port(inline_port)

        print(f"inline_bench: {machine_facts()}")
        print(
            f"  {args.clients} workstations, {args.rate:g} claims/s to each side, open loop,"
            f" {args.rounds} rounds of {args.seconds:g} s, a claim to each side in turn;"
            " mix 80% paid, 10% MR, 10% 75"
        )
        counter = Counter()
        ports = (relay_port, inline_port)
        # warm-up (connections, the outcomes client, the database)
        run_round(ports, args.clients, args.rate, 2.0, counter)
        relay: list[tuple[str, str, float]] = []
        bridge: list[tuple[str, str, float]] = []
        cpu_before = tree_cpu_s(daemon.pid)
        bridge_claims = 0
        per_round: list[float] = []
        passthrough = {"SYNPCN", "REJMR"}
        for n in range(args.rounds):
            r, got = run_round(ports, args.clients, args.rate, args.seconds, counter)
            relay += r
            bridge += got
            bridge_claims += len(got)
            rp = [ms for pcn, _, ms in r if pcn in passthrough]
            bp = [ms for pcn, _, ms in got if pcn in passthrough]
            per_round.append(pct(bp, 99) - pct(rp, 99))
            print(
                f"  round {n + 1}: paid + MR p99 relay {pct(rp, 99):6.2f} ms, pa-bridge"
                f" {pct(bp, 99):6.2f} ms, added {per_round[-1]:6.2f} ms"
                f" (load {os.getloadavg()[0]:.1f})"
            )
        cpu = tree_cpu_s(daemon.pid) - cpu_before
        time.sleep(1.0)  # the last answers' records ride the next commit (decision 0025)
        spent = outcomes_ms(work / "pa-bridge.sqlite3")

        def lat(rows: list[tuple[str, str, float]], pcns: set[str]) -> list[float]:
            return [ms for pcn, _, ms in rows if pcn in pcns]

        base = lat(relay, passthrough)
        ours = lat(bridge, passthrough)
        base75 = [ms for _, _, ms in relay]  # the relay treats every claim alike
        ours75 = [
            ms - spent[rx.lstrip("0")]
            for pcn, rx, ms in bridge
            if pcn == "REJ75" and rx.lstrip("0") in spent
        ]
        print(f"  bare relay, paid + MR ({len(base)}):          {summary(base)} ms")
        print(f"  pa-bridge,  paid + MR ({len(ours)}):          {summary(ours)} ms")
        print(f"  bare relay, every claim ({len(base75)}):       {summary(base75)} ms")
        print(f"  pa-bridge,  75 less its outcomes call ({len(ours75)}): {summary(ours75)} ms")
        added = pct(ours, 99) - pct(base, 99)
        added75 = pct(ours75, 99) - pct(base75, 99)
        print(
            f"  added p99: paid + MR {added:.2f} ms (p50 {pct(ours, 50) - pct(base, 50):.2f});"
            f" 75 beyond its outcomes call {added75:.2f} ms;"
            f" ratio p99 pa-bridge/relay {pct(ours, 99) / pct(base, 99):.2f}x"
        )
        ours_ms = [
            float(e["ours_ms"])
            for line in (work / "daemon.log").read_text().splitlines()
            if '"inline.answered"' in line and (e := json.loads(line)).get("result") == "passed"
        ]
        print(
            f"  pa-bridge's own time on the answer path (its log, switch answer in to bytes"
            f" out, passed answers, {len(ours_ms)}): {summary(ours_ms)} ms"
        )
        print(
            f"  added p99 per round, median: {statistics.median(per_round):.2f} ms;"
            f" pa-bridge CPU per claim (its queued reports included):"
            f" {cpu / max(1, bridge_claims) * 1000:.2f} ms"
        )
        ok = added < 5.0 and added75 < 5.0
        print(f"  target p99 added < 5 ms: {'met' if ok else 'NOT MET'}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
