"""What the PA service's interface says about a rejected claim: which reject codes
offer a PA, and for which the outcomes interface is called before answering.

Policy of this product, not of the NCPDP standard, so it lives here and not in
``ncpdp`` (which stays a protocol library). Imports nothing but ``ncpdp``.
"""

from __future__ import annotations

import ncpdp

__all__ = ["OUTCOMES_FIRST_CODES", "PA_REJECT_CODES", "outcomes_first", "pa_eligible"]

#: Reject codes that offer a PA (service interface, "Pharmacy claim interface").
PA_REJECT_CODES = frozenset({"MR", "AG", "A6", "70", "75", "76"})
#: Of those, the ones for which the outcomes interface is called before answering.
OUTCOMES_FIRST_CODES = frozenset({"70", "75", "76"})


def pa_eligible(tx: ncpdp.ResponseTransactionView) -> bool:
    """Rejected (112-AN R, or reject codes present at all) with a code offering a PA."""
    return tx.rejected and any(r.code in PA_REJECT_CODES for r in tx.reject_codes)


def outcomes_first(tx: ncpdp.ResponseTransactionView) -> bool:
    """Rejected with a code for which the outcomes interface is asked first."""
    return tx.rejected and any(r.code in OUTCOMES_FIRST_CODES for r in tx.reject_codes)
