"""What a claim exchange must hold before pa-bridge decides on it (issue 16).

Lenient parsing tolerates framing (a missing trailing separator, padding, a wrong
count that the groups settle); it does not make up substance. A request cut short
after its header parses leniently into a header and no transaction; deciding on it
would answer "submit PA" for a claim that is not there. So an exchange without the
segments and fields a decision (and the PA it may start) needs is refused, naming
what is missing (NCPDP segment and field ids, never values).
"""

from __future__ import annotations

import ncpdp

__all__ = ["missing_for_decision"]

#: transaction codes that bill a prescription: each transaction needs its claim
_BILLING = ("B1", "B3")


def _blank(value: object) -> bool:
    return value is None or not str(value).strip()


def missing_for_decision(
    req: ncpdp.Transmission, resp: ncpdp.Transmission, rv: ncpdp.RequestView | None = None
) -> list[str]:
    """What the exchange lacks, in words like ``request: 101-A1 BIN``; empty when it
    holds enough to decide on. ``rv``: the request's view when the caller has it (a
    view costs about 0.1 ms to build)."""
    missing: list[str] = []
    rv = rv if rv is not None else req.as_request()
    code = (rv.transaction_code or "").strip()
    if _blank(rv.bin):
        missing.append("request: 101-A1 BIN")
    if _blank(rv.service_provider_id):
        missing.append("request: 201-B1 service provider id")
    if not req.groups:
        missing.append("request: a transaction group (it ends after the header)")
    if code in (*_BILLING, "B2"):
        for i, group in enumerate(req.groups):
            n = f" (transaction {i + 1})"
            if group.segment("07") is None:
                missing.append(f"request: the claim segment AM07{n}")
                continue
            tx = rv.transactions[i] if i < len(rv.transactions) else None
            if tx is None or _blank(tx.rx_number):
                missing.append(f"request: 402-D2 prescription number{n}")
            if code in _BILLING and (tx is None or _blank(tx.product_id)):
                missing.append(f"request: 407-D7 product id{n}")
    if not resp.groups:
        try:
            status = resp.as_response().header_response_status
        except ncpdp.NcpdpError:
            status = None
        if _blank(status):
            missing.append("response: 501-F1 header response status")
    for i, group in enumerate(resp.groups):
        if group.segment("21") is None:
            missing.append(f"response: the response status segment AM21 (transaction {i + 1})")
    return missing
