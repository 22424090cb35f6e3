"""What each PA status means to a pharmacist, and what to do next.

Every (workflow status, outcome) pair the service can report, in both of its workflows
(ePA and classic, docs: pa-service-interface.md, "States and transitions"), plus the
two events (DELETE, fax failure). The console shows these words beside every PA; they
live here, once, so the worklist JSON and the PA page say the same thing.

``tone`` is how the console colours it (``ok``, ``warn``, ``bad``, ``info``);
``attention`` is the worklist group it puts a PA in (None: nothing to do).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "ATTENTION_ORDER",
    "ATTENTION_TITLES",
    "GROUPS",
    "GUIDE",
    "Group",
    "Guide",
    "guide",
    "guide_table",
    "overdue_step",
]


@dataclass(frozen=True)
class Guide:
    label: str
    meaning: str
    next_step: str
    tone: str
    attention: str | None = None
    #: what to do when it has waited too long for a decision (``pending_too_long``);
    #: None: the default words (:func:`overdue_step`)
    overdue: str | None = None


@dataclass(frozen=True)
class Group:
    """One group of the worklist: its key, its title, the words the PA page uses for it
    ("On the worklist (denied)") and the tone of its count's edge."""

    key: str
    title: str
    words: str
    tone: str


#: The worklist's groups, in the order the console lists them (most urgent first). A
#: new group is one entry here, and the rule that puts a PA in it (worklist.py: a
#: status's words name it here, a time rule there, decision 0014).
GROUPS: tuple[Group, ...] = (
    Group("not_submitted", "Rejected for PA, not submitted", "not submitted", "warn"),
    Group("denied", "Denied", "denied", "bad"),
    Group("fax_failed", "Fax failed", "fax failed", "bad"),
    Group("deleted", "Deleted", "deleted", "bad"),
    Group("failed", "Failed or expired at the service", "failed or expired", "bad"),
    Group("pending_too_long", "Waiting too long", "waiting too long", "warn"),
    Group(
        "approved",
        "Approved or not required: not yet acknowledged",
        "approved or not required",
        "ok",
    ),
    # an approval about to lapse (issue 28): the clock's rule in worklist.TIME_RULES
    Group("expiring", "Expiring soon", "expiring soon", "warn"),
)
ATTENTION_ORDER = tuple(g.key for g in GROUPS)
ATTENTION_TITLES = {g.key: g.title for g in GROUPS}

_CALL_PLAN = "Call the plan to ask about the decision. Open the PA to see what was sent and when."
_CALL_PRESCRIBER = (
    "Call the prescriber's office: the PA is with them and has not gone to the plan. "
    "Open the PA to see where it stands."
)

_APPROVED = Guide(
    "Approved",
    "The plan approved the PA.",
    "Send the claim again: it should now pay. Acknowledge it here once done.",
    "ok",
    "approved",
)
_DENIED = Guide(
    "Denied",
    "The plan denied the PA.",
    "Tell the patient and the prescriber: the prescriber can appeal or change the drug. "
    "Acknowledge it here once done.",
    "bad",
    "denied",
)
_PLAN_WORKING = Guide(
    "Plan is working on it",
    "The plan has the PA and has not decided yet.",
    "Nothing to do now. If it takes more than a few days, call the plan.",
    "warn",
    overdue=_CALL_PLAN,
)
_NOT_REQUIRED = Guide(
    "PA not required",
    "The plan says this patient does not need a PA for this drug.",
    "Send the claim again; if it is rejected again, call the plan. Acknowledge it here.",
    "ok",
    "approved",
)

