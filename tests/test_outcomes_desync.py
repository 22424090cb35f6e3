"""An outcomes service that sends an answer nobody asked for on a kept-alive
connection (issue 32): no claim is ever shown an answer that was not to its own
request. The service is a misbehaving fake on 127.0.0.1 that keeps connections open,
answers each request after a moment with a message naming that request's
prescription, and a little after each answer sends one more, unsolicited. The test
speaks only through the client's public calls, whatever its connections are made of."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from pa_bridge.client import PaServiceClient, outcome_variables
from tests.builders import REJECT_75, Claim, Rx, request, response

PAYER = "PRIOR AUTHORIZATION REQUIRED CALL HELP DESK"


def _answer(message: str) -> bytes:
    body = json.dumps({"button_label": "Start PA", "message": message}).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


class UnsolicitedService:
    """Keeps every connection open; answers each request ``answer_s`` after it came,
    naming its prescription; ``extra_s`` after each answer, sends one more answer,
    unsolicited, naming nobody's."""

    def __init__(self, answer_s: float = 0.04, extra_s: float = 0.02) -> None:
        self.answer_s, self.extra_s = answer_s, extra_s
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> UnsolicitedService:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        with conn:
            try:
                while not self.stop.is_set():
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    form, buf = parse_qs(buf[:length].decode()), buf[length:]
                    self.requests += 1
                    rx = form["prescription_reference_number"][0]
                    if self.stop.wait(self.answer_s):
                        return
                    conn.sendall(_answer(f"ANSWER FOR RX {rx}"))
                    if self.stop.wait(self.extra_s):
                        return
                    conn.sendall(_answer("UNSOLICITED, FOR NO REQUEST"))
            except OSError:
                return


@pytest.fixture
def service() -> Iterator[UnsolicitedService]:
    with UnsolicitedService() as s:
        yield s


def _variables(rx: str) -> dict[str, str]:
    claim = Claim(rxs=(Rx(rx_number=rx),))
    return outcome_variables(request(claim), response([REJECT_75]), api_key="k")


def test_no_claim_is_shown_an_answer_to_another_request(service: UnsolicitedService) -> None:
    client = PaServiceClient(
        claim_url=service.url + "/claim",
        outcomes_url=service.url + "/outcomes",
        dashboard_url=service.url + "/dashboard",
        username="u",
        password="p",
        api_key="k",
        timeout_s=2.0,
    )
    shown: list[tuple[str, str, str]] = []
    try:
        for n in range(30):
            rx = f"{700000000000 + n}"
            if n % 2:  # the call whose request goes out on the caller's thread, too
                result = client.start_outcomes(
                    _variables(rx), budget_ms=1000, fallback_message=PAYER
                ).result()
            else:
                result = client.outcomes(_variables(rx), budget_ms=1000, fallback_message=PAYER)
            shown.append((rx, result.source, result.message))
    finally:
        client.close()
    wrong = [(rx, msg) for rx, source, msg in shown if msg not in (f"ANSWER FOR RX {rx}", PAYER)]
    assert not wrong, f"{len(wrong)} of 30 claims were shown another request's answer: {wrong[:3]}"
    answered = sum(1 for _rx, source, _msg in shown if source == "outcomes")
    assert answered == 30, f"only {answered} of 30 got the service's own answer"
