"""The web server's own cost: CPU per request and requests per second of a bare Flask
endpoint (``POST /echo``, a 300-byte JSON body read and a small JSON answer) served by
``pa_bridge.wsgi.WsgiServer`` (uvicorn with httptools; uvloop's loop or asyncio's) and,
when installed, by cheroot (the server before decision 0013), each in its own process
with 16 threads, under 16 connections of wrk (Debian's package), in alternating rounds.

CPU is the server process's user + system time (``/proc/PID/stat``) over the round,
divided by the requests wrk completed; it is what a request costs the server whatever
else runs on the machine, so it is steadier than the rate on a shared box.

Usage: ``python bench/server_bench.py [rounds] [seconds]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import free_port, machine_facts, wait_healthy

APP = """
import json, sys
from flask import Flask, request, Response
app = Flask("bare")
@app.post("/echo")
def echo():
    body = request.get_json()
    return Response(json.dumps({"n": len(body)}), mimetype="application/json")
@app.get("/healthz")
def healthz():
    return "ok"
port = int(sys.argv[1])
"""

SERVERS = {
    "ours (uvloop)": "from pa_bridge.wsgi import WsgiServer\n"
    "import threading\nWsgiServer(app, '127.0.0.1', port, numthreads=16).start()\n"
    "threading.Event().wait()\n",
    "ours (asyncio loop)": "from pa_bridge.wsgi import WsgiServer\n"
    "import threading\nWsgiServer(app, '127.0.0.1', port, numthreads=16, use_uvloop=False).start()\n"
    "threading.Event().wait()\n",
    "cheroot": "from cheroot import wsgi\n"
    "wsgi.Server(('127.0.0.1', port), app, numthreads=16).safe_start()\n",
}

BODY = (
    '{"request": {"id": "AB12CD", "workflow_status": "PA Request", "notes": "' + "x" * 220 + '"}}'
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk(url: str, seconds: int, script: Path) -> int:
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        if "requests in" in line:
            return int(line.split()[0])
    raise RuntimeError(out)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if shutil.which("wrk") is None:
        print("server_bench: skipped, it needs wrk (apt-get install wrk)")
        return
    names = [n for n in SERVERS if n != "cheroot" or _has("cheroot")]
    script = Path(tempfile.mkdtemp()) / "post.lua"
    script.write_text(
        textwrap.dedent(
            f"""
            wrk.method = "POST"
            wrk.body = '{BODY}'
            wrk.headers["Content-Type"] = "application/json"
            """
        )
    )
    procs, ports = {}, {}
    for name in names:
        ports[name] = free_port()
        procs[name] = subprocess.Popen(
            [sys.executable, "-c", APP + SERVERS[name], str(ports[name])]
        )
        wait_healthy(ports[name])
    cpu: dict[str, list[float]] = {n: [] for n in names}
    rate: dict[str, list[float]] = {n: [] for n in names}
    try:
        for _ in range(rounds):
            for name in names:
                url = f"http://127.0.0.1:{ports[name]}/echo"
                _wrk(url, 1, script)  # warm
                before = _cpu_s(procs[name].pid)
                n = _wrk(url, seconds, script)
                cpu[name].append((_cpu_s(procs[name].pid) - before) / n * 1e6)
                rate[name].append(n / seconds)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    print(f"server_bench: {machine_facts()}; {rounds} rounds of {seconds} s, wrk -c16")
    for name in names:
        print(
            f"  {name:18} CPU/request median {statistics.median(cpu[name]):6.0f} us"
            f" (rounds {min(cpu[name]):.0f}-{max(cpu[name]):.0f});"
            f" {statistics.median(rate[name]):7.0f} req/s"
            f" (rounds {min(rate[name]):.0f}-{max(rate[name]):.0f})"
        )


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
