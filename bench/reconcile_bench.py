"""What a reconciliation pass costs (issue 28, decision 0031): the service's calls, the
pass's time, and pa-bridge's CPU per PA, beside a baseline measured in the same run:
the same changes delivered as callbacks (``CallbackIntake.receive_many``, 50 a
commit, as the listener hands them over).

The service is the sandbox in a child process, holding N approved PAs; pa-bridge's
SQLite store holds the same N PAs as their submits left them (status New, the
hosted-page link with its token), so the first pass finds every one changed (every
callback was lost), and the second finds none (the hourly cost of a healthy store).
CPU is this process's (the sandbox's is its own child's). Run: python bench/reconcile_bench.py [N]
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import free_port, machine_facts
from pa_bridge.callbacks.ingest import CallbackIntake
from pa_bridge.client import RequestsResource
from pa_bridge.config import load_settings
from pa_bridge.metrics import Metrics
from pa_bridge.sandbox import SANDBOX_API_ID
from pa_bridge.service.reconcile import Reconciler
from pa_bridge.store import Store, now_iso, pas

SANDBOX = textwrap.dedent(
    """
    import json, sys, threading
    from pa_bridge.sandbox import SandboxConfig, SandboxServer
    n, port = int(sys.argv[1]), int(sys.argv[2])
    sb = SandboxServer(SandboxConfig(step_seconds=0), port=port).start()
    made = [sb.state.create(f"k{i}", {"payer": {"bin": "610014"}}, "Favorable", sb.url)
            for i in range(n)]
    print(json.dumps([[p["id"], sb.state.token_url(p)] for p in made]), flush=True)
    threading.Event().wait()
    """
)


def _store(path: Path, made: list[list[str]]) -> Store:
    store = Store(path)

    def job(db: object) -> None:
        for pa_id, url in made:
            state: pas.CallbackState = {
                "workflow_status": "New", "plan_outcome": None, "status_time": None,
                "events_json": "[]", "deleted": 0, "fax_failed": 0, "links_json": "{}",
                "urls_json": json.dumps([url]), "details_json": None,
            }  # fmt: skip
            pas.insert_from_callback(db, pa_id, state, now=now_iso(), seq=store.next_seq(db))  # type: ignore[arg-type]

    store.write(job)
    return store


def main(n: int = 2000) -> None:
    logging.disable(logging.WARNING)  # the passes' log lines: the table says it
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", SANDBOX, str(n), str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        made = json.loads(child.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        while True:  # step_seconds=0: every PA reaches PA Response in a moment
            listed = httpx.get(f"{url}/sandbox/pas", timeout=30).json()["pas"]
            if all(p["workflow_status"] == "PA Response" for p in listed):
                break
            time.sleep(0.2)
        settings = load_settings(reconcile={"calls_per_minute": 0, "batch_size": 50})
        print(f"# reconcile_bench: {n} PAs, batch 50; {machine_facts()}")
        with tempfile.TemporaryDirectory() as tmp:
            store = _store(Path(tmp) / "a.sqlite3", made)
            ingest = CallbackIntake(store, forward=True)
            api = RequestsResource(url)
            rec = Reconciler(
                settings, store, api, ingest, metrics=Metrics(), default_api_id=SANDBOX_API_ID
            )
            rows = []
            for name in ("pass, every callback lost", "pass, nothing lost"):
                cpu, wall = time.process_time(), time.monotonic()
                report = rec.run_pass()
                cpu, wall = time.process_time() - cpu, time.monotonic() - wall
                assert report.complete and report.read == n, report
                rows.append((name, cpu, wall, report.calls, report.changes))
            # baseline: the same N final states delivered as callbacks, 50 a commit
            objs = [o for i in range(0, n, 50) for o in api.search_requests(
                [u.split("token_id=")[1] for _, u in made[i:i + 50]], api_id=SANDBOX_API_ID)]  # fmt: skip
            store2 = _store(Path(tmp) / "b.sqlite3", made)
            ingest2 = CallbackIntake(store2, forward=True)
            bodies: list[tuple[bytes, str | None]] = [
                (json.dumps({"request": o}).encode(), "application/json") for o in objs
            ]
            cpu, wall = time.process_time(), time.monotonic()
            for i in range(0, n, 50):
                ingest2.receive_many(bodies[i : i + 50])
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            rows.append(("baseline: the same changes as callbacks", cpu, wall, 0, n))
            api.close()
            store.close()
            store2.close()
        print(f"{'':42} {'calls':>6} {'changes':>8} {'wall s':>8} {'CPU s':>7} {'CPU us/PA':>10}")
        for name, cpu, wall, calls, changes in rows:
            print(
                f"{name:42} {calls:>6} {changes:>8} {wall:>8.2f} {cpu:>7.2f} {cpu / n * 1e6:>10.0f}"
            )
    finally:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
