"""Pharmacy callbacks: store first, acknowledge after the commit, apply in order.

The ordering rule (also in the README): a callback moves a PA's *current* status only
when it is newer. Newer means, in this order:

1. a later event time (the body's ``updated_at``, else the latest ``events[].time``),
   when both the current status and the callback have one and they differ;
2. otherwise a later place in the workflow (New < PA Request < PA Response < ...,
   see ``WORKFLOW_RANK``);
3. otherwise a more final outcome (null < Pending < a determination).

Every callback is still kept, once, in the PA's history in arrival order (with its
event time, so the history can also be read in event order).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .logs import log_event
from .outbox import enqueue
from .store import Database, Store, now_iso

__all__ = [
    "WORKFLOW_RANK",
    "CallbackResult",
    "CallbackService",
    "parse_callback",
    "is_newer",
    "CallbackShapeError",
]

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


def is_newer(
    new: tuple[str | None, str | None, str | None],
    current: tuple[str | None, str | None, str | None],
) -> bool:
    """(event_time, workflow_status, plan_outcome) of a callback vs the PA's current."""
    nt, ns, no = new
    ct, cs, co = current
    if cs is None:
        return True
    if nt and ct and nt != ct:
        return nt > ct
    nr, cr = WORKFLOW_RANK.get(ns or "", 0), WORKFLOW_RANK.get(cs or "", 0)
    if nr != cr:
        return nr > cr
    return _outcome_rank(no) > _outcome_rank(co)


class CallbackShapeError(ValueError):
    """Authenticated body that is not the expected JSON: goes to the dead letters."""


@dataclass(frozen=True)
class ParsedCallback:
    pa_id: str
    workflow_status: str | None
    plan_outcome: str | None
    event_time: str | None
    events: list[dict[str, Any]]
    dedupe_key: str


def parse_callback(body: bytes) -> ParsedCallback:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise CallbackShapeError("not JSON") from None
    if not isinstance(doc, dict):
        raise CallbackShapeError("not a JSON object")
    req = doc.get("request", doc)
    if not isinstance(req, dict):
        raise CallbackShapeError("'request' is not an object")
    pa_id = req.get("id")
    if not isinstance(pa_id, str | int) or isinstance(pa_id, bool) or str(pa_id) == "":
        raise CallbackShapeError("no PA id")
    status = req.get("workflow_status")
    outcome = req.get("plan_outcome")
    if status is not None and not isinstance(status, str):
        raise CallbackShapeError("workflow_status is not a string")
    if outcome is not None and not isinstance(outcome, str):
        raise CallbackShapeError("plan_outcome is not a string")
    raw_events = req.get("events") or []
    if not isinstance(raw_events, list):
        raise CallbackShapeError("events is not a list")
    events = []
    for e in raw_events:
        if isinstance(e, dict) and isinstance(e.get("type"), str):
            # keep type and time only: remote_user may name a person
            events.append(
                {
                    "type": e["type"],
                    "time": e.get("time") if isinstance(e.get("time"), str) else None,
                }
            )
    times = [e["time"] for e in events if e["time"]]
    updated = req.get("updated_at")
    event_time = (
        updated if isinstance(updated, str) and updated else (max(times) if times else None)
    )
    delivery = doc.get("delivery_id") or req.get("delivery_id")
    if isinstance(delivery, str | int) and not isinstance(delivery, bool) and str(delivery):
        key = f"delivery:{delivery}"
    else:
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        key = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return ParsedCallback(str(pa_id), status, outcome, event_time, events, key)


@dataclass(frozen=True)
class CallbackResult:
    outcome: str  # stored, duplicate, dead_letter
    pa_id: str | None = None


