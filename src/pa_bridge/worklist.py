"""The pharmacist's worklist: today's claims rejected for PA and the PAs, with no Flask.

What the console page shows, read from the store. It carries only what the pharmacist
needs to act: Rx number, product id, reject codes, the replacement message and button
label, PA status. Never a patient name, date of birth or cardholder id.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import ncpdp

from .client import pa_id_from_url
from .pa_guide import GROUPS, Guide, guide, guide_table, overdue_step
from .service import UseCases
from .service.decisions import claim_key
from .service.errors import InvalidRequest, NotFound, Unavailable
from .service.expiry import EXPIRING_GUIDE, days_left, is_expiring, reminder_due, window
from .service.pas import pa_json
from .service.pharmacies import Scope, in_scope
from .store import StoreUnavailable, exchanges, expiry, now_iso
from .store import console as console_store
from .store import pas as pa_rows

__all__ = [
    "local_day_start",
    "rx_lines",
    "claim_keys",
    "attention_of",
    "on_worklist",
    "state_group",
    "TIME_RULES",
    "When",
    "claims_today",
    "pas_today",
    "needs_action",
    "worklist",
    "pa_page",
    "acknowledge",
    "pharmacy_choices",
]

#: At most this many rows of each kind (a busy store sees a few hundred claims a day).
MAX_ROWS = 500


def local_day_start(now: float) -> str:
    """Local midnight of the day ``now`` falls in, as a UTC ISO string (the stored format)."""
    local = dt.datetime.fromtimestamp(now).astimezone()
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return now_iso(midnight.timestamp())


def _rx(value: str | None) -> str | None:
    if value is None:
        return None
    return value.lstrip("0") or "0"


_Lines = tuple[tuple[str | None, str | None, str], ...]
#: claim id -> (Rx number, product id, claim key) per transaction. Keyed by id, holding
#: only those fields: no raw claim (PHI) is kept in memory past the query that read it.
_LINES: dict[str, _Lines] = {}
_LINES_MAX = 4096
_LINES_LOCK = threading.Lock()


def _parse_lines(raw: bytes) -> _Lines:
    try:
        parsed = ncpdp.parse(raw, strict=False)
        view = parsed.as_request()
        return tuple(
            (_rx(t.rx_number), t.product_id, claim_key(parsed, i))
            for i, t in enumerate(view.transactions)
        )
    except Exception:  # stored requests parsed once already; be safe anyway
        return ()


def rx_lines(claim_id: str | None, raw: bytes | None) -> list[dict[str, str | None]]:
    """Rx number and product id of each transaction of a stored request (empty once purged)."""
    with _LINES_LOCK:
        lines = _LINES.get(claim_id) if claim_id else None
    if lines is None:
        if not raw:
            return []
        lines = _parse_lines(bytes(raw))
        if claim_id:
            with _LINES_LOCK:
                if len(_LINES) >= _LINES_MAX:
                    _LINES.pop(next(iter(_LINES)))
                _LINES[claim_id] = lines
    return [{"rx_number": r, "product_id": p} for r, p, _k in lines]


def claim_keys(claim_id: str | None, raw: bytes | None) -> list[str]:
    """The claim key of each transaction (what the service's duplicate check uses)."""
    rx_lines(claim_id, raw)  # fills the cache
    with _LINES_LOCK:
        lines = _LINES.get(claim_id) if claim_id else None
    if lines is None:
        lines = _parse_lines(bytes(raw)) if raw else ()
    return [k for _r, _p, k in lines]


_CONSOLE_PA_FIELDS = (
    "pa_id", "claim_id", "transaction_index", "workflow_status", "plan_outcome", "deleted",
    "fax_failed", "open_url", "url", "created_at", "updated_at", "cursor", "provisional_id",
)  # fmt: skip


#: statuses after which nobody is waiting on the plan any more
_SETTLED = frozenset({"Archived", "Provider Cancel", "Cancel Request Sent"})


def _details(row: Mapping[str, Any]) -> dict[str, Any]:
    try:
        d = json.loads(row.get("details_json") or "{}")
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}


