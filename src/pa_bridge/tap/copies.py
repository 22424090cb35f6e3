"""Tap mode: pa-bridge receives copies of the claim traffic and takes each exchange in
as ``POST /v1/claims`` does (decision 0039). The claim path itself is untouched:
nothing is ever sent back on a tap connection.

How copies arrive: on a TCP connection (optionally TLS) to ``tap.listen``, each
message framed by the ``tap.framing`` profile, the request before its response.
Requests and responses are paired by the matching rule of decision 0040 (header and
prescription numbers), not by their order alone: copies of several claims may be
interleaved, on one connection or several (e.g. requests on one, responses on
another). Two connections are two streams: a response copied on one may get ahead of
its request on the other, so a response that answers no request yet waits up to
:data:`RESPONSE_WAIT_SECONDS` for a request from another connection (on its own
connection, its request came before it or not at all). A request whose response does not arrive within
``pair_timeout_seconds`` is dropped, counted and logged; so is a response whose
request does not come within that wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor

from ncpdp.framing import Framing, FramingError

from ..logs import log_event
from ..metrics import Metrics
from .exchanges import ExchangeTaker, Taken
from .matching import Message, Waiting, answers, read
from .peers import Networks, peer_allowed, peer_name

__all__ = ["TapListener"]

_READ = 65_536
#: how long a response copied ahead of its request (on another connection) waits for
#: it; short, so that a stale response never meets a later request it would answer
RESPONSE_WAIT_SECONDS = 5.0


class TapListener:
    """The tap (module docstring). Lives on one event loop; exchanges are taken in on
    ``executor``."""

    def __init__(
        self,
        *,
        framing: Framing,
        taker: ExchangeTaker,
        metrics: Metrics,
        executor: Executor,
        pair_timeout: float = 60.0,
        allow: Networks = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.framing = framing
        self.taker = taker
        self.metrics = metrics
        self.executor = executor
        self.pair_timeout = pair_timeout
        self.allow = allow
        self.clock = clock
        #: requests waiting for their response (with their bytes and sender)
        self._requests: Waiting[tuple[bytes, str]] = Waiting()
        #: responses that came before their request: (when, response, bytes, sender,
        #: connection)
        self._responses: deque[tuple[float, Message, bytes, str, object]] = deque()
        self.response_wait = min(pair_timeout, RESPONSE_WAIT_SECONDS)
        self._work: set[asyncio.Future[Taken]] = set()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if not peer_allowed(peer, self.allow):
            log_event("tap.refused", level=logging.WARNING, peer=peer_name(peer))
            writer.close()
            return
        name = peer_name(peer)
        deframer = self.framing.deframer()
        log_event("tap.connected", peer=name)
        try:
            while True:
                data = await reader.read(_READ)
                if not data:
                    break
                for frame in deframer.feed(data):
                    self.copy(frame.payload, name, writer)
        except FramingError as e:
            log_event("tap.framing", level=logging.WARNING, peer=name, error=str(e))
        except (OSError, ConnectionError):
            pass
        finally:
            writer.close()
            if deframer.skipped:
                log_event("tap.bytes_outside_frames", peer=name, bytes=deframer.skipped)
            log_event("tap.disconnected", peer=name)

    def copy(self, payload: bytes, peer: str, source: object = None) -> None:
        """One copied message: a request waits for its response; a response is paired
        with the oldest request it answers and the exchange is taken in. ``source``:
        the connection it came on (a response waits only for a request from another)."""
        now = self.clock()
        self._expire(now)
        message = read(payload)
        if message is None:
            self._count("unreadable")
            log_event("tap.unreadable", level=logging.WARNING, peer=peer, bytes=len(payload))
            return
        if message.is_request:
            early = next(
                (r for r in self._responses if r[4] is not source and answers(message, r[1])),
                None,
            )
            if early is None:
                self._requests.add(now, message, (payload, peer))
            else:  # its response came first, on another connection
                self._responses.remove(early)
                self._take(message, payload, peer, early[1], early[2])
            return
        paired = self._requests.pair(message)
        if paired is None:
            self._responses.append((now, message, payload, peer, source))
            return
        request, (request_payload, request_peer) = paired
        self._take(request, request_payload, request_peer, message, payload)

    def _take(
        self,
        request: Message,
        request_payload: bytes,
        request_peer: str,
        message: Message,
        payload: bytes,
    ) -> None:
        """Take the exchange in on the executor."""
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(
            self.executor,
            lambda: self.taker.take(
                request, request_payload, message, payload, mode="tap", peer=request_peer
            ),
        )
        self._work.add(work)
        work.add_done_callback(self._work.discard)

    def _expire(self, now: float) -> None:
        while self._responses and now - self._responses[0][0] > self.response_wait:
            _, response, _, peer, _ = self._responses.popleft()
            self._count("unmatched_response")
            log_event(
                "tap.unmatched_response",
                level=logging.WARNING,
                peer=peer,
                transaction_code=response.transaction_code,
            )
        for request, (_, peer) in self._requests.expired(now, self.pair_timeout):
            self._count("unpaired_request")
            log_event(
                "tap.unpaired_request",
                level=logging.WARNING,
                peer=peer,
                transaction_code=request.transaction_code,
            )

    @property
    def waiting(self) -> int:
        """Copied requests waiting for their response."""
        return len(self._requests)

    @property
    def early_responses(self) -> int:
        """Copied responses waiting for their request (they came first)."""
        return len(self._responses)

    def expire(self) -> None:
        """Drop requests whose response has not come, and responses whose request has
        not (called now and then)."""
        self._expire(self.clock())

    def _count(self, result: str) -> None:
        self.metrics.tap_exchanges.labels("tap", result).inc()

    async def finish(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the exchanges being taken in."""
        if self._work:
            await asyncio.wait(set(self._work), timeout=timeout)
