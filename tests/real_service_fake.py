"""A small purpose-built fake of the PA service that answers only in the real shapes
(``../shared/docs/real-service-evidence.md``), on 127.0.0.1; not the sandbox.

* ``POST /cmmimport/``: form variables ``username``, ``password``, ``api_key``,
  ``ncpdp_claim`` and metadata; the PA link as a bare URL line (CRLF) in a
  ``text/html`` answer, HTTP 200 for a new PA and a duplicate alike; for a claim whose
  group id contains ``EMPTY``, the empty format (blank body). Errors: HTML pages with the
  message in ``<p>`` (403 wrong credentials, 404 missing variables).
* ``POST /outcomes``: ``button_label;message`` text.
* ``GET /request/view/<id>?token_id=``: a plain page.
* Callbacks: the request object, wrapped, real-shaped (:mod:`tests.real_shapes`),
  POSTed to ``callback_url`` by :meth:`RealServiceFake.callback`.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
from flask import Flask, Response, request

import ncpdp
from pa_bridge.wsgi import WsgiServer

from .real_shapes import callback_body, delete_event


@dataclass
class FakePa:
    id: str
    token: str
    key: str
    payer: dict[str, str]
    pharmacy: dict[str, str]
    prescription: dict[str, Any]
    deleted: bool = False


@dataclass
class ReceivedClaim:
    code: str
    framed: bool
    form: dict[str, str]


@dataclass
class RealServiceFake:
    username: str = "fake-user"
    password: str = "fake-pass"
    api_key: str = "fake-key"
    callback_url: str | None = None
    pas: dict[str, FakePa] = field(default_factory=dict)
    claims: list[ReceivedClaim] = field(default_factory=list)
    outcomes: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        app = Flask("real-service-fake")
        app.add_url_rule("/cmmimport/", "claim", self._claim, methods=["POST"])
        app.add_url_rule("/outcomes", "outcomes", self._outcomes, methods=["POST"])
        app.add_url_rule("/request/view/<pa_id>", "page", self._page, methods=["GET"])
        app.add_url_rule("/requests/<pa_id>", "request_page", self._page, methods=["GET"])
        self.server = WsgiServer(app, "127.0.0.1", 0, name="real-service-fake")

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> RealServiceFake:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    # ---- what the service sends
    def link(self, pa: FakePa) -> str:
        return f"{self.url}/request/view/{pa.id}?token_id={pa.token}"

    def callback(
        self, pa_id: str, status: str, outcome: str | None = None, *, delete: bool = False
    ) -> int:
        """POST one real-shaped callback for ``pa_id`` (known here or not) and return the
        receiver's HTTP status."""
        assert self.callback_url
        pa = self.pas.get(pa_id)
        kw: dict[str, Any] = {"portal": self.url}
        if pa is not None:
            kw |= {"token": pa.token, "payer": pa.payer, "pharmacy": pa.pharmacy}
            kw["prescription"] = pa.prescription
        if delete:
            kw["events"] = [delete_event()]
        body = callback_body(pa_id, status, outcome, **kw)
        r = httpx.post(
            self.callback_url,
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        return r.status_code

    # ---- handlers
    @staticmethod
    def _error(status: int, *messages: str) -> Response:
        ps = "".join(f"<p>{m}</p>" for m in messages)
        page = f"<html><head><title>{status} Error</title></head><body>{ps}</body></html>"
        return Response(page, status=status, mimetype="text/html")

    def _claim(self) -> Response:
        form = request.form.to_dict()
        missing = [v for v in ("username", "password", "api_key", "ncpdp_claim") if not form.get(v)]
        if missing:
            return self._error(404, *(f"Missing POST variable: {v}" for v in missing))
        if (form["username"], form["password"], form["api_key"]) != (
            self.username,
            self.password,
            self.api_key,
        ):
            return self._error(403, "Wrong or unknown username or password")
        raw = form["ncpdp_claim"]
        t = ncpdp.parse(raw, strict=False)
        view = t.as_request()
        code = view.transaction_code.strip()
        with self.lock:
            self.claims.append(ReceivedClaim(code, raw[:1] == "\x02" and raw[-1:] == "\x03", form))
        group = form.get("group_id") or view.group_id or ""
        lines = []
        for tx in view.transactions:
            key = "|".join([view.bin, view.pcn, group, tx.rx_number or "", str(tx.fill_number)])
            with self.lock:
                pa = next((p for p in self.pas.values() if p.key == key and not p.deleted), None)
                if code == "B1" and pa is None:
                    pa = FakePa(
                        id=secrets.token_hex(3).upper(),
                        token=secrets.token_urlsafe(12),
                        key=key,
                        payer={"bin": view.bin, "pcn": view.pcn, "group_id": group},
                        pharmacy={"npi": view.service_provider_id},
                        prescription={"drug_id": "085705", "quantity": "30", "days_supply": ""},
                    )
                    self.pas[pa.id] = pa
                if code == "B2" and pa is not None:
                    pa.deleted = True
            if pa is not None:
                lines.append(self.link(pa))
        if "EMPTY" in group.upper():
            return Response(b"", status=200, mimetype="text/html")
        return Response("".join(f"{u}\r\n" for u in lines), status=200, mimetype="text/html")

    def _outcomes(self) -> Response:
        with self.lock:
            self.outcomes.append(request.form.to_dict())
        codes = request.form.get("rejection_code", "").split(",")
        text = "Submit PA;PA required: submit it now" if "75" in codes else ";"
        return Response(text, status=200, mimetype="text/plain")

    def _page(self, pa_id: str) -> Response:
        pa = self.pas.get(pa_id)
        if pa is None or request.args.get("token_id") != pa.token:
            return self._error(403, "This link is not valid")
        return Response(f"<html><body><p>PA {pa.id}</p></body></html>", mimetype="text/html")
