"""The commit behind the callback receiver: what a body says, committing it (callbacks
arriving together commit together), then what to answer.

200 only after the callback is committed; 503 when it cannot be, so the service
retries; authenticated bodies that are not the expected JSON are dead-lettered and
acknowledged. The receiver's 401s and 413s are counted (and the 401s logged without
flooding the journal); nothing is stored for them.

The body is the service's request object, wrapped (``{"request": {...}}``) or bare,
as the real service sends it (the product's real-service-evidence.md): values may be strings
where the type is a number or boolean, ``plan_outcome`` may be null, ``events`` is
``[]`` on a plain status change, there is no ``updated_at`` and no delivery id, and
fields we do not know are tolerated.

A callback moves a PA's current status only when it is newer: the ordering rule of
:mod:`pa_bridge.pa_rules` (decision 0005).

Every callback is still kept, once, in the PA's history in arrival order (with its
event time). The PA's links (``html_url``, ``tokens[].html_url``, ``pdf_url``) are kept
from every callback, so a PA first heard of in a callback can be opened.

A PA without a store gets one from the body's ``pharmacy`` block when it names a store
of ``[[pharmacies]]`` (its ``ncpdpid``, else its ``npi``), and a PA without a product id
gets ``prescription.ndc`` when that is an 11-digit NDC; neither is ever overwritten
(a submit's claim says it first, decision 0022).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ..jsonlimits import MAX_DEPTH, TooDeep, loads_bounded
from ..logs import log_event
from ..metrics import Metrics
from ..pa_rules import (
    FAX_FAILURES,
    PENDING_PREFIX,
    digits_key,
    fields_agree,
    is_newer,
    time_key,
)
from ..store import Database, Kind, Store, StoreUnavailable, expiry, now_iso, pa_history, pas
from ..store import callbacks as kept
from ..store.outbox import enqueue
from ..webhooks import change_payload
from .replies import internal_error_reply, unavailable_reply

__all__ = [
    "CallbackReceiver",
    "CallbackResult",
    "CallbackIntake",
    "CallbackShapeError",
    "ParsedCallback",
    "UnauthorizedLog",
    "merge_details",
    "merge_events",
    "merge_links",
    "parse_callback",
]


# ---- what a body says (pure) ---------------------------------------------------------
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
    #: html_url, pdf_url, token_urls (list): the PA's links, no PHI
    links: dict[str, Any] = field(default_factory=dict)
    #: payer, pharmacy and drug identifiers to match a PA submitted without an id
    match: dict[str, str] = field(default_factory=dict)
    #: what the console shows beyond the status (see ``_details``), no PHI
    details: dict[str, Any] = field(default_factory=dict)
    #: the pharmacy block's ``ncpdpid`` and ``npi`` (store ids, not a person's), in order
    pharmacy_ids: tuple[str, ...] = ()
    #: ``prescription.ndc`` when it is an 11-digit NDC (hyphens dropped), else None
    ndc: str | None = None


def _text(value: Any) -> str | None:
    """A scalar as the service's string (numbers and booleans may come either way)."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip()
    return text or None


def _url(value: Any) -> str | None:
    text = _text(value)
    return text if text and text.lower().startswith(("http://", "https://")) else None


def _links(req: dict[str, Any]) -> dict[str, Any]:
    links: dict[str, Any] = {}
    for key in ("html_url", "pdf_url"):
        url = _url(req.get(key))
        if url:
            links[key] = url
    tokens = req.get("tokens")
    token_urls = []
    if isinstance(tokens, list):
        for t in tokens:
            if isinstance(t, dict):
                url = _url(t.get("html_url"))
                if url:
                    token_urls.append(url)
    if token_urls:
        links["token_urls"] = token_urls
    return links


def _details(req: dict[str, Any]) -> dict[str, Any]:
    """The approval period, the drug's name and strength, and ePA or classic: what the
    console shows beyond the status. Never the patient, prescriber or pharmacy."""
    out: dict[str, Any] = {}
    period = req.get("authorization_period")
    if isinstance(period, dict):
        for key in ("effective_date", "expiration_date"):
            v = _text(period.get(key))
            if v:
                out[key] = v[:40]
    rx = req.get("prescription")
    if isinstance(rx, dict):
        for key, name in (("name", "drug_name"), ("strength", "drug_strength")):
            v = _text(rx.get(key))
            if v:
                out[name] = v[:200]
    epa = _text(req.get("is_epa"))
    if epa in ("true", "false"):
        out["is_epa"] = epa == "true"
    out.update(_renewal(req))
    return out


