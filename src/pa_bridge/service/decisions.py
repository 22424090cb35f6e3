"""Pure decision logic over parsed claims: what each transaction of a response means
for the answer, what identifies a claim, which transaction to send. No I/O; imports
nothing but ``ncpdp`` and the PA policy (``pa_bridge.policy``, itself only ``ncpdp``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ncpdp

from ..policy import outcomes_first, pa_eligible

__all__ = [
    "TxDecision",
    "claim_key",
    "count_problem",
    "decide",
    "parse_error_text",
    "prescriber_fax",
]


@dataclass(frozen=True)
class TxDecision:
    index: int
    transaction_status: str
    reject_codes: list[str]
    pa_eligible: bool
    outcomes_first: bool
    payer_message: str


def decide(sv: ncpdp.ResponseView) -> list[TxDecision]:
    """One decision per answered transaction (one for a header-level reject)."""
    out = []
    for tx in sv.transactions:
        status = "R" if tx.rejected else (tx.transaction_status or "")
        out.append(
            TxDecision(
                index=tx.index,
                transaction_status=status,
                reject_codes=[r.code for r in tx.reject_codes],
                pa_eligible=pa_eligible(tx),
                outcomes_first=outcomes_first(tx),
                payer_message=tx.additional_message or sv.message or "",
            )
        )
    if not out:  # rejected at header level: no transaction group at all
        out.append(
            TxDecision(
                index=0,
                transaction_status=sv.header_response_status,
                reject_codes=[],
                pa_eligible=False,
                outcomes_first=False,
                payer_message=sv.message or "",
            )
        )
    return out


def claim_key(req: ncpdp.Transmission, index: int, view: ncpdp.RequestView | None = None) -> str:
    """What identifies a claim to the service's duplicate check (``view``: the
    request's view when the caller has it)."""
    v = view if view is not None else req.as_request()
    tx = v.transactions[index] if index < len(v.transactions) else None
    parts = [
        v.bin,
        v.pcn,
        v.group_id or "",
        (tx.rx_number or "").lstrip("0") if tx else "",
        str(tx.fill_number) if tx and tx.fill_number is not None else "",
        v.service_provider_id,
    ]
    return "|".join(parts)


def _rejected_in_header(resp: ncpdp.Transmission) -> bool:
    try:
        return resp.as_response().header_response_status.strip() == "R"
    except ncpdp.NcpdpError:
        return False


def request_count_problem(req: ncpdp.Transmission) -> str | None:
    """Why the request's 109-A9 cannot be trusted (it must be 1 to the version's most,
    4, or 1 in F6, and match its transactions), or None."""
    count = str(getattr(req.header, "transaction_count", "") or "").strip()
    n_req = len(req.groups)
    spec = ncpdp.VERSIONS.get(req.version)
    most = spec.max_transactions if spec is not None else 4
    if most == 1 and n_req > 1:  # F6: a second claim segment is not a second claim
        return (
            f"transaction count: an {req.version} transmission carries one transaction;"
            f" this one has {n_req} (109-A9 must be 1)"
        )
    if not count.isdigit() or not 1 <= int(count) <= most or int(count) != n_req:
        return f"transaction count 109-A9 must be 1-{most} and match its {n_req} transaction(s)"
    return None


def count_problem(req: ncpdp.Transmission, resp: ncpdp.Transmission) -> tuple[str, str] | None:
    """A claim exchange whose transaction counts do not agree is not one we can decide
    on (issue 19): (the part at fault, why), or None. The response must answer each of
    the request's transactions (or reject the whole transmission in its header)."""
    problem = request_count_problem(req)
    if problem is not None:
        return "request", f"the request's {problem}"
    n_req = len(req.groups)
    try:  # the view also reads a status segment sent without its group
        n_resp = len(resp.as_response().transactions)
    except ncpdp.NcpdpError:
        n_resp = len(resp.groups)
    if n_resp != n_req and not (n_resp == 0 and _rejected_in_header(resp)):
        return "response", f"the response answers {n_resp} transaction(s); the request has {n_req}"
    return None


_QUOTED = re.compile(r"b?'(?:[^'\\]|\\.)*'" + r'|b?"(?:[^"\\]|\\.)*"')


def parse_error_text(e: ncpdp.ParseError) -> str:
    """The parse error's reason and place, without any quoted piece of the claim (a
    quoted field can be a name or a date of birth): offset, segment and field say
    where to look."""
    return f"{_QUOTED.sub('(...)', e.reason)} (at {e.where})"


def prescriber_fax(metadata: Any) -> str:
    """The dispensing system's ``physician_fax`` (the claim interface's name for it; the
    outcomes interface calls it ``prescriber_fax``), whichever of the two it sent."""
    if not isinstance(metadata, Mapping):
        return ""
    for key in ("physician_fax", "prescriber_fax"):
        value = metadata.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""