def _deleted(row: Mapping[str, Any]) -> bool:
    """A DELETE event, or the service no longer returns the PA (issue 28: ``gone``)."""
    return bool(row["deleted"]) or row.get("gone_at") is not None


def _words(row: Mapping[str, Any]) -> Guide:
    """The words for the PA's latest state: deleted (a DELETE event, or gone from the
    service), else a fax failure that is its latest news, else its current status
    (decision 0014)."""
    return guide(
        row["workflow_status"],
        row["plan_outcome"],
        deleted=_deleted(row),
        fax_failed=bool(row["fax_failed_latest"]),
    )


def state_group(row: Mapping[str, Any]) -> str | None:
    """The worklist group the PA's latest state puts it in, before the clock's rules."""
    return _words(row).attention


@dataclass(frozen=True)
class When:
    """What the clock's rules compare a PA with: now, and the stored times they need."""

    now: float
    #: a PA started at or before this (stored format) has waited too long for a decision
    pending_cutoff: str
    #: ``[worklist] expiring_days``; None: no "Expiring soon" (the caller did not ask)
    expiring_days: int | None = None


def _waiting_too_long(row: Mapping[str, Any], group: str | None, when: When) -> str | None:
    """No decision ``intake.pending_alert_hours`` after it was started."""
    if (
        group is None
        and row["workflow_status"] not in _SETTLED
        and (row["plan_outcome"] or "") != "Cancelled"
        and row["created_at"]
        and row["created_at"] <= when.pending_cutoff
    ):
        return "pending_too_long"
    return group


def _expiring(row: Mapping[str, Any], group: str | None, when: When) -> str | None:
    """An approval whose end comes within ``[worklist] expiring_days`` (or ended as
    long ago), with no renewal: "Expiring soon" (issue 28). An approval a renewal took
    over, or long over, needs nothing more. Never a deleted or gone PA
    (:func:`~pa_bridge.service.expiry.is_expiring`)."""
    days = when.expiring_days
    if group not in (None, "approved") or days is None or not row.get("expires_at"):
        return group
    if is_expiring(row, when.now, days):
        return "expiring"
    left = days_left(row, when.now)
    if group == "approved" and (row.get("renewed_by") or (left is not None and left < -days)):
        return None  # a renewal took over, or the approval is long over
    return group


#: The rules the clock adds, in order, after the state's group: each takes the PA, its
#: group so far and the time, and answers its group (the same one when it does not
#: apply). A group that comes with time (an approval about to lapse) is a rule here
#: and a :data:`pa_guide.GROUPS` entry; nothing else changes (decision 0014).
TIME_RULES: tuple[Callable[[Mapping[str, Any], str | None, When], str | None], ...] = (
    _waiting_too_long,
    _expiring,
)


def attention_of(
    row: Mapping[str, Any],
    now: float,
    pending_hours: float,
    cutoff: str | None = None,
    *,
    expiring_days: int | None = None,
) -> str | None:
    """The worklist group a PA belongs in as it is now, or None (nothing to do).
    ``cutoff``: ``now - pending_hours`` as a stored time, when the caller has it;
    ``expiring_days``: ``[worklist] expiring_days``, for "Expiring soon" (an approval
    ending within it, with no renewal, comes before "approved")."""
    when = When(now, cutoff or now_iso(now - pending_hours * 3600), expiring_days)
    group = state_group(row)
    for rule in TIME_RULES:
        group = rule(row, group, when)
    return group


def on_worklist(
    attention: str | None,
    news_seq: int,
    acknowledged: Mapping[str, Any] | None,
    *,
    reminder: bool = False,
) -> bool:
    """Whether a PA in group ``attention`` is in "Needs you": it has a group, and no
    acknowledgement covers it. An acknowledgement covers the group it was given for,
    up to the PA's cursor the pharmacist saw; news after that cursor (a new status or
    outcome, an event not seen before), or another group, brings the PA back.
    ``reminder``: the acknowledgement was made before a reminder's time came (an
    approval whose end came closer than ``[worklist] expiring_reminder_days``,
    :func:`_reminder_due`): it no longer covers the PA either."""
    if attention is None:
        return False
    if acknowledged is None or acknowledged.get("attention") != attention or reminder:
        return True
    try:
        seen = int(acknowledged.get("cursor") or "")
    except ValueError:
        return True
    return news_seq > seen


