"""A claim exchange seen on the wire, taken in through the use cases the local API
serves: a B1 or B3 by :class:`ClaimIntake` as ``POST /v1/claims`` does (decisions, the
outcomes call and its report, the worklist's Submit PA button), a B2 the payer
accepted by :class:`Reversals` as ``POST /v1/reversals`` does. One path: this module
only turns bytes into the bodies those take.

A request seen again within ``retransmit_seconds`` (the same bytes: a dispensing
system that timed out and sent it again) is taken in once: the later exchange gets
the first one's result (decision 0040). One that was not taken in (skipped, refused,
an error) is tried again.

Blocking (the use cases are): the relay calls :meth:`ExchangeTaker.take` on a worker
thread.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..logs import log_event
from ..service import BridgeError, UseCases
from ..service.bodies import ClaimAnswer
from .matching import Message

__all__ = ["ExchangeTaker", "Taken"]

Result = Literal["claim", "reversal", "skipped", "refused", "error"]
#: transaction codes taken in as claims (billing); B2 goes to the reversals
CLAIM_CODES = frozenset({"B1", "B3"})


@dataclass(frozen=True, slots=True)
class Taken:
    """What was done with an exchange: ``answer`` is the claim's (as ``POST
    /v1/claims`` answers it) for a claim; ``retransmit`` when it was the result of
    the same request taken in earlier."""

    result: Result
    answer: ClaimAnswer | None = None
    detail: str = ""
    retransmit: bool = False


class _Seen:
    __slots__ = ("at", "done", "taken")

    def __init__(self, at: float) -> None:
        self.at = at
        self.done = threading.Event()
        self.taken: Taken | None = None


def request_digest(payload: bytes) -> bytes:
    """What identifies a request's bytes without keeping them (they hold PHI)."""
    return hashlib.blake2b(payload, digest_size=16).digest()


class ExchangeTaker:
    """Takes exchanges in (module docstring). ``mode`` (``tap`` or ``inline``) names
    where they came from in the audit trail, the logs and the metrics."""

    def __init__(
        self,
        use_cases: UseCases,
        *,
        retransmit_seconds: float = 120.0,
        wait_seconds: float = 3.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.use_cases = use_cases
        self.window = retransmit_seconds
        #: how long a retransmission waits for the first one's result still being made
        self.wait_seconds = wait_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[bytes, _Seen] = OrderedDict()

    def take(
        self,
        request: Message,
        request_payload: bytes,
        response: Message,
        response_payload: bytes,
        *,
        mode: str,
        peer: str,
    ) -> Taken:
        """Take the exchange in; never raises (a refusal or an error is a result)."""
        key = request_digest(request_payload)
        now = self.clock()
        with self._lock:
            while self._seen:  # oldest first: drop what is past the window
                first = next(iter(self._seen.values()))
                if now - first.at <= self.window or not first.done.is_set():
                    break
                self._seen.popitem(last=False)
            seen = self._seen.get(key)
            mine: _Seen | None = None
            if seen is None:
                mine = self._seen[key] = _Seen(now)
            else:
                seen.at = now
                self._seen.move_to_end(key)
        if seen is not None:
            seen.done.wait(self.wait_seconds)
            earlier = seen.taken
            if earlier is not None:
                self._count(mode, "retransmit")
                log_event(
                    "wire.retransmit",
                    mode=mode,
                    peer=peer,
                    transaction_code=request.transaction_code,
                    claim_id=earlier.answer.claim_id if earlier.answer else None,
                )
                return Taken(earlier.result, earlier.answer, earlier.detail, retransmit=True)
            return self._take_now(request, request_payload, response, response_payload, mode, peer)
        assert mine is not None
        try:
            taken = self._take_now(request, request_payload, response, response_payload, mode, peer)
        except BaseException:
            taken = Taken("error", detail="interrupted")
            raise
        finally:
            with self._lock:
                if taken.result not in ("claim", "reversal"):  # nothing taken in: try again
                    self._seen.pop(key, None)
                else:
                    mine.taken = taken
            mine.done.set()
        return taken

    def _take_now(
        self,
        request: Message,
        request_payload: bytes,
        response: Message,
        response_payload: bytes,
        mode: str,
        peer: str,
    ) -> Taken:
        code = request.transaction_code
        actor = f"{mode}:{peer}"
        try:
            if code in CLAIM_CODES:
                answer = self.use_cases.claims.intake(
                    {
                        "request": request_payload.decode("latin-1"),
                        "response": response_payload.decode("latin-1"),
                    },
                    actor,
                )
                taken = Taken("claim", answer)
            elif code == "B2":
                if response.transmission.as_response().rejected:
                    taken = Taken("skipped", detail="the payer refused the reversal")
                else:
                    self.use_cases.reversals.reversal(
                        {"request": request_payload.decode("latin-1")}, actor
                    )
                    taken = Taken("reversal")
            else:
                taken = Taken("skipped", detail=f"transaction code {code or 'blank'}")
        except BridgeError as e:
            taken = Taken("refused", detail=e.code)
        except Exception as e:  # never let one exchange stop the relay
            log_event("wire.take_failed", level=logging.ERROR, mode=mode, error=type(e).__name__)
            taken = Taken("error", detail=type(e).__name__)
        self._count(mode, taken.result)
        if taken.result != "claim":  # a claim logs claim.accepted itself
            log_event(
                "wire.exchange",
                level=logging.WARNING if taken.result in ("refused", "error") else logging.INFO,
                mode=mode,
                peer=peer,
                transaction_code=code,
                result=taken.result,
                detail=taken.detail,
            )
        return taken

    def _count(self, mode: str, result: str) -> None:
        self.use_cases.metrics.tap_exchanges.labels(mode, result).inc()
