"""The sandbox's switch: answers claims over TCP as a switch and its payers do, so that
inline mode can be tried and its fail-open promises tested against something that
misbehaves on command.

Framing: any ``ncpdp.framing`` profile (one per listener); TLS when given a context.
Each request frame gets one answer frame; requests on one connection are answered as
they finish (a connection may carry several at once).

Payers, chosen by BIN and PCN (101-A1, 104-A4) as a switch routes:

=======================================  ============================================
claim                                    answer
=======================================  ============================================
PCN ``REJ`` + a reject code (``REJ75``,   rejected (112-AN ``R``) with that code, the
``REJ70``, ``REJ76``, ``REJMR``,          payer's message in 526-FQ lines and its help
``REJAG``, ``REJA6``, ``REJ79`` ...)      desk phone; a 75 also names a preferred product
BIN ``999996`` / ``999997`` /             rejected 75, so that the outcomes interface's
``999998`` (the outcomes drills)          fault drills run behind it (trickle, 500, stall)
any other B1 or B3                       paid (``P``) with an authorization number and
                                         pricing; the same claim paid again (BIN, PCN,
                                         Rx number, fill number, provider, date of
                                         service) is a duplicate of paid (``D``)
B2                                       reversal approved (``A``); the claim may then be
                                         paid again
another transaction code, or a request   rejected at header level (501-F1 ``R``) with a
that does not parse                      message in 504-F4
=======================================  ============================================

Every answer echoes each transaction's 402-D2 in its Response Claim segment (AM22),
as payers do. D.0 and F6 carry the message as 40-character 526-FQ lines with 130-UF,
132-UH and 131-UG; 5.1 as one 526-FQ.

Faults, on command (:meth:`SandboxSwitch.stall`, :meth:`cut`, :meth:`swap`, or
``POST /sandbox/switch`` on the sandbox's HTTP port): the next request(s) get no
answer (for a while or at all), or their connection cut without one, or two requests
each other's answers (the second within a second, else the previous answer the
switch gave).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections import deque
from dataclasses import dataclass, field

import ncpdp
from ncpdp import ResponseHeader, Segment, TransactionGroup, Transmission
from ncpdp.framing import Frame, Framing, FramingError

from ..loop_thread import LoopThread, close_writers

__all__ = ["SandboxSwitch", "SwitchPayer"]

log = logging.getLogger("pa_bridge.sandbox.switch")

DRILL_BINS = frozenset({"999996", "999997", "999998"})
MESSAGES = {
    "75": ("PRIOR AUTHORIZATION REQUIRED", "CALL 800-555-0100 TO REQUEST PA"),
    "70": ("PRODUCT/SERVICE NOT COVERED",),
    "76": ("PLAN LIMITATIONS EXCEEDED", "QUANTITY OVER PLAN MAXIMUM"),
    "MR": ("PRODUCT NOT ON FORMULARY",),
    "AG": ("DAYS SUPPLY LIMITATION FOR PRODUCT",),
    "A6": ("MAY BE COVERED UNDER MEDICARE PART B",),
}
HELP_DESK = "8005550100"
PREFERRED = ("03", "00093505602", "SYNTHETIC PREFERRED 10MG")


def _digits(value: str | None) -> str:
    return (value or "").strip()


@dataclass
class SwitchPayer:
    """The payers behind the switch (module docstring): what each request gets."""

    #: claims paid and not reversed (their claim keys), for duplicates of paid
    paid: set[tuple[str, ...]] = field(default_factory=set)

    def answer(self, payload: bytes) -> bytes:
        """The response's bytes for the request ``payload``."""
        try:
            t = ncpdp.parse(payload, strict=False)
        except ncpdp.NcpdpError:
            return self._header_reject("D0", "B1", "01", "", "20000101", "UNREADABLE TRANSMISSION")
        if not t.is_request:
            return self._header_reject("D0", "B1", "01", "", "20000101", "NOT A REQUEST")
        h = t.header
        assert isinstance(h, ncpdp.RequestHeader)
        version, code = h.version.strip(), h.transaction_code.strip()
        qualifier, provider = h.service_provider_id_qualifier, h.service_provider_id.strip()
        dos = h.date_of_service
        if code not in ("B1", "B2", "B3") or not t.groups:
            return self._header_reject(
                version, code, qualifier, provider, dos, f"TRANSACTION CODE {code} NOT SUPPORTED"
            )
        reject = self._reject_code(h.bin, h.pcn)
        groups = []
        for g in t.groups:
            claim = g.segment("07")
            rx = claim.get("D2") if claim is not None else None
            rx_q = claim.get("EM") if claim is not None else None
            key = (h.bin, h.pcn, _digits(rx), _digits(claim.get("D3") if claim else ""), provider)
            echo = Segment("22", [("EM", rx_q or "1"), ("D2", rx or "")])
            if code == "B2":
                self.paid.discard(key)
                groups.append(TransactionGroup([Segment("21", [("AN", "A")]), echo]))
            elif reject is not None:
                groups.append(self._rejected(version, reject, echo))
            else:
                status = "D" if key in self.paid else "P"
                self.paid.add(key)
                auth = "SW" + (_digits(rx).lstrip("0") or "0")[-8:]
                groups.append(
                    TransactionGroup(
                        [
                            Segment("21", [("AN", status), ("F3", auth)]),
                            echo,
                            Segment("23", [("F5", "1000{"), ("F6", "1234{"), ("F9", "1299E")]),
                        ]
                    )
                )
        header = ResponseHeader.build(
            version=version,
            transaction_code=code,
            transaction_count=len(groups),
            header_response_status="A",
            service_provider_id_qualifier=qualifier,
            service_provider_id=provider,
            date_of_service=dos,
        )
        return bytes(Transmission(header, [], groups, group_separators=t.group_separators))

    @staticmethod
    def _reject_code(bin_: str, pcn: str) -> str | None:
        if bin_.strip() in DRILL_BINS:
            return "75"
        pcn = pcn.strip().upper()
        if pcn.startswith("REJ") and 2 <= len(pcn) - 3 <= 3:
            return pcn[3:]
        return None

    @staticmethod
    def _rejected(version: str, code: str, echo: Segment) -> TransactionGroup:
        lines = MESSAGES.get(code, ("CLAIM REJECTED",))
        st: list[tuple[str, str]] = [("AN", "R"), ("FA", "01"), ("FB", code)]
        if version == "51":
            st.append(("FQ", " ".join(lines)))
        else:
            st.append(("UF", str(len(lines)).zfill(2)))
            for i, line in enumerate(lines, start=1):
                st += [("UH", str(i).zfill(2)), ("FQ", line)]
                if i < len(lines):
                    st.append(("UG", "+"))
        st += [("7F", "03"), ("8F", HELP_DESK)]
        segs = [Segment("21", st)]
        if code == "75":
            q, pid, desc = PREFERRED
            segs.append(
                Segment("22", [*echo.fields, ("9F", "1"), ("AP", q), ("AR", pid), ("AU", desc)])
            )
        else:
            segs.append(echo)
        return TransactionGroup(segs)

    @staticmethod
    def _header_reject(
        version: str, code: str, qualifier: str, provider: str, dos: str, message: str
    ) -> bytes:
        header = ResponseHeader.build(
            version=version or "D0",
            transaction_code=code or "B1",
            transaction_count=1,
            header_response_status="R",
            service_provider_id_qualifier=qualifier or "01",
            service_provider_id=provider,
            date_of_service=dos,
        )
        return bytes(Transmission(header, [Segment("20", [("F4", message)])], []))


