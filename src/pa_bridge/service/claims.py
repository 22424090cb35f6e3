"""Claim intake: parse the exchange, decide, store it with its queued reports, call
the outcomes interface for the transactions that need it, answer within the budget."""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from ..client import (
    OutcomeResult,
    OutcomesCall,
    PaServiceClient,
    fallback_reason,
    outcome_variables,
)
from ..config import Settings
from ..logs import log_event
from ..metrics import Metrics
from ..store import (
    Database,
    Kind,
    Store,
    StoreUnavailable,
    audit,
    exchanges,
    now_iso,
    parse_iso,
)
from ..store.outbox import enqueue
from . import idempotency
from ._parse import new_exchange
from .bodies import ClaimAnswer, ClaimExchange, MessageSource, TransactionAnswer, read
from .decisions import TxDecision, claim_key, count_problem, decide, prescriber_fax
from .errors import InvalidRequest, NotFound, Unavailable
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
        #: claims with an Idempotency-Key being answered now: their answer, once ready
        self._answering: dict[str, Future[ClaimAnswer]] = {}

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
            body = read(ClaimExchange, body)
        req, resp, metadata = body.request, body.response, body.metadata
        req_bytes, resp_bytes = bytes(req), bytes(resp)
        rv = req.as_request()
        missing = missing_for_decision(req, resp, rv)
        if missing:  # lenient parsing tolerates framing, not missing substance
            raise InvalidRequest(
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
            raise InvalidRequest("malformed_claim", why, detail)
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
        # a replay of this key while this request is being answered waits for its
        # answer here (until the answer's record is committed, or lost)
        answering: Future[ClaimAnswer] | None = None
        if idempotency_key is not None:
            answering = self._answering[claim_id] = Future()
        try:
            self.store.write(store_exchange, timeout=10.0)
            stored_error: StoreUnavailable | None = None
        except StoreUnavailable as e:
            stored_error = e
        except idempotency.KeyTaken as e:  # the same key, at the same moment
            self._answering.pop(claim_id, None)
            return self._replayed(e.object_id)
        except idempotency.IdempotencyConflict:
            self._answering.pop(claim_id, None)
            raise idempotency.key_reused() from None

        answers = []
        for d in decisions:
            call = calls.get(d.index)
            if call is None:
                answers.append(self._transaction_answer(d))
                continue
            res = call.result()  # never raises: the answer or the fallback
            self.metrics.outcomes_calls.labels(
                "ok" if res.source == "outcomes" else "fallback"
            ).inc()
            self.metrics.outcomes_latency.observe(res.elapsed_ms / 1000.0)
            if res.source == "outcomes":
                answers.append(self._transaction_answer(d, res.message, res.button_label, res))
            else:
                answers.append(
                    self._transaction_answer(d, res=res, reason=fallback_reason(res.error))
                )

        if stored_error is not None:
            self._answering.pop(claim_id, None)  # nothing was stored: no replay to serve
            raise Unavailable(
                "storage_unavailable",
                "the claim could not be stored; send it again",
                str(stored_error),
            ) from None
        if self.report_ready is not None:
            for d in queued:
                self.report_ready(claim_id, d.index, functools.partial(variables_for, d.index))

        answer = _claim_answer(claim_id, answers, [*req.tolerated, *resp.tolerated], started)
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
        if answering is None:
            self.store.defer(record_answer)
        else:
            answering.set_result(answer)

            def recorded(_ok: bool) -> None:  # or lost: a replay then rebuilds it
                self._answering.pop(claim_id, None)

            self.store.defer(record_answer, recorded)
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
        """The answer given for ``claim_id``, again (issue 32):

        - while the first request is being answered in this daemon, its answer when it
          is ready (a wait on that request, never a poll);
        - else the answer recorded with the claim;
        - else, when no answer was recorded (the daemon stopped, or the database failed,
          between the claim's commit and its answer's), the answer rebuilt from the
          stored claim, and recorded. On PostgreSQL another daemon may still be
          answering it: the replay looks again until that one's budget has passed
          since the claim's commit, and only then rebuilds."""
        budget_s = self.settings.outcomes.budget_ms / 1000.0
        answering = self._answering.get(claim_id)
        if answering is not None:
            with contextlib.suppress(Exception):  # failed or late: what is stored
                answer = answering.result(timeout=budget_s + _ANSWER_MARGIN_S)
                return idempotency.ReplayedClaimAnswer.model_validate(answer.model_dump())
        while True:
            self.store.flush()
            row = exchanges.get(self.store.reader(), claim_id)
            if row is None:  # purged with its key's claim, or never there
                raise NotFound("unknown_claim", "no claim with that id", {"claim_id": claim_id})
            if row["answer_json"] is not None:
                saved = json.loads(row["answer_json"])
                return idempotency.ReplayedClaimAnswer.model_validate(saved)
            since = self.clock() - parse_iso(row["received_at"])
            if self.store.dialect != "postgresql" or since > budget_s + _ANSWER_MARGIN_S:
                return self._rebuilt(row)
            time.sleep(0.01)  # another daemon of the fleet may be answering it now

    def _rebuilt(self, row: exchanges.ExchangeRow) -> idempotency.ReplayedClaimAnswer:
        """The answer for a stored claim whose answer was not recorded: the payer's
        answer for each transaction, as a claim whose outcomes call fails gets it (the
        outcomes service's reply, if there was one, is not known), with
        ``fallback_reason`` ``not_recorded``. Recorded, so that a later replay gets the
        same."""
        started = time.monotonic()
        body = ClaimExchange.model_validate(
            {
                "request": bytes(row["request_raw"] or b"").decode("latin-1"),
                "response": bytes(row["response_raw"] or b"").decode("latin-1"),
                "metadata": json.loads(row["metadata_json"] or "{}"),
            }
        )
        req, resp = body.request, body.response
        answers = [
            self._transaction_answer(d, reason={"fallback_reason": "not_recorded"})
            if d.outcomes_first and d.index < len(req.groups)
            else self._transaction_answer(d)
            for d in decide(resp.as_response())
        ]
        answer = _claim_answer(row["id"], answers, [*req.tolerated, *resp.tolerated], started)
        saved = answer.json_text()
        claim_id = row["id"]
        self.store.defer(
            lambda db: exchanges.record_answer(db, claim_id, saved, answer.message_source)
        )
        log_event("claim.answer_rebuilt", claim_id=claim_id)
        return idempotency.ReplayedClaimAnswer.model_validate(answer.model_dump())

    def _transaction_answer(
        self,
        d: TxDecision,
        message: str | None = None,
        label: str | None = None,
        res: OutcomeResult | None = None,
        reason: dict[str, Any] | None = None,
    ) -> TransactionAnswer:
        """One transaction's answer: the payer's message (and the default button label
        when it is eligible for PA), replaced by the outcomes service's ``message`` and
        ``label`` when it gave them; a fallback when ``reason`` says why."""
        default = self.settings.intake.default_button_label if d.pa_eligible else ""
        source: MessageSource = "payer"
        if res is not None or reason:
            source = "fallback" if reason else "outcomes"
        return TransactionAnswer(
            index=d.index,
            transaction_status=d.transaction_status,
            reject_codes=d.reject_codes,
            pa_eligible=d.pa_eligible,
            message=message or d.payer_message,
            button_label=label or default,
            message_source=source,
            outcomes_elapsed_ms=None if res is None else round(res.elapsed_ms, 1),
            **(reason or {}),
        )


#: how long after its budget a claim's answer may still be on its way to its record
_ANSWER_MARGIN_S = 2.0


def _claim_answer(
    claim_id: str, answers: list[TransactionAnswer], tolerated: list[str], started: float
) -> ClaimAnswer:
    return ClaimAnswer(
        claim_id=claim_id,
        **answers[0].model_dump(exclude={"index"}),  # the first transaction's answer
        transactions=answers if len(answers) > 1 else None,
        tolerated=tolerated or None,
        elapsed_ms=round((time.monotonic() - started) * 1000, 1),
    )
