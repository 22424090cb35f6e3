"""Reversals: store the B2 with its queue item, try to deliver it at once, answer
with where it stands (delivered now, or queued)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..logs import log_event
from ..outbox import Outbox
from ..store import Database, Kind, Status, Store, StoreUnavailable, audit, exchanges, now_iso
from ..store import outbox as queue_items
from ..store.outbox import enqueue
from ._parse import new_exchange
from .bodies import Reversal, ReversalAnswer
from .decisions import claim_key, request_count_problem
from .errors import BridgeError

__all__ = ["Reversals"]


class Reversals:
    """``POST /v1/reversals``."""

    def __init__(
        self, store: Store, outbox: Outbox, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.clock = clock

    def reversal(
        self, body: Reversal | Mapping[str, Any], actor: str
    ) -> tuple[ReversalAnswer, bool]:
        """Returns (answer, delivered now?)."""
        if not isinstance(body, Reversal):
            body = Reversal.model_validate(body)
        req = body.request
        raw = bytes(req)
        if req.transaction_code != "B2":
            raise BridgeError(
                400, "not_a_reversal", f"a reversal must be a B2, this is a {req.transaction_code}"
            )
        problem = request_count_problem(req)
        if problem is not None:
            raise BridgeError(
                400, "malformed_claim", f"the B2's {problem}", {"part": "request", "field_id": "A9"}
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
            reversal_id=exchange_id, queue_id=item_id, status=status, last_error=last_error
        )
        log_event("reversal.accepted", reversal_id=exchange_id, queue_id=item_id, status=status)
        return answer, delivered
