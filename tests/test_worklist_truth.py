"""The pharmacist sees the truth after any sequence of events (issue 26): the defects
as found, each through the intake app on a real SQLite file, the sandbox on loopback
and callbacks in the real service's shapes (tests/desk.py). The console's own rendering
of the same defects is in tests/test_console.py; the state machine that tries
sequences no one wrote down is tests/test_pa_life.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pa_bridge.callbacks.ingest import merge_details, parse_callback
from tests.desk import Desk, delete, fax_failed, items_by_pa, prescription

APPROVAL = {"effective_date": "2026-11-27", "expiration_date": "2027-11-27"}


@pytest.fixture
def desk(tmp_path: Path, sandbox: Any) -> Iterator[Desk]:
    d = Desk(tmp_path / "desk.sqlite3", sandbox)
    try:
        yield d
    finally:
        d.close()


def _group(desk: Desk, pa_id: str) -> str | None:
    """The PA's group in "Needs you" (None: not there)."""
    item = items_by_pa(desk.worklist()).get(pa_id)
    return None if item is None else str(item["attention"])


# ---- a fax failure never hides what came after it ---------------------------------------
@pytest.mark.parametrize("kind", ["REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE"])
def test_a_denial_after_a_fax_failure_shows_as_denied(desk: Desk, kind: str) -> None:
    desk.callback("FAXD01", "Sent to Plan", events=[fax_failed(kind=kind)])
    assert _group(desk, "FAXD01") == "fax_failed"
    desk.callback("FAXD01", "Sent to Plan", "Unfavorable")
    item = items_by_pa(desk.worklist())["FAXD01"]
    assert item["attention"] == "denied"
    assert item["pa"]["label"] == "Denied" and "Fax failed" not in item["pa"]["next_step"]
    assert item["pa"]["notes"] == ["A fax to the plan failed earlier; the PA has moved on since."]


def test_a_denial_after_an_acknowledged_fax_failure_comes_back(desk: Desk) -> None:
    desk.callback("FAXD02", "Sent to Plan", events=[fax_failed()])
    desk.acknowledge("FAXD02")
    assert _group(desk, "FAXD02") is None
    desk.callback("FAXD02", "Sent to Plan", "Unfavorable")
    assert _group(desk, "FAXD02") == "denied"
    item = items_by_pa(desk.worklist())["FAXD02"]
    assert item["returned"] is True and item["pa"]["acknowledged"]["attention"] == "fax_failed"


def test_a_late_fax_failure_of_an_earlier_step_does_not_hide_the_denial(desk: Desk) -> None:
    """Out of order: the denial arrives first, then the fax failure of the step before
    it. The denial is the latest state; the fax failure is news all the same."""
    desk.callback("FAXD03", "Sent to Plan", "Unfavorable")
    desk.acknowledge("FAXD03")
    desk.callback("FAXD03", "Sent to Plan", None, events=[fax_failed()])
    item = items_by_pa(desk.worklist())["FAXD03"]
    assert item["attention"] == "denied" and item["pa"]["label"] == "Denied"
    assert item["returned"] is True  # an event the pharmacist has not seen


def test_a_later_status_supersedes_a_fax_failure_and_a_new_one_returns(desk: Desk) -> None:
    desk.callback("FAXD04", "Shared", events=[fax_failed("2026-11-24T08:00:00Z")])
    assert _group(desk, "FAXD04") == "fax_failed"
    desk.callback("FAXD04", "Sent to Plan")  # faxed again: it reached the plan
    assert _group(desk, "FAXD04") is None
    assert desk.page("FAXD04")["pa"]["label"] == "Sent to the plan"
    desk.callback("FAXD04", "Sent to Plan", events=[fax_failed("2026-11-25T08:00:00Z")])
    assert _group(desk, "FAXD04") == "fax_failed"


