"""The rules of a PA, for the callback receiver and the use cases alike: where a status
stands in its workflow, which of two reports of a PA is newer, and whether a callback
names the claim a PA was submitted for.

The ordering rule (decision 0005, also in the README): a callback moves a PA's
*current* status only when it is newer. Newer means, in this order:

1. a later place in the workflow: the workflow status (New < PA Request < PA Response
   < ..., see ``WORKFLOW_RANK``), then the outcome (null < Pending < a determination);
2. on the same place, a later event time (the latest parseable ``events[].time``, or
   an ``updated_at`` if a body ever carries one), when both sides have one;
3. otherwise arrival: the report that arrives later wins.

A PA submitted without an id (the empty answer format) is held as ``pending-...``
until a callback whose identifiers agree with the claim's (:func:`fields_agree`)
brings the service's id. Pure functions; nothing here reads or writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = [
    "FAX_FAILURES",
    "PENDING_PREFIX",
    "WORKFLOW_RANK",
    "claim_match_fields",
    "digits_key",
    "fields_agree",
    "is_newer",
    "time_key",
]


#: Id prefix of a PA we submitted whose answer named none (the empty format), until
#: its first callback brings the service's id.
PENDING_PREFIX = "pending-"

#: The event types of a failed fax (the service's documents use both spellings).
FAX_FAILURES = frozenset({"REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE"})

#: Place of each workflow status in its workflow (ePA and classic share New/Archived).
WORKFLOW_RANK: dict[str, int] = {
    "New": 0,
    "Shared": 1,
    "Shared \\ Accessed Online": 2,
    "PA Request": 2,
    "Question Request": 2,
    "Sent to Plan": 3,
    "Question Response": 3,
    "PA Response": 4,
    "Appealed": 5,
    "Appeal Request": 5,
    "Appeal Response": 6,
    "Cancel Request Sent": 7,
    "Provider Cancel": 8,
    "Expired": 8,
    "Failure": 8,
    "Archived": 9,
}
_OUTCOME_RANK = {None: 0, "": 0, "Pending": 1, "Unsent": 1, "N/A": 2}


def _outcome_rank(outcome: str | None) -> int:
    return _OUTCOME_RANK.get(outcome, 2)


def time_key(value: str | None) -> datetime | None:
    """An event time as an aware datetime, or None when it is not ISO 8601 (the
    evidence's DELETE event carries the literal string "time")."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def is_newer(
    new: tuple[str | None, str | None, str | None],
    current: tuple[str | None, str | None, str | None],
) -> bool:
    """(event_time, workflow_status, plan_outcome) of a callback that arrives now vs the
    PA's current: workflow order, then event times, then arrival (see the module doc).
    A status we do not know has no place in the workflow: it is ordered by time and
    arrival only."""
    nt, ns, no = new
    ct, cs, co = current
    if cs is None:
        return True
    nr, cr = WORKFLOW_RANK.get(ns or ""), WORKFLOW_RANK.get(cs or "")
    if nr is not None and cr is not None and nr != cr:
        return nr > cr
    if nr is not None and cr is not None and _outcome_rank(no) != _outcome_rank(co):
        return _outcome_rank(no) > _outcome_rank(co)
    ntk, ctk = time_key(nt), time_key(ct)
    if ntk is not None and ctk is not None and ntk != ctk:
        return ntk > ctk
    return True  # arrival: the later one


def digits_key(value: str | None) -> str:
    return (value or "").strip().lstrip("0")


def claim_match_fields(
    bin_: str | None, pcn: str | None, group_id: str | None, provider: str | None,
    ndc: str | None, rx_number: str | None,
) -> dict[str, str]:  # fmt: skip
    """The same identifiers from our side (the claim as sent, overrides applied)."""
    out = {
        "bin": (bin_ or "").strip().upper(),
        "pcn": (pcn or "").strip().upper(),
        "group_id": (group_id or "").strip().upper(),
        "provider": (provider or "").strip(),
        "ndc": (ndc or "").strip(),
        "rx": digits_key(rx_number),
    }
    return {k: v for k, v in out.items() if v}


def fields_agree(a: dict[str, str], b: dict[str, str]) -> bool:
    """Both name the same BIN, and every other identifier both have is equal; the
    pharmacy agrees when one of a side's ids (a callback may name its NCPDP id and its
    NPI, ``provider_alt``) is one of the other's."""
    if not a.get("bin") or a.get("bin") != b.get("bin"):
        return False
    if "provider" in a and "provider" in b:
        mine = {a["provider"], a.get("provider_alt")} - {None}
        if not mine & {b["provider"], b.get("provider_alt")}:
            return False
    skip = {"provider", "provider_alt"}
    return all(a[k] == b[k] for k in (a.keys() & b.keys()) - skip)
