"""pa-bridge's own connections to the real switch, for inline mode (decisions 0039
and 0040).

- One or more paths (``inline.switch``: host:port each, a primary and its alternates),
  up to ``connections`` kept-alive connections on each, TLS unless told otherwise.
- A connection carries one request at a time: it is written, and the connection is
  free again when a frame comes back on it.
- Every answer is matched to the request it answers by its header and prescription
  numbers (:func:`matching.answers`): first the request sent on that connection,
  else any request waiting on another connection (a switch that answers on the wrong
  connection, swapped answers). An answer that answers no waiting request is never
  given to one: it is dropped, and the connection it came on is closed (it is out of
  step). A request or an answer that does not parse is matched by position (the
  next frame on its connection), as a bare relay would.
- A path whose connection fails (refused, reset, TLS, a time-out) is paused, 2 s at
  first and doubling up to ``pause_max_seconds``; requests take the other paths. When
  every path is paused the one whose pause ends first is tried anyway.
- A request is sent once. If the switch does not answer it (the connection breaks, or
  ``switch_timeout_seconds`` pass) :class:`SwitchFailed` says so; it is never sent
  again by us (the payer may have it), except when it could not be written at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ncpdp.framing import Frame, Framing, FramingError

from ..logs import log_event
from ..loop_thread import close_writers
from ..metrics import Metrics
from .matching import Message, answers, read

__all__ = ["SwitchFailed", "SwitchPath", "SwitchPool"]

_READ = 65_536


class SwitchFailed(Exception):
    """The switch did not answer a request; ``reason`` is ``timeout``, ``cut``,
    ``unreachable``, ``out_of_step`` or ``closing``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class SwitchPath:
    host: str
    port: int
    failures: int = 0
    paused_until: float = 0.0
    conns: set[_Conn] = field(default_factory=set)
    #: connections being opened
    opening: int = 0

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"


class _Flight:
    """One request sent (or about to be) to the switch."""

    __slots__ = ("frame", "future", "message", "sent_on")

    def __init__(
        self,
        frame: Frame,
        message: Message | None,
        future: asyncio.Future[tuple[Frame, Message | None]],
    ):
        self.frame = frame
        self.message = message
        self.future = future
        self.sent_on: _Conn | None = None


class _Conn:
    __slots__ = ("deframer", "flight", "idle_since", "path", "reader", "task", "writer")

    def __init__(
        self,
        path: SwitchPath,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        framing: Framing,
    ) -> None:
        self.path = path
        self.reader = reader
        self.writer = writer
        self.deframer = framing.deframer()
        #: the request written on this connection that no frame has come back for yet
        self.flight: _Flight | None = None
        self.idle_since = time.monotonic()
        self.task: asyncio.Task[None] | None = None