#: (workflow_status, plan_outcome) -> words. None is the JSON null.
GUIDE: dict[tuple[str, str | None], Guide] = {
    # ---- both workflows
    ("New", None): Guide(
        "Started",
        "The PA exists at the service; the prescriber has not sent it to the plan yet.",
        "Nothing to do now. The prescriber completes it; if it sits here for days, "
        "call the prescriber's office.",
        "info",
        overdue="Call the prescriber's office: they have not sent the PA to the plan yet. "
        "Open the PA to see what is missing.",
    ),
    # ---- ePA
    ("PA Request", None): Guide(
        "Sent to the plan",
        "The PA request was sent to the plan electronically.",
        "Nothing to do now: the plan usually answers within 72 hours.",
        "info",
        overdue=_CALL_PLAN,
    ),
    ("PA Response", "Favorable"): _APPROVED,
    ("PA Response", "Unfavorable"): _DENIED,
    ("PA Response", "Pending"): _PLAN_WORKING,
    ("Question Request", None): Guide(
        "Plan asked for questions",
        "The request for the plan's questions was sent to the plan.",
        "Nothing to do now: the prescriber answers the plan's questions next.",
        "info",
        overdue="Call the plan: its questions have not come back. Open the PA to see where it "
        "stands.",
    ),
    ("Question Response", None): Guide(
        "Questions to answer",
        "The plan's questions are ready for the prescriber to answer.",
        "Nothing to do at the pharmacy; if it sits here, remind the prescriber's office.",
        "info",
        overdue="Call the prescriber's office: the plan's questions are waiting for their "
        "answers. Open the PA to see which.",
    ),
    ("Question Response", "Favorable"): _APPROVED,
    ("Question Response", "Unfavorable"): _DENIED,
    ("Question Response", "N/A"): _NOT_REQUIRED,
    ("Appeal Request", None): Guide(
        "Appeal sent",
        "The prescriber appealed the denial; the appeal is with the plan.",
        "Nothing to do now.",
        "info",
        overdue=_CALL_PLAN,
    ),
    ("Appeal Response", "Favorable"): Guide(
        "Appeal approved",
        "The plan approved the appeal.",
        "Send the claim again: it should now pay. Acknowledge it here once done.",
        "ok",
        "approved",
    ),
    ("Appeal Response", "Unfavorable"): Guide(
        "Appeal denied",
        "The plan denied the appeal.",
        "Tell the patient and the prescriber (another drug, or paying cash). "
        "Acknowledge it here once done.",
        "bad",
        "denied",
    ),
    ("Appeal Response", "Pending"): Guide(
        "Appeal pending",
        "The plan has the appeal and has not decided yet.",
        "Nothing to do now.",
        "warn",
        overdue=_CALL_PLAN,
    ),
    ("Cancel Request Sent", None): Guide(
        "Cancellation sent",
        "The PA is being cancelled; the plan has not confirmed yet.",
        "Nothing to do.",
        "info",
    ),
    ("Provider Cancel", "Cancelled"): Guide(
        "Cancelled",
        "The PA was cancelled and the plan confirmed it.",
        "Nothing to do, unless the patient still needs the drug: then start a new PA.",
        "info",
    ),
    ("Expired", None): Guide(
        "Expired",
        "The plan's questions were not answered in time and the PA expired.",
        "Call the prescriber's office: a new PA is needed if the patient still needs "
        "the drug. Acknowledge it here once done.",
        "bad",
        "failed",
    ),
    ("Failure", None): Guide(
        "Failed",
        "The service could not process the electronic PA.",
        "Call the prescriber's office or the plan; a new PA may be needed. "
        "Acknowledge it here once done.",
        "bad",
        "failed",
    ),
    # ---- classic (fax) workflow
    ("Shared", None): Guide(
        "Shared",
        "The PA was sent to another user (usually the prescriber's office).",
        "Nothing to do now.",
        "info",
        overdue=_CALL_PRESCRIBER,
    ),
    ("Shared \\ Accessed Online", None): Guide(
        "Opened by the prescriber",
        "The user it was shared with has opened it.",
        "Nothing to do now.",
        "info",
        overdue=_CALL_PRESCRIBER,
    ),
    ("Sent to Plan", None): Guide(
        "Sent to the plan",
        "The PA was sent to the plan (by fax); nothing has come back yet.",
        "Nothing to do now. Classic plans answer the prescriber directly: if you hear "
        "nothing in a few days, call the prescriber's office.",
        "info",
        overdue="Call the prescriber's office (classic plans answer them directly), or the plan. "
        "Open the PA to see when it was sent.",
    ),
    ("Sent to Plan", "Favorable"): _APPROVED,
    ("Sent to Plan", "Unfavorable"): _DENIED,
    ("Sent to Plan", "Pending"): _PLAN_WORKING,
    ("Sent to Plan", "Unknown"): Guide(
        "No determination",
        "The plan gave no decision (the PA page may say why).",
        "Open the PA to read the plan's reason, then call the plan or the prescriber.",
        "warn",
        "failed",
    ),
    ("Appealed", "Favorable"): Guide(
        "Appeal approved",
        "The plan approved the appeal.",
        "Send the claim again: it should now pay. Acknowledge it here once done.",
        "ok",
        "approved",
    ),
    ("Appealed", "Unfavorable"): Guide(
        "Appeal denied",
        "The plan denied the appeal.",
        "Tell the patient and the prescriber. Acknowledge it here once done.",
        "bad",
        "denied",
    ),
    ("Appealed", "Pending"): Guide(
        "Appeal pending",
        "The plan has the appeal and has not decided yet.",
        "Nothing to do now.",
        "warn",
        overdue=_CALL_PLAN,
    ),
    ("Appealed", "Cancelled"): Guide(
        "Appeal cancelled",
        "The appeal was cancelled.",
        "Nothing to do.",
        "info",
    ),
    ("Appealed", "Unknown"): Guide(
        "Appeal without determination",
        "An appeal was created but the plan gave no decision.",
        "Open the PA; call the prescriber's office if the patient is waiting.",
        "warn",
        overdue=_CALL_PLAN,
    ),
    # ---- archived (both workflows). A prescriber's office archives a PA once it is
    # decided, often within minutes: the decision keeps its group, so a denial or an
    # approval nobody has seen yet stays in "Needs you" (issue 26's verification);
    # archiving alone is not news (callbacks/ingest.py), so an acknowledged decision
    # does not come back for it.
    ("Archived", "Favorable"): Guide(
        "Archived: approved",
        "The PA was approved, then archived; the approval stands until its expiration date.",
        "Send the claim again if that is not done yet: it should now pay. "
        "Acknowledge it here once done.",
        "ok",
        "approved",
    ),
    ("Archived", "Unfavorable"): Guide(
        "Archived: denied",
        "The PA was denied, then archived.",
        "Tell the patient and the prescriber if that is not done yet: the prescriber can "
        "appeal or change the drug. Acknowledge it here once done.",
        "bad",
        "denied",
    ),
    ("Archived", "Pending"): Guide(
        "Archived before a decision",
        "The PA was archived before the plan decided.",
        "If the patient still needs the drug, call the prescriber's office. "
        "Acknowledge it here once done.",
        "warn",
        "failed",
    ),
    ("Archived", "Cancelled"): Guide(
        "Archived: cancelled", "The PA was cancelled and archived.", "Nothing to do.", "info"
    ),
    ("Archived", "Unknown"): Guide(
        "Archived without a decision",
        "The PA was archived with no decision from the plan.",
        "If the patient still needs the drug, call the prescriber's office. "
        "Acknowledge it here once done.",
        "warn",
        "failed",
    ),
    ("Archived", "Unsent"): Guide(
        "Archived, never sent",
        "The PA was archived without being sent to the plan (therapy changed, or another reason).",
        "Nothing to do, unless the patient still needs the drug.",
        "info",
    ),
}

