"""Acknowledged callbacks per second and latency with 16 concurrent senders, next to
the ceiling: a bare Flask endpoint that commits nothing, on the same server as
pa-bridge's callback receiver (``WsgiServer``, as many threads), measured in the same
run. Every callback is
distinct (its own delivery id), so each one is a real commit with synchronous=FULL.
Target: >= 0.85x of the ceiling.

Beside them, the floor of the design: the bare endpoint, except that each request
waits for a second thread to release it in a batch (group commit with no SQL and no
fsync). What the commit path itself costs is the gap between the floor and ours.

The three are measured in alternating rounds (ceiling, floor, ours, ceiling, ...) and
the ratios reported are the medians of the per-round ratios: on a shared machine the
absolute rate drifts by 20% within a minute, and alternating keeps each ratio's two
halves seconds apart. Context switches per request (all threads of each server
process) are printed beside them: they are where the daemon's extra CPU goes.

Load comes from wrk (Debian's package) when installed, so the load generator is not
the bottleneck; otherwise from Python threads (then both figures are client-bound and
the ratio says less).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import (
    Daemon,
    floor_app,
    free_port,
    machine_facts,
    pct,
    run_clients,
    wait_healthy,
)
from pa_bridge.wsgi import DEFAULT_THREADS as THREADS  # the receiver's threads, and the ceiling's

SENDERS = 16
ROUNDS = 5
SECONDS = 4

BARE_APP = floor_app(
    """
    import sys
    from flask import Flask, jsonify, request
    app = Flask("bare")
    @app.post("/callbacks/pharmacy")
    def cb():
        request.get_data()
        return jsonify({"status": "stored"}), 200
    """,
    THREADS,
)

# The floor of any commit-before-acknowledge design with a writer thread: the bare
# endpoint, except that each request waits until a second thread, which gathers every
# waiting request in one batch like a group commit, has released it. No SQL, no fsync.
WAIT_APP = floor_app(
    """
    import queue, sys, threading
    from flask import Flask, jsonify, request
    waiting = queue.SimpleQueue()
    def committer():
        while True:
            batch = [waiting.get()]
            while True:
                try:
                    batch.append(waiting.get_nowait())
                except queue.Empty:
                    break
            for done in batch:
                done.set()
    threading.Thread(target=committer, daemon=True).start()
    app = Flask("wait")
    @app.post("/callbacks/pharmacy")
    def cb():
        request.get_data()
        done = threading.Event()
        waiting.put(done)
        done.wait()
        return jsonify({"status": "stored"}), 200
    """,
    THREADS,
)

# The floor of the same design with the work every callback needs before its commit:
# the bare endpoint, plus pa-bridge's own parse of the body (JSON, shape checks, the
# dedupe key), plus waiting for the batching thread. Still no SQL and no fsync.
PARSE_WAIT_APP = WAIT_APP.replace(
    "request.get_data()\n", "parse_callback(request.get_data())\n"
).replace(
    "import queue, sys", "from pa_bridge.callbacks.ingest import parse_callback\nimport queue, sys"
)

# The floor of the other design, a writer process that owns SQLite: the bare endpoint
# hands each body to another process over a Unix socket (one per request thread) and
# waits for its one-byte answer; that process answers every body it has read in one
# go, like a group commit, with no SQL and no fsync.
HANDOFF_APP = floor_app(
    """
    import os, selectors, socket, struct, sys, tempfile, threading
    from flask import Flask, jsonify, request
    path = os.path.join(tempfile.mkdtemp(), "writer.sock")
    if os.fork() == 0:  # the writer process
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(64)
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        parent = os.getppid()
        while os.getppid() == parent:
            ready = []
            for key, _ in sel.select(timeout=1):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                head = key.fileobj.recv(4)
                if not head:
                    sel.unregister(key.fileobj)
                    continue
                n = struct.unpack("!I", head)[0]
                while n:
                    n -= len(key.fileobj.recv(n))
                ready.append(key.fileobj)
            for conn in ready:
                conn.sendall(b"1")
        os._exit(0)
    while not os.path.exists(path):
        pass
    local = threading.local()
    app = Flask("handoff")
    @app.post("/callbacks/pharmacy")
    def cb():
        body = request.get_data()
        s = getattr(local, "s", None)
        if s is None:
            s = local.s = socket.socket(socket.AF_UNIX)
            s.connect(path)
        s.sendall(struct.pack("!I", len(body)) + body)
        s.recv(1)
        return jsonify({"status": "stored"}), 200
    """,
    THREADS,
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


def _context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` and of its
    child processes (the daemon's callback listener is one)."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        total += sum(int(m) for m in re.findall(r"ctxt_switches:\s+(\d+)", text))
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = children.read_text().split()
        except OSError:
            continue
        total += sum(_context_switches(int(k)) for k in kids)
    return total


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
        f"callbacks_bench: {machine_facts()}; {SENDERS} concurrent senders; {THREADS} server threads everywhere; load from {'wrk' if have_wrk else 'python threads'}"
    )
    script = Path(tempfile.mkdtemp()) / "cb.lua"
    script.write_text(WRK_SCRIPT)
    load = (lambda u: _wrk(u, script)) if have_wrk else _python_load
    apps = {
        "ceiling": BARE_APP,
        "floor": WAIT_APP,
        "floor_parse": PARSE_WAIT_APP,
        "floor_process": HANDOFF_APP,
    }
    ports = {name: free_port() for name in apps}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", code, str(ports[name])], stderr=subprocess.DEVNULL
        )
        for name, code in apps.items()
    }
    try:
        for p in ports.values():
            wait_healthy(p)
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
            assert d.proc is not None
            cases = {
                name: (f"http://127.0.0.1:{ports[name]}/callbacks/pharmacy", procs[name].pid)
                for name in apps
            }
            cases["ours"] = (f"http://127.0.0.1:{d.callbacks}/callbacks/pharmacy", d.proc.pid)
            for url, _pid in cases.values():  # warm-up every case
                load(url)
            runs: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in cases}
            switches: dict[str, list[float]] = {k: [] for k in cases}
            for _ in range(ROUNDS):
                for name, (url, pid) in cases.items():
                    before, t0 = _context_switches(pid), time.monotonic()
                    result = load(url)
                    runs[name].append(result)
                    done = result[0] * (SECONDS if have_wrk else time.monotonic() - t0)
                    switches[name].append((_context_switches(pid) - before) / max(done, 1))
            conn = sqlite3.connect(f"{d.dir}/var/pa-bridge.sqlite3")
            try:
                stored = conn.execute("SELECT count(*) FROM callbacks").fetchone()[0]
            finally:
                conn.close()
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(10)
    print(
        f"{'case':<52} {'acks/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-200':>8} {'ctx sw/req':>11}"
    )
    labels = {
        "ceiling": "bare Flask endpoint on the same server (ceiling)",
        "floor": "floor: bare + wait for a batching thread",
        "floor_parse": "floor: bare + our parse + wait for a batching thread",
        "floor_process": "floor: bare + hand-off to a writer process",
        "ours": "pa-bridge /callbacks/pharmacy (FULL fsync)",
    }
    for name, label in labels.items():
        rs = runs[name]
        print(
            f"{label:<52} {statistics.median(r[0] for r in rs):>9.1f}"
            f" {statistics.median(r[1] for r in rs):>8.2f} {statistics.median(r[2] for r in rs):>8.2f}"
            f" {sum(r[3] for r in rs):>8} {statistics.median(switches[name]):>11.1f}"
        )

    def ratios(name: str) -> list[float]:
        return [o[0] / c[0] for o, c in zip(runs[name], runs["ceiling"], strict=True)]

    def per_round(name: str) -> str:
        return " ".join(f"{r:.2f}" for r in ratios(name))

    print(f"medians of {ROUNDS} alternating rounds of {SECONDS} s each")
    print(
        f"ratio: {statistics.median(ratios('ours')):.2f}x of the ceiling (target >= 0.85x);"
        f" per round: {per_round('ours')}; rows committed in total: {stored}"
    )
    print("floors, with no SQL and no fsync at all (what each design costs before any write):")
    for name, what in (
        ("floor", "waiting for a batching thread"),
        ("floor_parse", "our parse, then waiting for a batching thread"),
        ("floor_process", "handing the body to another process and waiting"),
    ):
        print(
            f"  {what}: {statistics.median(ratios(name)):.2f}x of the ceiling;"
            f" per round: {per_round(name)}"
        )


if __name__ == "__main__":
    main()