class SwitchPool:
    """The connections to the switch (module docstring). Lives on one event loop."""

    def __init__(
        self,
        paths: list[tuple[str, int]],
        framing: Framing,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        connections: int = 4,
        connect_timeout: float = 5.0,
        pause_seconds: float = 2.0,
        pause_max_seconds: float = 60.0,
        idle_seconds: float = 120.0,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not paths:
            raise ValueError("no switch address")
        self.paths = [SwitchPath(h, p) for h, p in paths]
        self.framing = framing
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.per_path = connections
        self.connect_timeout = connect_timeout
        self.pause_seconds = pause_seconds
        self.pause_max_seconds = pause_max_seconds
        self.idle_seconds = idle_seconds
        self.metrics = metrics
        self.clock = clock
        self._idle: deque[_Conn] = deque()
        #: callers waiting for a connection to be freed
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: requests written and not answered yet, oldest first
        self._waiting: list[_Flight] = []
        self._closing = False

    # ---- sending ---------------------------------------------------------------------
    async def exchange(
        self, frame: Frame, message: Message | None, timeout: float
    ) -> tuple[Frame, Message | None]:
        """The switch's answer to ``frame`` (its frame, as it came, and the answer read
        for matching); raises :class:`SwitchFailed`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        flight = _Flight(frame, message, loop.create_future())
        for _attempt in range(len(self.paths) + 1):
            conn = await self._acquire(deadline)
            conn.flight = flight
            flight.sent_on = conn
            self._waiting.append(flight)
            try:
                conn.writer.write(frame.raw)
                await conn.writer.drain()
            except (OSError, ssl.SSLError):
                # the connection was gone before the request went out whole: the switch
                # cannot have answered it; try another connection
                conn.flight = flight.sent_on = None
                self._forget(flight)
                self._broken(conn, "cut", pause=True)
                continue
            break
        else:
            raise SwitchFailed("unreachable")
        timer = loop.call_at(deadline, self._expired, flight)
        try:
            return await flight.future
        finally:
            timer.cancel()

    def _expired(self, flight: _Flight) -> None:
        """The switch has not answered by the deadline."""
        if flight.future.done():
            return
        self._count("timeout")
        self._forget(flight)
        conn = flight.sent_on
        if conn is not None and conn.flight is flight:
            # a late answer would put the connection out of step: close it
            self._broken(conn, "timeout", pause=True, fail=False)
        flight.future.set_exception(SwitchFailed("timeout"))

    def _forget(self, flight: _Flight) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(flight)

    # ---- connections -----------------------------------------------------------------
    async def _acquire(self, deadline: float) -> _Conn:
        """A free connection: an idle one on an unpaused path, else a new one on an
        unpaused path; when every path is paused, an idle one, else a new one on the
        path whose pause ends first; else wait for one to be freed."""
        loop = asyncio.get_running_loop()
        tried: set[str] = set()  # each path is dialled at most once for one request
        while True:
            if self._closing:
                raise SwitchFailed("closing")
            now = self.clock()
            for stale in [c for c in self._idle if c.writer.is_closing()]:
                self._close(stale)
            idle = next((c for c in self._idle if c.path.paused_until <= now), None)
            if idle is not None:
                self._idle.remove(idle)
                return idle
            if self._idle and not self._any_open(now):
                return self._idle.popleft()  # every path rests: an idle connection first
            path = self._path_to_open(now, tried)
            if path is not None:
                tried.add(path.name)
                opened = await self._open(path)
                if opened is not None:
                    return opened
                continue  # that path is paused now: try the next one
            if not any(p.conns or p.opening for p in self.paths):
                raise SwitchFailed("unreachable")  # nothing to wait for: every path failed
            remaining = deadline - loop.time()
            if remaining <= 0:
                self._count("busy")
                raise SwitchFailed("timeout")
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, min(remaining, 1.0))
            except TimeoutError:
                pass
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _any_open(self, now: float) -> bool:
        return any(p.paused_until <= now for p in self.paths)

    def _path_to_open(self, now: float, tried: set[str]) -> SwitchPath | None:
        """A path that may take one more connection and was not dialled for this
        request yet: an unpaused one with room, the one with fewest connections; when
        every path is paused, the one whose pause ends first (tried anyway); None when
        there is none."""
        room = [
            p
            for p in self.paths
            if len(p.conns) + p.opening < self.per_path and p.name not in tried
        ]
        if not room:
            return None
        live = [p for p in room if p.paused_until <= now]
        if live:
            return min(live, key=lambda p: len(p.conns) + p.opening)
        if self._any_open(now):
            return None  # the unpaused paths are full: wait for one of theirs
        return min(room, key=lambda p: p.paused_until)

    async def _open(self, path: SwitchPath) -> _Conn | None:
        path.opening += 1
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    path.host,
                    path.port,
                    ssl=self.ssl_context,
                    server_hostname=(self.server_hostname or path.host)
                    if self.ssl_context is not None
                    else None,
                    limit=_READ,
                ),
                self.connect_timeout,
            )
        except (OSError, ssl.SSLError, TimeoutError) as e:
            reason = "tls" if isinstance(e, ssl.SSLError) else "unreachable"
            self._pause(path, reason, type(e).__name__)
            return None
        finally:
            path.opening -= 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = _Conn(path, reader, writer, self.framing)
        path.conns.add(conn)
        conn.task = asyncio.get_running_loop().create_task(self._read(conn))
        log_event("inline.switch_connected", path=path.name, tls=self.ssl_context is not None)
        return conn

    async def _read(self, conn: _Conn) -> None:
        """Every frame that comes back on ``conn``, until it closes."""
        reason = "cut"
        try:
            while True:
                data = await conn.reader.read(_READ)
                if not data:
                    break
                for frame in conn.deframer.feed(data):
                    self._answered(conn, frame)
                    if conn.writer.is_closing():
                        return
        except FramingError as e:
            reason = "framing"
            log_event(
                "inline.switch_framing", level=logging.WARNING, path=conn.path.name, error=str(e)
            )
        except (OSError, ssl.SSLError) as e:
            reason = "cut"
            log_event(
                "inline.switch_read_failed",
                level=logging.WARNING,
                path=conn.path.name,
                error=type(e).__name__,
            )
        self._broken(conn, reason, pause=conn.flight is not None)

    def _answered(self, conn: _Conn, frame: Frame) -> None:
        mine = conn.flight
        conn.flight = None  # one frame back for the one request sent: the connection is free
        message = read(frame.payload)
        target: _Flight | None = None
        if mine is not None and not mine.future.done():
            if message is None or mine.message is None or answers(mine.message, message):
                target = mine
        if target is None and message is not None:
            target = next(
                (
                    f
                    for f in self._waiting
                    if f.message is not None and not f.future.done() and answers(f.message, message)
                ),
                None,
            )
            if target is not None and target is not mine:
                log_event(
                    "inline.answer_on_another_connection",
                    level=logging.WARNING,
                    path=conn.path.name,
                )
        if target is None:
            # an answer for no request waiting: never handed to one; this connection
            # is out of step with its switch
            self._count("unmatched_answer")
            log_event(
                "inline.answer_unmatched",
                level=logging.WARNING,
                path=conn.path.name,
                bytes=len(frame.raw),
                readable=message is not None,
            )
            if mine is not None and not mine.future.done():
                conn.flight = mine  # its own request fails with the connection
            self._broken(conn, "out_of_step", pause=False)
            return
        self._forget(target)
        target.future.set_result((frame, message))
        conn.path.failures = 0
        self._release(conn)

    def _release(self, conn: _Conn) -> None:
        if conn.writer.is_closing() or self._closing:
            return
        conn.idle_since = self.clock()
        self._idle.append(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _broken(self, conn: _Conn, reason: str, *, pause: bool, fail: bool = True) -> None:
        """``conn`` is done: closed, out of the pool; the request still waiting on it
        fails (unless ``fail`` is false: its caller deals with it)."""
        flight, conn.flight = conn.flight, None
        self._close(conn)
        if pause:
            self._pause(conn.path, reason, None)
        if flight is not None and fail and not flight.future.done():
            self._count(reason)
            self._forget(flight)
            flight.future.set_exception(SwitchFailed(reason))
        self._wake()

    def _close(self, conn: _Conn) -> None:
        conn.path.conns.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        if not conn.writer.is_closing():
            conn.writer.close()
        task = conn.task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()

    def _pause(self, path: SwitchPath, reason: str, error: str | None) -> None:
        path.failures += 1
        pause = min(self.pause_max_seconds, self.pause_seconds * 2 ** (path.failures - 1))
        path.paused_until = self.clock() + pause
        self._count(f"path_{reason}")
        log_event(
            "inline.switch_path_paused",
            level=logging.WARNING,
            path=path.name,
            reason=reason,
            error=error,
            pause_seconds=round(pause, 1),
        )

    def _count(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.inline_switch_failures.labels(reason).inc()

    def close_idle(self) -> None:
        """Close connections idle longer than ``idle_seconds`` (the switch would)."""
        now = self.clock()
        for conn in list(self._idle):
            if now - conn.idle_since > self.idle_seconds:
                self._close(conn)

    async def close(self) -> None:
        self._closing = True
        writers = [c.writer for p in self.paths for c in p.conns]
        for path in self.paths:
            for conn in list(path.conns):
                self._broken(conn, "closing", pause=False)
        for flight in list(self._waiting):
            if not flight.future.done():
                flight.future.set_exception(SwitchFailed("closing"))
        self._waiting.clear()
        await close_writers(writers)

    @property
    def connections(self) -> int:
        return sum(len(p.conns) for p in self.paths)
