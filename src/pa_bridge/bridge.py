"""The use cases, with no Flask in sight: claim intake, submit PA, reversal, PA reads.

Web handlers call these and turn :class:`BridgeError` into the JSON error body.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

import ncpdp

from . import policy
from .callbacks import PENDING_PREFIX, claim_match_fields, fields_agree
from .client import (
    ClaimResult,
    OutcomesCall,
    PaServiceClient,
    ServiceError,
    best_urls,
    claim_metadata,
    outcome_variables,
)
from .config import Settings
from .logs import log_event
from .metrics import Metrics
from .outbox import DeliveryFailed, Outbox, enqueue
from .store import Database, Store, StoreUnavailable, now_iso

__all__ = ["Bridge", "BridgeError"]


class BridgeError(Exception):
    """An answer other than success: HTTP ``status``, stable ``code``, a ``message`` a
    pharmacist or store IT can act on, and ``detail`` (never PHI, never secrets)."""

    def __init__(self, status: int, code: str, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail


_QUOTED = re.compile(r"b?'(?:[^'\\]|\\.)*'" + r'|b?"(?:[^"\\]|\\.)*"')


def _without_content(e: ncpdp.ParseError) -> str:
    """The parse error's reason and place, without any quoted piece of the claim (a
    quoted field can be a name or a date of birth): offset, segment and field say
    where to look."""
    where = [f"byte offset {e.offset}"]
    if e.segment_id is not None:
        where.append(f"segment AM{e.segment_id}")
    if e.field_id is not None:
        where.append(f"field {e.field_id}")
    return f"{_QUOTED.sub('(...)', e.reason)} (at {', '.join(where)})"


def _parse(raw: Any, what: str, *, want: str) -> tuple[ncpdp.Transmission, bytes]:
    if not isinstance(raw, str) or not raw:
        raise BridgeError(400, "invalid_body", f"'{what}' must be a non-empty string of raw NCPDP")
    try:
        t = ncpdp.parse(raw, strict=False)
    except ncpdp.ParseError as e:
        raise BridgeError(
            400,
            "malformed_claim",
            f"the {what} is not a well-formed NCPDP {want}: {_without_content(e)}",
            {"part": what, "offset": e.offset, "segment_id": e.segment_id, "field_id": e.field_id},
        ) from None
    if t.kind != want:
        raise BridgeError(
            400,
            "malformed_claim",
            f"the {what} is an NCPDP {t.kind}, expected a {want}",
            {"part": what},
        )
    return t, bytes(t)


def _check_counts(req: ncpdp.Transmission, resp: ncpdp.Transmission) -> None:
    """A claim exchange whose transaction counts do not agree is not one we can decide
    on (issue 19): 109-A9 must be 1-4 and match the request's transactions, and the
    response must answer each of them (or reject the whole transmission in its header)."""
    count = str(getattr(req.header, "transaction_count", "") or "").strip()
    n_req = len(req.groups)
    if not count.isdigit() or not 1 <= int(count) <= 4 or int(count) != n_req:
        raise BridgeError(
            400,
            "malformed_claim",
            f"the request's transaction count 109-A9 must be 1-4 and match its {n_req}"
            " transaction(s)",
            {"part": "request", "field_id": "A9"},
        )
    try:  # the view also reads a status segment sent without its group
        n_resp = len(resp.as_response().transactions)
    except ncpdp.NcpdpError:
        n_resp = len(resp.groups)
    if n_resp != n_req and not (n_resp == 0 and _rejected_in_header(resp)):
        raise BridgeError(
            400,
            "malformed_claim",
            f"the response answers {n_resp} transaction(s); the request has {n_req}",
            {"part": "response"},
        )


def _rejected_in_header(resp: ncpdp.Transmission) -> bool:
    try:
        return resp.as_response().header_response_status.strip() == "R"
    except ncpdp.NcpdpError:
        return False


def _insert_exchange(db: Database, row: dict[str, Any]) -> None:
    """A plain prepared INSERT: the claim hot path (sqlite-utils' insert() inspects the
    table and builds its SQL on every call)."""
    cols = list(row)
    db.conn.execute(
        f"INSERT INTO exchanges ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608 - column names are ours
        [row[c] for c in cols],
    )


def claim_key(req: ncpdp.Transmission, index: int) -> str:
    """What identifies a claim to the service's duplicate check."""
    v = req.as_request()
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