class _Faults:
    """Armed faults, taken one request at a time (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stall: deque[float | None] = deque()
        self.cut = 0
        self.swap = 0

    def take(self) -> tuple[str, float | None]:
        with self.lock:
            if self.cut:
                self.cut -= 1
                return "cut", None
            if self.stall:
                return "stall", self.stall.popleft()
            if self.swap:
                self.swap -= 1
                return "swap", None
            return "", None


class SandboxSwitch:
    """The switch on ``host:port`` (0: a free port), on its own event loop thread.

    ``received`` and ``sent``: every request frame taken and answer frame written, as
    bytes, in order (for tests: inline mode must forward requests unchanged).
    ``delay_seconds``: every answer waits this long (a real switch takes about 2 s)."""

    def __init__(
        self,
        framing: Framing | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        delay_seconds: float = 0.0,
        swap_wait_seconds: float = 1.0,
    ) -> None:
        self.framing = framing or Framing()
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.delay_seconds = delay_seconds
        self.swap_wait_seconds = swap_wait_seconds
        self.payer = SwitchPayer()
        self.faults = _Faults()
        self.received: list[bytes] = []
        self.sent: list[bytes] = []
        self.connections = 0
        self._loop_thread = LoopThread("sandbox-switch")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._last_answer: bytes | None = None
        self._swap_waiting: asyncio.Future[bytes] | None = None
        self._swap_mine = b""
        self._stopped: asyncio.Event | None = None

    # ---- commands ----------------------------------------------------------------------
    def stall(self, count: int = 1, seconds: float | None = None) -> None:
        """The next ``count`` requests get their answer after ``seconds`` (None: never;
        their connection stays open)."""
        with self.faults.lock:
            self.faults.stall.extend([seconds] * count)

    def cut(self, count: int = 1) -> None:
        """The next ``count`` requests get their connection closed instead of an answer."""
        with self.faults.lock:
            self.faults.cut += count

    def swap(self, count: int = 1) -> None:
        """The next ``count`` requests each get another request's answer."""
        with self.faults.lock:
            self.faults.swap += count

    def clear(self) -> None:
        with self.faults.lock:
            self.faults.stall.clear()
            self.faults.cut = self.faults.swap = 0

    # ---- life ------------------------------------------------------------------------------
    def start(self) -> SandboxSwitch:
        self._loop_thread.start(self._start)
        return self

    async def _start(self) -> None:
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        self._loop_thread.stop(self._stop, timeout=5)

    async def _stop(self) -> None:
        assert self._stopped is not None and self._server is not None
        self._stopped.set()
        self._server.close()
        await close_writers(self._writers)
        await self._server.wait_closed()

    def __enter__(self) -> SandboxSwitch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- serving -----------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        deframer = self.framing.deframer()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                data = await reader.read(65_536)
                if not data:
                    break
                for frame in deframer.feed(data):
                    task = asyncio.get_running_loop().create_task(self._request(frame, writer))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except (FramingError, OSError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _request(self, frame: Frame, writer: asyncio.StreamWriter) -> None:
        self.received.append(frame.raw)
        fault, seconds = self.faults.take()
        if fault == "cut":
            writer.transport.abort()
            return
        answer = self.payer.answer(frame.payload)
        if fault == "stall":
            assert self._stopped is not None
            if seconds is None:
                await self._stopped.wait()
                return
            await asyncio.sleep(seconds)
        elif fault == "swap":
            answer = await self._swapped(answer)
        elif self._swap_waiting is not None and not self._swap_waiting.done():
            # a request held for a swap gets this one's answer, and this one gets its
            answer = await self._give_swap(answer)
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        self._send(writer, answer)

    async def _swapped(self, answer: bytes) -> bytes:
        """Wait for the next request's answer and give ours to it; without one within
        ``swap_wait_seconds``, the previous answer given (another claim's)."""
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[bytes] = loop.create_future()
        self._swap_waiting = waiting
        self._swap_mine = answer
        try:
            return await asyncio.wait_for(waiting, self.swap_wait_seconds)
        except TimeoutError:
            self._swap_waiting = None
            stale = self._last_answer
            return stale if stale is not None else answer.replace(b"\x1cD2", b"\x1cD29", 1)

    async def _give_swap(self, answer: bytes) -> bytes:
        waiting = self._swap_waiting
        assert waiting is not None
        self._swap_waiting = None
        mine = self._swap_mine
        waiting.set_result(answer)
        return mine

    def _send(self, writer: asyncio.StreamWriter, payload: bytes) -> None:
        raw = self.framing.frame(payload)
        self._last_answer = payload
        if writer.is_closing():
            return
        self.sent.append(raw)
        writer.write(raw)