def _reminder_due(
    ack: Mapping[str, Any] | None, attention: str | None, row: Mapping[str, Any], now: float,
    reminder_days: int,
) -> bool:  # fmt: skip
    """Whether an "Expiring soon" acknowledgement was made before the reminder's time,
    and that time has come (issue 28)."""
    return (
        ack is not None
        and attention == "expiring"
        and ack.get("attention") == "expiring"
        and reminder_due(row, now, reminder_days, str(ack["at"]))
    )


def _listed(
    row: Mapping[str, Any], attention: str | None, ack: Mapping[str, Any] | None, now: float,
    reminder_days: int,
) -> bool:  # fmt: skip
    """:func:`on_worklist` for a PA row, with the expiring reminder."""
    reminder = _reminder_due(ack, attention, row, now, reminder_days)
    return on_worklist(attention, int(row["news_seq"]), ack, reminder=reminder)


def _drug_name(d: Mapping[str, Any]) -> str | None:
    """The drug's name and strength from one callback's block, the strength only when
    the name does not say it already ("ELIQUIS 5 MG TABLET", "5 MG")."""
    name, strength = d.get("drug_name"), d.get("drug_strength")
    if name and strength and str(strength).casefold() in str(name).casefold():
        return str(name)
    return " ".join(str(x) for x in (name, strength) if x) or None


def _notes(row: Mapping[str, Any], g: Guide) -> list[str]:
    """What the PA's label does not say already (never the label again)."""
    notes = []
    if row["fax_failed"] and not row["fax_failed_latest"] and not _deleted(row):
        notes.append("A fax to the plan failed earlier; the PA has moved on since.")
    return [n for n in notes if n != g.label]


def _pa_summary(
    row: Mapping[str, Any],
    now: float | None = None,
    pending_hours: float | None = None,
    cutoff: str | None = None,
    expiring_days: int | None = None,
) -> dict[str, Any]:
    pa = pa_json(row)
    out = {k: pa[k] for k in _CONSOLE_PA_FIELDS}
    state = _words(row)
    attention = (
        None
        if now is None or pending_hours is None
        else attention_of(row, now, pending_hours, cutoff, expiring_days=expiring_days)
    )
    g = EXPIRING_GUIDE if attention == "expiring" else state
    d = _details(row)
    # the approval period only while the latest state is an approval (about to lapse
    # or not): never on a deleted, gone, denied or failed PA
    approved = state.tone == "ok"
    out.update(
        {
            "label": g.label,
            "meaning": g.meaning,
            "next_step": overdue_step(g) if attention == "pending_too_long" else g.next_step,
            "tone": g.tone,
            "attention": attention,
            "notes": _notes(row, g),
            # issue 28: the approval's last day, days left, the renewal links, gone
            "expires_at": row.get("expires_at") if approved else None,
            "days_left": None if now is None or not approved else days_left(row, now),
            "renewal_of": row.get("renewal_of"),
            "renewed_by": row.get("renewed_by"),
            "gone": pa["gone"],
            "drug_name": _drug_name(d),
            "expiration_date": d.get("expiration_date") if approved else None,
            "effective_date": d.get("effective_date") if approved else None,
            "is_epa": d.get("is_epa"),
            "page_url": f"/console/pa/{row['id']}",
            "news_cursor": str(row["news_seq"]),
        }
    )
    return out