def _renewal(req: dict[str, Any]) -> dict[str, Any]:
    """``is_renewal``, the PA this one renews (``associated_requests``'
    ``request_being_renewed``) and its renewals' ids, when the body says (issue 28)."""
    out: dict[str, Any] = {}
    flag = (_text(req.get("is_renewal")) or "").lower()
    if flag in ("true", "1", "false", "0"):
        out["is_renewal"] = flag in ("true", "1")
    assoc = req.get("associated_requests")
    if not isinstance(assoc, dict):
        return out
    being = assoc.get("request_being_renewed")
    of = _text(being.get("id")) if isinstance(being, dict) else None
    if of:
        out["renewal_of"] = of[:64]
    renewals = assoc.get("renewals")
    if isinstance(renewals, list):
        ids = [i[:64] for r in renewals if isinstance(r, dict) and (i := _text(r.get("id")))]
        if ids:
            out["renewals"] = ids[:20]
    return out


def _stored_object(text: str | None) -> dict[str, Any]:
    """A JSON object stored in a column, or ``{}`` for nothing or anything else."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


#: Details that go together: a callback that carries one of a block's keys replaces
#: the whole block, so a drug's name never meets another callback's strength, nor an
#: approval's end another approval's start (issue 26).
_DETAIL_BLOCKS = (
    ("drug_name", "drug_strength"),
    ("effective_date", "expiration_date"),
)


def merge_details(old_json: str | None, new: dict[str, Any]) -> str:
    """The PA's details with the newest callback's over the older ones, block by block
    (:data:`_DETAIL_BLOCKS`): a block the callback carries is taken as a whole."""
    merged = _stored_object(old_json)
    for block in _DETAIL_BLOCKS:
        if any(k in new for k in block):
            for k in block:
                merged.pop(k, None)
    merged.update(new)
    return json.dumps(merged)


def _callback_match(req: dict[str, Any], ids: tuple[str, ...]) -> dict[str, str]:
    """What a callback says about the claim behind it (no PHI): BIN, PCN, group,
    pharmacy id (``ids``: :func:`_pharmacy_ids`), NDC, Rx number, when it carries them."""
    out: dict[str, str] = {}

    def block(name: str) -> dict[str, Any]:
        value = req.get(name)
        return value if isinstance(value, dict) else {}

    payer, rx = block("payer"), block("prescription")
    for key in ("bin", "pcn", "group_id"):
        v = _text(payer.get(key))
        if v:
            out[key] = v.upper()
    if ids:  # the claim's 201-B1 may be either: its NCPDP id or its NPI
        out["provider"] = ids[0]
    if len(ids) > 1:
        out["provider_alt"] = ids[1]
    ndc = _text(rx.get("ndc"))
    if not ndc:
        drug = _text(rx.get("drug_id")) or ""
        ndc = drug if len(drug) == 11 and drug.isdigit() else None  # else a 6-digit ddid
    if ndc:
        out["ndc"] = ndc
    ref = _text(rx.get("prescription_reference"))
    if ref:
        out["rx"] = digits_key(ref)
    return out


def _pharmacy_ids(req: dict[str, Any]) -> tuple[str, ...]:
    """The pharmacy block's NCPDP id, then its NPI: the candidates for its store."""
    block = req.get("pharmacy")
    if not isinstance(block, dict):
        return ()
    found: list[str] = []
    for key in ("ncpdpid", "npi"):
        value = block.get(key)
        v = None if isinstance(value, bool) else _text(value)
        if v and v not in found:
            found.append(v)
    return tuple(found)


def _ndc11(req: dict[str, Any]) -> str | None:
    """``prescription.ndc`` as the claim's 407-D7 would have it: 11 digits (an NDC
    written 5-4-2 with hyphens is the same code). ``drug_id`` is not read: the real
    service sends a 6-digit drug id there (the product's real-service-evidence.md)."""
    rx = req.get("prescription")
    if not isinstance(rx, dict) or isinstance(rx.get("ndc"), bool):
        return None
    ndc = (_text(rx.get("ndc")) or "").replace("-", "")
    return ndc if len(ndc) == 11 and ndc.isdigit() and ndc.isascii() else None


