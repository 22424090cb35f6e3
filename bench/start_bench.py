"""Start to healthy, and resident memory: ``pa-bridge serve`` beside a bare Flask app on
the same server, in alternating rounds of one run (issue 31).

Start to healthy: from starting the process to the first 200 from ``GET /healthz``
(asked every 5 ms). Memory: the resident set (VmRSS) of the process and every process
below it, once healthy and again after 200 claims (the figure a store sees at work).
The daemon runs as deployed against a real service, here unreachable (callbacks and
claims never call it; the outcomes call falls back): no in-process sandbox.
Goals: healthy within 1.0 s of ``pa-bridge serve`` and under 100 MB in all.

    .venv/bin/python bench/start_bench.py [rounds]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import floor_app, free_port, machine_facts
from bench.intake_bench import claim_body
from tests import builders as b

ROUNDS = 5
CLAIMS = 200
GOAL_S, GOAL_MB = 1.0, 100.0

BARE_APP = floor_app(
    """
    from flask import Flask
    app = Flask("bare")
    """,
    16,
)

SERVICE = {
    "PA_BRIDGE_SERVICE__CLAIM_URL": "http://127.0.0.1:9/claim",
    "PA_BRIDGE_SERVICE__OUTCOMES_URL": "http://127.0.0.1:9/outcomes",
    "PA_BRIDGE_SERVICE__USERNAME": "bench",
    "PA_BRIDGE_SERVICE__PASSWORD": "bench-password-1",
    "PA_BRIDGE_SERVICE__API_KEY": "bench-key",
    "PA_BRIDGE_LOGGING__LEVEL": "WARNING",
}


def _tree(pid: int) -> list[int]:
    kids: list[int] = []
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids += [int(k) for k in f.read_text().split()]
        except OSError:
            continue
    return [pid] + [p for k in kids for p in _tree(k)]


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and the processes below it, in MB."""
    total = 0
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def _healthy_after(proc: subprocess.Popen[bytes], port: int, started: float) -> float:
    with httpx.Client(timeout=1) as c:
        while time.monotonic() - started < 60:
            if proc.poll() is not None:
                raise RuntimeError(f"exited with {proc.returncode}")
            try:
                if c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.005)
    raise RuntimeError("not healthy within 60 s")


def one(kind: str) -> tuple[float, float, float]:
    """(seconds to healthy, MB once healthy, MB after the claims) of one start."""
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="pa-bridge-start-"))
    if kind == "bare":
        cmd = [sys.executable, "-c", BARE_APP, str(port)]
        env = dict(os.environ)
    else:
        cmd = [sys.executable, "-m", "pa_bridge", "serve"]
        env = {
            **os.environ,
            **SERVICE,
            "PA_BRIDGE_INTAKE__LISTEN": f"127.0.0.1:{port}",
            "PA_BRIDGE_CALLBACKS__LISTEN": f"127.0.0.1:{free_port()}",
        }
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        healthy = _healthy_after(proc, port, started)
        at_start = rss_mb(proc.pid)
        after = at_start
        if kind == "daemon":
            content = json.dumps(claim_body([b.REJECT_75])).encode()
            with httpx.Client(timeout=10) as c:
                for _ in range(CLAIMS):
                    c.post(
                        f"http://127.0.0.1:{port}/v1/claims",
                        content=content,
                        headers={"Content-Type": "application/json"},
                    )
            after = rss_mb(proc.pid)
        return healthy, at_start, after
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    print(f"start_bench: {machine_facts()}; {rounds} alternating rounds")
    got: dict[str, list[tuple[float, float, float]]] = {"bare": [], "daemon": []}
    for r in range(rounds):
        for kind in ("bare", "daemon") if r % 2 == 0 else ("daemon", "bare"):
            got[kind].append(one(kind))
    print(f"{'':<34} {'to healthy s':>12} {'RSS MB':>8} {f'after {CLAIMS} claims':>18}")
    for kind, label in (("bare", "bare Flask app, same server"), ("daemon", "pa-bridge serve")):
        rows = got[kind]
        s = statistics.median(r[0] for r in rows)
        m0 = statistics.median(r[1] for r in rows)
        m1 = statistics.median(r[2] for r in rows)
        per = " ".join(f"{r[0]:.2f}" for r in rows)
        print(f"{label:<34} {s:>12.2f} {m0:>8.1f} {m1:>18.1f}   rounds: {per}")
    d = got["daemon"]
    s, m = statistics.median(r[0] for r in d), statistics.median(r[2] for r in d)
    print(
        f"goals: healthy within {GOAL_S:.1f} s: {'met' if s <= GOAL_S else 'missed'} ({s:.2f} s);"
        f" under {GOAL_MB:.0f} MB: {'met' if m < GOAL_MB else 'missed'} ({m:.1f} MB)"
    )


if __name__ == "__main__":
    main()