def claims_today(
    use_cases: UseCases, now: float | None = None, pharmacies: list[str] | None = None
) -> list[dict[str, Any]]:
    """One entry per PA-eligible transaction of each claim received today (local time),
    newest first, with the answer's message and button label and the PA if one exists:
    the claim's own, or the one the service answered for the same claim sent earlier
    (same claim key; ``pa_via`` says which). ``pharmacies``: only these stores'."""
    t_now = use_cases.clock() if now is None else now
    start = local_day_start(t_now)
    hours = use_cases.settings.intake.pending_alert_hours
    days = use_cases.settings.worklist.expiring_days
    cutoff = now_iso(t_now - hours * 3600)
    use_cases.store.flush()  # the answers' records may be deferred (decision 0025)
    reader = use_cases.store.reader()
    rows = exchanges.pa_eligible_claims_since(reader, start, MAX_ROWS, pharmacies)
    if not rows:
        return []
    pas: dict[tuple[str | None, int], dict[str, Any]] = {}
    for p in pa_rows.for_claims(reader, [r["id"] for r in rows]):
        pas[(p["claim_id"], p["transaction_index"] or 0)] = _pa_summary(
            p, t_now, hours, cutoff, days
        )
    keys = {r["id"]: claim_keys(r["id"], r["request_raw"]) for r in rows}
    wanted = sorted({k for ks in keys.values() for k in ks})
    by_key = {
        k: _pa_summary(p, t_now, hours, cutoff, days)
        for k, p in console_store.pas_by_claim_keys(reader, wanted).items()
    }
    default_label = use_cases.settings.intake.default_button_label
    out: list[dict[str, Any]] = []
    for r in rows:
        answer = json.loads(r["answer_json"]) if r["answer_json"] else None
        if answer is None:  # the answer is recorded a moment after it is sent
            txs: list[dict[str, Any]] = [
                {
                    "index": 0,
                    "pa_eligible": True,
                    "reject_codes": [c for c in (r["reject_codes"] or "").split(",") if c],
                    "message": None,
                    "button_label": default_label,
                    "message_source": None,
                }
            ]
        elif "transactions" in answer:
            txs = answer["transactions"]
        else:
            txs = [{**answer, "index": 0}]
        lines = rx_lines(r["id"], r["request_raw"])
        for t in txs:
            if not t.get("pa_eligible"):
                continue
            i = int(t.get("index", 0))
            line = lines[i] if i < len(lines) else {"rx_number": None, "product_id": None}
            pa = pas.get((r["id"], i))
            via = "claim" if pa is not None else None
            ks = keys[r["id"]]
            if pa is None and i < len(ks) and ks[i] in by_key:
                pa, via = by_key[ks[i]], "claim_key"
            out.append(
                {
                    "key": f"{r['id']}:{i}",
                    "claim_id": r["id"],
                    "transaction_index": i,
                    "received_at": r["received_at"],
                    "rx_number": line["rx_number"],
                    "product_id": line["product_id"],
                    "reject_codes": list(t.get("reject_codes") or []),
                    "message": t.get("message"),
                    "button_label": t.get("button_label") or default_label,
                    "message_source": t.get("message_source"),
                    "fallback_reason": t.get("fallback_reason"),
                    "pa": pa,
                    "pa_via": via,
                }
            )
    return out


def _with_line(use_cases: UseCases, row: Mapping[str, Any], pa: dict[str, Any]) -> dict[str, Any]:
    lines = rx_lines(row["claim_id"], row.get("request_raw"))
    i = row["transaction_index"] or 0
    pa.update(lines[i] if i < len(lines) else {"rx_number": None, "product_id": None})
    return pa


def pas_today(
    use_cases: UseCases, now: float | None = None, pharmacies: list[str] | None = None
) -> list[dict[str, Any]]:
    """PAs created or changed today (local time), most recently changed first, each with
    the Rx number and product id of its claim when the claim is known."""
    t_now = use_cases.clock() if now is None else now
    start = local_day_start(t_now)
    hours = use_cases.settings.intake.pending_alert_hours
    days = use_cases.settings.worklist.expiring_days
    rows = pa_rows.touched_since(use_cases.store.reader(), start, MAX_ROWS, pharmacies)
    cutoff = now_iso(t_now - hours * 3600)
    return [_with_line(use_cases, r, _pa_summary(r, t_now, hours, cutoff, days)) for r in rows]


