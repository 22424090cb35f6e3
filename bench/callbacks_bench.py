"""Acknowledged callbacks per second and latency with 16 concurrent senders, next to
the ceiling: a bare Flask endpoint on the same WSGI server (cheroot, same thread
count) measured in the same run. Every callback is distinct (its own delivery id), so
each one is a real commit with synchronous=FULL. Target: >= 0.85x of the ceiling.

Load comes from wrk (Debian's package) when installed, so the load generator is not
the bottleneck; otherwise from Python threads (then both figures are client-bound and
the ratio says less).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import Daemon, free_port, machine_facts, pct, run_clients

SENDERS = 16
SECONDS = 8

BARE_APP = textwrap.dedent(
    """
    import sys
    from cheroot import wsgi
    from flask import Flask, jsonify, request
    app = Flask("bare")
    @app.post("/callbacks/pharmacy")
    def cb():
        request.get_data()
        return jsonify({"status": "stored"}), 200
    @app.get("/healthz")
    def h():
        return "ok"
    wsgi.Server(("127.0.0.1", int(sys.argv[1])), app, numthreads=16).safe_start()
    """
)

WRK_SCRIPT = textwrap.dedent(
    """
    local next_tid = 0
    function setup(thread) thread:set("tid", next_tid); next_tid = next_tid + 1 end
    function init(args) counter = 0; run = args[1] end
    function request()
      counter = counter + 1
      local body = '{"request":{"id":"PA' .. (counter % 700) .. '","workflow_status":"New",' ..
        '"delivery_id":"' .. run .. '-' .. tid .. '-' .. counter .. '"}}'
      return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
    end
    """
)


def _wrk(url: str, script: Path) -> tuple[float, float, float, int]:
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{SENDERS}",
            f"-d{SECONDS}s",
            "--latency",
            "-s",
            str(script),
            url,
            "--",
            uuid.uuid4().hex[:8],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def ms(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return float("nan")
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, ms("50"), ms("99"), int(non2xx.group(1)) if non2xx else 0


def _python_load(url: str) -> tuple[float, float, float, int]:
    run = uuid.uuid4().hex[:8]
    bad = [0]

    def call(c: httpx.Client, i: int) -> None:
        body = {
            "request": {"id": f"PA{i % 700}", "workflow_status": "New", "delivery_id": f"{run}-{i}"}
        }
        if c.post(url, content=json.dumps(body)).status_code != 200:
            bad[0] += 1

    lat, wall = run_clients(SENDERS, 150, call)
    return len(lat) / wall, pct(lat, 50), pct(lat, 99), bad[0]


def main() -> None:
    have_wrk = shutil.which("wrk") is not None
    print(
        f"callbacks_bench: {machine_facts()}; {SENDERS} concurrent senders; load from {'wrk' if have_wrk else 'python threads'}"
    )
    script = Path(tempfile.mkdtemp()) / "cb.lua"
    script.write_text(WRK_SCRIPT)
    load = (lambda u: _wrk(u, script)) if have_wrk else _python_load
    port = free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        # A real service configured (unreachable; callbacks never call it): the daemon
        # as deployed, without the in-process sandbox.
        env = {
            "PA_BRIDGE_LOGGING__LEVEL": "WARNING",
            "PA_BRIDGE_SERVICE__CLAIM_URL": "http://127.0.0.1:9/claim",
            "PA_BRIDGE_SERVICE__OUTCOMES_URL": "http://127.0.0.1:9/outcomes",
            "PA_BRIDGE_SERVICE__USERNAME": "bench",
            "PA_BRIDGE_SERVICE__PASSWORD": "bench",
            "PA_BRIDGE_SERVICE__API_KEY": "bench",
        }
        with Daemon(env=env) as d:
            cb_url = f"http://127.0.0.1:{d.callbacks}/callbacks/pharmacy"
            load(f"http://127.0.0.1:{port}/callbacks/pharmacy")  # warm-up both
            load(cb_url)
            ceiling = load(f"http://127.0.0.1:{port}/callbacks/pharmacy")
            ours = load(cb_url)
            conn = sqlite3.connect(f"{d.dir}/var/pa-bridge.sqlite3")
            try:
                stored = conn.execute("SELECT count(*) FROM callbacks").fetchone()[0]
            finally:
                conn.close()
    finally:
        bare.terminate()
        bare.wait(10)
    print(f"{'case':<44} {'acks/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-200':>8}")
    for name, (rps, p50, p99, bad) in (
        ("bare Flask endpoint on cheroot (ceiling)", ceiling),
        ("pa-bridge /callbacks/pharmacy (FULL fsync)", ours),
    ):
        print(f"{name:<44} {rps:>9.1f} {p50:>8.2f} {p99:>8.2f} {bad:>8}")
    print(
        f"ratio: {ours[0] / ceiling[0]:.2f}x of the ceiling (target >= 0.85x); rows committed in total: {stored}"
    )


if __name__ == "__main__":
    main()
