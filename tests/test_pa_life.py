"""A PA's life as a state machine (issue 26): hypothesis draws sequences of what a busy
pharmacy day brings (claims, Submit PA in the service's empty format, callbacks in the
real service's shapes for every status of both workflows with outcomes, DELETE and fax
failure events, out of order, repeated, skipped, several in one commit; reversals and
their DELETE; acknowledgements, as seen or stale; the clock moving on), and after every
step checks what the pharmacist relies on:

- the worklist group matches the PA's latest state (decision 0014: deleted; else a fax
  failure no later status has superseded; else its current status by the ordering
  rule of decision 0005; else waiting too long);
- a change the pharmacist has not seen (a new status or outcome, an event not seen
  before) puts a PA that needs them in "Needs you", and nothing else does;
- nothing deleted reads as approved; no text repeats; a waiting PA says what to do;
- the drug is one callback's block, the approval period only on an approval;
- every PA the feed has is reachable by every id it ever had (``GET /v1/pa/{id}``,
  ``/open``, the console's PA page), and the feed has nothing else.

With issue 28 merged in: approval periods whose end the moving clock brings within
``[worklist] expiring_days`` ("Expiring soon", a clock rule after the state's group,
with its reminder ``expiring_reminder_days`` before the end), and reconciliation: a
request object read back and applied as its callback would have been (news the same
way), and the service no longer returning a PA (``gone``: read as deleted) or
returning it again.

Everything runs for real (tests/desk.py): the intake app through Flask's test client
on a SQLite file, the sandbox on loopback, the callback ingest on the same store. The
model below says what should be true in a few lines each; the ordering of two statuses
is decision 0005's rule (``is_newer``, tested on its own in test_callbacks.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pa_bridge.callbacks.ingest import FAX_FAILURES, is_newer
from pa_bridge.pa_guide import GUIDE, guide
from pa_bridge.service.expiry import EXPIRING_GUIDE
from pa_bridge.store import now_iso
from pa_bridge.worklist import local_day_start
from tests.desk import Desk, items_by_pa, prescription

#: every (status, outcome) of both workflows, and a few the service may add one day
PLACES: list[tuple[str | None, str | None]] = [
    *GUIDE,
    ("PA Response", None),
    ("Sent to Plan", "Cancelled"),
    ("A status of tomorrow", None),
    (None, None),  # a body without a status: its events only
]
#: ISO times, and the evidence's literal "time" (not a time at all)
TIMES = ["time", "2026-11-24T08:00:00Z", "2026-11-24T09:00:00Z", "2026-11-25T10:00:00Z"]
EVENT = st.builds(
    lambda kind, t: {"type": kind, "time": t, "remote_user": {"display_name": "SYN USER"}},
    st.sampled_from(["DELETE", "REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE"]),
    st.sampled_from(TIMES),
)
EVENTS = st.one_of(st.just([]), st.lists(EVENT, min_size=1, max_size=2))
#: (name, strength) of a callback's drug, or None: a prescription block without one
DRUGS = st.sampled_from(
    [
        None,
        ("ELIQUIS", "5 MG"),
        ("ELIQUIS 5 MG TABLET", None),
        ("ELIQUIS 5 MG TABLET", "5 MG"),
        ("XARELTO", "10 MG"),
        (None, "20 MG"),
    ]
)
PERIODS = st.sampled_from(
    [
        None,
        {"effective_date": "2026-11-27", "expiration_date": "2027-11-27"},
        {"expiration_date": "2028-01-31"},
        # days from the desk's first day (resolved in the body): one the clock brings
        # into "Expiring soon", one inside it that reaches its reminder, one ending
        # within the reminder's days, one long over
        {"expiration_date": "+22"},
        {"expiration_date": "+9"},
        {"expiration_date": "+5"},
        {"expiration_date": "-25"},
    ]
)
#: the statuses of both workflows (a status of tomorrow has no words of its own)
GUIDE_STATUSES = {status for status, _ in GUIDE}
#: statuses after which nobody waits on the plan (worklist.py's, said again)
SETTLED = {"Archived", "Provider Cancel", "Cancel Request Sent"}
HOUR = 3600.0


@dataclass
class Claim:
    claim_id: str
    rx: str
    received: float  # on the desk's clock


@dataclass
class Pa:
    """What the pharmacist should see of one PA."""

    ids: list[str]  # every id it had, the one it has now last
    rx: str
    claim: Claim | None
    created: float  # on the desk's clock (submitted) or the real one (first heard of in a callback)
    status: str | None = "New"
    outcome: str | None = None
    status_time: str | None = None
    events: set[tuple[str, str]] = field(default_factory=set)
    deleted: bool = False
    fax_ever: bool = False
    fax_latest: bool = False
    drug: tuple[str | None, str | None] | None = None
    period: dict[str, str] | None = None
    linked: bool = False  # a callback brought its links
    gone: bool = False  # the service no longer returns it (reconciliation)
    news_step: int = 0
    ack: tuple[str | None, int, float] | None = None  # (group acknowledged, step seen, at)
    seen: list[tuple[int, str]] = field(default_factory=list)  # (step, cursor shown)
    owed_delete: bool = False  # reversed: the service's DELETE follows by callback

    @property
    def id(self) -> str:
        return self.ids[-1]

    def words(self) -> Any:
        gone = self.deleted or self.gone
        return guide(self.status, self.outcome, deleted=gone, fax_failed=self.fax_latest)

    def days_left(self, now: float) -> int | None:
        """Days from the pharmacy's date to the approval period's last day, if any."""
        end = (self.period or {}).get("expiration_date")
        return None if end is None else (dt.date.fromisoformat(end[:10]) - _local(now)).days

    def group(self, now: float, hours: float, days: int) -> str | None:
        g: str | None = self.words().attention
        if (
            g is None
            and self.status not in SETTLED
            and self.outcome != "Cancelled"
            and self.created <= now - hours * HOUR
        ):
            return "pending_too_long"
        left = self.days_left(now)
        if g in (None, "approved") and left is not None:
            if -days <= left <= days and self.outcome == "Favorable" and not self.words_deleted:
                return "expiring"
            if g == "approved" and left < -days:
                return None  # long over
        return g

    @property
    def words_deleted(self) -> bool:
        return self.deleted or self.gone

    def on_list(self, now: float, hours: float, days: int, reminder_days: int) -> bool:
        g = self.group(now, hours, days)
        if g is None:
            return False
        if self.ack is None or self.ack[0] != g or self.news_step > self.ack[1]:
            return True
        left = self.days_left(now)
        if g == "expiring" and left is not None and left <= reminder_days:
            # acknowledged before the reminder's day (local midnight) began: back
            end = dt.date.fromisoformat((self.period or {})["expiration_date"][:10])
            day = end - dt.timedelta(days=reminder_days)
            return self.ack[2] < dt.datetime.combine(day, dt.time()).astimezone().timestamp()
        return False


def _local(now: float) -> dt.date:
    """The pharmacy's date at ``now`` (the daemon's local time zone)."""
    return dt.datetime.fromtimestamp(now).astimezone().date()


def _event_time(events: list[dict[str, Any]]) -> str | None:
    times = [e["time"] for e in events if e["time"] != "time"]
    return max(times) if times else None


def _doubled(text: str) -> str | None:
    """A phrase said twice in a row ("DeletedDeleted", "Fax failed Fax failed")."""
    m = re.search(r"\b([A-Za-z][\w ,]{2,}?)\s*\1(?!\w)", text)
    return m.group(0) if m else None


class PaLife(RuleBasedStateMachine):
    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory(prefix="pa-life-")
        self.desk = Desk(Path(self._dir.name) / "pa.sqlite3", SANDBOX[0])
        self.hours = self.desk.pending_alert_hours
        self.days = self.desk.expiring_days
        self.reminder_days = self.desk.expiring_reminder_days
        self.pas: list[Pa] = []
        self.bodies: list[tuple[bytes, Pa]] = []
        self.step = 0
        self.unsubmitted: dict[str, Claim] = {}
        self._n = itertools.count(1)

    def teardown(self) -> None:
        self.desk.close()
        self._dir.cleanup()

    # ---- what happens ------------------------------------------------------------------
    def _rx(self) -> str:
        return f"{next(self._n) + 710000:012d}"

    @initialize(target=claims)
    def first_claim(self) -> Any:
        return self.new_claim()

    @rule(target=claims)
    def new_claim(self) -> Any:
        """A claim rejected for PA: on the list until submitted (or the day ends)."""
        self.step += 1
        rx = self._rx()
        c = Claim(self.desk.claim(rx), rx, self.desk.now)
        self.unsubmitted[c.claim_id] = c
        return c

    @rule(claim=consumes(claims))
    def submit(self, claim: Claim) -> None:
        """Submit PA; the service's empty answer: a provisional id, the link to come."""
        self.step += 1
        pa = self.desk.submit(claim.claim_id)
        assert pa["pa_id"].startswith("pending-") and pa["link_pending"] is True
        self.unsubmitted.pop(claim.claim_id)
        self.pas.append(Pa([pa["pa_id"]], claim.rx, claim, self.desk.now, news_step=self.step))
        again = self.desk.submit(claim.claim_id)  # a second click: the same PA, nothing sent
        assert again["pa_id"] == pa["pa_id"]

    @rule(
        which=st.integers(min_value=0),
        new=st.booleans(),
        place=st.sampled_from(PLACES),
        events=EVENTS,
        drug=DRUGS,
        period=PERIODS,
        batch=st.integers(min_value=1, max_value=3),
    )
    def callbacks(
        self,
        which: int,
        new: bool,
        place: tuple[str | None, str | None],
        events: list[dict[str, Any]],
        drug: tuple[str | None, str | None] | None,
        period: dict[str, str] | None,
        batch: int,
    ) -> None:
        """Callbacks in one commit (the listener hands several over at once): the first
        for the PA drawn (or a PA first heard of now), the others for PAs drawn after it,
        each with the same shapes."""
        self.step += 1
        sent = []
        for i in range(batch):
            pa = self._pa_for(which + i, new and i == 0)
            sent.append((self._body(pa, place, events if i == 0 else [], drug, period), pa))
        results = self.desk.ingest.receive_many([(body, "application/json") for body, _ in sent])
        applied: set[bytes] = set()
        for (body, pa), result in zip(sent, results, strict=True):
            assert not isinstance(result, BaseException), result
            fresh = body not in applied and body not in {b for b, _ in self.bodies}
            assert result.outcome == ("stored" if fresh else "duplicate"), result
            if fresh:
                applied.add(body)
                self._apply(pa, body)
                self.bodies.append((body, pa))

    def _pa_for(self, which: int, new: bool) -> Pa:
        if new or not self.pas:
            pa = Pa([f"CB{next(self._n):04d}"], f"{next(self._n) + 990000:012d}", None, time.time())
            pa.status = None  # until its first callback
            pa.news_step = self.step
            self.pas.append(pa)
            return pa
        return self.pas[which % len(self.pas)]

    def _body(
        self,
        pa: Pa,
        place: tuple[str | None, str | None],
        events: list[dict[str, Any]],
        drug: tuple[str | None, str | None] | None,
        period: dict[str, str] | None,
    ) -> bytes:
        if pa.id.startswith("pending-"):  # its first callback: the service's id
            pa.ids.append(f"R{next(self._n):05d}")
        name, strength = drug or (None, None)
        status, outcome = place
        end = (period or {}).get("expiration_date", "")
        if end[:1] in "+-" and end:  # days from the desk's first day
            day = _local(self.desk.start) + dt.timedelta(days=int(end))
            period = {**(period or {}), "expiration_date": day.isoformat()}
        return self.desk.callback_body(
            pa.id,
            status,
            outcome,
            events=events,
            prescription=prescription(pa.rx, name, strength),
            period=period,
        )

    def _apply(self, pa: Pa, body: bytes) -> None:
        """What the callback ``body`` does to the model of ``pa``."""
        req = json.loads(body)["request"]
        events = [{"type": e["type"], "time": e["time"]} for e in req["events"]]
        status, outcome = req.get("workflow_status"), req.get("plan_outcome")
        et = _event_time(events)
        fresh = {(e["type"], e["time"]) for e in events} - pa.events
        pa.events |= fresh
        first = not pa.linked and pa.claim is None
        was = (pa.status_time, pa.status, pa.outcome)
        if first:
            current = True
            if status:
                pa.status, pa.outcome, pa.status_time = status, outcome, et
        else:
            here = (status, outcome) if status else (pa.status, pa.outcome)
            current = is_newer((et, *here), was)
            if status and current:
                pa.status, pa.outcome, pa.status_time = status, outcome, et
        moved = first or (pa.status, pa.outcome) != was[1:]
        pa.deleted = pa.deleted or any(t == "DELETE" for t, _ in pa.events)
        fax_now = any(t in FAX_FAILURES for t, _ in fresh)
        pa.fax_ever = pa.fax_ever or fax_now
        if current and fax_now:
            pa.fax_latest = True
        elif moved:
            pa.fax_latest = False
        # archiving a decided PA keeps its outcome: not news (the decision keeps its group)
        archived = not first and pa.status == "Archived" and pa.outcome is not None
        if (moved and not (archived and pa.outcome == was[2])) or fresh:
            pa.news_step = self.step
        rx = req["prescription"]
        if rx.get("name") or rx.get("strength"):
            pa.drug = (rx.get("name"), rx.get("strength"))
        if "authorization_period" in req:
            pa.period = req["authorization_period"]
        pa.linked = True
        if any(t == "DELETE" for t, _ in fresh):
            pa.owed_delete = False

    @precondition(lambda self: bool(self.bodies))
    @rule(which=st.integers(min_value=0))
    def repeat(self, which: int) -> None:
        """The service sends a callback again: kept once, nothing changes."""
        self.step += 1
        body, _pa = self.bodies[which % len(self.bodies)]
        assert self.desk.send(body) == "duplicate"

    @precondition(lambda self: any(p.claim is not None for p in self.pas))
    @rule(which=st.integers(min_value=0))
    def reverse(self, which: int) -> None:
        """The claim is reversed: the service takes the B2 and deletes the PA; until its
        DELETE comes by callback, nothing changes for the pharmacist. The answer names the
        claim's PA, deleted already or not (a repeated B2 finds it too: issue 31)."""
        self.step += 1
        submitted = [p for p in self.pas if p.claim is not None]
        pa = submitted[which % len(submitted)]
        answer = self.desk.reverse(pa.rx)
        assert answer["status"] == "delivered"
        assert [(p["pa_id"], p["deleted"]) for p in answer["pas"]] == [(pa.id, pa.deleted)]
        assert answer["pa_found"] is True
        assert ("was deleted already" in answer["message"]) == pa.deleted
        pa.owed_delete = not pa.deleted

    @precondition(lambda self: any(p.owed_delete and p.linked for p in self.pas))
    @rule(which=st.integers(min_value=0), when=st.sampled_from(TIMES))
    def deleted_by_the_service(self, which: int, when: str) -> None:
        """The DELETE event of a reversed claim's PA, at its status as it stands."""
        self.step += 1
        owed = [p for p in self.pas if p.owed_delete and p.linked]
        pa = owed[which % len(owed)]
        event = {"type": "DELETE", "time": when, "remote_user": {"display_name": "SYN USER"}}
        body = self._body(pa, (pa.status, pa.outcome), [event], None, None)
        outcome = self.desk.send(body)
        if outcome == "stored":
            self._apply(pa, body)
            self.bodies.append((body, pa))
        pa.owed_delete = False

    @precondition(lambda self: bool(self.pas))
    @rule(which=st.integers(min_value=0), stale=st.booleans(), by_old_id=st.booleans())
    def acknowledge(self, which: int, stale: bool, by_old_id: bool) -> None:
        """The pharmacist acknowledges a PA as their page showed it (``stale``: a page
        loaded some steps ago), by the id it has now or one it had."""
        self.step += 1
        pa = self.pas[which % len(self.pas)]
        step, cursor = pa.seen[0] if stale else pa.seen[-1]
        answer = self.desk.acknowledge(pa.ids[0] if by_old_id else pa.id, cursor)
        assert answer["pa_id"] == pa.id
        pa.ack = (pa.group(self.desk.now, self.hours, self.days), step, self.desk.now)

    @precondition(lambda self: bool(self.pas))
    @rule(
        which=st.integers(min_value=0),
        place=st.sampled_from([p for p, g in GUIDE.items() if p[1] == "Favorable"]),
        end=st.sampled_from(["+22", "+9", "+5", "-25"]),
        read_back=st.booleans(),
    )
    def approved_for_a_while(
        self, which: int, place: tuple[str, str], end: str, read_back: bool
    ) -> None:
        """An approval with its period's end a number of days from the desk's first
        day (issue 28), by callback or found by reconciliation: the clock brings it
        into "Expiring soon" and to its reminder."""
        self.step += 1
        pa = self.pas[which % len(self.pas)]
        if read_back and not pa.linked:
            read_back = False  # reconciliation reads only the PAs it can name
        body = self._body(pa, place, [], None, {"expiration_date": end})
        if read_back:
            assert self.desk.read_back(body) in ("changed", "completed", "unchanged")
        elif self.desk.send(body) == "stored":
            self.bodies.append((body, pa))
        else:
            return  # the same callback again: nothing changes
        self._apply(pa, body)

    @precondition(lambda self: any(p.linked for p in self.pas))
    @rule(
        which=st.integers(min_value=0),
        place=st.sampled_from(PLACES),
        events=EVENTS,
        period=PERIODS,
    )
    def read_back(
        self,
        which: int,
        place: tuple[str | None, str | None],
        events: list[dict[str, Any]],
        period: dict[str, str] | None,
    ) -> None:
        """Reconciliation reads a PA back from the service (issue 28): what a lost
        callback carried is applied as the callback would have been, news alike; a
        read that changes nothing is not applied."""
        self.step += 1
        linked = [p for p in self.pas if p.linked]
        pa = linked[which % len(linked)]
        body = self._body(pa, place, events, None, period)
        outcome = self.desk.read_back(body)
        assert outcome in ("changed", "completed", "unchanged"), outcome
        before = (pa.status, pa.outcome, pa.status_time, set(pa.events))
        self._apply(pa, body)
        moved = before != (pa.status, pa.outcome, pa.status_time, pa.events)
        assert (outcome == "changed") == moved, (outcome, before, pa)

    @precondition(lambda self: any(p.linked for p in self.pas))
    @rule(which=st.integers(min_value=0))
    def gone_or_back(self, which: int) -> None:
        """Reconciliation finds the service no longer returns a PA (no token left: it
        reads as deleted), or returns it again; news either way, unless a DELETE event
        came already (then the pharmacist sees no change)."""
        self.step += 1
        linked = [p for p in self.pas if p.linked]
        pa = linked[which % len(linked)]
        assert self.desk.gone(pa.id, back=pa.gone)
        pa.gone = not pa.gone
        if not pa.deleted:
            pa.news_step = self.step

    @precondition(lambda self: self.desk.now - self.desk.start < 4 * 24 * HOUR)
    @rule()
    def time_passes(self) -> None:
        """40 hours on (never onto a boundary: every time the model compares differs by
        hours)."""
        self.step += 1
        self.desk.now += 40 * HOUR

    # ---- what must be true after every step ---------------------------------------------
    @invariant()
    def the_pharmacist_sees_the_truth(self) -> None:
        desk, now = self.desk, self.desk.now
        data = desk.worklist()
        items = items_by_pa(data)
        day = local_day_start(now)
        claim_items = {i["claim"]["claim_id"] for i in data["items"] if i["claim"] is not None}
        today = {c for c, claim in self.unsubmitted.items() if now_iso(claim.received) >= day}
        assert claim_items == today
        assert {i["attention"] for i in data["items"] if i["claim"]} <= {"not_submitted"}
        for pa in self.pas:
            shown = desk.page(pa.ids[0])["pa"]  # by its first id: the same PA
            assert shown["pa_id"] == pa.id
            words, group = pa.words(), pa.group(now, self.hours, self.days)
            label = EXPIRING_GUIDE.label if group == "expiring" else words.label
            assert (shown["attention"], shown["label"]) == (group, label), pa
            listed = pa.on_list(now, self.hours, self.days, self.reminder_days)
            assert (pa.id in items) == listed, (pa, shown)
            if group == "expiring":
                assert shown["days_left"] == pa.days_left(now), (shown, pa)
            if pa.id in items:
                assert items[pa.id]["attention"] == group
                assert items[pa.id]["returned"] == (pa.ack is not None)
            self._says_it_once(shown, pa, group)
            if not (pa.words_deleted or pa.fax_latest) and pa.status in GUIDE_STATUSES:
                # a decision never vanishes from the groups (archived or not)
                if pa.outcome == "Unfavorable":
                    assert group == "denied", (group, pa)
                elif pa.outcome == "Favorable":
                    assert group in ("approved", "expiring", None), (group, pa)
                    assert group is not None or (pa.days_left(now) or 0) < -self.days, pa
            pa.seen.append((self.step, shown["cursor"]))
        for summary in (*[i["pa"] for i in items.values()], *data["pas"]):
            assert _doubled(" ".join([summary["label"], *summary["notes"]])) is None, summary

    def _says_it_once(self, shown: dict[str, Any], pa: Pa, group: str | None) -> None:
        texts = [shown["label"], shown["meaning"], shown["next_step"], *shown["notes"]]
        assert len(set(texts)) == len(texts), texts
        for text in (*texts, shown["drug_name"] or "", " ".join([texts[0], *shown["notes"]])):
            assert _doubled(text) is None, text
        if pa.words_deleted:  # a DELETE event, or gone from the service
            assert shown["tone"] != "ok" and shown["expiration_date"] is None, shown
            assert shown["attention"] != "expiring" and shown["days_left"] is None, shown
            assert "pprove" not in " ".join(texts), texts
        if group == "pending_too_long":
            assert "Nothing to do" not in shown["next_step"], shown["next_step"]
        name, strength = pa.drug or (None, None)
        drug = name if name and strength and strength in name else None
        expected = drug or " ".join(x for x in (name, strength) if x) or None
        assert shown["drug_name"] == expected, (shown["drug_name"], pa.drug)
        earlier = pa.fax_ever and not pa.fax_latest and not pa.words_deleted
        assert shown["notes"] == (["A fax to the plan failed earlier; the PA has moved on since."]
                                  if earlier else []), (shown["notes"], pa)  # fmt: skip
        approved = pa.words().tone == "ok"
        until = (pa.period or {}).get("expiration_date") if approved else None
        assert shown["expiration_date"] == until, (shown["expiration_date"], pa)

    @invariant()
    def every_pa_is_reachable_by_every_id_it_had(self) -> None:
        desk = self.desk
        feed = desk.get("/v1/pa", limit="500").get_json()["pas"]
        assert sorted(p["pa_id"] for p in feed) == sorted(pa.id for pa in self.pas)
        provisional = {p["pa_id"]: p["provisional_id"] for p in feed}
        for pa in self.pas:
            assert provisional[pa.id] == (pa.ids[0] if len(pa.ids) > 1 else None)
            for pa_id in pa.ids:
                got = desk.get(f"/v1/pa/{pa_id}")
                assert got.status_code == 200 and got.get_json()["pa_id"] == pa.id, pa_id
                opened = desk.get(f"/v1/pa/{pa_id}/open")
                if pa.linked:
                    assert opened.status_code == 302 and pa.id in opened.headers["Location"]
                else:
                    assert opened.get_json()["error"]["code"] == "no_pa_url"


#: the session's sandbox, for the machine's desks (hypothesis builds the machine itself)
SANDBOX: list[Any] = []


def test_a_pas_life(sandbox: Any) -> None:
    SANDBOX[:] = [sandbox]
    run = settings(
        max_examples=30,
        stateful_step_count=20,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    run_state_machine_as_test(PaLife, settings=run)
