"""A/B of the cost of a claim: the relay floor, a daemon on another tree (A) and a
daemon on this tree (B), in alternating rounds of one run.

    .venv/bin/python bench/intake_ab.py TREE_A [TREE_B] [rounds] [claims]

A tree needs only ``src/pa_bridge`` and ``ncpdp`` (``git archive <commit> src ncpdp |
tar -x -C DIR`` makes one); each daemon runs with ``PYTHONPATH`` pointing at its tree
(B defaults to this one), so that both import their code the same way: with B on the
editable install instead, the same code measured 0.1 ms more on one side.
Each round measures the floor, then A and B in an order that alternates, for a
75-reject and a paid claim (its queued report delivered inside the count), with
``cpu_per_claim`` from ``intake_bench``. Prints each figure's median and B/A.
On a shared machine only a difference that holds round after round means anything.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, Daemon, Sandbox, machine_facts
from bench.intake_bench import claim_body, cpu_per_claim, relay
from tests import builders as b


def main() -> None:
    args = sys.argv[1:]
    trees = [Path(args.pop(0)).resolve()]
    trees.append(Path(args.pop(0)).resolve() if args and not args[0].isdigit() else ROOT)
    rounds = int(args[0]) if args else 7
    claims = int(args[1]) if len(args) > 1 else 300
    for tree in trees:
        if not (tree / "src" / "pa_bridge").is_dir():
            raise SystemExit(f"{tree} has no src/pa_bridge")
    cases = {"reject 75": claim_body([b.REJECT_75]), "paid": claim_body([b.PAID])}
    env = [{"PYTHONPATH": os.pathsep.join([str(t / "src"), str(t)])} for t in trees]
    print(f"intake_ab: {machine_facts()}; A = {trees[0]}, B = {trees[1]}")
    with (
        Sandbox() as sb,
        Daemon(config=sb.service_config(), env=env[0]) as da,
        Daemon(config=sb.service_config(), env=env[1]) as db,
    ):
        with relay(sb.url) as (relay_pid, relay_url):
            daemons = {"A": da, "B": db}

            def measure(name: str, case: str, n: int) -> float:
                d = daemons[name]
                assert d.proc is not None
                return cpu_per_claim(d.proc.pid, f"{d.url}/v1/claims", cases[case], n, d.url)

            for name in daemons:  # warm-up
                for case in cases:
                    measure(name, case, 50)
            cpu_per_claim(relay_pid, relay_url, cases["reject 75"], 50, None)
            floor: list[float] = []
            got: dict[tuple[str, str], list[float]] = {(n, c): [] for n in daemons for c in cases}
            for r in range(rounds):
                floor.append(cpu_per_claim(relay_pid, relay_url, cases["reject 75"], claims, None))
                order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
                for case in cases:
                    for name in order:
                        got[(name, case)].append(measure(name, case, claims))
                print(
                    f"round {r + 1}: load {os.getloadavg()[0]:.2f} floor {floor[-1]:.2f}"
                    + "".join(f" {n}/{c} {v[-1]:.2f}" for (n, c), v in got.items()),
                    flush=True,
                )
    f = statistics.median(floor)
    print(f"median of {rounds} rounds of {claims} claims, CPU ms per claim (x floor)")
    print(f"floor {f:.2f}")
    for case in cases:
        a = statistics.median(got[("A", case)])
        bb = statistics.median(got[("B", case)])
        print(f"{case:<10} A {a:.2f} ({a / f:.2f}x)  B {bb:.2f} ({bb / f:.2f}x)  B/A {bb / a:.3f}")
    print(
        json.dumps({"floor": f, **{f"{n}/{c}": statistics.median(v) for (n, c), v in got.items()}})
    )


if __name__ == "__main__":
    main()