#: At most this many worklist items in one answer (the counts still count them all).
MAX_ITEMS = 200


def needs_action(
    use_cases: UseCases, now: float | None = None, pharmacies: list[str] | None = None
) -> list[dict[str, Any]]:
    """What needs the pharmacist, most urgent group first, newest first in a group
    (at most ``MAX_ITEMS``).

    Claims rejected for PA today with no PA; and every PA changed within the retention
    period (``storage.retention_days``) that is denied, deleted, failed its fax, failed
    or expired at the service, approved (or not required), or still without a decision
    ``intake.pending_alert_hours`` after it was started, unless the pharmacist has
    acknowledged it as it is: news after what they acknowledged (a new status or
    outcome, an event not seen before), or another group, brings it back (decision
    0014)."""
    t = use_cases.clock() if now is None else now
    return _needs_action(use_cases, t, claims_today(use_cases, t, pharmacies), pharmacies)[0]


def _needs_action(
    use_cases: UseCases,
    t_now: float,
    claims: list[dict[str, Any]],
    pharmacies: list[str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    hours = use_cases.settings.intake.pending_alert_hours
    wl = use_cases.settings.worklist
    cutoff = now_iso(t_now - hours * 3600)
    # (attention, since, claim entry or PA row) for everything that needs the pharmacist
    found: list[tuple[str, str, dict[str, Any] | None, Mapping[str, Any] | None]] = [
        ("not_submitted", c["received_at"] or "", c, None) for c in claims if c["pa"] is None
    ]
    horizon = now_iso(t_now - use_cases.settings.storage.retention_days * 86_400)
    rows: list[Mapping[str, Any]] = list(
        console_store.pas_changed_since(use_cases.store.reader(), horizon, MAX_ROWS * 4, pharmacies)
    )
    # approvals about to lapse, however long ago they last changed (issue 28)
    seen = {r["id"] for r in rows}
    rows += [
        r
        for r in expiry.in_window(
            use_cases.store.reader(), *window(t_now, wl.expiring_days), MAX_ROWS
        )
        if r["id"] not in seen and (pharmacies is None or r["provider_id"] in pharmacies)
    ]
    flagged = [
        (r, a)
        for r in rows
        if (a := attention_of(r, t_now, hours, cutoff, expiring_days=wl.expiring_days)) is not None
    ]
    ids = {r["id"]: r["id"] for r, _ in flagged}
    ids.update({r["provisional_id"]: r["id"] for r, _ in flagged if r["provisional_id"]})
    acks = console_store.latest_acknowledgements(use_cases.store.reader(), ids)
    for r, a in flagged:
        if _listed(r, a, acks.get(r["id"]), t_now, wl.expiring_reminder_days):
            found.append((a, r["updated_at"] or "", None, r))
    counts = {g.key: 0 for g in GROUPS}
    for a, *_ in found:
        counts[a] += 1
    rank = {g.key: i for i, g in enumerate(GROUPS)}
    found.sort(key=lambda f: f[1], reverse=True)
    found.sort(key=lambda f: rank[f[0]])
    found = found[:MAX_ITEMS]
    # the stored requests only of claims whose Rx number is not in the cache yet
    with _LINES_LOCK:
        missing = sorted({r["claim_id"] for *_, r in found if r and r["claim_id"]} - _LINES.keys())
    raws = console_store.claim_requests(use_cases.store.reader(), missing) if missing else {}
    items: list[dict[str, Any]] = []
    for attention, since, claim, row in found:
        pa = None
        if row is not None:
            pa = _pa_summary(row, t_now, hours, cutoff, wl.expiring_days)
            pa = _with_line(use_cases, {**row, "request_raw": raws.get(row["claim_id"])}, pa)
            pa["acknowledged"] = acks.get(row["id"])
        key = "claim:" + claim["key"] if claim is not None else "pa:" + (pa or {})["pa_id"]
        items.append(
            {
                "attention": attention,
                "key": key,
                "since": since or None,
                "claim": claim,
                "pa": pa,
                # acknowledged before, back because of news since (or another group)
                "returned": bool(pa and pa["acknowledged"]),
            }
        )
    return items, counts


def worklist(
    use_cases: UseCases, now: float | None = None, pharmacies: list[str] | None = None
) -> dict[str, Any]:
    """Everything the console shows, in one answer (``pharmacies``: only these
    stores'; the answer lists the stores the caller may choose between)."""
    t = use_cases.clock() if now is None else now
    claims = claims_today(use_cases, t, pharmacies)
    items, counts = _needs_action(use_cases, t, claims, pharmacies)
    return {
        "generated_at": now_iso(t),
        "day_start": local_day_start(t),
        "pending_alert_hours": use_cases.settings.intake.pending_alert_hours,
        "counts": {**counts, "total": sum(counts.values())},
        "groups": [
            {
                "key": g.key,
                "title": g.title,
                "words": g.words,
                "tone": g.tone,
                "count": counts[g.key],
            }
            for g in GROUPS
        ],
        "items": items,
        "claims": claims,
        "pas": pas_today(use_cases, t, pharmacies),
        "guide": _GUIDE,
        "pharmacy": pharmacies[0] if pharmacies is not None and len(pharmacies) == 1 else None,
    }


_GUIDE = guide_table()


def pharmacy_choices(use_cases: UseCases, scope: Scope = None) -> list[dict[str, str | None]]:
    """The stores the console's selector offers: the configured ones the caller may
    act for (empty for a single store)."""
    return [
        {"provider_id": p.provider_id, "name": p.name}
        for p in use_cases.pharmacies.all()
        if scope is None or p.provider_id in scope
    ]


def pa_page(
    use_cases: UseCases, pa_id: str, now: float | None = None, scope: Scope = None
) -> dict[str, Any]:
    """One PA for its console page: status words, history, events, acknowledgements,
    the claim it came from (Rx number, product id, drug name where known) and its links.
    Raises :class:`~pa_bridge.service.errors.NotFound` for an unknown PA."""
    t = use_cases.clock() if now is None else now
    hours = use_cases.settings.intake.pending_alert_hours
    full = use_cases.pas.get_pa(pa_id, scope).model_dump()  # 404 when unknown (or not ours)
    use_cases.store.flush()  # the claim's answer may be deferred (decision 0025)
    row = use_cases.pas.get_pa_row(pa_id)  # by any id it had (its provisional one too)
    assert row is not None
    wl = use_cases.settings.worklist
    pa = _pa_summary(row, t, hours, None, wl.expiring_days)
    pa["links"] = full["links"]
    pa["urls"] = full["urls"]
    pa["link_pending"] = full["link_pending"]
    pa["other_links"] = named_links(row["id"], full["urls"], full["links"], full["url"])
    pa["groups"] = {g.key: g.words for g in GROUPS}
    ids = [row["id"], *([row["provisional_id"]] if row["provisional_id"] else [])]
    acks = console_store.acknowledgements(use_cases.store.reader(), ids)
    last = acks[-1] if acks else None
    if last is not None and _listed(row, pa["attention"], last, t, wl.expiring_reminder_days):
        last = None  # back on the worklist: the earlier acknowledgement no longer holds
    pa["acknowledged"] = last
    claim: dict[str, Any] | None = None
    if row["claim_id"]:
        c = console_store.claim(use_cases.store.reader(), row["claim_id"])
        if c is not None:
            i = row["transaction_index"] or 0
            lines = rx_lines(c["id"], c["request_raw"])
            line = lines[i] if i < len(lines) else {"rx_number": None, "product_id": None}
            answer = json.loads(c["answer_json"]) if c["answer_json"] else {}
            txs = answer.get("transactions") or [{**answer, "index": 0}]
            tx: dict[str, Any] = next((x for x in txs if int(x.get("index", 0)) == i), {})
            claim = {
                "claim_id": c["id"],
                "transaction_index": i,
                "received_at": c["received_at"],
                "transaction_code": c["transaction_code"],
                "bin": c["bin"],
                "pcn": c["pcn"],
                "group_id": c["group_id"],
                **line,
                "reject_codes": list(tx.get("reject_codes") or []),
                "message": tx.get("message"),
                "message_source": tx.get("message_source"),
                "fallback_reason": tx.get("fallback_reason"),
                "purged": c["raw_purged_at"] is not None,
            }
    pa["rx_number"] = claim["rx_number"] if claim else None
    pa["product_id"] = claim["product_id"] if claim else None
    return {
        "generated_at": now_iso(t),
        "pa": pa,
        "claim": claim,
        "history": full["history"],
        "events": full["events"],
        "acknowledgements": acks,
    }


def acknowledge(
    use_cases: UseCases,
    pa_id: str,
    who: str,
    now: float | None = None,
    scope: Scope = None,
    seen: str | None = None,
    remote: str | None = None,
) -> dict[str, Any]:
    """Record that ``who`` acknowledged the PA (by any id it had) as it is now: its
    worklist group, and the cursor the pharmacist saw (``seen``, the PA's ``cursor``
    on their page; the PA's cursor now when not given). It leaves the worklist until
    news after that cursor, or another group, brings it back (decision 0014). Raises
    :class:`~pa_bridge.service.errors.NotFound` for an unknown PA,
    :class:`~pa_bridge.service.errors.InvalidRequest` for a ``seen`` that is not a
    cursor."""
    t = use_cases.clock() if now is None else now
    row = use_cases.pas.get_pa_row(pa_id)
    if row is None or not in_scope(scope, row["provider_id"]):
        raise NotFound("unknown_pa", "no PA with that id", {"pa_id": pa_id})
    cursor = int(row["change_seq"])
    if seen is not None:
        try:
            cursor = min(cursor, int(seen))
        except ValueError:
            raise InvalidRequest(
                "invalid_body", "'cursor' must be the PA's cursor as the page showed it"
            ) from None
    attention = attention_of(
        row,
        t,
        use_cases.settings.intake.pending_alert_hours,
        expiring_days=use_cases.settings.worklist.expiring_days,
    )
    try:
        at = now_iso(t)
        ack = use_cases.store.write(
            lambda db: console_store.acknowledge(
                db, row["id"], who, attention, str(cursor), at, remote
            )
        )
    except StoreUnavailable as e:
        raise Unavailable(
            "storage_unavailable", "the acknowledgement could not be saved; try again", str(e)
        ) from None
    return {"pa_id": row["id"], "acknowledged": ack}


# ---- a PA's links, named for what each opens ------------------------------------------
def _link_label(pa_id: str, url: str) -> str:
    parts = urlsplit(url)
    path = parts.path.lower()
    token = any(k == "token_id" for k, _ in parse_qsl(parts.query))
    named = pa_id_from_url(url)
    who = f"PA {named or pa_id}"
    if "thumbnail" in path:
        what = "preview picture"
    elif path.endswith(("/download", ".pdf")):
        what = "as PDF"
    elif named is not None:
        what = "page at the service"
    else:
        what = f"link at {parts.hostname or 'the service'}"
    label = f"{who} {what}"
    if what != "preview picture":
        label += " (with its access token)" if token else " (you may need to sign in)"
    if named is not None and named != pa_id:
        label += ", answered to the same submit"
    return label


def named_links(
    pa_id: str, urls: list[str], links: Mapping[str, Any], main: str | None
) -> list[dict[str, str]]:
    """Every link of the PA but ``main`` (the one "Open PA" opens), each with a label
    saying what it opens: which PA, its page or PDF, with an access token or not."""
    candidates = [*urls, *(links.get("token_urls") or []), links.get("html_url")]
    candidates.append(links.get("pdf_url"))
    out: list[dict[str, str]] = []
    seen = {main}
    count: dict[str, int] = {}
    for url in candidates:
        if not url or url in seen:
            continue
        seen.add(url)
        label = _link_label(pa_id, str(url))
        count[label] = count.get(label, 0) + 1
        if count[label] > 1:
            label = f"{label}, link {count[label]}"
        out.append({"href": str(url), "label": label})
    return out
