"""Inline mode: pa-bridge where the switch was (decisions 0039-0041).

The dispensing system connects here as it did to its switch. Each request frame is
forwarded unchanged to the real switch (:class:`SwitchPool`) and the switch's answer
comes back:

- byte for byte, at once, for a paid claim and for every answer that is not a 70, 75
  or 76 reject; the exchange is then taken in (:class:`ExchangeTaker`, the local API's
  use cases) after the answer is written;
- for a 70/75/76 reject, with the outcomes message in place of the payer's 526-FQ
  text (:func:`rewrite.replace_messages`) when the claim is taken in and the outcomes
  interface answers within ``outcomes.budget_ms``;
- fail-open: the payer's bytes unchanged, at once, on any error of ours, when our
  budget runs out, or when either message does not parse.

If the switch does not answer (its connection breaks, or ``switch_timeout_seconds``
pass) there are no payer's bytes to give: the dispensing system's connection is
closed, which is what it would have seen from the switch itself.

A request sent again (the same bytes, within ``retransmit_seconds``) is forwarded
too, and whichever answer comes first goes to the newest asker, once; the exchange
is taken in once (decision 0040).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import ncpdp
from ncpdp.framing import Frame, Framing, FramingError

from ..logs import log_event
from ..metrics import Metrics
from ..service.decisions import decide
from .exchanges import ExchangeTaker, Taken
from .matching import Message, read
from .peers import Networks, peer_allowed, peer_name
from .rewrite import RewriteError, replace_messages
from .upstream import SwitchFailed, SwitchPool

__all__ = ["InlineRelay"]

_READ = 65_536
#: an exchange to take in: (request, its payload, response, its payload)
_Args = tuple[Message, bytes, Message, bytes]


class _Client:
    """A dispensing system's connection."""

    __slots__ = ("asks", "closed", "peer", "writer")

    def __init__(self, writer: asyncio.StreamWriter, peer: str) -> None:
        self.writer = writer
        self.peer = peer
        self.closed = False
        #: its requests being answered
        self.asks: set[asyncio.Task[None]] = set()

    @property
    def open(self) -> bool:
        return not self.closed and not self.writer.is_closing()

    def send(self, data: bytes) -> bool:
        if self.closed or self.writer.is_closing():
            return False
        self.writer.write(data)
        return True

    def cut(self) -> None:
        """Close the connection at once (what a switch that failed does)."""
        if self.closed:
            return
        self.closed = True
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.abort()


class _Group:
    """One request's bytes and its retransmissions: who waits for its answer."""

    __slots__ = ("flights", "seen", "waiting")

    def __init__(self, now: float) -> None:
        self.seen = now
        self.flights = 0
        #: the connections waiting for an answer, oldest first
        self.waiting: list[_Client] = []


