"""PA policy: which rejected claims offer a PA, and which ask the outcomes interface
first (pa-service-interface.md, "Pharmacy claim interface")."""

from __future__ import annotations

import pytest

import ncpdp
from pa_bridge import policy

from .builders import DUPLICATE, PAID, Outcome, response_bytes


def _tx(outcome: Outcome) -> ncpdp.ResponseTransactionView:
    return ncpdp.parse(response_bytes([outcome])).as_response().transactions[0]


def test_code_sets_follow_the_interface() -> None:
    assert policy.PA_REJECT_CODES == {"MR", "AG", "A6", "70", "75", "76"}
    assert policy.OUTCOMES_FIRST_CODES == {"70", "75", "76"}


@pytest.mark.parametrize(
    ("codes", "eligible", "first"),
    [
        (("75",), True, True),
        (("70",), True, True),
        (("76",), True, True),
        (("MR",), True, False),
        (("AG",), True, False),
        (("A6",), True, False),
        (("M1", "75"), True, True),  # any code of the set will do
        (("M1",), False, False),
        (("79",), False, False),
    ],
)
def test_rejected_claims(codes: tuple[str, ...], eligible: bool, first: bool) -> None:
    tx = _tx(Outcome(status="R", reject_codes=codes))
    assert policy.pa_eligible(tx) is eligible
    assert policy.outcomes_first(tx) is first


def test_paid_status_with_a_pa_code_is_rejected_and_eligible() -> None:
    tx = _tx(Outcome(status="P", reject_codes=("MR",)))
    assert policy.pa_eligible(tx) and not policy.outcomes_first(tx)


@pytest.mark.parametrize("outcome", [PAID, DUPLICATE])
def test_paid_and_duplicate_are_not_eligible(outcome: Outcome) -> None:
    tx = _tx(outcome)
    assert not policy.pa_eligible(tx) and not policy.outcomes_first(tx)
