"""The tap and inline listeners on one event loop, in a thread of the daemon (decision
0039): built from ``[tap]``, ``[inline]`` and ``[framing.*]``, started and stopped by
the composition root."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..config import Settings, as_list, parse_listen
from ..logs import log_event
from ..loop_thread import LoopThread, close_writers
from ..service import UseCases
from .copies import TapListener
from .exchanges import ExchangeTaker
from .inline import InlineRelay
from .peers import Networks
from .upstream import SwitchPool

__all__ = ["WireListeners", "listener_tls", "switch_tls"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def listener_tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """TLS for a listener (1.2 or later), or None for plain TCP."""
    if cert is None or key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def switch_tls(settings: Settings) -> ssl.SSLContext | None:
    """TLS to the switch from ``[inline]`` (verified against ``switch_ca_file`` or the
    system's store; a client certificate when given), or None for plain TCP."""
    st = settings.inline
    if not st.switch_tls:
        return None
    ctx = ssl.create_default_context(
        cafile=str(st.switch_ca_file) if st.switch_ca_file is not None else None
    )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if st.switch_cert_file is not None and st.switch_key_file is not None:
        ctx.load_cert_chain(str(st.switch_cert_file), str(st.switch_key_file))
    return ctx


def _networks(entries: list[str]) -> Networks:
    return tuple(ipaddress.ip_network(e, strict=False) for e in entries)


class WireListeners:
    """``[tap]`` and ``[inline]`` served (each only when its ``listen`` is set).
    ``switch`` overrides ``inline.switch`` (the sandbox's switch, plain TCP)."""

    def __init__(
        self,
        settings: Settings,
        use_cases: UseCases,
        *,
        switch: list[tuple[str, int]] | None = None,
    ) -> None:
        self.settings = settings
        self.use_cases = use_cases
        self.stop_grace = settings.inline.stop_grace_seconds
        self._switch = switch
        self._loop_thread = LoopThread("ncpdp-wire")
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._ticker: asyncio.Task[None] | None = None
        self.taker = ExchangeTaker(use_cases, retransmit_seconds=settings.inline.retransmit_seconds)
        self.answer_executor = ThreadPoolExecutor(8, thread_name_prefix="inline-answer")
        self.background_executor = ThreadPoolExecutor(4, thread_name_prefix="wire-intake")
        self.tap: TapListener | None = None
        self.relay: InlineRelay | None = None
        self.pool: SwitchPool | None = None
        self.tap_address: tuple[str, int] | None = None
        self.inline_address: tuple[str, int] | None = None

    @property
    def enabled(self) -> bool:
        s = self.settings
        return s.tap.listen is not None or s.inline.listen is not None

    # ---- start -------------------------------------------------------------------------
    def start(self) -> WireListeners:
        """Bind the listeners (an ``OSError`` names the key whose address failed)."""
        try:
            self._loop_thread.start(self._start)
        except BaseException:
            self._shutdown_executors()
            raise
        return self

    async def _start(self) -> None:
        s = self.settings
        metrics = self.use_cases.metrics
        if s.tap.listen is not None:
            self.tap = TapListener(
                framing=s.framing_profile(s.tap.framing),
                taker=self.taker,
                metrics=metrics,
                executor=self.background_executor,
                pair_timeout=s.tap.pair_timeout_seconds,
                allow=_networks(as_list(s.tap.allow)),
            )
            self.tap_address = await self._serve(
                "tap.listen",
                s.tap.listen,
                self.tap.connection,
                listener_tls(s.tap.tls_cert, s.tap.tls_key),
            )
            log_event("tap.listening", listen=_fmt(self.tap_address), framing=s.tap.framing)
        if s.inline.listen is not None:
            st = s.inline
            listen = s.inline.listen
            framing = s.framing_profile(st.framing)
            plain = self._switch is not None
            paths = self._switch or [parse_listen(a) for a in as_list(st.switch)]
            self.pool = SwitchPool(
                paths,
                framing,
                ssl_context=None if plain else switch_tls(s),
                server_hostname=st.switch_server_name,
                connections=st.connections,
                connect_timeout=st.connect_timeout_seconds,
                pause_seconds=st.pause_seconds,
                pause_max_seconds=st.pause_max_seconds,
                idle_seconds=st.idle_seconds,
                metrics=metrics,
            )
            self.relay = InlineRelay(
                framing=framing,
                pool=self.pool,
                taker=self.taker,
                metrics=metrics,
                answer_executor=self.answer_executor,
                background_executor=self.background_executor,
                budget_ms=s.outcomes.budget_ms,
                safety_margin_ms=s.outcomes.safety_margin_ms,
                switch_timeout=st.switch_timeout_seconds,
                retransmit_seconds=st.retransmit_seconds,
                allow=_networks(as_list(st.allow)),
            )
            self.inline_address = await self._serve(
                "inline.listen",
                listen,
                self.relay.connection,
                listener_tls(st.tls_cert, st.tls_key),
            )
            log_event(
                "inline.listening",
                listen=_fmt(self.inline_address),
                framing=st.framing,
                switch=[f"{h}:{p}" for h, p in paths],
                switch_tls=not plain and st.switch_tls,
            )
            if not plain and not st.switch_tls:
                log_event(
                    "inline.switch_in_clear",
                    level=logging.WARNING,
                    note="inline.switch_tls is false: claims go to the switch unencrypted",
                )
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _serve(
        self, key: str, listen: str, handler: Handler, tls: ssl.SSLContext | None
    ) -> tuple[str, int]:
        host, port = parse_listen(listen)

        async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.add(writer)
            try:
                await handler(reader, writer)
            finally:
                self._writers.discard(writer)

        try:
            if tls is None:
                server = await asyncio.start_server(tracked, host, port, limit=65_536)
            else:
                server = await asyncio.start_server(
                    tracked, host, port, limit=65_536, ssl=tls, ssl_handshake_timeout=30
                )
        except OSError as e:
            raise OSError(e.errno, f"{key} {listen}: {e.strerror or e}") from e
        self._servers.append(server)
        sockname = server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if self.tap is not None:
                self.tap.expire()
            if self.pool is not None:
                self.pool.close_idle()

    # ---- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop taking connections, give the requests in flight
        ``inline.stop_grace_seconds`` to finish, close the rest (a dispensing system then
        sees what a switch outage looks like) and the switch connections."""
        self._loop_thread.stop(self._stop, timeout=self.stop_grace + 5)
        self._shutdown_executors()
        log_event("wire.stopped")

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        if self._ticker is not None:
            self._ticker.cancel()
        if self.relay is not None:
            await self.relay.finish(self.stop_grace)
        if self.tap is not None:
            await self.tap.finish(self.stop_grace)
        await close_writers(self._writers)
        if self.pool is not None:
            await self.pool.close()
        for server in self._servers:
            await server.wait_closed()

    def _shutdown_executors(self) -> None:
        self.answer_executor.shutdown(wait=True, cancel_futures=False)
        self.background_executor.shutdown(wait=True, cancel_futures=False)

    @property
    def alive(self) -> bool:
        return self._loop_thread.alive


def _fmt(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