class InlineRelay:
    """The relay (module docstring). Lives on one event loop; the blocking use cases
    run on ``answer_executor`` (70/75/76 rejects, waited for) and
    ``background_executor`` (the rest, after the answer)."""

    def __init__(
        self,
        *,
        framing: Framing,
        pool: SwitchPool,
        taker: ExchangeTaker,
        metrics: Metrics,
        answer_executor: Executor,
        background_executor: Executor,
        budget_ms: int = 1500,
        safety_margin_ms: int = 100,
        switch_timeout: float = 30.0,
        retransmit_seconds: float = 120.0,
        allow: Networks = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.framing = framing
        self.pool = pool
        self.taker = taker
        self.metrics = metrics
        self.answer_executor = answer_executor
        self.background_executor = background_executor
        #: how long a 70/75/76 answer waits for its outcomes message, from the switch's
        #: answer: the budget less ``outcomes.safety_margin_ms`` kept back for writing
        #: the answer, so that the payer's bytes go back within the budget, as the
        #: local API's answer does
        self.budget_s = max(1, budget_ms - safety_margin_ms) / 1000.0
        self.switch_timeout = switch_timeout
        self.window = retransmit_seconds
        self.allow = allow
        self.clock = clock
        self._groups: dict[bytes, _Group] = {}
        self._asks: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Future[Taken]] = set()
        self.server: asyncio.Server | None = None

    # ---- the listener ----------------------------------------------------------------
    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One dispensing system's connection: every frame it sends is a request."""
        peer = writer.get_extra_info("peername")
        if not peer_allowed(peer, self.allow):
            log_event("inline.refused", level=logging.WARNING, peer=peer_name(peer))
            writer.close()
            return
        client = _Client(writer, peer_name(peer))
        deframer = self.framing.deframer()
        log_event("inline.connected", peer=client.peer)
        try:
            while not client.closed:
                data = await reader.read(_READ)
                if not data:
                    break
                for frame in deframer.feed(data):
                    task = asyncio.get_running_loop().create_task(self._ask(client, frame))
                    self._asks.add(task)
                    task.add_done_callback(self._asks.discard)
                    client.asks.add(task)
                    task.add_done_callback(client.asks.discard)
            if client.asks:  # it stopped sending: what it asked is still answered
                await asyncio.wait(set(client.asks))
        except FramingError as e:
            log_event(
                "inline.client_framing", level=logging.WARNING, peer=client.peer, error=str(e)
            )
            client.cut()
        except (OSError, ConnectionError):
            client.cut()
        finally:
            writer.close()
            if deframer.skipped:
                log_event("inline.bytes_outside_frames", peer=client.peer, bytes=deframer.skipped)
            log_event("inline.disconnected", peer=client.peer)

    # ---- one request -------------------------------------------------------------------
    def _group(self, payload: bytes, client: _Client) -> tuple[_Group, bool]:
        now = self.clock()
        if len(self._groups) > 256:
            for k in [
                k for k, g in self._groups.items() if not g.flights and now - g.seen > self.window
            ]:
                del self._groups[k]
        key = hashlib.blake2b(payload, digest_size=16).digest()
        group = self._groups.get(key)
        again = group is not None and (group.flights > 0 or now - group.seen <= self.window)
        if group is None or not again:
            group = self._groups[key] = _Group(now)
        group.seen = now
        group.waiting.append(client)
        return group, again

    async def _ask(self, client: _Client, frame: Frame) -> None:
        received = time.perf_counter()
        request = read(frame.payload)
        group, again = self._group(frame.payload, client)
        if again:
            log_event(
                "inline.retransmit",
                peer=client.peer,
                transaction_code=request.transaction_code if request else None,
            )
        group.flights += 1
        try:
            answer, response = await self.pool.exchange(frame, request, self.switch_timeout)
        except SwitchFailed as e:
            group.flights -= 1
            log_event(
                "inline.switch_failed", level=logging.WARNING, peer=client.peer, reason=e.reason
            )
            if group.flights == 0:  # no other copy of it is still on its way: an outage
                for waiting in group.waiting:
                    waiting.cut()
                group.waiting.clear()
            return
        group.flights -= 1
        switch_done = time.perf_counter()
        data, result, later = await self._answer(request, frame, answer, response, client.peer)
        # the newest asker still connected; older asks were given up by their senders
        target = next((c for c in reversed(group.waiting) if c.open), None)
        group.waiting.clear()
        if target is None or not target.send(data):
            result = "dropped"
        written = time.perf_counter()
        if later is not None:  # taken in after the answer is on its way
            self._in_background(later, client.peer)
        self.metrics.inline_answers.labels(result).inc()
        log_event(
            "inline.answered",
            peer=client.peer,
            result=result,
            transaction_code=request.transaction_code if request else None,
            switch_ms=round((switch_done - received) * 1000, 1),
            ours_ms=round((written - switch_done) * 1000, 2),
        )

    async def _answer(
        self,
        request: Message | None,
        frame: Frame,
        answer: Frame,
        response: Message | None,
        peer: str,
    ) -> tuple[bytes, str, _Args | None]:
        """The bytes for the dispensing system, what they are (``passed``,
        ``replaced`` or ``fallback``), and the exchange to take in after they are
        written (None: taken in already, or nothing to take in)."""
        if request is None or response is None:
            return answer.raw, "passed", None  # not ours to read: relayed as it came
        args = (request, frame.payload, response, answer.payload)
        try:
            decisions = decide(response.transmission.as_response())
        except ncpdp.NcpdpError:
            return answer.raw, "passed", args
        first = [
            d for d in decisions if d.outcomes_first and d.index < len(request.transmission.groups)
        ]
        if not first or request.transaction_code not in ("B1", "B3"):
            return answer.raw, "passed", args
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        work = loop.run_in_executor(self.answer_executor, self._take, args, peer)
        try:
            taken = await asyncio.wait_for(asyncio.shield(work), self.budget_s)
        except TimeoutError:
            self._keep(work)  # it finishes and is stored; the answer cannot wait for it
            return (*self._fallback(answer, "budget", peer, started), None)
        except Exception as e:  # the use case never raises; this is a bug of ours
            return (*self._fallback(answer, type(e).__name__, peer, started), None)
        claim = taken.answer
        if claim is None:
            return (*self._fallback(answer, taken.detail or taken.result, peer, started), None)
        by_index = {t.index: t for t in claim.transactions} if claim.transactions else None
        messages: dict[int, str] = {}
        for d in first:
            t = by_index.get(d.index) if by_index is not None else (claim if d.index == 0 else None)
            if t is None or t.message_source != "outcomes":
                continue
            if t.message.strip() and t.message.strip() != d.payer_message.strip():
                messages[d.index] = t.message
        if not messages:
            reason = "outcomes_fallback" if claim.message_source == "fallback" else "unchanged"
            data, result = self._fallback(
                answer, reason, peer, started, unchanged=reason == "unchanged"
            )
            return data, result, None
        try:
            new = replace_messages(response.transmission, messages)
            data = self.framing.reframe(answer, ncpdp.serialize(new))
        except (RewriteError, FramingError, ncpdp.NcpdpError) as e:
            return (*self._fallback(answer, type(e).__name__, peer, started), None)
        return data, "replaced", None

    def _fallback(
        self, answer: Frame, reason: str, peer: str, started: float, *, unchanged: bool = False
    ) -> tuple[bytes, str]:
        if not unchanged:
            log_event(
                "inline.fallback",
                level=logging.WARNING,
                peer=peer,
                reason=reason,
                waited_ms=round((time.perf_counter() - started) * 1000, 1),
            )
        return answer.raw, "passed" if unchanged else "fallback"

    def _take(self, args: _Args, peer: str) -> Taken:
        request, request_payload, response, response_payload = args
        return self.taker.take(
            request, request_payload, response, response_payload, mode="inline", peer=peer
        )

    def _in_background(self, args: _Args, peer: str) -> None:
        loop = asyncio.get_running_loop()
        self._keep(loop.run_in_executor(self.background_executor, self._take, args, peer))

    def _keep(self, work: asyncio.Future[Taken]) -> None:
        self._background.add(work)
        work.add_done_callback(self._background.discard)

    # ---- stopping ----------------------------------------------------------------------
    async def finish(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the requests in flight and the exchanges being
        taken in; cut what is left."""
        pending: set[Any] = set(self._asks) | set(self._background)
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        for task in list(self._asks):
            task.cancel()