def test_an_appeal_denied_after_an_acknowledged_denial_comes_back(desk: Desk) -> None:
    """Another outcome in the same group is news: decision 0014 used to keep it off."""
    desk.callback("APPD01", "PA Response", "Unfavorable")
    desk.acknowledge("APPD01")
    desk.callback("APPD01", "PA Response", "Unfavorable", memo="the same again")
    assert _group(desk, "APPD01") is None  # nothing new
    desk.callback("APPD01", "Appeal Response", "Unfavorable")
    assert _group(desk, "APPD01") == "denied"
    assert items_by_pa(desk.worklist())["APPD01"]["pa"]["label"] == "Appeal denied"


@pytest.mark.parametrize(
    ("outcome", "group", "label"),
    [
        ("Unfavorable", "denied", "Archived: denied"),
        ("Favorable", "approved", "Archived: approved"),
        ("Pending", "failed", "Archived before a decision"),
        ("Unknown", "failed", "Archived without a decision"),
    ],
)
def test_an_archived_pa_keeps_what_the_pharmacist_has_not_seen(
    desk: Desk, outcome: str, group: str, label: str
) -> None:
    """A prescriber's office archives a PA once it is decided, often within minutes. A
    denial (or approval) nobody has seen yet stays in "Needs you" when it is archived,
    and when the archived callback comes before the decision's (out of order); an
    acknowledged one does not come back for being archived: nothing new happened."""
    decided = "PA Response" if outcome != "Unknown" else "Sent to Plan"
    desk.callback("ARCH01", decided, outcome, period=APPROVAL)
    desk.callback("ARCH01", "Archived", outcome, period=APPROVAL)
    item = items_by_pa(desk.worklist()).get("ARCH01")
    assert item is not None, "an unseen decision vanished when its PA was archived"
    assert (item["attention"], item["pa"]["label"]) == (group, label)
    assert "Acknowledge" in item["pa"]["next_step"]
    approved = outcome == "Favorable"
    assert (item["pa"]["expiration_date"] is not None) == approved
    # out of order: the archive first, the decision after it
    desk.callback("ARCH02", "Archived", outcome)
    desk.callback("ARCH02", decided, outcome)
    assert _group(desk, "ARCH02") == group
    # acknowledged, then archived: nothing new for the pharmacist when it was decided
    # (a PA archived while the plan was still working on it needs them again)
    desk.callback("ARCH03", decided, outcome)
    desk.acknowledge("ARCH03")
    desk.callback("ARCH03", "Archived", outcome)
    assert _group(desk, "ARCH03") == (group if outcome == "Pending" else None)
    assert desk.page("ARCH03")["pa"]["label"] == label


def test_an_acknowledgement_covers_only_what_the_pharmacist_saw(desk: Desk) -> None:
    desk.callback("SEEN01", "PA Response", "Favorable")
    seen = desk.page("SEEN01")["pa"]["cursor"]
    desk.callback("SEEN01", "PA Response", "Favorable", events=[delete()])  # meanwhile
    answer = desk.acknowledge("SEEN01", seen)
    assert answer["acknowledged"]["cursor"] == seen
    assert _group(desk, "SEEN01") == "deleted"  # the deletion was not seen: still there
    desk.acknowledge("SEEN01", desk.page("SEEN01")["pa"]["cursor"])
    assert _group(desk, "SEEN01") is None
    bad = desk.post("/v1/pa/SEEN01/acknowledge", {"cursor": "yesterday"})
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_body"


# ---- a deleted PA never reads as approved ---------------------------------------------------
def test_a_deleted_pa_never_reads_as_approved(desk: Desk) -> None:
    desk.callback("DELA01", "PA Response", "Favorable", period=APPROVAL)
    approved = desk.page("DELA01")["pa"]
    assert (approved["label"], approved["expiration_date"]) == ("Approved", "2027-11-27")
    desk.callback("DELA01", "PA Response", "Favorable", events=[delete()])
    for pa in (desk.page("DELA01")["pa"], items_by_pa(desk.worklist())["DELA01"]["pa"]):
        assert pa["label"] == "Deleted" and pa["tone"] == "bad"
        assert pa["expiration_date"] is None and pa["effective_date"] is None
        words = " ".join([pa["label"], pa["meaning"], pa["next_step"], *pa["notes"]])
        assert "pprove" not in words, words
    # a denial after an approval does not show the approval's period either
    desk.callback("DELA02", "PA Response", "Favorable", period=APPROVAL)
    desk.callback("DELA02", "Appeal Response", "Unfavorable")
    assert desk.page("DELA02")["pa"]["expiration_date"] is None


