"""Outcomes deadline benchmark: PaServiceClient.outcomes() against the sandbox.

Cases: the sandbox answering at once (JSON and text), and each fault drill (BIN 999997
answers 500, 999998 answers after 5 s, 999996 trickles its answer over 3 s), plus the
stall drill hit by 8 callers at once. For each case: p50 / p99 / max of the elapsed
time the caller saw (measured around the call), and how many calls exceeded the
budget (target: zero). Runs in about a minute.

    .venv/bin/python bench/outcomes_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pa_bridge.client import PaServiceClient, outcome_variables
from pa_bridge.sandbox import SANDBOX_API_KEY, SandboxConfig, SandboxServer
from tests.builders import REJECT_75, Claim, request, response

BUDGET_MS = 1500.0


def variables(bin_: str = "610014") -> dict[str, str]:
    return outcome_variables(
        request(Claim(bin=bin_)), response([REJECT_75]), api_key=SANDBOX_API_KEY
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_case(
    client: PaServiceClient, name: str, bin_: str, calls: int, concurrency: int = 1
) -> None:
    v = variables(bin_)

    def one() -> tuple[float, str]:
        t0 = time.perf_counter()
        r = client.outcomes(v, budget_ms=BUDGET_MS, fallback_message="orig")
        return (time.perf_counter() - t0) * 1000, r.source

    if concurrency == 1:
        results = [one() for _ in range(calls)]
    else:
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda _: one(), range(calls)))
    elapsed = [e for e, _ in results]
    sources = Counter(s for _, s in results)
    over = sum(1 for e in elapsed if e > BUDGET_MS)
    print(
        f"{name:<34} n={calls:<4} p50={statistics.median(elapsed):8.1f} ms "
        f"p99={pct(elapsed, 0.99):8.1f} ms max={max(elapsed):8.1f} ms "
        f"over_budget={over:<3} sources={dict(sources)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls per case")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the fallbacks are expected here
    fast_n, slow_n = (50, 4) if args.quick else (300, 15)
    print(f"python {platform.python_version()} ({platform.python_implementation()})")
    print(f"platform {platform.platform()}; cpus {os.cpu_count()}")
    print(f"budget {BUDGET_MS:.0f} ms; elapsed measured around each outcomes() call\n")
    started = time.perf_counter()
    with SandboxServer(SandboxConfig()) as sb:
        kwargs = sb.client_kwargs()
        with PaServiceClient(**kwargs) as client:
            client.outcomes(variables(), fallback_message="warm-up")
            run_case(client, "answers at once (json)", "610014", fast_n)
        with PaServiceClient(**kwargs | {"outcomes_url": sb.url + "/outcomes.txt"}) as client:
            run_case(client, "answers at once (text)", "610014", fast_n)
        with PaServiceClient(**kwargs) as client:
            run_case(client, "drill 999997: HTTP 500", "999997", fast_n // 2)
            run_case(client, "drill 999998: answers after 5 s", "999998", slow_n)
            run_case(client, "drill 999996: trickles over 3 s", "999996", slow_n)
            run_case(client, "drill 999998, 8 callers at once", "999998", 8 * 3, concurrency=8)
    print(f"\ntotal runtime {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
