"""The cost of a claim: the daemon's CPU time per claim beside the floor's, and,
for information, intake answers per second and latency from 8 concurrent clients.

Cost (the target, which holds on a shared machine): a few hundred sequential claims,
and the CPU time (user + system, from /proc) the daemon and its child process used
for them, divided by their number; beside it the same figure for the bare relay floor
(Flask on the daemon's own WSGI server helper, forwarding one fixed outcomes form to
the sandbox over a kept-alive connection, parsing and storing nothing), in alternating
rounds of the same run. A paid claim's cost includes delivering its queued outcome
report (the rounds wait for the queue to drain). Target: at most 1.5x the floor for a
75-reject and for a paid claim, with the exchange committed (synchronous=FULL) before
the answer, as always.

Cases: paid claims (answered at once, report queued), 75-rejects with the sandbox's
outcomes answering at once, and 75-rejects while the outcomes interface stalls (BIN
999998). The sandbox runs as its own process, as the real service would be remote.
Baseline in the same run: the outcomes call itself, POSTed directly to the same
sandbox by the same client code (one httpx.Client per bench thread, as for intake) at
the same concurrency, so the bench client's own cost is the same on both sides. Overhead = intake p99 minus
outcomes p99. Targets: p99 overhead <= 5 ms; zero answers over 1550 ms when stalling.

Beside the closed loop (each client sends its next claim as soon as it has an answer,
which on this 2-CPU machine saturates it), an open loop below saturation: each client
sends 10 claims a second, and latency counts from when each claim was due.

The baseline and the 75-reject case run in alternating rounds and the overhead is the
median of the per-round differences: on a shared machine the rates drift within a
minute, and a difference of two runs made a minute apart says more about the drift.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

import ncpdp
from bench._common import (
    Daemon,
    Sandbox,
    floor_app,
    free_port,
    machine_facts,
    pct,
    run_clients,
    run_paced,
    tree_cpu_s,
    wait_healthy,
)
from pa_bridge.client import outcome_variables
from pa_bridge.sandbox import SANDBOX_API_KEY
from tests import builders as b

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}
CLIENTS = 8
PER_CLIENT = 60
ROUNDS = 3
PACED_PER_CLIENT_S = 10  # open loop: each client sends 10 claims a second, 80/s in all
PACED_SECONDS = 4
COST_CLAIMS = 200  # sequential claims a round, for the CPU cost per claim
COST_ROUNDS = 3
COST_TARGET = 1.5  # times the floor's CPU per claim

# The floor of any intake on this stack: a bare Flask endpoint on our server that reads
# the claim, forwards one fixed outcomes form to the sandbox over a kept-alive
# http.client connection and answers.
# No parsing, no storage.
RELAY_APP = floor_app(
    """
    import http.client, sys, threading, urllib.parse
    from flask import Flask, jsonify, request
    target = urllib.parse.urlsplit(sys.argv[2])
    form = sys.argv[3].encode()
    local = threading.local()
    app = Flask("relay")
    @app.post("/v1/claims")
    def claims():
        request.get_data()
        for attempt in (1, 2):
            c = getattr(local, "c", None)
            if c is None:
                c = local.c = http.client.HTTPConnection(target.hostname, target.port, timeout=1.5)
            try:
                c.request("POST", "/outcomes.json", body=form,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
                answer = c.getresponse().read()
                break
            except (OSError, http.client.HTTPException):
                c.close()
                local.c = None
        return jsonify({"message": answer[:50].decode("latin-1")}), 200
    """,
    16,
)


def outcomes_form() -> bytes:
    """The fixed outcomes form the relay forwards (a 75-reject of the builders' claim)."""
    return urlencode(
        outcome_variables(
            ncpdp.parse(b.request_bytes()),
            ncpdp.parse(b.response_bytes([b.REJECT_75])),
            api_key=SANDBOX_API_KEY,
        )
    ).encode()


@contextlib.contextmanager
def relay(sandbox_url: str) -> Iterator[tuple[int, str]]:
    """The relay floor running against ``sandbox_url``: (its pid, its claims URL)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", RELAY_APP, str(port), sandbox_url, outcomes_form().decode()],
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(port)
        yield proc.pid, f"http://127.0.0.1:{port}/v1/claims"
    finally:
        proc.terminate()
        proc.wait(10)


def _drained(url: str, timeout: float = 30.0) -> None:
    """Wait until the daemon's queue is empty (a paid claim's report delivered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/healthz", timeout=5).json().get("queue_depth") == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("the daemon's queue did not drain")


def claim_body(response: list[str], **request: str) -> dict[str, str]:
    """A synthetic claim's JSON body for ``POST /v1/claims``: the builders' request
    (``request`` overrides its fields) and a response with ``response``'s reject codes
    (``[b.PAID]``: paid)."""
    return {
        "request": b.request_bytes(**request).decode("latin-1"),
        "response": b.response_bytes(response).decode("latin-1"),
    }


def cpu_per_claim(pid: int, url: str, body: dict[str, str], n: int, drain: str | None) -> float:
    """CPU milliseconds per claim used by ``pid`` and its children for ``n`` sequential
    claims POSTed to ``url`` (and, with ``drain``, the queue work they left)."""
    content = json.dumps(body).encode()
    with httpx.Client(timeout=30) as c:
        c.post(url, content=content, headers=JSON)  # the connection, outside the count
        if drain:
            _drained(drain)
        before = tree_cpu_s(pid)
        for _ in range(n):
            r = c.post(url, content=content, headers=JSON)
            assert r.status_code == 200, r.text
        if drain:
            _drained(drain)
        return (tree_cpu_s(pid) - before) * 1000 / n


def cost(d: Daemon, relay_pid: int, relay_url: str, cases: dict[str, dict[str, str]]) -> bool:
    """Print the CPU per claim of each case beside the floor's; True when on target."""
    daemon_pid = d.proc.pid if d.proc is not None else 0
    claims = f"{d.url}/v1/claims"
    floor: list[float] = []
    per_case: dict[str, list[float]] = {name: [] for name in cases}
    for body in cases.values():  # warm-up
        cpu_per_claim(daemon_pid, claims, body, 30, d.url)
    cpu_per_claim(relay_pid, relay_url, cases["reject 75 (outcomes first)"], 30, None)
    for _ in range(COST_ROUNDS):
        floor.append(
            cpu_per_claim(
                relay_pid, relay_url, cases["reject 75 (outcomes first)"], COST_CLAIMS, None
            )
        )
        for name, body in cases.items():
            per_case[name].append(cpu_per_claim(daemon_pid, claims, body, COST_CLAIMS, d.url))
    f = statistics.median(floor)
    print(
        f"cost: CPU per claim (daemon and its child process), {COST_CLAIMS} sequential claims"
        f" a round, median of {COST_ROUNDS} alternating rounds"
    )
    print(f"{'case':<38} {'CPU ms/claim':>12} {'x floor':>8}  rounds")
    print(f"{'floor: bare Flask relay':<38} {f:>12.2f} {1.0:>8.2f}  {_rounds(floor)}")
    ok = True
    for name, values in per_case.items():
        m = statistics.median(values)
        ok = ok and m <= COST_TARGET * f
        print(f"{'intake: ' + name:<38} {m:>12.2f} {m / f:>8.2f}  {_rounds(values)}")
    print(f"cost target: at most {COST_TARGET}x the floor: {'met' if ok else 'NOT met'}")
    return ok


def _rounds(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> None:
    cost_only = "--cost-only" in sys.argv
    print(f"intake_bench: {machine_facts()}; {CLIENTS} concurrent clients")
    paid = claim_body([b.PAID])
    r75 = claim_body([b.REJECT_75])
    stall = claim_body([b.REJECT_75], bin="999998")
    with Sandbox() as sb, Daemon(config=sb.service_config()) as d:
        sandbox = sb.url
        form = outcomes_form()

        def outcomes_direct(c: httpx.Client, i: int) -> None:
            r = c.post(f"{sandbox}/outcomes.json", content=form, headers=FORM)
            assert r.status_code == 200 and r.content, r.text

        server_overhead: list[float] = []

        def post(body: dict[str, str], url: str | None = None) -> object:
            # encoded once, as the baseline's form is: the client's own work per
            # request is then a POST of bytes and a read on both sides
            content = json.dumps(body).encode()
            target = url or f"{d.url}/v1/claims"

            def call(c: httpx.Client, i: int) -> None:
                r = c.post(target, content=content, headers=JSON)
                assert r.status_code == 200, r.text
                a = json.loads(r.content)
                if a.get("outcomes_elapsed_ms") is not None:
                    server_overhead.append(a["elapsed_ms"] - a["outcomes_elapsed_ms"])

            return call

        floor = contextlib.ExitStack()
        relay_pid, relay_url = floor.enter_context(relay(sandbox))
        relay_call = post(r75, relay_url)
        cost(
            d,
            relay_pid,
            relay_url,
            {"reject 75 (outcomes first)": r75, "paid claim (async report)": paid},
        )
        if cost_only:
            floor.close()
            return

        run_clients(CLIENTS, 10, post(paid))  # warm-up
        run_clients(CLIENTS, 10, outcomes_direct)
        run_clients(CLIENTS, 10, relay_call)
        rows = []
        base: list[float] = []
        lat75: list[float] = []
        server75: list[float] = []
        base_wall = wall75 = 0.0
        round_overheads: list[float] = []
        relay_overheads: list[tuple[float, float]] = []
        relay_lat: list[float] = []
        relay_wall = 0.0
        for _ in range(ROUNDS):
            b_lat, b_wall = run_clients(CLIENTS, PER_CLIENT, outcomes_direct)
            server_overhead.clear()
            i_lat, i_wall = run_clients(CLIENTS, PER_CLIENT, post(r75))
            server75 += server_overhead
            round_overheads.append(pct(i_lat, 99) - pct(b_lat, 99))
            r_lat, r_wall = run_clients(CLIENTS, PER_CLIENT, relay_call)
            relay_overheads.append(
                (pct(r_lat, 99) - pct(b_lat, 99), pct(r_lat, 50) - pct(b_lat, 50))
            )
            relay_lat += r_lat
            relay_wall += r_wall
            base += b_lat
            lat75 += i_lat
            base_wall += b_wall
            wall75 += i_wall
        floor.close()
        rows.append(("outcomes call itself (baseline)", base, base_wall))
        rows.append(("floor: bare Flask relay, no work", relay_lat, relay_wall))
        lat, wall = run_clients(CLIENTS, PER_CLIENT, post(paid))
        rows.append(("intake: paid claim (async report)", lat, wall))
        rows.append(("intake: reject 75 (outcomes first)", lat75, wall75))
        # open loop below saturation: what pa-bridge adds when claims are not queued
        # behind one another on this 2-CPU machine shared with the client and sandbox
        paced_base: list[float] = []
        paced_75: list[float] = []
        paced_rounds: list[tuple[float, float]] = []
        n_paced = PACED_PER_CLIENT_S * PACED_SECONDS
        for _ in range(ROUNDS):
            pb = run_paced(CLIENTS, n_paced, 1 / PACED_PER_CLIENT_S, outcomes_direct)
            pi = run_paced(CLIENTS, n_paced, 1 / PACED_PER_CLIENT_S, post(r75))
            paced_rounds.append((pct(pi, 99) - pct(pb, 99), pct(pi, 50) - pct(pb, 50)))
            paced_base += pb
            paced_75 += pi
        paced_secs = ROUNDS * PACED_SECONDS
        rows.append(
            (f"paced {CLIENTS * PACED_PER_CLIENT_S}/s: outcomes call", paced_base, paced_secs)
        )
        rows.append(
            (f"paced {CLIENTS * PACED_PER_CLIENT_S}/s: intake reject 75", paced_75, paced_secs)
        )
        lat_stall, wall_stall = run_clients(CLIENTS, 3, post(stall))
        serial_base, sb_wall = run_clients(1, 150, outcomes_direct)
        rows.append(("1 client: outcomes call itself", serial_base, sb_wall))
        serial_75, s75_wall = run_clients(1, 150, post(r75))
        rows.append(("1 client: intake reject 75", serial_75, s75_wall))
        rows.append(("intake: reject 75, outcomes stalls", lat_stall, wall_stall))

    print(f"{'case':<38} {'n':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, values, secs in rows:
        print(
            f"{name:<38} {len(values):>5} {len(values) / secs:>8.1f} {pct(values, 50):>8.2f}"
            f" {pct(values, 99):>8.2f} {max(values):>8.2f}"
        )
    overhead = statistics.median(round_overheads)
    over = sum(1 for x in lat_stall if x > 1550)
    print(
        f"overhead of intake over the outcomes call, {CLIENTS} clients: p99 {overhead:.2f} ms"
        f" (target <= 5 ms; median of {ROUNDS} alternating rounds:"
        f" {' '.join(f'{x:.1f}' for x in round_overheads)}),"
        f" p50 {pct(lat75, 50) - pct(base, 50):.2f} ms"
    )
    relay_p99 = statistics.median(o[0] for o in relay_overheads)
    print(
        f"floor: overhead of a bare Flask relay (reads the claim, forwards a fixed form, parses"
        f" and stores nothing), {CLIENTS} clients: p99 {relay_p99:.2f} ms"
        f" (rounds: {' '.join(f'{o[0]:.1f}' for o in relay_overheads)}),"
        f" p50 {statistics.median(o[1] for o in relay_overheads):.2f} ms"
    )
    print(
        f"pa-bridge's own time around the outcomes call (answer elapsed_ms minus the call's),"
        f" {CLIENTS} clients: p50 {pct(server75, 50):.2f} ms, p99 {pct(server75, 99):.2f} ms"
    )
    print(
        f"overhead, 1 client: p99 {pct(serial_75, 99) - pct(serial_base, 99):.2f} ms,"
        f" p50 {pct(serial_75, 50) - pct(serial_base, 50):.2f} ms"
    )
    print(
        f"overhead in an open loop, {CLIENTS} clients sending {PACED_PER_CLIENT_S} claims/s each"
        f" (latency from when each was due): p99 {statistics.median(o[0] for o in paced_rounds):.2f} ms"
        f" (rounds: {' '.join(f'{o[0]:.1f}' for o in paced_rounds)}),"
        f" p50 {statistics.median(o[1] for o in paced_rounds):.2f} ms"
        f" (rounds: {' '.join(f'{o[1]:.1f}' for o in paced_rounds)})"
    )
    print(f"answers over 1550 ms while outcomes stalls: {over} of {len(lat_stall)} (target 0)")


if __name__ == "__main__":
    main()