def test_a_pa_the_service_no_longer_returns_reads_as_deleted(desk: Desk) -> None:
    """Issue 28 folded into 26's rules: a PA reconciliation found gone (no token left)
    is deleted to the pharmacist, never approved nor "Expiring soon", and comes back to
    "Needs you" after an acknowledgement of its approval (news)."""
    import datetime as dt

    soon = (dt.date.today() + dt.timedelta(days=10)).isoformat()
    desk.callback("GONE01", "PA Response", "Favorable", period={"expiration_date": soon})
    assert _group(desk, "GONE01") == "expiring"
    desk.acknowledge("GONE01")
    assert _group(desk, "GONE01") is None
    assert desk.gone("GONE01")
    item = items_by_pa(desk.worklist())["GONE01"]
    assert item["attention"] == "deleted" and item["returned"] is True
    for pa in (desk.page("GONE01")["pa"], item["pa"]):
        assert (pa["label"], pa["tone"], pa["gone"]) == ("Deleted", "bad", True)
        assert pa["expiration_date"] is None and pa["days_left"] is None
        words = " ".join([pa["label"], pa["meaning"], pa["next_step"], *pa["notes"]])
        assert "pprove" not in words, words
    assert desk.get("/v1/pa/GONE01").get_json()["expiring"] is False
    desk.acknowledge("GONE01")
    assert _group(desk, "GONE01") is None
    assert desk.gone("GONE01", back=True)  # the service returns it again: news
    assert _group(desk, "GONE01") == "expiring"
    # a PA deleted by its DELETE event, acknowledged: losing its tokens is no news
    desk.callback("GONE02", "PA Response", "Unfavorable", events=[delete()])
    desk.acknowledge("GONE02")
    assert desk.gone("GONE02")
    assert _group(desk, "GONE02") is None
    # gone (acknowledged as deleted), back, gone again: news, though the group is the
    # one acknowledged
    desk.callback("GONE03", "PA Response", "Unfavorable")
    assert desk.gone("GONE03")
    desk.acknowledge("GONE03")
    assert desk.gone("GONE03", back=True)
    assert _group(desk, "GONE03") == "denied"
    assert desk.gone("GONE03")
    assert _group(desk, "GONE03") == "deleted"


def test_a_change_reconciliation_finds_is_news(desk: Desk) -> None:
    """A callback lost and found by reconciliation brings an acknowledged PA back as
    the callback would have; a read that changes nothing does not."""
    desk.callback("RECN01", "Sent to Plan", events=[fax_failed()])
    desk.acknowledge("RECN01")
    same = desk.callback_body("RECN01", "Sent to Plan", events=[fax_failed()])
    assert desk.read_back(same) == "unchanged"
    assert _group(desk, "RECN01") is None
    lost = desk.callback_body("RECN01", "Sent to Plan", "Unfavorable", events=[fax_failed()])
    assert desk.read_back(lost) == "changed"
    item = items_by_pa(desk.worklist())["RECN01"]
    assert (item["attention"], item["pa"]["label"], item["returned"]) == ("denied", "Denied", True)
    desk.acknowledge("RECN01")
    lost_fax = fax_failed("2026-11-26T08:00:00Z")
    body = desk.callback_body("RECN01", "Sent to Plan", "Unfavorable", events=[lost_fax])
    assert desk.read_back(body) == "changed"  # an event not seen before: news
    assert _group(desk, "RECN01") == "fax_failed"


