"""Claim intake: parse the exchange, decide, store it with its queued reports, call
the outcomes interface for the transactions that need it, answer within the budget."""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..client import OutcomesCall, PaServiceClient, fallback_reason, outcome_variables
from ..config import Settings
from ..logs import log_event
from ..metrics import Metrics
from ..store import Database, Kind, Store, StoreUnavailable, audit, exchanges, now_iso
from ..store.outbox import enqueue
from . import idempotency
from ._parse import new_exchange
from .bodies import ClaimAnswer, ClaimExchange, MessageSource, TransactionAnswer
from .decisions import claim_key, count_problem, decide, prescriber_fax
from .errors import BridgeError
from .exchange_rules import missing_for_decision
from .pharmacies import Pharmacies, Scope, check_scope

__all__ = ["ClaimIntake"]


#: intake's hand-off of a queued outcome report: (claim id, transaction index, how to
#: build its variables from what intake parsed)
ReportReady = Callable[[str, int, Callable[[], dict[str, str]]], None]


class ClaimIntake:
    """``POST /v1/claims``. ``wake_queue`` is told when outcome reports were queued;
    ``report_ready`` is handed each of them first (:meth:`Deliveries.report_ready`)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: PaServiceClient,
        metrics: Metrics,
        *,
        wake_queue: Callable[[], None],
        report_ready: ReportReady | None = None,
        clock: Callable[[], float] = time.time,
        pharmacies: Pharmacies | None = None,
    ) -> None:
        self.pharmacies = pharmacies or Pharmacies()
        self.settings = settings
        self.store = store
        self.client = client
        self.metrics = metrics
        self.wake_queue = wake_queue
        self.report_ready = report_ready
        self.clock = clock

    def intake(
        self,
        body: ClaimExchange | Mapping[str, Any],
        actor: str,
        idempotency_key: str | None = None,
        scope: Scope = None,
    ) -> ClaimAnswer:
        """The answer for a claim exchange (a JSON body is checked here, so that the
        time spent reading it counts in ``elapsed_ms`` and against the budget). With
        ``idempotency_key``, a key used before answers that claim's answer again (an
        :class:`idempotency.ReplayedClaimAnswer`), decision 0017. A chain's claim from
        a pharmacy it does not list, or one ``scope`` does not include, is refused
        before anything is stored or sent (decision 0022)."""
        started = time.monotonic()
        budget_s = self.settings.outcomes.budget_ms / 1000.0
        if not isinstance(body, ClaimExchange):
            body = ClaimExchange.model_validate(body)
        req, resp, metadata = body.request, body.response, body.metadata
        req_bytes, resp_bytes = bytes(req), bytes(resp)
        rv = req.as_request()
        missing = missing_for_decision(req, resp, rv)
        if missing:  # lenient parsing tolerates framing, not missing substance
            raise BridgeError(
                400,
                "malformed_claim",
                "the claim exchange lacks what a decision needs: " + "; ".join(missing),
                {"missing": missing},
            )
        creds = self.pharmacies.credentials_for(rv.service_provider_id)  # 422 if unknown
        check_scope(scope, rv.service_provider_id)
        api_key = creds.api_key if creds is not None else self.client.api_key
        fp = ""
        if idempotency_key is not None:
            fp = idempotency.fingerprint(
                req_bytes.decode("latin-1"), resp_bytes.decode("latin-1"), metadata
            )
            earlier = self._idempotent(idempotency_key, fp)
            if earlier is not None:
                return self._replayed(earlier)
        problem = count_problem(req, resp)
        if problem is not None:
            part, why = problem
            detail = {"part": part, "field_id": "A9"} if part == "request" else {"part": part}
            raise BridgeError(400, "malformed_claim", why, detail)
        sv = resp.as_response()
        decisions = decide(sv)
        claim_id = uuid.uuid4().hex
        first = decisions[0]
        # the transactions whose report is queued (the rest are answered by a call now)
        queued = [d for d in decisions if not d.outcomes_first and d.index < len(req.groups)]
        variables_for = functools.partial(
            outcome_variables,
            req,
            resp,
            api_key=api_key,
            views=(rv, sv),
            prescriber_fax=prescriber_fax(metadata),
        )

        def store_exchange(db: Database) -> None:
            row = new_exchange(claim_id, "claim", actor, rv, req_bytes, now_iso(self.clock()))
            row["transaction_count"] = len(decisions)
            row["response_raw"] = resp_bytes
            row["metadata_json"] = json.dumps(metadata)
            row["transaction_status"] = first.transaction_status
            row["reject_codes"] = ",".join(first.reject_codes)
            row["pa_eligible"] = int(any(d.pa_eligible for d in decisions))
            row["claim_keys"] = json.dumps([claim_key(req, i, rv) for i in range(len(req.groups))])
            exchanges.insert(db, row)
            if idempotency_key is not None:
                idempotency.record(db, "claims", idempotency_key, fp, claim_id)
            audit.add(
                db,
                actor,
                "claim.accepted",
                claim_id,
                f"{rv.transaction_code} {first.transaction_status}",
            )
            for d in queued:
                enqueue(
                    db,
                    Kind.OUTCOME_REPORT,
                    {"claim_id": claim_id, "index": d.index},
                    claim_id=claim_id,
                    now=self.clock(),
                )

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
            calls[d.index] = self.client.start_outcomes(
                variables_for(d.index),
                budget_ms=max(1, int(remaining_ms)),
                fallback_message=d.payer_message,
            )
        try:
            self.store.write(store_exchange, timeout=10.0)
            stored_error: StoreUnavailable | None = None
        except StoreUnavailable as e:
            stored_error = e
        except idempotency.KeyTaken as e:  # the same key, at the same moment
            return self._replayed(e.object_id)
        except idempotency.IdempotencyConflict:
            raise idempotency.key_reused() from None

        answers = []
        for d in decisions:
            message, label = d.payer_message, ""
            source: MessageSource = "payer"
            outcomes_ms: float | None = None
            reason: dict[str, Any] = {}
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
                    reason = fallback_reason(res.error)
            answers.append(
                TransactionAnswer(
                    index=d.index,
                    transaction_status=d.transaction_status,
                    reject_codes=d.reject_codes,
                    pa_eligible=d.pa_eligible,
                    message=message,
                    button_label=label,
                    message_source=source,
                    outcomes_elapsed_ms=outcomes_ms,
                    **reason,
                )
            )

        if stored_error is not None:
            raise BridgeError(
                503,
                "storage_unavailable",
                "the claim could not be stored; send it again",
                str(stored_error),
            ) from None
        if self.report_ready is not None:
            for d in queued:
                self.report_ready(claim_id, d.index, functools.partial(variables_for, d.index))

        answer = ClaimAnswer(
            claim_id=claim_id,
            **answers[0].model_dump(exclude={"index"}),  # the first transaction's answer
            transactions=answers if len(answers) > 1 else None,
            tolerated=[*req.tolerated, *resp.tolerated] or None,
            elapsed_ms=round((time.monotonic() - started) * 1000, 1),
        )
        decision: str = answer.message_source
        if decision == "payer":
            decision = "submit_pa" if answer.pa_eligible else "async"
        self.metrics.claims.labels(decision).inc()
        if calls and answer.elapsed_ms > self.settings.outcomes.budget_ms:
            self.metrics.budget_misses.inc()
        saved = answer.json_text()

        def record_answer(db: Database) -> None:
            exchanges.record_answer(db, claim_id, saved, answer.message_source)

        # rides in the next commit (decision 0025): the exchange is durable already
        self.store.defer(record_answer)
        log_event(
            "claim.accepted",
            claim_id=claim_id,
            transaction_code=rv.transaction_code,
            transaction_status=answer.transaction_status,
            reject_codes=answer.reject_codes,
            message_source=answer.message_source,
            elapsed_ms=answer.elapsed_ms,
            outcomes_ms=answer.outcomes_elapsed_ms,
        )
        if queued:  # last: the delivery thread then does not compete with this one
            self.wake_queue()
        return answer

    # ---- Idempotency-Key (decision 0017) ------------------------------------------
    def _idempotent(self, key: str, fp: str) -> str | None:
        try:
            return idempotency.lookup(self.store, "claims", key, fp)
        except idempotency.IdempotencyConflict:
            raise idempotency.key_reused() from None

    def _replayed(self, claim_id: str) -> idempotency.ReplayedClaimAnswer:
        """The answer given for ``claim_id``, again. It is recorded just after it is
        sent; a replay that arrives while the first request is still being answered
        waits for it (up to the outcomes budget and a margin)."""
        deadline = time.monotonic() + self.settings.outcomes.budget_ms / 1000.0 + 2.0
        while True:
            self.store.flush()
            saved = exchanges.answer_json(self.store.reader(), claim_id)
            if saved is not None:
                return idempotency.ReplayedClaimAnswer.model_validate(json.loads(saved))
            if time.monotonic() > deadline:
                raise BridgeError(
                    409,
                    "idempotency_in_progress",
                    "a request with this Idempotency-Key is still being answered; send it"
                    " again in a moment",
                    {"claim_id": claim_id},
                )
            time.sleep(0.01)