def merge_links(old_json: str | None, new: dict[str, Any]) -> dict[str, Any]:
    """The PA's links: the newest html_url and pdf_url, every token link seen."""
    merged = _stored_object(old_json)
    for key in ("html_url", "pdf_url"):
        if new.get(key):
            merged[key] = new[key]
    tokens = list(merged.get("token_urls") or [])
    for url in new.get("token_urls") or []:
        if url not in tokens:
            tokens.append(url)
    if tokens:
        merged["token_urls"] = tokens
    return merged


def parse_callback(body: bytes) -> ParsedCallback:
    try:
        doc = loads_bounded(body)
    except TooDeep:
        # a callback is a few levels deep; a thousand would fail the decoder and with
        # it the whole commit batch: kept as a dead letter instead (issue 19)
        raise CallbackShapeError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CallbackShapeError("not JSON") from None
    if not isinstance(doc, dict):
        raise CallbackShapeError("not a JSON object")
    req = doc.get("request", doc)
    if not isinstance(req, dict):
        raise CallbackShapeError("'request' is not an object")
    pa_id = _text(req.get("id"))
    if pa_id is None or isinstance(req.get("id"), bool):
        raise CallbackShapeError("no PA id")
    for key in ("workflow_status", "plan_outcome"):
        if isinstance(req.get(key), dict | list):
            raise CallbackShapeError(f"{key} is not a string")
    status = _text(req.get("workflow_status"))
    outcome = _text(req.get("plan_outcome"))
    if outcome is not None and outcome.lower() == "null":
        outcome = None
    raw_events = req.get("events") or []
    if not isinstance(raw_events, list):
        raise CallbackShapeError("events is not a list")
    events = []
    for e in raw_events:
        if isinstance(e, dict) and _text(e.get("type")):
            # keep type and time only: remote_user may name a person
            events.append({"type": _text(e.get("type")), "time": _text(e.get("time"))})
    timed = [(tk, e["time"]) for e in events if (tk := time_key(e["time"])) is not None]
    updated = _text(req.get("updated_at"))
    if time_key(updated) is None:
        updated = None
    event_time = updated or (max(timed)[1] if timed else None)
    delivery = doc.get("delivery_id") or req.get("delivery_id")
    if isinstance(delivery, str | int) and not isinstance(delivery, bool) and str(delivery):
        key = f"delivery:{delivery}"
    else:
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        key = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    pharmacy_ids = _pharmacy_ids(req)
    return ParsedCallback(
        pa_id,
        status,
        outcome,
        event_time,
        events,
        key,
        _links(req),
        _callback_match(req, pharmacy_ids),
        _details(req),
        pharmacy_ids,
        _ndc11(req),
    )