def test_expiring_soon_is_one_entry_of_the_groups_table(desk: Desk) -> None:
    """The groups the console lists come from pa_guide.GROUPS, "Expiring soon" with
    them, with its words and tone (issue 26's table, issue 28's group)."""
    groups = {g["key"]: g for g in desk.worklist()["groups"]}
    assert (groups["expiring"]["title"], groups["expiring"]["tone"]) == ("Expiring soon", "warn")
    assert list(groups)[-2:] == ["approved", "expiring"]


# ---- notes and words ----------------------------------------------------------------------
def test_notes_never_repeat_the_label(desk: Desk) -> None:
    desk.callback("NOTE01", "PA Request", events=[delete(), fax_failed()])
    desk.callback("NOTE02", "Sent to Plan", events=[fax_failed()])
    pas = {p["pa_id"]: p for p in desk.worklist()["pas"]}
    assert (pas["NOTE01"]["label"], pas["NOTE01"]["notes"]) == ("Deleted", [])
    assert (pas["NOTE02"]["label"], pas["NOTE02"]["notes"]) == ("Fax failed", [])


@pytest.mark.parametrize(
    ("status", "outcome", "who"),
    [
        (None, None, "prescriber"),  # submitted, no callback yet: New
        ("New", None, "prescriber"),
        ("Shared", None, "prescriber"),
        ("PA Request", None, "plan"),
        ("Sent to Plan", None, "prescriber"),
        ("PA Response", "Pending", "plan"),
        ("Question Response", None, "prescriber"),
        ("Appealed", "Pending", "plan"),
        ("A status we do not know", None, "plan"),
    ],
)
def test_waiting_too_long_says_what_to_do(
    desk: Desk, status: str | None, outcome: str | None, who: str
) -> None:
    if status is None:
        pa_id = desk.submit(desk.claim("000000770001"))["pa_id"]
    else:
        pa_id = "WAIT01"
        desk.callback(pa_id, status, outcome)
    desk.now += (desk.pending_alert_hours + 1) * 3600
    item = items_by_pa(desk.worklist())[pa_id]
    assert item["attention"] == "pending_too_long"
    step = item["pa"]["next_step"]
    assert "Nothing to do" not in step and who in step and "Open the PA" in step, step


# ---- the PA page's links are named for what they open --------------------------------------
def test_every_link_of_a_pa_is_named_for_what_it_opens(tmp_path: Path, sandbox: Any) -> None:
    desk = Desk(tmp_path / "links.sqlite3", sandbox, claim_format="")  # the default format
    try:
        pa = desk.submit(desk.claim("000000880001"))
        pa_id = pa["pa_id"]
        assert pa["url"] and "/request/view/" in pa["url"]
        portal = pa["url"].split("/request/view/")[0]
        desk.callback(pa_id, "PA Request", portal=portal)  # its token link and its PDF
        page = desk.page(pa_id)["pa"]
        links = page["other_links"]
        assert len(page["urls"]) >= 2 and links, page
        labels = [link["label"] for link in links]
        assert len(set(labels)) == len(labels)
        for link in links:
            assert f"PA {pa_id}" in link["label"], link
            assert "Other link" not in link["label"]
        assert f"PA {pa_id} as PDF" in " ".join(labels)
        assert page["url"] not in [link["href"] for link in links]  # "Open PA" opens it
    finally:
        desk.close()


# ---- the drug: one callback's block, as a whole -------------------------------------------
def test_a_callbacks_drug_block_is_taken_as_a_whole(desk: Desk) -> None:
    rx = "000000990001"
    desk.callback("DRUG01", "PA Request", prescription=prescription(rx, "ELIQUIS", "10 MG"))
    assert desk.page("DRUG01")["pa"]["drug_name"] == "ELIQUIS 10 MG"
    desk.callback("DRUG01", "PA Response", "Pending",
                  prescription=prescription(rx, "ELIQUIS 5 MG TABLET"))  # fmt: skip
    assert desk.page("DRUG01")["pa"]["drug_name"] == "ELIQUIS 5 MG TABLET"
    desk.callback("DRUG01", "PA Response", "Favorable",
                  prescription=prescription(rx, "ELIQUIS 5 MG TABLET", "5 MG"))  # fmt: skip
    assert desk.page("DRUG01")["pa"]["drug_name"] == "ELIQUIS 5 MG TABLET"  # not "5 MG" twice
    # a callback without a drug keeps the last block
    desk.callback("DRUG01", "PA Response", "Favorable", prescription={"drug_id": "085705"})
    assert desk.page("DRUG01")["pa"]["drug_name"] == "ELIQUIS 5 MG TABLET"


