"""Tap mode: pa-bridge receives copies of the claim traffic and takes each exchange in
as ``POST /v1/claims`` does (decision 0039). The claim path itself is untouched:
nothing is ever sent back on a tap connection.

How copies arrive: on a TCP connection (optionally TLS) to ``tap.listen``, each
message framed by the ``tap.framing`` profile, the request before its response.
Requests and responses are paired by the matching rule of decision 0040 (header and
prescription numbers), not by their order alone: copies of several claims may be
interleaved, on one connection or several (e.g. requests on one, responses on
another). A request whose response does not arrive within ``pair_timeout_seconds``
is dropped, counted and logged; so is a response that answers no request seen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from ncpdp.framing import Framing, FramingError

from ..logs import log_event
from ..metrics import Metrics
from .exchanges import ExchangeTaker, Taken
from .matching import Waiting, read
from .peers import Networks, peer_allowed, peer_name

__all__ = ["TapListener"]

_READ = 65_536


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
                    self.copy(frame.payload, name)
        except FramingError as e:
            log_event("tap.framing", level=logging.WARNING, peer=name, error=str(e))
        except (OSError, ConnectionError):
            pass
        finally:
            writer.close()
            if deframer.skipped:
                log_event("tap.bytes_outside_frames", peer=name, bytes=deframer.skipped)
            log_event("tap.disconnected", peer=name)

    def copy(self, payload: bytes, peer: str) -> None:
        """One copied message: a request waits for its response; a response is paired
        with the oldest request it answers and the exchange is taken in."""
        now = self.clock()
        self._expire(now)
        message = read(payload)
        if message is None:
            self._count("unreadable")
            log_event("tap.unreadable", level=logging.WARNING, peer=peer, bytes=len(payload))
            return
        if message.is_request:
            self._requests.add(now, message, (payload, peer))
            return
        paired = self._requests.pair(message)
        if paired is None:
            self._count("unmatched_response")
            log_event(
                "tap.unmatched_response",
                level=logging.WARNING,
                peer=peer,
                transaction_code=message.transaction_code,
            )
            return
        request, (request_payload, request_peer) = paired
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

    def expire(self) -> None:
        """Drop requests whose response has not come (called now and then)."""
        self._expire(self.clock())

    def _count(self, result: str) -> None:
        self.metrics.tap_exchanges.labels("tap", result).inc()

    async def finish(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the exchanges being taken in."""
        if self._work:
            await asyncio.wait(set(self._work), timeout=timeout)