def merge_events(old_json: str | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PA's events with the new ones not seen before (by type and time)."""
    old = json.loads(old_json) if old_json else []
    seen = {(e.get("type"), e.get("time")) for e in old}
    merged = list(old)
    for e in new:
        k = (e.get("type"), e.get("time"))
        if k not in seen:
            seen.add(k)
            merged.append(e)
    return merged


#: what a PA's status is made of: a difference here is a change a callback carried
_STATUS_COLS = ("workflow_status", "plan_outcome", "status_time", "deleted", "fax_failed")


def _same_state(
    new: pas.CallbackState, old: pas.CallbackState, cols: tuple[str, ...] = pas.STATE_COLS
) -> bool:
    """Whether merging changed nothing of ``cols`` of the PA (JSON columns compared as
    values; ``details_json`` None is "nothing new")."""
    a, b = cast(dict[str, Any], new), cast(dict[str, Any], old)
    for key in cols:
        if key.endswith("_json"):
            if (key != "details_json" or a[key] is not None) and _stored_json(
                a[key]
            ) != _stored_json(b[key]):
                return False
        elif a[key] != b[key]:
            return False
    return True


def _stored_json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


# ---- the commit ---------------------------------------------------------------------
@dataclass(frozen=True)
class CallbackResult:
    #: stored, duplicate, dead_letter; reconciliation: changed, completed, unchanged,
    #: unknown, invalid
    outcome: str
    pa_id: str | None = None


class CallbackIntake:
    """Commits callbacks: dedupe, the PA's history, the ordering rule, links, dead
    letters, and the webhook's queue item in the same transaction when forwarding.

    ``pharmacies``: the provider ids of ``[[pharmacies]]`` (the composition root passes
    them; none for a single store). A PA without a store takes the one its callback's
    pharmacy block names, when it is one of these."""

    def __init__(
        self,
        store: Store,
        *,
        forward: bool,
        commit_timeout_s: float = 5.0,
        pharmacies: Iterable[str] = (),
    ) -> None:
        self.store = store
        self.forward = forward
        self.commit_timeout_s = commit_timeout_s
        self.pharmacies = frozenset(p.strip() for p in pharmacies)

    def pharmacy_of(self, cb: ParsedCallback) -> str | None:
        """The configured store the callback's pharmacy block names (NCPDP id first),
        or None: no ``[[pharmacies]]`` (a single store: nothing filters by store), no
        block, or a store this deployment does not list."""
        return next((p for p in cb.pharmacy_ids if p in self.pharmacies), None)

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
        outcomes = self._commit(jobs, parsed, items)
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

    def reconcile_many(self, bodies: list[bytes]) -> list[CallbackResult]:
        """Apply request objects read back from the service's requests resource
        (reconciliation, issue 28) exactly as their callbacks would have been: the
        same merge, ordering rule and webhook, the history entry's source
        ``reconcile``; but only where the PA changes (``changed``: its status or
        events, what a lost callback carried; ``completed``: only what callbacks may
        lack, the approval period or links; else ``unchanged``), and never for a PA we
        do not hold (``unknown``). One commit
        for the lot; raises what kept it from committing (StoreUnavailable). A body
        that is not a request object is ``invalid``, and nothing is kept of it."""
        parsed: list[ParsedCallback | None] = []
        for body in bodies:
            try:
                parsed.append(parse_callback(body))
            except CallbackShapeError:
                parsed.append(None)

        def job(db: Database) -> list[CallbackResult]:
            now = now_iso()
            out = []
            for cb in parsed:
                if cb is None:
                    out.append(CallbackResult("invalid"))
                    continue
                # the feed position first, as for a callback: on PostgreSQL the PA's
                # state is then read after every change committed before (decision 0021)
                seq = self.store.next_seq(db)
                row = pas.callback_state(db, cb.pa_id)
                if row is None:
                    out.append(CallbackResult("unknown", cb.pa_id))
                    continue
                result, _state = self._merge(
                    db, cb, row, now, seq, source="reconcile", only_if_changed=True
                )
                out.append(result)
            return out

        if not any(parsed):
            return [CallbackResult("invalid") for _ in parsed]
        results: list[CallbackResult] = self.store.write(job, timeout=self.commit_timeout_s)
        return results

    def _commit(
        self,
        jobs: list[Callable[[Database], CallbackResult]],
        parsed: list[ParsedCallback | str],
        items: list[tuple[bytes, str | None]],
    ) -> list[tuple[bool, Any]]:
        """Commit the jobs: the callbacks among them as one job (one statement keeps
        them all, decision 0027), or, if that job fails for a reason of its own (a bad
        callback), each on its own, so the others are stored all the same."""
        many = [
            (cb, body)
            for cb, (body, _) in zip(parsed, items, strict=True)
            if not isinstance(cb, str)
        ]
        if len(many) < 2:
            return self.store.write_all(jobs, timeout=self.commit_timeout_s)
        others = [job for job, cb in zip(jobs, parsed, strict=True) if isinstance(cb, str)]
        first = self.store.write_all(
            [lambda db: self._apply_many(db, many), *others], timeout=self.commit_timeout_s
        )
        (ok, value), rest = first[0], iter(first[1:])
        if ok:
            results = iter(value)
        elif isinstance(value, StoreUnavailable):  # none of them is stored: 503 each
            results = iter([value] * len(many))
        else:  # a bug in one callback: each on its own, so only that one fails
            alone = [job for job, cb in zip(jobs, parsed, strict=True) if not isinstance(cb, str)]
            results = iter(self.store.write_all(alone, timeout=self.commit_timeout_s))
            return [next(rest) if isinstance(cb, str) else next(results) for cb in parsed]
        return [next(rest) if isinstance(cb, str) else (ok, next(results)) for cb in parsed]

    def _apply_job(self, cb: ParsedCallback, body: bytes) -> Callable[[Database], CallbackResult]:
        return lambda db: self._apply_many(db, [(cb, body)])[0]

    @staticmethod
    def _dead_letter_job(
        body: bytes, content_type: str | None, reason: str
    ) -> Callable[[Database], CallbackResult]:
        def job(db: Database) -> CallbackResult:
            kept.add_dead_letter(db, now_iso(), reason, (content_type or "")[:200], body)
            return CallbackResult("dead_letter")

        return job

    @staticmethod
    def _claim_placeholder(db: Database, cb: ParsedCallback) -> str | None:
        """The one PA we submitted whose answer named no PA (the empty format) and that
        this callback's identifiers agree with; None when there is none or several."""
        if not cb.match.get("bin"):
            return None
        found = []
        for pid, links_json in pas.awaiting_placeholders(db, PENDING_PREFIX):
            try:
                awaiting = json.loads(links_json or "{}").get("awaiting") or {}
            except (ValueError, AttributeError):
                continue
            if fields_agree(cb.match, awaiting):
                found.append(pid)
        return found[0] if len(found) == 1 else None

    def _apply_many(
        self, db: Database, cbs: list[tuple[ParsedCallback, bytes]]
    ) -> list[CallbackResult]:
        """Apply callbacks in one job (one is a list of one): their bodies kept and
        their PAs read in one statement (PostgreSQL), each then merged in order; a PA
        named twice merges its second callback with what the first one made of it."""
        now = now_iso()
        # The feed positions first: on PostgreSQL the first one takes the lock every PA
        # change takes, so taking it before the dedupe keys (whose insert waits for
        # another daemon's insert of the same key) keeps one lock order across daemons,
        # and no deadlock (decision 0021). A duplicate leaves a gap in the positions,
        # which is harmless.
        seqs = [self.store.next_seq(db) for _ in cbs]
        keeps = kept.keep_and_read_many(db, [(cb.dedupe_key, now, cb.pa_id, b) for cb, b in cbs])
        made: dict[str, pas.CallbackState | None] = {}
        out = []
        for (cb, _body), seq, (stored, row) in zip(cbs, seqs, keeps, strict=True):
            if not stored:
                out.append(CallbackResult("duplicate", cb.pa_id))
                continue
            result, made[cb.pa_id] = self._merge(db, cb, made.get(cb.pa_id, row), now, seq)
            out.append(result)
        return out

    @staticmethod
    def _reconciled_already(
        db: Database, cb: ParsedCallback, state: pas.CallbackState, row: pas.CallbackState
    ) -> bool:
        """Whether this callback is the late delivery of the change reconciliation
        already applied: it changes nothing of the PA, and the PA's newest history entry
        is that read back, at the same status and outcome. It is kept (its body is), but
        it adds no second history entry and no second webhook for the one change."""
        if not _same_state(state, row):
            return False
        last = pa_history.latest(db, cb.pa_id)
        return (
            last is not None
            and last["source"] == "reconcile"
            and (last["workflow_status"], last["plan_outcome"])
            == (cb.workflow_status, cb.plan_outcome)
        )

    def _merge(
        self,
        db: Database,
        cb: ParsedCallback,
        row: pas.CallbackState | None,
        now: str,
        seq: int,
        *,
        source: str = "callback",
        only_if_changed: bool = False,
    ) -> tuple[CallbackResult, pas.CallbackState]:
        """Merge a kept callback with its PA's state ``row`` and write the PA; the
        result and the PA's state now. ``source``: what the history entry and the
        webhook say made the change (``reconcile``: a read back from the service);
        ``only_if_changed``: a body that changes nothing of the PA is not applied
        (result ``unchanged``), as a reconciliation read usually is.

        What the pharmacist sees (decision 0014): a fax failure is the PA's latest news
        when its callback is not older than the PA's current status (the ordering
        rule), until a later callback moves the status; ``news_seq`` moves to this
        change's position when the current status or outcome changes, an event not
        seen before arrives, or the PA is new. A change reconciliation finds is news
        the same way (it comes through here)."""
        note = None
        if row is None:
            placeholder = self._claim_placeholder(db, cb)
            if placeholder is not None:  # the PA we submitted without an id: it is this one
                pas.rename(db, placeholder, cb.pa_id)
                row = pas.callback_state(db, cb.pa_id)
                note = f"matched to the submit recorded as {placeholder}"
        new_events = "[]"
        fresh: list[dict[str, Any]] = []  # events not seen before on this PA
        if cb.events:
            new_events = json.dumps(cb.events)
            old_events = row["events_json"] if row else None
            merged = merge_events(old_events, cb.events)
            fresh = merged[len(json.loads(old_events) if old_events else []) :]
            events_json: str | None = json.dumps(merged)
            deleted = int(any(e["type"] == "DELETE" for e in merged))
            fax_failed = int(any(e["type"] in FAX_FAILURES for e in merged))
        elif row is not None:
            events_json, deleted, fax_failed = row["events_json"], row["deleted"], row["fax_failed"]
        else:
            events_json, deleted, fax_failed = "[]", 0, 0
        links_json: str | None
        urls_json: str | None
        if cb.links or note or (row is None and cb.match):
            links = merge_links(row["links_json"] if row else None, cb.links)
            if row is None and cb.match:
                links["match"] = cb.match  # for a submit whose answer comes after this
            links.pop("awaiting", None)
            urls = json.loads(row["urls_json"] or "[]") if row else []
            for url in links.get("token_urls") or []:
                if url not in urls:
                    urls.append(url)
            links_json, urls_json = json.dumps(links), json.dumps(urls)
        else:  # nothing to merge (the hot path of a body without links)
            links_json, urls_json = (row["links_json"], row["urls_json"]) if row else ("{}", "[]")
        details_json = (
            merge_details(row["details_json"] if row else None, cb.details) if cb.details else None
        )
        # the current status moves only for a newer callback (decision 0005)
        status = (cb.workflow_status, cb.plan_outcome, cb.event_time)
        # ``current``: the callback is not older than the PA's status (one without a
        # status stands at the PA's place, ordered by its events' time)
        current, moved = True, True
        if row is not None:
            was = (row["status_time"], row["workflow_status"], row["plan_outcome"])
            place = (cb.workflow_status, cb.plan_outcome) if cb.workflow_status else was[1:]
            current = is_newer((cb.event_time, *place), was)
            if not (cb.workflow_status is not None and current):
                status = (row["workflow_status"], row["plan_outcome"], row["status_time"])
            moved = status[:2] != was[1:]
        # a fax failure is the latest news unless its callback is older than the PA's
        # status; a later status supersedes it (decision 0014)
        if current and any(e["type"] in FAX_FAILURES for e in fresh):
            fax_latest = 1
        elif moved or row is None:
            fax_latest = 0
        else:
            fax_latest = row["fax_failed_latest"]
        # archiving a decided PA keeps its outcome: nothing new for the pharmacist
        archived = (
            row is not None
            and status[0] == "Archived"
            and status[1] is not None
            and status[1] == row["plan_outcome"]
        )
        news = (moved and not archived) or bool(fresh)
        state: pas.CallbackState = {
            "workflow_status": status[0],
            "plan_outcome": status[1],
            "status_time": status[2],
            "events_json": events_json,
            "deleted": deleted,
            "fax_failed": fax_failed,
            "links_json": links_json,
            "urls_json": urls_json,
            "details_json": details_json,  # None: keep what the PA has
            "fax_failed_latest": fax_latest,
            "news_seq": seq if news or row is None else row["news_seq"],
        }
        outcome = "stored"
        if not only_if_changed and row is not None and self._reconciled_already(db, cb, state, row):
            return CallbackResult(outcome, cb.pa_id), row
        if only_if_changed and row is not None:
            if _same_state(state, row):
                return CallbackResult("unchanged", cb.pa_id), row
            # only what a callback may lack (the period, links): completed, not missed
            same = _same_state(state, row, (*_STATUS_COLS, "events_json"))
            outcome = "completed" if same else "changed"
        # a PA we did not start (or whose submit we have not stored): kept all the same
        record = pas.insert_from_callback if row is None else pas.update_from_callback
        # the store and the NDC only where the PA has none (never over a submit's)
        record(
            db,
            cb.pa_id,
            state,
            now=now,
            seq=seq,
            provider_id=self.pharmacy_of(cb),
            product_id=cb.ndc,
        )
        if cb.details:  # the approval's end and the renewal links (issue 28)
            expiry.record_facts(
                db,
                cb.pa_id,
                expires_at=expiry.expiry_date(cb.details.get("expiration_date")),
                renewal_of=cb.details.get("renewal_of"),
                renewals=cb.details.get("renewals") or [],
            )
        if details_json is None:
            state = {**state, "details_json": row["details_json"] if row else "{}"}
        pa_history.add(
            db,
            cb.pa_id,
            now,
            source,
            workflow_status=cb.workflow_status,
            plan_outcome=cb.plan_outcome,
            event_time=cb.event_time,
            events_json=new_events,
            note=note,
        )
        if self.forward:  # the change itself, not the PA at delivery (decision 0018)
            change = {
                "source": source,
                "workflow_status": cb.workflow_status,
                "plan_outcome": cb.plan_outcome,
                "event_time": cb.event_time,
                "events": cb.events,
            }
            after = {
                "workflow_status": status[0],
                "plan_outcome": status[1],
                "deleted": deleted,
                "fax_failed": fax_failed,
                "events_json": events_json,
            }
            enqueue(db, Kind.WEBHOOK, change_payload(cb.pa_id, seq, now, change, after))
        return CallbackResult(outcome, cb.pa_id), state


# ---- the answers -------------------------------------------------------------------
class UnauthorizedLog:
    """Unauthenticated callback attempts, logged without flooding the journal (issue 19):
    the first of a spell is logged (``callback.unauthorized``, with its address); the
    others in the next ``interval_s`` are summed into one line when it ends
    (``callback.unauthorized_repeated``: ``count``, up to ten ``remotes``). The metric
    ``pa_bridge_callbacks_total{result="unauthorized"}`` counts every attempt."""

    MAX_REMOTES = 10

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._count = 0
        self._remotes: set[str] = set()

    def attempt(self, remote: str) -> None:
        with self._lock:
            if self._timer is not None:  # within a spell: summed
                self._count += 1
                if len(self._remotes) < self.MAX_REMOTES:
                    self._remotes.add(remote)
                return
            self._timer = threading.Timer(self.interval_s, self.flush)
            self._timer.name = "callbacks-unauthorized-log"
            self._timer.daemon = True
            self._timer.start()
        log_event("callback.unauthorized", level=logging.WARNING, remote=remote)

    def flush(self) -> None:
        """End the spell: log its sum, if any (at the interval's end, and at stop)."""
        with self._lock:
            timer, count, remotes = self._timer, self._count, sorted(self._remotes)
            self._timer, self._count, self._remotes = None, 0, set()
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if count:
            log_event(
                "callback.unauthorized_repeated",
                level=logging.WARNING,
                count=count,
                remotes=remotes,
                seconds=self.interval_s,
            )


class CallbackReceiver:
    """The receiver's :class:`~.receiver.Sink` in the daemon: commits each callback and
    says what to answer, after the commit; counts and logs the 401s and 413s.
    ``on_stored`` is called after a commit that stored a callback when the intake
    forwards them (the queue's wake-up)."""

    def __init__(
        self,
        intake: CallbackIntake,
        metrics: Metrics,
        *,
        on_stored: Callable[[], None] | None = None,
        unauthorized_log: UnauthorizedLog | None = None,
    ) -> None:
        self.intake = intake
        self.metrics = metrics
        self.on_stored = on_stored
        self.unauthorized_log = unauthorized_log or UnauthorizedLog()
        self._counters: dict[str, Any] = {}

    def _count(self, outcome: str) -> None:
        counter = self._counters.get(outcome)
        if counter is None:
            counter = self._counters[outcome] = self.metrics.callbacks.labels(outcome)
        counter.inc()

    def _reply(self, result: CallbackResult | BaseException) -> tuple[int, bytes]:
        if isinstance(result, StoreUnavailable):
            self._count("unavailable")
            log_event("callback.not_committed", level=logging.ERROR, error=str(result))
            return unavailable_reply()
        if isinstance(result, BaseException):  # a bug: this callback alone gets a 500
            log_event("callback.error", level=logging.ERROR, error=type(result).__name__)
            return internal_error_reply()
        self._count(result.outcome)
        return 200, json.dumps({"status": result.outcome, "pa_id": result.pa_id}).encode()

    def receive(self, body: bytes, content_type: str | None) -> tuple[int, bytes]:
        """Commit one callback (those that arrive together commit together: the store's
        writer takes every job waiting in one transaction); what to answer, after the
        commit."""
        (result,) = self.intake.receive_many([(body, content_type)])
        reply = self._reply(result)
        stored = isinstance(result, CallbackResult) and result.outcome == "stored"
        if stored and self.intake.forward and self.on_stored is not None:
            self.on_stored()
        return reply

    def unauthorized(self, remote: str) -> None:
        """A request without the right credentials (answered 401; nothing stored)."""
        self._count("unauthorized")
        self.unauthorized_log.attempt(remote)

    def too_large(self) -> None:
        """A body over ``callbacks.max_body_bytes`` (answered 413; nothing stored)."""
        self._count("too_large")