def test_merge_details_takes_each_block_whole() -> None:
    def details(req: dict[str, Any]) -> dict[str, Any]:
        body = {"request": {"id": "P1", "workflow_status": "New", **req}}
        return parse_callback(json.dumps(body).encode()).details

    first = merge_details(
        None,
        details(
            {
                "prescription": {"name": "ELIQUIS", "strength": "10 MG"},
                "authorization_period": {"effective_date": "2026-01-01", "expiration_date": "2027-01-01"},
                "is_epa": True,
            }
        ),
    )  # fmt: skip
    later = details(
        {"prescription": {"name": "ELIQUIS 5 MG TABLET"},
         "authorization_period": {"expiration_date": "2028-01-01"}}
    )  # fmt: skip
    assert json.loads(merge_details(first, later)) == {
        "drug_name": "ELIQUIS 5 MG TABLET",
        "expiration_date": "2028-01-01",
        "is_epa": True,
    }
    assert json.loads(merge_details(first, details({"is_epa": "false"}))) == {
        **json.loads(first),
        "is_epa": False,
    }


# ---- the provisional id stays an alias ----------------------------------------------------
def test_the_provisional_id_still_reaches_the_pa_after_its_first_callback(desk: Desk) -> None:
    rx = "000000660001"
    started = desk.submit(desk.claim(rx))
    pending = started["pa_id"]
    assert pending.startswith("pending-") and started["link_pending"] is True
    assert desk.get(f"/v1/pa/{pending}/open").status_code == 404  # link on its way
    desk.callback("17NSTY", "PA Request", prescription=prescription(rx))
    for path in (f"/v1/pa/{pending}", "/v1/pa/17NSTY"):
        r = desk.get(path)
        assert r.status_code == 200, r.get_json()
        pa = r.get_json()
        assert (pa["pa_id"], pa["provisional_id"]) == ("17NSTY", pending)
        assert pa["claim_id"] == started["claim_id"]
        assert [h["source"] for h in pa["history"]] == ["submit", "callback"]
    opened = desk.get(f"/v1/pa/{pending}/open")
    assert opened.status_code == 302 and "17NSTY" in opened.headers["Location"]
    assert desk.page(pending)["pa"]["pa_id"] == "17NSTY"
    shell = desk.get(f"/console/pa/{pending}")
    assert shell.status_code == 200
    shell.close()
    # acknowledged by the old id: recorded on the PA
    assert desk.acknowledge(pending)["pa_id"] == "17NSTY"
    assert len(desk.page("17NSTY")["acknowledgements"]) == 1
    feed = desk.get("/v1/pa").get_json()["pas"]
    assert [(p["pa_id"], p["provisional_id"]) for p in feed] == [("17NSTY", pending)]
    assert desk.get("/v1/pa/pending-000000000000").status_code == 404


def test_an_acknowledgement_under_the_provisional_id_follows_the_pa(desk: Desk) -> None:
    rx = "000000660002"
    pending = desk.submit(desk.claim(rx))["pa_id"]
    desk.now += (desk.pending_alert_hours + 1) * 3600
    assert _group(desk, pending) == "pending_too_long"
    desk.acknowledge(pending)
    assert _group(desk, pending) is None
    desk.callback("17NSTZ", "PA Response", "Favorable", prescription=prescription(rx))
    assert _group(desk, "17NSTZ") == "approved"
    page = desk.page("17NSTZ")
    assert [a["attention"] for a in page["acknowledgements"]] == ["pending_too_long"]