def _merge_events(old_json: str | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    old = json.loads(old_json) if old_json else []
    seen = {(e.get("type"), e.get("time")) for e in old}
    merged = list(old)
    for e in new:
        k = (e.get("type"), e.get("time"))
        if k not in seen:
            seen.add(k)
            merged.append(e)
    return merged


class CallbackService:
    def __init__(self, store: Store, *, forward: bool, commit_timeout_s: float = 5.0) -> None:
        self.store = store
        self.forward = forward
        self.commit_timeout_s = commit_timeout_s

    def receive_many(
        self, items: list[tuple[bytes, str | None]]
    ) -> list[CallbackResult | BaseException]:
        """Commit every callback (or dead letter) in ``items`` together, one commit for
        the lot. Per item: its result, or the exception that kept it from being
        committed (StoreUnavailable when the database cannot take it)."""
        jobs: list[Callable[[Database], CallbackResult]] = []
        parsed: list[ParsedCallback | str] = []
        for body, content_type in items:
            try:
                cb = parse_callback(body)
            except CallbackShapeError as e:
                jobs.append(self._dead_letter_job(body, content_type, str(e)))
                parsed.append(str(e))
                continue
            jobs.append(self._apply_job(cb, body))
            parsed.append(cb)
        outcomes = self.store.write_all(jobs, timeout=self.commit_timeout_s)
        results: list[CallbackResult | BaseException] = []
        for (ok, value), cb_or_reason, (body, _) in zip(outcomes, parsed, items, strict=True):
            results.append(value)
            if not ok:
                continue
            if isinstance(cb_or_reason, str):
                log_event(
                    "callback.dead_letter",
                    level=logging.WARNING,
                    reason=cb_or_reason,
                    size=len(body),
                )
            else:
                log_event(
                    "callback.received",
                    pa_id=value.pa_id,
                    result=value.outcome,
                    workflow_status=cb_or_reason.workflow_status,
                )
        return results

    def _apply_job(self, cb: ParsedCallback, body: bytes) -> Callable[[Database], CallbackResult]:
        return lambda db: self._apply(db, cb, body)

    @staticmethod
    def _dead_letter_job(
        body: bytes, content_type: str | None, reason: str
    ) -> Callable[[Database], CallbackResult]:
        def job(db: Database) -> CallbackResult:
            db.execute(
                "INSERT INTO dead_letters (received_at, reason, content_type, body) VALUES (?, ?, ?, ?)",
                [now_iso(), reason, (content_type or "")[:200], body],
            )
            return CallbackResult("dead_letter")

        return job

    def _apply(self, db: Database, cb: ParsedCallback, body: bytes) -> CallbackResult:
        conn = db.conn  # the hot path: plain sqlite3 calls, few statements
        now = now_iso()
        cur = conn.execute(
            "INSERT OR IGNORE INTO callbacks (dedupe_key, received_at, pa_id, body) VALUES (?, ?, ?, ?)",
            (cb.dedupe_key, now, cb.pa_id, body),
        )
        if cur.rowcount == 0:
            return CallbackResult("duplicate", cb.pa_id)
        seq = self.store.next_seq(db)
        row = conn.execute(
            "SELECT workflow_status, plan_outcome, status_time, events_json, deleted, fax_failed"
            " FROM pas WHERE id = ?",
            (cb.pa_id,),
        ).fetchone()
        new_events = "[]"
        if cb.events:
            new_events = json.dumps(cb.events)
            merged = _merge_events(row[3] if row else None, cb.events)
            events_json = json.dumps(merged)
            deleted = int(any(e["type"] == "DELETE" for e in merged))
            fax_failed = int(
                any(e["type"] in ("REQUEST_FAX_FAILED", "REQUEST_FAX_FAILURE") for e in merged)
            )
        elif row is not None:
            events_json, deleted, fax_failed = row[3], row[4], row[5]
        else:
            events_json, deleted, fax_failed = "[]", 0, 0
        if row is None:  # a PA we did not start (or whose submit we have not stored): keep it
            conn.execute(
                "INSERT INTO pas (id, urls_json, workflow_status, plan_outcome, status_time, deleted, matched,"
                " created_at, updated_at, change_seq, events_json, fax_failed)"
                " VALUES (?, '[]', ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
                (cb.pa_id, cb.workflow_status, cb.plan_outcome, cb.event_time, deleted, now, now, seq,
                 events_json, fax_failed),
            )  # fmt: skip
        else:
            newer = cb.workflow_status is not None and is_newer(
                (cb.event_time, cb.workflow_status, cb.plan_outcome), (row[2], row[0], row[1])
            )
            status = (
                (cb.workflow_status, cb.plan_outcome, cb.event_time)
                if newer
                else (row[0], row[1], row[2])
            )
            conn.execute(
                "UPDATE pas SET workflow_status = ?, plan_outcome = ?, status_time = ?, events_json = ?,"
                " deleted = ?, fax_failed = ?, updated_at = ?, change_seq = ? WHERE id = ?",
                (*status, events_json, deleted, fax_failed, now, seq, cb.pa_id),
            )
        conn.execute(
            "INSERT INTO pa_history (pa_id, received_at, source, workflow_status, plan_outcome, event_time,"
            " events_json) VALUES (?, ?, 'callback', ?, ?, ?, ?)",
            (cb.pa_id, now, cb.workflow_status, cb.plan_outcome, cb.event_time, new_events),
        )
        if self.forward:
            enqueue(db, "webhook", {"pa_id": cb.pa_id, "change_seq": seq})
        return CallbackResult("stored", cb.pa_id)
