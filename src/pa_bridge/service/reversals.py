"""Reversals: store the B2 with its queue item, try to deliver it at once, answer
with where it stands (delivered now, or queued)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from ..logs import log_event
from ..outbox import Outbox
from ..store import (
    Database,
    Kind,
    Status,
    Store,
    StoreUnavailable,
    audit,
    exchanges,
    now_iso,
    pas,
)
from ..store import outbox as queue_items
from ..store.outbox import enqueue
from . import idempotency
from ._parse import new_exchange
from .bodies import Reversal, ReversalAnswer, ReversalPa, read
from .decisions import claim_key, request_count_problem
from .errors import Conflict, InvalidRequest, Refused, Unavailable
from .pharmacies import Pharmacies, Scope, check_scope

__all__ = ["Reversals", "reversal_outcome"]


def reversal_outcome(status: str, held: list[ReversalPa]) -> dict[str, Any]:
    """What a reversal's answer says happened: ``pa_found``, ``pas`` (the claim's PAs,
    each PA the service deletes; ``deleted`` is true once its DELETE event has arrived,
    as for a repeated B2) and a plain ``message``."""
    live = ", ".join(p.pa_id for p in held if not p.deleted)
    done = ", ".join(p.pa_id for p in held if p.deleted)
    already = f" PA {done} was deleted already." if done else ""
    if status == Status.DELIVERED:
        if live:
            message = (
                f"The PA service took the reversal and deletes PA {live}; its DELETE event"
                " follows by callback." + already
            )
        elif done:
            message = "The PA service took the reversal." + already
        else:
            message = "The PA service took the reversal; pa-bridge knows no PA for this claim."
    elif status == Status.FAILED:
        message = "The PA service refused the reversal; nothing was deleted."
    elif status == Status.HELD:
        # refused for pa-bridge's own configuration (or held after a restore): the
        # dispensing system has nothing to change, store IT has
        message = (
            "The reversal is queued and waits for store IT (pa-bridge queue list shows"
            " why); it is sent once that is fixed"
            + (f"; it then deletes PA {live}." if live else ".")
            + already
        )
    else:
        message = (
            "The reversal is queued and retried until the PA service takes it"
            + (f"; it then deletes PA {live}." if live else ".")
            + already
        )
    return {"pa_found": bool(held), "pas": held, "message": message}


class Reversals:
    """``POST /v1/reversals``."""

    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        *,
        clock: Callable[[], float] = time.time,
        pharmacies: Pharmacies | None = None,
    ) -> None:
        self.pharmacies = pharmacies or Pharmacies()
        self.store = store
        self.outbox = outbox
        self.clock = clock

    def reversal(
        self,
        body: Reversal | Mapping[str, Any],
        actor: str,
        idempotency_key: str | None = None,
        scope: Scope = None,
    ) -> tuple[ReversalAnswer, bool]:
        """Returns (answer, delivered now?). Raises ``422 reversal_refused`` when the
        service refused the B2 for good (it stays in the queue, ``failed``); one refused
        for our own credentials or configuration is held, and answered as queued. A key used
        before answers that reversal's state and sends nothing (decision 0017). A chain's
        B2 from a pharmacy it does not list (422) or outside ``scope`` (403) is refused
        before anything is stored (decision 0022)."""
        if not isinstance(body, Reversal):
            body = read(Reversal, body)
        req = body.request
        raw = bytes(req)
        if req.transaction_code != "B2":
            raise InvalidRequest(
                "not_a_reversal", f"a reversal must be a B2, this is a {req.transaction_code}"
            )
        problem = request_count_problem(req)
        if problem is not None:
            raise InvalidRequest(
                "malformed_claim", f"the B2's {problem}", {"part": "request", "field_id": "A9"}
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
            raise InvalidRequest(
                "malformed_claim",
                "the B2 lacks what the service needs to find the claim: " + ", ".join(missing),
                {"part": "request"},
            )
        self.pharmacies.credentials_for(rv.service_provider_id)  # 422 if not configured
        check_scope(scope, rv.service_provider_id)
        exchange_id = uuid.uuid4().hex
        keys = [claim_key(req, i) for i in range(len(req.groups))]
        fp = ""
        if idempotency_key is not None:
            fp = idempotency.fingerprint(raw.decode("latin-1"))
            try:
                earlier = idempotency.lookup(self.store, "reversals", idempotency_key, fp)
            except idempotency.IdempotencyConflict:
                raise idempotency.key_reused() from None
            if earlier is not None:
                return self._replayed(earlier, keys)
        # a PA deleted already (a repeated B2) is still the claim's: found
        held = self._held(keys)

        def job(db: Database) -> int:
            row = new_exchange(exchange_id, "reversal", actor, rv, raw, now_iso(self.clock()))
            row["transaction_count"] = len(req.groups)
            exchanges.insert(db, row)
            item = enqueue(
                db,
                Kind.REVERSAL,
                {"exchange_id": exchange_id, "claim_keys": keys},
                claim_id=exchange_id,
                now=self.clock(),
            )
            audit.add(db, actor, "reversal.accepted", exchange_id, f"queue item {item}")
            if idempotency_key is not None:
                idempotency.record(db, "reversals", idempotency_key, fp, exchange_id)
            return item

        try:
            item_id = self.store.write(job)
        except idempotency.KeyTaken as e:
            return self._replayed(e.object_id, keys)
        except idempotency.IdempotencyConflict:
            raise idempotency.key_reused() from None
        except StoreUnavailable as e:
            raise Unavailable(
                "storage_unavailable",
                "the reversal could not be stored; send it again",
                str(e),
            ) from None
        # Once the B2 is delivered the answer is 200, whatever happens to the
        # bookkeeping after it (the outbox records it later if the database is locked).
        delivered = self.outbox.deliver(item_id)
        status, last_error = Status.DELIVERED.value, None
        if not delivered:
            try:
                state = queue_items.state(self.store.reader(), item_id)
                if state is None:
                    raise IndexError(item_id)
                status, last_error = state
            except Exception as e:  # the reversal is queued all the same
                status, last_error = Status.PENDING.value, f"status unknown: {type(e).__name__}"
        answer = ReversalAnswer(
            reversal_id=exchange_id,
            queue_id=item_id,
            status=_answer_status(status),
            last_error=last_error,
            **reversal_outcome(status, held),
        )
        log_event("reversal.accepted", reversal_id=exchange_id, queue_id=item_id, status=status)
        if answer.status == "failed":  # refused for good: store IT sees it in `queue list`
            raise Refused(
                "reversal_refused",
                "the PA service refused this reversal; it is kept in the queue as failed"
                " (pa-bridge queue list) and is not retried by itself",
                answer.model_dump(),
            )
        return answer, delivered

    def _held(self, keys: list[str]) -> list[ReversalPa]:
        """The PAs we hold for the reversed claims (by claim key), deleted or not."""
        db = self.store.reader()
        out: list[ReversalPa] = []
        for key in dict.fromkeys(keys):
            out.extend(
                ReversalPa(
                    pa_id=row["id"],
                    workflow_status=row["workflow_status"],
                    deleted=bool(row["deleted"]),
                )
                for row in pas.for_reversal(db, key)
            )
        return out

    def _replayed(
        self, exchange_id: str, keys: list[str]
    ) -> tuple[idempotency.ReplayedReversalAnswer, bool]:
        """The answer for a reversal accepted before (a replayed Idempotency-Key): its
        queue item's state now; nothing is sent again."""
        item = queue_items.for_claim(self.store.reader(), exchange_id, Kind.REVERSAL)
        if item is None:
            raise Conflict(
                "idempotency_in_progress",
                "a request with this Idempotency-Key is still being answered; send it again in"
                " a moment",
            )
        item_id, stored_status, last_error = item
        status = _answer_status(stored_status)
        answer = idempotency.ReplayedReversalAnswer(
            reversal_id=exchange_id,
            queue_id=item_id,
            status=status,
            last_error=last_error,
            **reversal_outcome(status, self._held(keys)),
        )
        if status == Status.FAILED:
            raise Refused(
                "reversal_refused", "the PA service refused this reversal", answer.model_dump()
            )
        return answer, status == Status.DELIVERED


def _answer_status(stored: str) -> Any:
    """The queue's status as the answer says it: delivered, failed (for good), or
    pending (queued: not tried yet, retrying, or held after a restore)."""
    if stored in (Status.DELIVERED, Status.FAILED):
        return cast(Any, str(stored))
    return "pending"
