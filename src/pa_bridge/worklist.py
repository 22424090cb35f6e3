"""The pharmacist's worklist: today's claims rejected for PA and the PAs, with no Flask.

What the console page shows, read from the store. It carries only what the pharmacist
needs to act: Rx number, product id, reject codes, the replacement message and button
label, PA status. Never a patient name, date of birth or cardholder id.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from typing import Any

import ncpdp

from .service import Services
from .service.pas import pa_json
from .store import exchanges, now_iso, pas
from .store.pas import PaRow

__all__ = ["local_day_start", "rx_lines", "claims_today", "pas_today", "worklist"]

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


_Lines = tuple[tuple[str | None, str | None], ...]
#: claim id -> (Rx number, product id) per transaction. Keyed by id, holding only those
#: two fields: no raw claim (PHI) is kept in memory past the query that read it.
_LINES: dict[str, _Lines] = {}
_LINES_MAX = 4096
_LINES_LOCK = threading.Lock()


def _parse_lines(raw: bytes) -> _Lines:
    try:
        view = ncpdp.parse(raw, strict=False).as_request()
    except Exception:  # stored requests parsed once already; be safe anyway
        return ()
    return tuple((_rx(t.rx_number), t.product_id) for t in view.transactions)


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
    return [{"rx_number": r, "product_id": p} for r, p in lines]


_CONSOLE_PA_FIELDS = (
    "pa_id", "claim_id", "transaction_index", "workflow_status", "plan_outcome", "deleted",
    "fax_failed", "open_url", "url", "created_at", "updated_at", "cursor",
)  # fmt: skip


def _pa_summary(row: PaRow) -> dict[str, Any]:
    pa = pa_json(row)
    return {k: pa[k] for k in _CONSOLE_PA_FIELDS}


def claims_today(bridge: Services, now: float | None = None) -> list[dict[str, Any]]:
    """One entry per PA-eligible transaction of each claim received today (local time),
    newest first, with the answer's message and button label and the PA if one exists."""
    start = local_day_start(bridge.clock() if now is None else now)
    reader = bridge.store.reader()
    rows = exchanges.pa_eligible_claims_since(reader, start, MAX_ROWS)
    if not rows:
        return []
    by_claim: dict[tuple[str | None, int], dict[str, Any]] = {}
    for p in pas.for_claims(reader, [r["id"] for r in rows]):
        by_claim[(p["claim_id"], p["transaction_index"] or 0)] = _pa_summary(p)
    default_label = bridge.settings.intake.default_button_label
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
                    "pa": by_claim.get((r["id"], i)),
                }
            )
    return out


def pas_today(bridge: Services, now: float | None = None) -> list[dict[str, Any]]:
    """PAs created or changed today (local time), most recently changed first, each with
    the Rx number and product id of its claim when the claim is known."""
    start = local_day_start(bridge.clock() if now is None else now)
    rows = pas.touched_since(bridge.store.reader(), start, MAX_ROWS)
    out = []
    for r in rows:
        pa = _pa_summary(r)
        lines = rx_lines(r["claim_id"], r["request_raw"])
        i = r["transaction_index"] or 0
        line = lines[i] if i < len(lines) else {"rx_number": None, "product_id": None}
        pa.update(line)
        out.append(pa)
    return out


def worklist(bridge: Services, now: float | None = None) -> dict[str, Any]:
    """Everything the console shows, in one answer."""
    t = bridge.clock() if now is None else now
    return {
        "generated_at": now_iso(t),
        "day_start": local_day_start(t),
        "claims": claims_today(bridge, t),
        "pas": pas_today(bridge, t),
    }