def _prescriber_fax(metadata: Any) -> str:
    """The dispensing system's ``physician_fax`` (the claim interface's name for it; the
    outcomes interface calls it ``prescriber_fax``), whichever of the two it sent."""
    if not isinstance(metadata, Mapping):
        return ""
    for key in ("physician_fax", "prescriber_fax"):
        value = metadata.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""


@dataclass(frozen=True)
class _TxDecision:
    index: int
    transaction_status: str
    reject_codes: list[str]
    pa_eligible: bool
    outcomes_first: bool
    payer_message: str


class Bridge:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: PaServiceClient,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.metrics.watch_store(store, clock)
        self.settings = settings
        self.store = store
        self.client = client
        self.clock = clock
        self.outbox = Outbox(
            store,
            {
                "outcome_report": self._deliver_outcome_report,
                "reversal": self._deliver_reversal,
                "webhook": self._deliver_webhook,
            },
            settings.queue,
            clock=clock,
        )
        self._claim_locks: dict[str, threading.Lock] = {}
        self._claim_locks_guard = threading.Lock()
        self._webhook_http = httpx.Client(timeout=10.0)

    def close(self) -> None:
        self._webhook_http.close()

    def _deliver_webhook(self, payload: dict[str, Any]) -> None:
        """POST the PA as it is now to the dispensing system's webhook."""
        url = self.settings.callbacks.forward_url
        if not url:
            raise DeliveryFailed("callbacks.forward_url is not configured", retryable=False)
        try:
            pa = self.get_pa(str(payload.get("pa_id")))
        except BridgeError:
            raise DeliveryFailed("the PA is gone", retryable=False) from None
        try:
            r = self._webhook_http.post(url, json={"pa": pa})
        except httpx.HTTPError as e:
            raise DeliveryFailed(f"webhook unreachable: {type(e).__name__}") from None
        if not 200 <= r.status_code < 300:
            raise DeliveryFailed(f"webhook answered HTTP {r.status_code}")

    # ---- audit ----------------------------------------------------------------
    @staticmethod
    def _audit(
        db: Database, actor: str, action: str, object_id: str | None, detail: str | None = None
    ) -> None:
        db.execute(
            "INSERT INTO audit (at, actor, action, object_id, detail) VALUES (?, ?, ?, ?, ?)",
            [now_iso(), actor, action, object_id, detail],
        )

    def _exchange_row(
        self, id: str, kind: str, actor: str, rv: ncpdp.RequestView, raw: bytes
    ) -> dict[str, Any]:
        """The columns every stored exchange has, from its request."""
        return {
            "id": id,
            "received_at": now_iso(self.clock()),
            "actor": actor,
            "kind": kind,
            "version": rv.version,
            "transaction_code": rv.transaction_code,
            "bin": rv.bin,
            "pcn": rv.pcn,
            "group_id": rv.group_id,
            "provider_id": rv.service_provider_id,
            "date_of_service": rv.date_of_service,
            "request_raw": raw,
        }

    # ---- claim intake ----------------------------------------------------------
    def intake(self, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        started = time.monotonic()
        budget_s = self.settings.outcomes.budget_ms / 1000.0
        req, req_bytes = _parse(body.get("request"), "request", want="request")
        resp, resp_bytes = _parse(body.get("response"), "response", want="response")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise BridgeError(400, "invalid_body", "'metadata' must be an object")
        _check_counts(req, resp)
        rv = req.as_request()
        sv = resp.as_response()
        decisions = self._decide(sv)
        claim_id = uuid.uuid4().hex
        first = decisions[0]

        def store_exchange(db: Database) -> None:
            _insert_exchange(
                db,
                {
                    **self._exchange_row(claim_id, "claim", actor, rv, req_bytes),
                    "transaction_count": len(decisions),
                    "response_raw": resp_bytes,
                    "metadata_json": json.dumps(metadata),
                    "transaction_status": first.transaction_status,
                    "reject_codes": ",".join(first.reject_codes),
                    "pa_eligible": int(any(d.pa_eligible for d in decisions)),
                },
            )
            self._audit(
                db,
                actor,
                "claim.accepted",
                claim_id,
                f"{rv.transaction_code} {first.transaction_status}",
            )
            for d in decisions:
                if not d.outcomes_first and d.index < len(req.groups):
                    enqueue(
                        db,
                        "outcome_report",
                        {"claim_id": claim_id, "index": d.index},
                        claim_id=claim_id,
                        now=self.clock(),
                    )

        reports_queued = any(not d.outcomes_first and d.index < len(req.groups) for d in decisions)

        # Outcomes calls for 70/75/76 transactions, all inside the same budget, start
        # first (on the client's workers); the exchange is committed here while they
        # are in flight, and the answer waits for both.
        calls: dict[int, OutcomesCall] = {}
        for d in decisions:
            if not (d.outcomes_first and d.index < len(req.groups)):
                continue
            remaining_ms = (
                max(0.0, budget_s - (time.monotonic() - started)) * 1000
                - self.settings.outcomes.safety_margin_ms
            )
            variables = outcome_variables(
                req,
                resp,
                d.index,
                api_key=self.client.api_key,
                views=(rv, sv),
                prescriber_fax=_prescriber_fax(metadata),
            )
            calls[d.index] = self.client.start_outcomes(
                variables, budget_ms=max(1, int(remaining_ms)), fallback_message=d.payer_message
            )
        try:
            self.store.write(store_exchange, timeout=10.0)
            stored_error: StoreUnavailable | None = None
        except StoreUnavailable as e:
            stored_error = e

        answers = []
        for d in decisions:
            message, label, source = d.payer_message, "", "payer"
            outcomes_ms: float | None = None
            if d.pa_eligible:
                label = self.settings.intake.default_button_label
            call = calls.get(d.index)
            if call is not None:
                res = call.result()  # never raises: the answer or the fallback
                self.metrics.outcomes_calls.labels(
                    "ok" if res.source == "outcomes" else "fallback"
                ).inc()
                outcomes_ms = round(res.elapsed_ms, 1)
                self.metrics.outcomes_latency.observe(res.elapsed_ms / 1000.0)
                if res.source == "outcomes":
                    message = res.message or d.payer_message
                    label = res.button_label or label
                    source = "outcomes"
                else:
                    source = "fallback"
            answers.append(
                {
                    "index": d.index,
                    "transaction_status": d.transaction_status,
                    "reject_codes": d.reject_codes,
                    "pa_eligible": d.pa_eligible,
                    "message": message,
                    "button_label": label,
                    "message_source": source,
                    **({"outcomes_elapsed_ms": outcomes_ms} if outcomes_ms is not None else {}),
                }
            )

        if stored_error is not None:
            raise BridgeError(
                503,
                "storage_unavailable",
                "the claim could not be stored; send it again",
                str(stored_error),
            ) from None
        if reports_queued:
            self.outbox.wake()

        top = dict(answers[0])
        top.pop("index")
        answer: dict[str, Any] = {"claim_id": claim_id, **top}
        if len(answers) > 1:
            answer["transactions"] = answers
        if req.tolerated or resp.tolerated:
            answer["tolerated"] = list(req.tolerated) + list(resp.tolerated)
        answer["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        decision = answer["message_source"]
        if decision == "payer":
            decision = "submit_pa" if answer["pa_eligible"] else "async"
        self.metrics.claims.labels(decision).inc()
        if calls and answer["elapsed_ms"] > self.settings.outcomes.budget_ms:
            self.metrics.budget_misses.inc()
        saved = json.dumps(answer)

        def record_answer(db: Database) -> None:
            db.execute(
                "UPDATE exchanges SET answer_json = ?, message_source = ? WHERE id = ?",
                [saved, answer["message_source"], claim_id],
            )

        self.store.submit(record_answer)  # not awaited: the answer never waits on it
        log_event(
            "claim.accepted",
            claim_id=claim_id,
            transaction_code=rv.transaction_code,
            transaction_status=answer["transaction_status"],
            reject_codes=answer["reject_codes"],
            message_source=answer["message_source"],
            elapsed_ms=answer["elapsed_ms"],
            outcomes_ms=answer.get("outcomes_elapsed_ms"),
        )
        return answer

    @staticmethod
    def _decide(sv: ncpdp.ResponseView) -> list[_TxDecision]:
        out = []
        for tx in sv.transactions:
            status = "R" if tx.rejected else (tx.transaction_status or "")
            out.append(
                _TxDecision(
                    index=tx.index,
                    transaction_status=status,
                    reject_codes=[r.code for r in tx.reject_codes],
                    pa_eligible=policy.pa_eligible(tx),
                    outcomes_first=policy.outcomes_first(tx),
                    payer_message=tx.additional_message or sv.message or "",
                )
            )
        if not out:  # rejected at header level: no transaction group at all
            out.append(
                _TxDecision(
                    index=0,
                    transaction_status=sv.header_response_status,
                    reject_codes=[],
                    pa_eligible=False,
                    outcomes_first=False,
                    payer_message=sv.message or "",
                )
            )
        return out

    def _exchange(self, claim_id: str) -> dict[str, Any]:
        rows = self.store.query("SELECT * FROM exchanges WHERE id = ?", [claim_id])
        if not rows or rows[0]["kind"] != "claim":
            raise BridgeError(404, "unknown_claim", "no claim with that id", {"claim_id": claim_id})
        return rows[0]

    def _deliver_outcome_report(self, payload: dict[str, Any]) -> None:
        row = self.store.query(
            "SELECT request_raw, response_raw, metadata_json FROM exchanges WHERE id = ?",
            [payload.get("claim_id")],
        )
        if not row or row[0]["request_raw"] is None:
            raise DeliveryFailed("the claim's content is gone (purged)", retryable=False)
        req = ncpdp.parse(row[0]["request_raw"], strict=False)
        resp = ncpdp.parse(row[0]["response_raw"], strict=False)
        try:
            metadata = json.loads(row[0]["metadata_json"] or "{}")
        except ValueError:
            metadata = {}
        variables = outcome_variables(
            req,
            resp,
            int(payload.get("index", 0)),
            api_key=self.client.api_key,
            prescriber_fax=_prescriber_fax(metadata),
        )
        res = self.client.outcomes(variables, budget_ms=10_000, fallback_message="")
        if res.source != "outcomes":
            raise DeliveryFailed(f"outcomes interface: {res.error or 'no answer'}")

    # ---- submit PA -------------------------------------------------------------
    def _lock_for(self, key: str) -> threading.Lock:
        with self._claim_locks_guard:
            lock = self._claim_locks.get(key)
            if lock is None:
                lock = self._claim_locks[key] = threading.Lock()
            return lock

    def _pa_for_claim(self, claim_id: str, index: int) -> dict[str, Any] | None:
        rows = self.store.query(
            "SELECT * FROM pas WHERE claim_id = ? AND transaction_index = ? ORDER BY created_at LIMIT 1",
            [claim_id, index],
        )
        return rows[0] if rows else None

    def _reversed_since(self, key: str, since: str) -> bool:
        """Whether a reversal of the claim with ``key`` came in after ``since`` (queued
        or delivered; one store IT dropped does not count)."""
        rows = self.store.query(
            "SELECT 1 AS x FROM outbox, json_each(outbox.payload_json, '$.claim_keys') AS k"
            " WHERE outbox.kind = 'reversal' AND outbox.status != 'dropped'"
            " AND outbox.created_at >= ? AND k.value = ? LIMIT 1",
            [since, key],
        )
        return bool(rows)

    def submit_pa(
        self, claim_id: str, body: Mapping[str, Any], actor: str
    ) -> tuple[dict[str, Any], bool]:
        """Returns (the PA, created now?)."""
        ex = self._exchange(claim_id)
        index = body.get("transaction", 0)
        if not isinstance(index, int) or not 0 <= index < max(1, int(ex["transaction_count"] or 1)):
            raise BridgeError(
                400,
                "invalid_body",
                "'transaction' must be the index of one of the claim's transactions",
            )
        existing = self._pa_for_claim(claim_id, index)
        if existing is not None:
            return self.pa_json(existing), False
        if ex["request_raw"] is None:
            raise BridgeError(
                410, "claim_purged", "this claim is older than the retention period; send it again"
            )
        req = ncpdp.parse(ex["request_raw"], strict=False)
        resp = ncpdp.parse(ex["response_raw"], strict=False)
        tx = resp.as_response().transactions
        if index >= len(tx) or not policy.pa_eligible(tx[index]):
            raise BridgeError(
                409, "not_pa_eligible", "this claim was not rejected for a reason that allows a PA"
            )
        extra = body.get("metadata") or {}
        if not isinstance(extra, dict):
            raise BridgeError(400, "invalid_body", "'metadata' must be an object")
        dispensing = {**json.loads(ex["metadata_json"] or "{}"), **extra}
        key = claim_key(req, index)
        # One lock per claim key: two clicks on the same claim (or on two exchanges of
        # the same claim) send it once.
        with self._lock_for(key):
            existing = self._pa_for_claim(claim_id, index)
            if existing is not None:
                return self.pa_json(existing), False
            if self._reversed_since(key, str(ex["received_at"])):
                raise BridgeError(
                    409,
                    "claim_reversed",
                    "this claim was reversed after it was sent; a PA cannot be started for"
                    " it. If it was billed again, send the new claim",
                )
            same = self._live_pa_for_key(key)
            if same is not None:  # a second click: our own records know this claim
                self.metrics.pa_submits.labels("duplicate").inc()
                log_event("pa.second_click", claim_id=claim_id, pa_id=same["id"])
                return self.pa_json(same), False
            md = claim_metadata(
                req, resp, {str(k): str(v) for k, v in dispensing.items()}, index=index
            )
            try:
                result = self.client.submit_claim(bytes(ncpdp.only_transaction(req, index)), md)
            except ServiceError as e:
                self.metrics.pa_submits.labels(e.code).inc()
                log_event("pa.submit_failed", level=logging.WARNING, claim_id=claim_id, code=e.code)
                raise self._service_error(e) from None
            rv = req.as_request()
            t = rv.transactions[index] if index < len(rv.transactions) else None
            match = claim_match_fields(
                md.bin_number or rv.bin,
                md.pcn_number or rv.pcn,
                md.group_id or rv.group_id,
                rv.service_provider_id,
                t.product_id if t else None,
                t.rx_number if t else None,
            )
            pa, known = self._store_pa(claim_id, index, key, result, actor, match)
        outcome = "duplicate" if known else ("created" if pa["url"] else "started")
        self.metrics.pa_submits.labels(outcome).inc()
        log_event(
            "pa.submitted",
            claim_id=claim_id,
            pa_id=pa["pa_id"],
            result=outcome,
            links=len(result.pa_urls),
            format=result.format,
        )
        return pa, not known

    def _live_pa_for_key(self, key: str) -> dict[str, Any] | None:
        rows = self.store.query(
            "SELECT * FROM pas WHERE claim_key = ? AND deleted = 0 AND claim_id IS NOT NULL"
            " ORDER BY created_at LIMIT 1",
            [key],
        )
        return rows[0] if rows else None

    @staticmethod
    def _service_error(e: ServiceError) -> BridgeError:
        status = {"timeout": 504, "unreachable": 503, "tls": 502, "missing_claim_data": 422}.get(
            e.code, 502
        )
        return BridgeError(status, f"service_{e.code}", e.message, e.detail)

    def _store_pa(
        self,
        claim_id: str,
        index: int,
        key: str,
        result: ClaimResult,
        actor: str,
        match: dict[str, str],
    ) -> tuple[dict[str, Any], bool]:
        """Store the PA the service answered for; (the PA, already known to our records?).

        The PA id comes from the link(s) (``/request/view/{id}``); an answer without an
        id but with a link gets a local id; an answer without a link (the empty format)
        gets a ``pending-`` id that its first callback replaces (see callbacks.py),
        unless a callback for it came first, in which case that PA is linked now.
        """
        now = now_iso(self.clock())
        urls = list(result.pa_urls)
        notes: list[str] = []
        if len(urls) > 1:
            notes.append(
                f"the service answered {len(urls)} PA links"
                + (f" (PAs {', '.join(result.pa_ids)})" if result.pa_ids else "")
                + "; all are kept on this PA"
            )
        if not urls:
            notes.append("PA started at the service; its link arrives with its callback")

        def job(db: Database) -> tuple[str, bool]:
            pa_id = result.pa_id
            if pa_id is None and not urls:
                pa_id = self._callback_only_match(db, match)
            if pa_id is None:
                prefix = "local-" if urls else PENDING_PREFIX
                pa_id = prefix + uuid.uuid4().hex[:12]
            seq = self.store.next_seq(db)
            row = db.execute(
                "SELECT claim_id, urls_json, links_json FROM pas WHERE id = ?", [pa_id]
            ).fetchone()
            known = row is not None and row[0] is not None
            if row is None:
                links = {"awaiting": match} if pa_id.startswith(PENDING_PREFIX) else {}
                db.execute(
                    "INSERT INTO pas (id, claim_id, transaction_index, claim_key, urls_json, workflow_status,"
                    " plan_outcome, created_at, updated_at, change_seq, matched, links_json)"
                    " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, 1, ?)",
                    [pa_id, claim_id, index, key, json.dumps(urls), "New", now, now, seq,
                     json.dumps(links)],
                )  # fmt: skip
            else:  # known already (a callback came first, or a duplicate): link it
                merged = [*urls, *(u for u in json.loads(row[1] or "[]") if u not in urls)]
                links = json.loads(row[2] or "{}")
                links.pop("match", None)
                if known and row[0] != claim_id:
                    notes.append(
                        f"the service answered with this PA, already known for claim {row[0]}"
                    )
                db.execute(
                    "UPDATE pas SET claim_id = coalesce(claim_id, ?), transaction_index = coalesce(transaction_index, ?),"
                    " claim_key = coalesce(claim_key, ?), urls_json = ?, links_json = ?,"
                    " matched = 1, updated_at = ?, change_seq = ? WHERE id = ?",
                    [claim_id, index, key, json.dumps(merged), json.dumps(links), now, seq, pa_id],
                )  # fmt: skip
            db.execute(
                "INSERT INTO pa_history (pa_id, received_at, source, workflow_status, note) VALUES (?, ?, 'submit', ?, ?)",
                [pa_id, now, None if row is not None else "New", "; ".join(notes) or None],
            )
            self._audit(db, actor, "pa.submit", pa_id, f"claim {claim_id} transaction {index}")
            return pa_id, known

        try:
            pa_id, known = self.store.write(job)
        except StoreUnavailable as e:
            raise BridgeError(
                503,
                "storage_unavailable",
                "the PA was created but could not be saved; click again",
                str(e),
            ) from None
        pa = self.get_pa_row(pa_id)
        assert pa is not None
        return self.pa_json(pa), known

    @staticmethod
    def _callback_only_match(db: Database, match: dict[str, str]) -> str | None:
        """The one PA first heard of in a callback, not yet tied to a claim, whose
        identifiers agree with this claim's (for an answer that named no PA)."""
        found = []
        for pa_id, links_json in db.execute(
            "SELECT id, links_json FROM pas WHERE claim_id IS NULL AND deleted = 0"
            " AND matched = 0 ORDER BY created_at DESC LIMIT 200"
        ).fetchall():
            try:
                seen = json.loads(links_json or "{}").get("match") or {}
            except (ValueError, AttributeError):
                continue
            if fields_agree(match, seen):
                found.append(pa_id)
        return found[0] if len(found) == 1 else None

    # ---- reversal ----------------------------------------------------------------
    def reversal(self, body: Mapping[str, Any], actor: str) -> tuple[dict[str, Any], bool]:
        """Returns (answer, delivered now?)."""
        req, raw = _parse(body.get("request"), "request", want="request")
        if req.transaction_code != "B2":
            raise BridgeError(
                400, "not_a_reversal", f"a reversal must be a B2, this is a {req.transaction_code}"
            )
        count = str(getattr(req.header, "transaction_count", "") or "").strip()
        if not count.isdigit() or not 1 <= int(count) <= 4 or int(count) != len(req.groups):
            raise BridgeError(
                400,
                "malformed_claim",
                f"the B2's transaction count 109-A9 must be 1-4 and match its"
                f" {len(req.groups)} transaction(s)",
                {"part": "request", "field_id": "A9"},
            )
        rv = req.as_request()
        missing = [
            name
            for name, value in (
                ("101-A1 BIN", rv.bin),
                ("201-B1 service provider id", rv.service_provider_id),
            )
            if not (value or "").strip()
        ]
        for t in rv.transactions:
            if not (t.rx_number or "").strip():
                missing.append(f"402-D2 prescription number (transaction {t.index + 1})")
        if missing:
            # the service needs these to find the PA to delete; a B2 without them
            # would sit in the queue failing for good
            raise BridgeError(
                400,
                "malformed_claim",
                "the B2 lacks what the service needs to find the claim: " + ", ".join(missing),
                {"part": "request"},
            )
        exchange_id = uuid.uuid4().hex
        keys = [claim_key(req, i) for i in range(len(req.groups))]

        def job(db: Database) -> int:
            _insert_exchange(
                db,
                {
                    **self._exchange_row(exchange_id, "reversal", actor, rv, raw),
                    "transaction_count": len(req.groups),
                },
            )
            item = enqueue(
                db,
                "reversal",
                {"exchange_id": exchange_id, "claim_keys": keys},
                claim_id=exchange_id,
                now=self.clock(),
            )
            self._audit(db, actor, "reversal.accepted", exchange_id, f"queue item {item}")
            return item

        try:
            item_id = self.store.write(job)
        except StoreUnavailable as e:
            raise BridgeError(
                503,
                "storage_unavailable",
                "the reversal could not be stored; send it again",
                str(e),
            ) from None
        # Once the B2 is delivered the answer is 200, whatever happens to the
        # bookkeeping after it (the outbox records it later if the database is locked).
        delivered = self.outbox.deliver(item_id)
        status, last_error = "delivered", None
        if not delivered:
            try:
                row = self.store.query(
                    "SELECT status, last_error FROM outbox WHERE id = ?", [item_id]
                )
                status, last_error = row[0]["status"], row[0]["last_error"]
            except Exception as e:  # the reversal is queued all the same
                status, last_error = "pending", f"status unknown: {type(e).__name__}"
        answer = {
            "reversal_id": exchange_id,
            "queue_id": item_id,
            "status": status,
            "last_error": last_error,
        }
        log_event(
            "reversal.accepted", reversal_id=exchange_id, queue_id=item_id, status=answer["status"]
        )
        return answer, delivered

    def _deliver_reversal(self, payload: dict[str, Any]) -> None:
        row = self.store.query(
            "SELECT request_raw FROM exchanges WHERE id = ?", [payload.get("exchange_id")]
        )
        if not row or row[0]["request_raw"] is None:
            raise DeliveryFailed("the reversal's content is gone", retryable=False)
        try:
            self.client.submit_claim(row[0]["request_raw"], None)
        except ServiceError as e:
            raise DeliveryFailed(f"{e.code}: {e.message}", retryable=e.retryable) from None
        keys = payload.get("claim_keys") or []
        now = now_iso(self.clock())

        def job(db: Database) -> None:
            for key in keys:
                for (pa_id,) in db.execute(
                    "SELECT id FROM pas WHERE claim_key = ?", [key]
                ).fetchall():
                    db.execute(
                        "INSERT INTO pa_history (pa_id, received_at, source, note) VALUES (?, ?, 'reversal', ?)",
                        [pa_id, now, "B2 delivered to the service"],
                    )

        # The B2 is delivered: a history note that cannot be written now (the database
        # is locked) must not make the delivery count as failed and send it again.
        try:
            self.store.write(job)
        except Exception as e:
            log_event(
                "reversal.history_not_saved",
                level=logging.WARNING,
                reversal_id=payload.get("exchange_id"),
                error=type(e).__name__,
            )

    # ---- PA reads ------------------------------------------------------------------
    def get_pa_row(self, pa_id: str) -> dict[str, Any] | None:
        rows = self.store.query("SELECT * FROM pas WHERE id = ?", [pa_id])
        return rows[0] if rows else None

    @staticmethod
    def pa_links(row: Mapping[str, Any]) -> tuple[list[str], dict[str, Any], str | None]:
        """(the PA's URLs, its links from callbacks, the one to open): the token link
        (hosted page with ``token_id``) when there is one, else the best link known."""
        urls = json.loads(row["urls_json"] or "[]")
        try:
            links = json.loads(row["links_json"] or "{}") if "links_json" in row.keys() else {}
        except ValueError:
            links = {}
        public = {k: links[k] for k in ("html_url", "pdf_url", "token_urls") if k in links}
        candidates = [*urls, *(links.get("token_urls") or [])]
        candidates += [links[k] for k in ("html_url", "pdf_url") if links.get(k)]
        best = best_urls(candidates)
        return urls, public, best[0] if best else None

    @staticmethod
    def pa_json(row: Mapping[str, Any]) -> dict[str, Any]:
        urls, links, url = Bridge.pa_links(row)
        return {
            "pa_id": row["id"],
            "claim_id": row["claim_id"],
            "transaction_index": row["transaction_index"],
            "urls": urls,
            "url": url,
            "links": links,
            "link_pending": url is None,
            "open_url": f"/v1/pa/{row['id']}/open",
            "workflow_status": row["workflow_status"],
            "plan_outcome": row["plan_outcome"],
            "status": row["workflow_status"],
            "deleted": bool(row["deleted"]),
            "fax_failed": bool(row["fax_failed"]),
            "events": json.loads(row["events_json"] or "[]"),
            "matched": bool(row["matched"]),
            "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            "cursor": str(row["change_seq"]),
        }

    def list_pas(self, since: str | None, limit: int) -> dict[str, Any]:
        bad = BridgeError(400, "invalid_cursor", "'since' must be a cursor from an earlier answer")
        try:
            after = int(since) if since not in (None, "") else 0
        except ValueError:
            raise bad from None
        # cursors are times in microseconds (decision 0009): one below zero, past 63
        # bits or from the future was never handed out
        if after < 0 or after >= 1 << 63 or after > int(time.time() * 1_000_000) + 60_000_000:
            raise bad
        rows = self.store.query(
            "SELECT * FROM pas WHERE change_seq > ? ORDER BY change_seq LIMIT ?", [after, limit]
        )
        cursor = str(rows[-1]["change_seq"]) if rows else str(after)
        return {"pas": [self.pa_json(r) for r in rows], "cursor": cursor}

    def get_pa(self, pa_id: str) -> dict[str, Any]:
        row = self.get_pa_row(pa_id)
        if row is None:
            raise BridgeError(404, "unknown_pa", "no PA with that id", {"pa_id": pa_id})
        pa = self.pa_json(row)
        hist = self.store.query("SELECT * FROM pa_history WHERE pa_id = ? ORDER BY id", [pa_id])
        pa["history"] = [
            {
                "received_at": h["received_at"],
                "source": h["source"],
                "workflow_status": h["workflow_status"],
                "plan_outcome": h["plan_outcome"],
                "event_time": h["event_time"],
                "events": json.loads(h["events_json"]) if h["events_json"] else [],
                "note": h["note"],
            }
            for h in hist
        ]
        return pa

    def pa_open_url(self, pa_id: str) -> str:
        row = self.get_pa_row(pa_id)
        if row is None:
            raise BridgeError(404, "unknown_pa", "no PA with that id", {"pa_id": pa_id})
        url = self.pa_links(row)[2]
        if url is None:
            raise BridgeError(
                404,
                "no_pa_url",
                "PA started, link on its way: the service sends it with the PA's first callback",
            )
        return url

    def dashboard_url(self) -> str:
        try:
            token = self.client.dashboard_login()
        except ServiceError as e:
            raise self._service_error(e) from None
        return self.client.dashboard_url_with_token(token)

    # ---- health ---------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        db_ok = True
        depth, oldest = (0, None)
        try:
            depth, oldest = self.outbox.depth()
        except Exception:  # the daemon's own check names the problem
            db_ok = False
        return {
            "database": db_ok and self.store.writer_alive,
            "queue_depth": depth,
            "queue_oldest_age_s": None if oldest is None else round(oldest, 1),
        }