_DELETED = Guide(
    "Deleted",
    "The PA was deleted at the service (by a user, or because the claim was reversed). "
    "Nobody is working on it any more.",
    "If the patient still needs the drug, send the claim again and start a new PA. "
    "Acknowledge it here once done.",
    "bad",
    "deleted",
)
_FAX_FAILED = Guide(
    "Fax failed",
    "The service could not fax the PA to the plan, even after several tries.",
    "Open the PA and fax it again, or call the plan to send it another way. "
    "Acknowledge it here once done.",
    "bad",
    "fax_failed",
)
_NO_STATUS = Guide(
    "Submitted",
    "The PA was submitted; the service has not sent its status yet.",
    "Nothing to do now: the status arrives by itself.",
    "info",
    overdue="Open the PA to check that it reached the service; if it did not, call the "
    "service's help desk or submit it again.",
)


def _unknown(status: str, outcome: str | None) -> Guide:
    return Guide(
        status if outcome is None else f"{status}, {outcome}",
        "The service reported a status this version of pa-bridge does not know.",
        "Open the PA at the service to see what it means.",
        "warn",
    )


_OVERDUE = (
    "Open the PA at the service to see where it stands, then call the plan or the "
    "prescriber's office."
)


def overdue_step(g: Guide) -> str:
    """What to do about a PA that has waited too long for a decision in state ``g``."""
    return g.overdue or _OVERDUE


def guide(
    workflow_status: str | None,
    plan_outcome: str | None,
    *,
    deleted: bool = False,
    fax_failed: bool = False,
) -> Guide:
    """The words for a PA as it is now. A deletion says more than any status (nobody
    works on a deleted PA); ``fax_failed``: a fax failure is the PA's latest news (no
    later status has come since, decision 0014), and says more than its status."""
    if deleted:
        return _DELETED
    if fax_failed:
        return _FAX_FAILED
    if not workflow_status:
        return _NO_STATUS
    outcome = plan_outcome or None
    if outcome is not None and outcome.lower() == "null":
        outcome = None
    found = GUIDE.get((workflow_status, outcome))
    if found is None and outcome is not None:
        found = GUIDE.get((workflow_status, None))
    return found or _unknown(workflow_status, outcome)


def guide_table() -> list[dict[str, Any]]:
    """Every status the service can report, with its words (for the console's legend)."""
    rows = [{"workflow_status": s, "plan_outcome": o, **asdict(g)} for (s, o), g in GUIDE.items()]
    rows.append(
        {"workflow_status": None, "plan_outcome": None, "event": "DELETE", **asdict(_DELETED)}
    )
    rows.append(
        {
            "workflow_status": None,
            "plan_outcome": None,
            "event": "REQUEST_FAX_FAILED",
            **asdict(_FAX_FAILED),
        }
    )
    return rows
