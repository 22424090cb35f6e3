"""Shared bits of the benchmarks: machine facts, percentiles, a daemon subprocess."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def machine_facts() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return (
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus, "
        f"load {load[0]:.2f}"
    )


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def floor_app(body: str, threads: int) -> str:
    """The source of a small Flask app for ``python -c``: ``body`` (indented as in a
    triple-quoted string) defines ``app``; this adds ``GET /healthz`` and serves it on
    the daemon's own server (``pa_bridge.wsgi.WsgiServer``, decision 0013) with
    ``threads`` threads on 127.0.0.1 at the port in ``sys.argv[1]``."""
    return textwrap.dedent(body) + textwrap.dedent(
        f"""
        import sys as _sys
        import threading as _threading
        from pa_bridge.wsgi import WsgiServer as _WsgiServer
        @app.get("/healthz")
        def _healthz():
            return "ok"
        _WsgiServer(app, "127.0.0.1", int(_sys.argv[1]), name="floor", numthreads={threads}).start()
        _threading.Event().wait()
        """
    )


def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and every process
    below it: the live ones, and the children it has waited for (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                children.setdefault(int(st[1]), []).append(int(name))
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        st = _proc_stat(p)
        if st is None:
            continue
        # utime, stime, cutime, cstime are fields 14-17 (index 11-14 here)
        total += sum(int(x) for x in st[11:15])
        todo += children.get(p, [])
    return total / tick


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, timeout: float = 20.0) -> None:
    """Wait until ``GET /healthz`` on a loopback port answers at all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)


def answers_200(url: str, timeout: float = 30.0) -> bool:
    """Whether ``GET url`` answered 200 within ``timeout`` (asked every 0.1 s): a
    process that has just been started is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def run_clients(
    n_clients: int, per_client: int, call: Callable[[httpx.Client, int], Any]
) -> tuple[list[float], float]:
    """Run ``call`` from ``n_clients`` threads; returns (latencies in ms, wall seconds)."""
    lat: list[list[float]] = [[] for _ in range(n_clients)]

    def worker(k: int) -> None:
        with httpx.Client(timeout=30) as c:
            for i in range(per_client):
                t0 = time.perf_counter()
                call(c, k * per_client + i)
                lat[k].append((time.perf_counter() - t0) * 1000)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for part in lat for x in part], time.perf_counter() - t0


def run_paced(
    n_clients: int, per_client: int, interval_s: float, call: Callable[[httpx.Client, int], Any]
) -> list[float]:
    """Open loop: each of ``n_clients`` threads sends one request every ``interval_s``,
    the clients staggered evenly, whether or not the last answer came back in time.
    Latency is measured from when the request was due, so a request held up behind a
    slow one counts its wait (no coordinated omission). Each client first sends one
    unmeasured request, so connection set-up is not in the figures."""
    lat: list[list[float]] = [[] for _ in range(n_clients)]
    ready = threading.Barrier(n_clients + 1)
    start: list[float] = []

    def worker(k: int) -> None:
        with httpx.Client(timeout=30) as c:
            call(c, k * (per_client + 1))
            ready.wait()
            for i in range(per_client):
                due = start[0] + (i + k / n_clients) * interval_s
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                call(c, k * (per_client + 1) + 1 + i)
                lat[k].append((time.perf_counter() - due) * 1000)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    # far enough ahead that every client is asleep before its first request is due;
    # with 0.05 s the first requests started up to 100 ms late
    start.append(time.perf_counter() + 0.5)
    ready.wait()
    for t in threads:
        t.join()
    return [x for part in lat for x in part]


class Daemon:
    """`pa-bridge serve` on the embedded default in a temporary directory."""

    def __init__(self, env: dict[str, str] | None = None, config: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pa-bridge-bench-"))
        self.config = config
        self.intake = free_port()
        self.callbacks = free_port()
        self.env = {
            **os.environ,
            "PA_BRIDGE_INTAKE__LISTEN": f"127.0.0.1:{self.intake}",
            "PA_BRIDGE_CALLBACKS__LISTEN": f"127.0.0.1:{self.callbacks}",
            "PA_BRIDGE_SANDBOX__LISTEN": "127.0.0.1:0",
            **(env or {}),
        }
        self.log = self.dir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.intake}"

    def __enter__(self) -> Daemon:
        cmd = [sys.executable, "-m", "pa_bridge", "serve"]
        if self.config is not None:
            (self.dir / "pa-bridge.toml").write_text(self.config)
            cmd += ["--config", str(self.dir / "pa-bridge.toml")]
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, cwd=self.dir, env=self.env, stdout=fh, stderr=fh)
        if not answers_200(f"{self.url}/healthz"):
            raise RuntimeError(f"daemon did not start: {self.log.read_text()[-2000:]}")
        return self

    def sandbox_url(self) -> str:
        for line in self.log.read_text().splitlines():
            if '"daemon.sandbox_started"' in line:
                return str(json.loads(line)["url"])
        raise RuntimeError("no sandbox in this daemon")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Sandbox:
    """`pa-bridge sandbox` alone, as a separate process (like the real service)."""

    def __init__(self, callback_url: str | None = None) -> None:
        self.port = free_port()
        self.callback_url = callback_url
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Sandbox:
        cmd = [sys.executable, "-m", "pa_bridge", "sandbox", "--port", str(self.port)]
        if self.callback_url:
            cmd += ["--callback-url", self.callback_url]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not answers_200(f"{self.url}/_ping"):
            raise RuntimeError("sandbox did not start")
        return self

    def service_config(self) -> str:
        from pa_bridge.sandbox import SANDBOX_API_KEY, SANDBOX_PASSWORD, SANDBOX_USERNAME

        return (
            "[service]\n"
            f'claim_url = "{self.url}/cmmimport/"\n'
            f'outcomes_url = "{self.url}/outcomes.json"\n'
            f'dashboard_url = "{self.url}/dashboard"\n'
            f'username = "{SANDBOX_USERNAME}"\npassword = "{SANDBOX_PASSWORD}"\n'
            f'api_key = "{SANDBOX_API_KEY}"\n'
        )

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
