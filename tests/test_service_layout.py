"""Use cases apart (issue 15): the decision logic is pure (it imports only ``ncpdp``
and the standard library) and the services know nothing of Flask."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import ncpdp
from pa_bridge.service.decisions import claim_key, count_problem, decide
from tests.builders import PAID, REJECT_75, Claim, Rx, request, response

SERVICE = Path(__file__).resolve().parents[1] / "src" / "pa_bridge" / "service"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or "").split(".")[0])
    return names


def test_decisions_import_only_ncpdp_the_policy_and_the_standard_library() -> None:
    imported = _imports(SERVICE / "decisions.py")
    assert imported - set(sys.stdlib_module_names) == {"ncpdp", "..policy"}
    policy = _imports(SERVICE.parent / "policy.py")
    assert policy - set(sys.stdlib_module_names) == {"ncpdp"}


def test_no_service_imports_flask() -> None:
    for path in SERVICE.glob("*.py"):
        assert not _imports(path) & {"flask", "werkzeug"}, path.name


def test_decide_one_per_transaction_without_io() -> None:
    d = decide(response([PAID, REJECT_75]).as_response())
    assert [(x.index, x.transaction_status, x.reject_codes, x.pa_eligible) for x in d] == [
        (0, "P", [], False),
        (1, "R", ["75"], True),
    ]


def test_claim_key_and_single_transaction() -> None:
    req = request(Claim(rxs=(Rx(), Rx(rx_number="000000000042", fill_number="01"))))
    assert claim_key(req, 1) == "610014|SYNPCN|SYNGRP01|42|1|1999999976"
    one = ncpdp.only_transaction(req, 1)
    assert len(one.groups) == 1
    assert one.as_request().transactions[0].rx_number == "000000000042"
    assert count_problem(one, response([PAID])) is None
    assert count_problem(req, response([PAID])) == (
        "response",
        "the response answers 1 transaction(s); the request has 2",
    )
