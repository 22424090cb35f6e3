"""The sandbox's Flask app: the PA service's pharmacy interfaces with a test payer.

See the package docstring for the paths and the test payer table.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from html import escape
from typing import Any

from flask import Flask, Response, request

import ncpdp

from .. import __version__
from ..client import CLAIM_VARIABLES, DASHBOARD_LOGIN_VARIABLES, OUTCOME_VARIABLES, is_framed
from ._state import CallbackTarget, SandboxState
from .config import SandboxConfig, SandboxPharmacy

__all__ = ["create_sandbox_app", "sandbox_state"]

log = logging.getLogger("pa_bridge.sandbox")

UNKNOWN_NDC = "00000000000"
OUTCOMES_500_BIN = "999997"
OUTCOMES_STALL_BIN = "999998"
OUTCOMES_TRICKLE_BIN = "999996"
BUTTON_LABEL = "Submit PA"
#: Replacement rejection messages for the codes that call outcomes first.
REPLACEMENTS = {
    "75": "Prior authorization required. Submit an electronic PA now; "
    "the prescriber completes it online.",
    "70": "Product not covered as billed. The plan may cover it after a prior authorization; "
    "submit an electronic PA.",
    "76": "Plan limits exceeded. Request an exception with an electronic PA.",
}
_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
    "<body><h1>{title}</h1>{body}<p><small>pa-bridge sandbox: synthetic data only</small></p>"
    "</body></html>"
)


def sandbox_state(app: Flask) -> SandboxState:
    state = app.extensions["pa_sandbox"]
    assert isinstance(state, SandboxState)
    return state


def _page(title: str, body: str, status: int = 200) -> Response:
    return Response(
        _PAGE.format(title=escape(title), body=body), status=status, mimetype="text/html"
    )


def _errors(status: int, *errors: tuple[int, str, str]) -> Response:
    """The claim interface's error shape (the evidence): an HTML page with each message
    in a ``<p>`` element. ``(code, message, detail)``: the detail follows the message."""
    paragraphs = "".join(
        f"<p>{escape(m)}{': ' + escape(d) if d and d not in m else ''}</p>" for _, m, d in errors
    )
    title = {403: "Forbidden", 404: "Not Found", 422: "Unprocessable Entity"}.get(status, "Error")
    body = (
        f"<!doctype html><html><head><title>{status} {title}</title></head>"
        f"<body>{paragraphs}</body></html>"
    )
    return Response(body, status=status, mimetype="text/html")


def _same(given: str | None, expected: str) -> bool:
    return hmac.compare_digest((given or "").encode(), expected.encode())


def _us_date(ccyymmdd: str) -> str:
    d = ccyymmdd.strip()
    return f"{d[4:6]}/{d[6:8]}/{d[:4]}" if len(d) == 8 and d.isdigit() else ""


def _plain(number: Any) -> str:
    """A quantity as the service writes it: "30", "2.5" (no trailing zeros)."""
    try:
        return format(Decimal(str(number)).normalize(), "f")
    except (InvalidOperation, ValueError):
        return str(number)


def _final_outcome(group_id: str) -> str:
    g = group_id.upper()
    if "DENY" in g:
        return "Unfavorable"
    if "PEND" in g:
        return "Pending"
    return "Favorable"


def create_sandbox_app(config: SandboxConfig | None = None) -> Flask:
    """The sandbox app. Its state (``app.extensions["pa_sandbox"]``) owns a scheduler
    thread started on first use; call ``sandbox_state(app).close()`` when done (the
    :class:`~pa_bridge.sandbox.SandboxServer` does)."""
    config = config or SandboxConfig()
    app = Flask("pa_bridge.sandbox")
    state = SandboxState(config)
    app.extensions["pa_sandbox"] = state

    accepted = [
        SandboxPharmacy(config.username, config.password, config.api_key),
        *config.pharmacies,
    ]

    def who(username: str | None, password: str | None) -> SandboxPharmacy | None:
        """The store these credentials are (every set compared, in constant time)."""
        found = None
        for p in accepted:
            if _same(username, p.username) & _same(password, p.password):
                found = found or p
        return found

    def by_api_key(api_key: str | None) -> SandboxPharmacy | None:
        found = None
        for p in accepted:
            if _same(api_key, p.api_key):
                found = found or p
        return found

    def pa_url(pa: dict[str, Any]) -> str:
        """The hosted-page link, ``{portal}/request/view/{id}?token_id=...``."""
        return state.token_url(pa)

    # ------------------------------------------------------------ claim interface

    def refused(form: Any, password_key: str, *, api_key: bool) -> bool:
        """Credentials that were sent and are wrong: refused (403) before any missing
        variable is named (404), as the service does, so a wrong password is never
        taken for a right one missing its claim."""
        username, password = form.get("username"), form.get(password_key)
        if not (username and password):
            return False  # not sent: a missing variable, named below
        pharmacy = who(username, password)
        if pharmacy is None:
            return True
        return (
            api_key
            and bool(form.get("api_key"))
            and not _same(form.get("api_key"), pharmacy.api_key)
        )

    def claim(fmt: str) -> Response:
        form = request.form
        wrong = (403, (403001, "Wrong or unknown username or password", "credentials rejected"))
        if refused(form, "password", api_key=True):
            return _errors(*wrong)
        missing = [v for v in CLAIM_VARIABLES if not form.get(v)]
        if missing:
            return _errors(
                404,
                *((404001, f"Missing POST variable: {v}", v) for v in missing),
            )
        pharmacy = who(form.get("username"), form.get("password"))
        if pharmacy is None or not _same(form.get("api_key"), pharmacy.api_key):
            return _errors(*wrong)
        state.portal = state.portal or request.host_url.rstrip("/")
        raw_claim = form["ncpdp_claim"]
        framed = is_framed(raw_claim)
        try:
            t = ncpdp.parse(raw_claim, strict=False)
        except ncpdp.ParseError as exc:
            state.record_claim(framed=framed, fmt=fmt, username=pharmacy.username)
            return _errors(500, (500001, "The claim could not be parsed", str(exc)))
        sent_for = t.as_request().service_provider_id if t.is_request else ""
        state.record_claim(framed=framed, fmt=fmt, username=pharmacy.username, provider_id=sent_for)
        state.record_call(
            "claim",
            pharmacy.username,
            provider_id=sent_for,
            transaction_code=t.as_request().transaction_code.strip() if t.is_request else "",
        )
        if pharmacy.provider_id is not None and sent_for != pharmacy.provider_id:
            # the service's rule: only the submitting pharmacy's own credentials
            return _errors(
                403,
                (403004, "These credentials are not the submitting pharmacy's", "201-B1"),
            )
        if not t.is_request:
            return _errors(500, (500002, "The claim is a response, not a request", "kind"))
        view = t.as_request()
        code = view.transaction_code.strip()
        if view.version.strip() not in ("D0", "51", "F6"):
            return _errors(
                500, (500003, "Only NCPDP D.0, 5.1 and F6 claims are accepted", "102-A2")
            )
        if code not in ("B1", "B2"):
            return _errors(
                500, (500004, "Only B1 and B2 transactions are accepted", f"103-A3 {code!r}")
            )
        bin_ = form.get("bin_number") or view.bin
        pcn = form.get("pcn_number") or view.pcn
        group = form.get("group_id") or view.group_id or ""
        provider = view.service_provider_id

        def key(tx: ncpdp.RequestTransactionView, group_id: str) -> str:
            fill = "" if tx.fill_number is None else str(tx.fill_number)
            return "|".join([bin_, pcn, group_id, tx.rx_number or "", fill, provider])

        if code == "B2":
            results: list[tuple[dict[str, Any], bool]] = []
            for tx in view.transactions:
                found = state.find(key(tx, group), include_deleted=True)
                if found is None and not group:
                    found = next(
                        (
                            p
                            for p in reversed(state.all())
                            if p["dup_key"].split("|")[:2] == [bin_, pcn]
                            and p["dup_key"].split("|")[3:] == key(tx, "").split("|")[3:]
                        ),
                        None,
                    )
                if found is not None:
                    already = bool(found["deleted"])
                    results.append((state.delete(found, "pharmacy"), already))
            return render_claim(fmt, results)

        for tx in view.transactions:
            ndc = (tx.product_id or "").strip()
            if ndc == UNKNOWN_NDC or not ndc:
                return _errors(
                    422,
                    (422001, "Unrecognised NDC", f"407-D7 in transaction {tx.index + 1}"),
                )
        results = []
        for tx in view.transactions:
            k = key(tx, group)
            npi = form.get("physician_npi") or (
                tx.prescriber_id if tx.prescriber_id_qualifier == "01" else ""
            )
            dea = form.get("physician_dea") or (
                tx.prescriber_id if tx.prescriber_id_qualifier == "12" else ""
            )
            pharmacy_key = "npi" if view.service_provider_id_qualifier == "01" else "ncpdpid"
            fields = {
                "payer": {"bin": bin_, "pcn": pcn, "group_id": group},
                "prescription": {
                    # the service answers a 6-digit drug id (ddid), not the NDC
                    "drug_id": f"{int(tx.product_id or '0') % 900000 + 100000:06d}"
                    if (tx.product_id or "").isdigit()
                    else "",
                    "ndc": tx.product_id,
                    # a synthetic name: the test payer's drug list is ours
                    "name": "Sandboxin (test drug)",
                    "strength": "10 MG",
                    "prescription_reference": tx.rx_number,
                    "fill_number": tx.fill_number,
                    "quantity": None if tx.quantity is None else _plain(tx.quantity),
                    "days_supply": tx.days_supply,
                    "date_of_service": _us_date(view.date_of_service),
                },
                "prescriber": {
                    "npi": npi or None,
                    "dea_number": dea or None,
                    "last_name": form.get("physician_lname") or tx.prescriber_last_name,
                },
                "pharmacy": {pharmacy_key: provider},
            }
            pa, duplicate = state.find_or_create(
                k, fields, _final_outcome(group), portal=request.host_url.rstrip("/")
            )
            results.append((pa, duplicate))
        # HTTP 200 for a new PA and for a duplicate alike: nothing marks a duplicate.
        return render_claim(fmt, results)

    def render_claim(fmt: str, results: list[tuple[dict[str, Any], bool]]) -> Response:
        urls = [pa_url(pa) for pa, _ in results]
        if fmt == "json":
            # "Verbose JSON": the evidence does not show its field names, so these are
            # deliberately our own; pa-bridge must find the links whatever they are.
            body = {
                "result": "ok",
                "transactions": [
                    {
                        "sequence": str(i + 1),
                        "prior_auth": {
                            "key": pa["id"],
                            "state": pa["workflow_status"],
                            "determination": pa["plan_outcome"],
                            "api": f"{state.portal_of(pa)}/requests/{pa['id']}",
                            "document": f"{state.portal_of(pa)}/requests/{pa['id']}/download",
                            "open_in_browser": url,
                        },
                    }
                    for i, ((pa, _), url) in enumerate(zip(results, urls, strict=True))
                ],
            }
            return Response(json.dumps(body), status=200, mimetype="application/json")
        if fmt == "empty":
            return Response(b"", status=200, mimetype="text/html")
        # The default format: the URL of each PA, one per line, in a text/html answer.
        body_text = "".join(f"{u}\r\n" for u in urls)
        return Response(body_text, status=200, mimetype="text/html")

    for rule in ("/cmmimport/", "/cmmimport"):
        app.add_url_rule(rule, f"claim_default{rule}", lambda: claim("lines"), methods=["POST"])
    app.add_url_rule("/cmmimport/json", "claim_json", lambda: claim("json"), methods=["POST"])
    app.add_url_rule("/cmmimport/empty", "claim_empty", lambda: claim("empty"), methods=["POST"])

    # ------------------------------------------------------------ outcomes interface

    def outcomes(fmt: str) -> Response:
        form = request.form
        if form.get("api_key") and by_api_key(form.get("api_key")) is None:
            return _errors(403, (403002, "Unknown api_key", "api_key rejected"))
        missing = [v for v in OUTCOME_VARIABLES if v not in form]
        if "api_key" not in missing and not form.get("api_key"):
            missing.insert(0, "api_key")
        if missing:
            return _errors(404, *((404002, f"Missing POST variable: {v}", v) for v in missing))
        caller = by_api_key(form.get("api_key"))
        if caller is None:
            return _errors(403, (403002, "Unknown api_key", "api_key rejected"))
        state.record_call("outcomes", caller.username)
        bin_ = form.get("bin", "").strip()
        if bin_ == OUTCOMES_500_BIN:
            return _errors(500, (500010, "Outcomes drill: server error", "bin 999997"))
        if bin_ == OUTCOMES_STALL_BIN and state.stop_event.wait(config.stall_seconds):
            return _errors(503, (503001, "The sandbox is stopping", "stopped during stall"))
        if config.outcomes_delay_seconds and state.stop_event.wait(config.outcomes_delay_seconds):
            return _errors(503, (503001, "The sandbox is stopping", "stopped during a delay"))
        codes = [c.strip() for c in form.get("rejection_code", "").split(",") if c.strip()]
        replacement = next((REPLACEMENTS[c] for c in codes if c in REPLACEMENTS), None)
        if replacement is not None:
            label, message = BUTTON_LABEL, replacement
        else:
            label, message = "", form.get("rejection_message", "")
        if fmt == "json":
            body = json.dumps({"button_label": label, "message": message}).encode()
            mimetype = "application/json"
        elif fmt == "txt":
            body = f"{label};{message}".encode()
            mimetype = "text/plain"
        else:
            return _page(
                "Outcome",
                f"<p>Button label: <b>{escape(label) or '(none)'}</b></p>"
                f"<p>Message: {escape(message)}</p>",
            )
        if bin_ == OUTCOMES_TRICKLE_BIN:
            return Response(
                _trickle(body, config.trickle_seconds, state),
                status=200,
                mimetype=mimetype,
                headers={"Content-Length": str(len(body))},
            )
        return Response(body, status=200, mimetype=mimetype)

    def outcomes_page() -> Response:
        inputs = "".join(f"<label>{v} <input name='{v}'></label><br>" for v in OUTCOME_VARIABLES)
        return _page(
            "Outcomes interface (sandbox)",
            "<p>POST the outcome variables to /outcomes.json (JSON) or /outcomes.txt "
            "(text: <code>button_label;message</code>). Rejection codes 70, 75, 76 get a "
            "replacement message; BIN 999997 answers 500, 999998 answers after 5 s, "
            "999996 trickles its answer over 3 s.</p>"
            f"<form method='post' action='/outcomes.json'>{inputs}"
            "<button>Send</button></form>",
        )

    app.add_url_rule("/outcomes", "outcomes_page", outcomes_page, methods=["GET"])
    app.add_url_rule("/outcomes", "outcomes_html", lambda: outcomes("html"), methods=["POST"])
    app.add_url_rule("/outcomes.json", "outcomes_json", lambda: outcomes("json"), methods=["POST"])
    app.add_url_rule("/outcomes.txt", "outcomes_txt", lambda: outcomes("txt"), methods=["POST"])

    # ------------------------------------------------------------ dashboard, PA pages

    @app.post("/dashboard/login")
    def dashboard_login() -> Response:
        form = request.form
        if refused(form, "plaintext_password", api_key=False):
            return _errors(403, (403003, "Wrong or unknown username or password", "login"))
        missing = [v for v in DASHBOARD_LOGIN_VARIABLES if not form.get(v)]
        if missing:
            return _errors(404, *((404003, f"Missing POST variable: {v}", v) for v in missing))
        caller = who(form.get("username"), form.get("plaintext_password"))
        if caller is None:
            return _errors(403, (403003, "Wrong or unknown username or password", "login"))
        state.record_call("dashboard_login", caller.username)
        token = secrets.token_urlsafe(32)
        state.dashboard_tokens.add(token)
        return Response(token, status=200, mimetype="text/plain")

    @app.get("/dashboard")
    def dashboard() -> Response:
        if request.args.get("token") not in state.dashboard_tokens:
            return _page("Dashboard", "<p>Please log in again.</p>", 403)
        rows = "".join(
            f"<tr><td><a href='{escape(pa_url(pa))}'>{escape(pa['id'])}</a></td>"
            f"<td>{escape(pa['workflow_status'])}</td><td>{escape(pa['plan_outcome'] or '')}</td></tr>"
            for pa in state.all()
            if not pa["deleted"]
        )
        return _page(
            "Pharmacy dashboard (sandbox)",
            f"<table><tr><th>PA</th><th>Status</th><th>Outcome</th></tr>{rows}</table>",
        )

    @app.get("/request/view/<pa_id>")
    def pa_page(pa_id: str) -> Response:
        """The hosted PA page: a plain page showing the PA and its status."""
        pa = state.get(pa_id)
        if pa is None or pa["deleted"]:
            return _page("Prior authorization", "<p>No such PA (or it was deleted).</p>", 404)
        if not any(_same(request.args.get("token_id"), t["id"]) for t in pa["tokens"]):
            return _page("Prior authorization", "<p>This link is not valid.</p>", 403)
        remote_user = {
            k: request.args[f"remote_user[{k}]"]
            for k in ("display_name", "phone_number", "fax_number")
            if request.args.get(f"remote_user[{k}]")
        }
        if remote_user:  # the client's user, saved in the PA's history
            state.record_remote_user(pa_id, remote_user)
        history = "".join(
            f"<li>{escape(h['time'])}: {escape(h['workflow_status'])}"
            f"{' (' + escape(h['plan_outcome']) + ')' if h.get('plan_outcome') else ''}</li>"
            for h in pa["history"]
        )
        rx = pa.get("prescription", {})
        return _page(
            f"Prior authorization {pa['id']}",
            f"<p>Status: <b id='status'>{escape(pa['workflow_status'])}</b></p>"
            f"<p>Outcome: <b id='outcome'>{escape(pa['plan_outcome'] or 'none yet')}</b></p>"
            f"<p>Drug (NDC): {escape(str(rx.get('ndc') or ''))}</p><ol>{history}</ol>",
        )

    @app.get("/_ping")
    def ping() -> Response:
        body = {
            "now": str(int(time.time())),
            "status": "ok",
            "app_name": "pa-bridge-sandbox",
            "version": __version__,
            "database": "true",
        }
        return Response(json.dumps(body), mimetype="application/json")

    # ------------------------------------------------------------ requests resource

    def api_error(status: int, code: int, message: str) -> Response:
        """The requests resource's error shape: ``{"errors": [{code, message, debug}]}``."""
        body = {"errors": [{"code": code, "message": message, "debug": f"sandbox: {message}"}]}
        return Response(json.dumps(body), status=status, mimetype="application/json")

    def api_caller() -> tuple[str, str] | Response:
        """(api_id, token part) from ``Authorization: Bearer <api_id>+<token>`` or the
        ``api_id`` / ``token_id`` parameters; an error answer when the version or the
        api_id is missing or wrong, or the resource is drilled to fail."""
        if state.requests_status is not None:
            return api_error(state.requests_status, state.requests_status * 1000, "drill")
        if request.values.get("v") != "1":
            return api_error(400, 400001, "v=1 is required")
        auth = request.headers.get("Authorization", "")
        api_id, token = request.values.get("api_id", ""), request.values.get("token_id", "")
        if auth[:7].lower() == "bearer ":
            api_id, _, token = auth[7:].strip().partition("+")
        if not _same(api_id, config.api_id):
            return api_error(401, 401001, "api_id missing or incorrect")
        state.record_call(f"requests.{request.endpoint}", api_id)
        return api_id, token

    @app.get("/requests/_ping")
    def requests_ping() -> Response:
        return ping()

    @app.get("/requests/<pa_id>")
    def get_request(pa_id: str) -> Response:
        caller = api_caller()
        if isinstance(caller, Response):
            return caller
        pa = state.get(pa_id)
        token = caller[1]
        if (
            pa is None
            or pa["deleted"]  # soft-deleted: all access revoked
            or not any(_same(token, t["id"]) for t in pa["tokens"])
        ):
            return api_error(404, 404001, "request not found")
        return Response(
            json.dumps({"request": state.request_object(pa)}), mimetype="application/json"
        )

    @app.post("/requests/search")
    def search_requests() -> Response:
        caller = api_caller()
        if isinstance(caller, Response):
            return caller
        tokens = request.form.getlist("token_ids[]") or request.form.getlist("token_ids")
        if not tokens:
            return api_error(400, 400002, "token_ids is required")
        found = [state.request_object(pa) for pa in state.by_tokens(tokens)]
        items = [{"request": o} for o in found] if config.search_wrapped else found
        return Response(json.dumps({"requests": items}), mimetype="application/json")

    # ------------------------------------------------------------ admin (tests, store IT)

    @app.post("/sandbox/control")
    def control() -> Response:
        """Drills: ``drop_callbacks`` (true: every callback is lost, counted),
        ``omit_period`` (callbacks without ``authorization_period``), and
        ``requests_status`` (the requests resource answers that HTTP status; null:
        normally). Answers the drills as they now are."""
        data = request.get_json(silent=True) or {}
        if "drop_callbacks" in data:
            state.drop_callbacks = bool(data["drop_callbacks"])
        if "omit_period" in data:
            state.omit_period = bool(data["omit_period"])
        if "requests_status" in data:
            value = data["requests_status"]
            state.requests_status = int(value) if value else None
        body = {
            "drop_callbacks": state.drop_callbacks,
            "dropped_callbacks": state.dropped_callbacks,
            "omit_period": state.omit_period,
            "requests_status": state.requests_status,
        }
        return Response(json.dumps(body), mimetype="application/json")

    @app.post("/sandbox/pas/<pa_id>/renew")
    def renew(pa_id: str) -> Response:
        renewal = state.renew(pa_id)
        if renewal is None:
            return api_error(404, 404002, "no such PA")
        return Response(
            json.dumps({"pa_id": renewal["id"], "renewal_of": pa_id, "url": pa_url(renewal)}),
            mimetype="application/json",
        )

    @app.get("/sandbox/pas")
    def list_pas() -> Response:
        out = []
        for pa in state.all():
            item = {k: v for k, v in pa.items() if k not in ("tokens", "dup_key", "final_outcome")}
            item["callbacks"] = pa.get("callbacks", {"attempts": 0, "delivered": 0})
            out.append(item)
        return Response(
            json.dumps({"pas": out, "pending_callbacks": state.pending_callbacks()}),
            mimetype="application/json",
        )

    @app.get("/sandbox/claims")
    def list_claims() -> Response:
        """Every claim received: its format and whether it came framed STX ... ETX."""
        return Response(json.dumps({"claims": state.claims()}), mimetype="application/json")

    @app.get("/sandbox/calls")
    def list_calls() -> Response:
        """Every call with the username its credentials belong to (newest last)."""
        return Response(json.dumps({"calls": state.calls()}), mimetype="application/json")

    @app.post("/sandbox/callback-url")
    def set_callback() -> Response:
        data: dict[str, Any] = (
            request.get_json(silent=True) if request.is_json else request.form.to_dict()
        ) or {}
        url = str(data.get("url") or "").strip() or None
        state.callback = CallbackTarget(
            url, str(data.get("username") or "") or None, str(data.get("password") or "") or None
        )
        log.info("sandbox callback target %s", "registered" if url else "cleared")
        return Response(
            json.dumps({"callback_url": url, "basic_auth": state.callback.username is not None}),
            mimetype="application/json",
        )

    @app.post("/sandbox/switch")
    def switch_faults() -> Response:
        """Arm the sandbox switch's faults: ``stall`` (with ``stall_seconds``, absent:
        never answered), ``cut``, ``swap`` (counts of requests), ``clear``."""
        switch = state.switch
        if switch is None:
            return _errors(404, (404020, "No sandbox switch runs here", "switch"))
        data: dict[str, Any] = (
            request.get_json(silent=True) if request.is_json else request.form.to_dict()
        ) or {}
        try:
            counts = {k: int(data.get(k) or 0) for k in ("stall", "cut", "swap")}
            seconds = data.get("stall_seconds")
            stall_seconds = float(seconds) if seconds not in (None, "") else None
            if min(counts.values()) < 0 or (stall_seconds is not None and stall_seconds < 0):
                raise ValueError("negative")
        except (TypeError, ValueError):
            return _errors(
                400,
                (400020, "stall, cut and swap are counts (0 or more), stall_seconds too", "switch"),
            )
        clear = data.get("clear")
        if clear is True or str(clear).strip().lower() in ("true", "1", "yes", "on"):
            switch.clear()
        if counts["stall"]:
            switch.stall(counts["stall"], stall_seconds)
        if counts["cut"]:
            switch.cut(counts["cut"])
        if counts["swap"]:
            switch.swap(counts["swap"])
        log.info("sandbox switch faults armed: %s", counts)
        return Response(json.dumps({"armed": counts}), mimetype="application/json")

    return app


def _trickle(body: bytes, seconds: float, state: SandboxState) -> Iterator[bytes]:
    """One byte at a time, spread over ``seconds``; stops early when the sandbox stops."""
    interval = seconds / max(len(body), 1)
    for i in range(len(body)):
        if i and state.stop_event.wait(interval):
            return
        yield body[i : i + 1]
