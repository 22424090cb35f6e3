"""The console's sign-in (issue 29, decision 0034): the pages and JSON of signing in and
out, and :func:`admit`, which the intake app's authentication hook asks first.

- A person's session is a cookie (``pa_bridge_session``: HttpOnly, SameSite=Strict,
  Secure over HTTPS), never a token in a URL. A sign-in half done (the code is next,
  or the browser is at the identity provider) has its own short-lived cookie
  (``pa_bridge_sign_in``, SameSite=Lax so the provider's redirect back carries it).
- Requests a page makes on its own (the worklist's polling) send
  ``X-PA-Bridge-Background: 1``: they do not keep a session alive, so the idle
  time-out means the person did nothing.
- The intake API's bearer tokens are untouched: a request with a token and no
  session is the dispensing system's, as before.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any, Literal
from urllib.parse import quote

from flask import (
    Blueprint,
    Response,
    current_app,
    g,
    jsonify,
    redirect,
    request,
)
from pydantic import BaseModel, Field
from werkzeug.wrappers import Response as BaseResponse

from ..auth.oidc import Oidc, OidcFailed
from ..auth.people import (
    People,
    Person,
    SessionEnded,
    SignInRefused,
    pharmacy_contact,
    with_remote_user,
)
from ..logs import log_event
from ..service import UseCases
from ..service.errors import NotFound
from .errors import error_response
from .openapi import operation
from .pages import page, private_redirect

__all__ = [
    "COOKIE",
    "CodeBody",
    "SessionState",
    "SignInAnswer",
    "SignInBody",
    "SignInOptions",
    "SignOutAnswer",
    "admit",
    "bp",
    "install",
    "is_own",
    "opened",
    "person",
    "record",
]

COOKIE = "pa_bridge_session"
PENDING_COOKIE = "pa_bridge_sign_in"
BACKGROUND = "X-PA-Bridge-Background"
SIGN_IN_PAGE = "/console/sign-in"
_OWN = ("/console/sign-in", "/console/sign-out", "/console/session", "/console/oidc/")

bp = Blueprint("people", __name__)


def install(app: Any) -> None:
    """The sign-in's routes on ``app``; its use case is made on first use from the
    app's use cases (``People``, and ``Oidc`` when ``[oidc]`` is set)."""
    app.register_blueprint(bp)


_MADE = threading.Lock()


def _people() -> People:
    ext = current_app.extensions
    found: People | None = ext.get("pa_bridge.people")
    if found is None:
        with _MADE:
            found = ext.get("pa_bridge.people")
            if found is None:
                use_cases: UseCases = ext["pa_bridge"]
                s = use_cases.settings
                if s.oidc.enabled():
                    ext["pa_bridge.oidc"] = Oidc(s.oidc, s.secret(s.oidc.client_secret))
                found = People(use_cases.store, s, clock=use_cases.clock)
                ext["pa_bridge.people"] = found
    return found


def _remote() -> str | None:
    return request.remote_addr


def is_own(path: str) -> bool:
    """The sign-in's own paths: served to anyone (each checks what it needs)."""
    return path.startswith(_OWN)


def _is_page(path: str) -> bool:
    return path == "/" or path.startswith("/console/pa/")


def _set_cookie(resp: Response | BaseResponse, name: str, value: str, *, lax: bool = False) -> None:
    resp.set_cookie(
        name,
        value,
        httponly=True,
        secure=request.is_secure,
        samesite="Lax" if lax else "Strict",
        path="/",
    )


def _clear(resp: Response | BaseResponse, name: str) -> None:
    resp.delete_cookie(name, path="/", httponly=True, secure=request.is_secure)


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a path of this server only."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def admit() -> tuple[Response, int] | BaseResponse | None:
    """Asked first by the intake app's authentication hook: a person's session sets
    ``g.person`` and ``g.actor``; a console page or console JSON that needs a person
    and has none is refused (the page: to the sign-in page; the JSON: 401). None:
    carry on (a token, or no sign-in needed)."""
    path = request.path
    g.person = None
    if is_own(path):
        return None
    # the dispensing system sends no cookie: nothing to parse then
    token = request.cookies.get(COOKIE) if "HTTP_COOKIE" in request.environ else None
    needs = _is_page(path) or path.startswith("/v1/console/")
    if not token and not needs:
        return None  # the dispensing system's requests: nothing to look at
    people = _people()
    ended = None
    if token:
        activity = request.headers.get(BACKGROUND) != "1" or request.method not in ("GET", "HEAD")
        try:
            person = people.session(token, activity=activity, remote=_remote())
        except SessionEnded as e:
            ended = e.why
        else:
            g.person = person
            g.actor = f"{person.actor}@{_remote() or 'unknown'}"
            g.scope = None
            return None
    if not needs or not people.required():
        return None
    if _is_page(path):
        resp = redirect(f"{SIGN_IN_PAGE}?next={quote(request.full_path.rstrip('?'))}", code=302)
        if ended:
            _clear(resp, COOKIE)
        return resp
    if ended:
        resp, status = error_response(
            401, "session_ended", "your session ended: sign in again", {"why": ended}
        )
        _clear(resp, COOKIE)
        return resp, status
    return error_response(401, "sign_in_required", "sign in to use the console")


def person() -> Person | None:
    found: Person | None = g.get("person")
    return found


def opened(use_cases: UseCases, pa_id: str, url: str) -> str:
    """The hosted page's URL for whoever opens the PA, recorded in the audit log: a
    person's display name and the store's phone and fax go to the service
    (``remote_user``, saved in the PA's history)."""
    who = person()
    if who is not None:
        row = use_cases.pas.get_pa_row(pa_id)
        phone, fax = pharmacy_contact(use_cases.settings, row["provider_id"] if row else None)
        url = with_remote_user(url, who.display_name, phone, fax)
    record(use_cases, "pa.open", pa_id)
    return url


def record(
    use_cases: UseCases, action: str, object_id: str | None, detail: str | None = None
) -> None:
    """An audit entry for what this request did, by whoever sent it."""
    actor = str(g.get("actor") or _remote() or "unknown")
    _people().record(actor, action, object_id, detail)


# ---- pages and JSON of signing in ------------------------------------------------------


class SignInBody(BaseModel):
    name: str = Field(description="the sign-in name")
    password: str


class CodeBody(BaseModel):
    code: str = Field(description="the authenticator's six digits")


class SignInAnswer(BaseModel):
    signed_in: bool
    display_name: str | None = Field(default=None, description="when signed in")
    next: Literal["code"] | None = Field(
        default=None, description="`code`: the authenticator's code is next"
    )


class OidcChoice(BaseModel):
    label: str = Field(description="the button's words")


class SignInOptions(BaseModel):
    required: bool = Field(description="whether the console needs a person signed in")
    totp: bool = Field(description="whether an authenticator's code follows the password")
    oidc: OidcChoice | None = Field(description="single sign-on, when `[oidc]` is set")


class SignOutAnswer(BaseModel):
    signed_out: bool = Field(description="a session was ended")


class SessionState(BaseModel):
    signed_in: bool
    name: str
    display_name: str
    idle_minutes: int = Field(description="`[console] idle_minutes`")
    idle_seconds_left: int = Field(ge=0)


def _json(model: BaseModel) -> Response:
    resp = jsonify(model.model_dump(exclude_unset=True))
    resp.headers["Cache-Control"] = "no-store"
    return resp


_REFUSALS = {
    400: "a body without what the step needs (`invalid_body`), or no sign-in started"
    " (`sign_in_not_started`)",
    401: "`sign_in_failed`: the name, password or code is not right; `sign_in_expired`:"
    " start again",
    429: "`locked`: too many attempts; `Retry-After` says when to try again",
    503: "the database cannot be used; try again",
}


def _page(name: str) -> Response:
    return page(name, cache="no-store")


@bp.get(SIGN_IN_PAGE)
@operation(
    "signInPage",
    public=True,
    answers={200: (None, "the page")},
    content={200: ["text/html"]},
)
def sign_in_page() -> Response:
    """The sign-in page (HTML)"""
    return _page("signin.html")


@bp.get(f"{SIGN_IN_PAGE}/options")
@operation("signInOptions", public=True, answers={200: (SignInOptions, "how to sign in")})
def sign_in_options() -> Response:
    """Whether sign-in is required, with an authenticator's code, or single sign-on"""
    people = _people()
    oidc: Oidc | None = current_app.extensions.get("pa_bridge.oidc")
    return jsonify(
        SignInOptions(
            required=people.required(),
            totp=people.totp_required,
            oidc=None if oidc is None else OidcChoice(label=oidc.s.button_label),
        ).model_dump()
    )


def _body() -> dict[str, Any]:
    data = request.get_json(silent=True)
    return data if isinstance(data, dict) else {}


def _refused(e: SignInRefused) -> tuple[Response, int]:
    resp, status = error_response(e.status, e.code, e.message)
    if e.retry_after is not None:
        resp.headers["Retry-After"] = str(e.retry_after)
    return resp, status


def _signed_in(token: str, who: Person | None) -> Response:
    resp = _json(SignInAnswer(signed_in=True, display_name=who.display_name if who else None))
    _set_cookie(resp, COOKIE, token)
    _clear(resp, PENDING_COOKIE)
    return resp


@bp.post(SIGN_IN_PAGE)
@operation(
    "signIn",
    public=True,
    body=SignInBody,
    answers={200: (SignInAnswer, "signed in (a `pa_bridge_session` cookie), or the code is next")},
    errors=_REFUSALS,
)
def sign_in() -> Response | tuple[Response, int]:
    """Name and password: signed in, or the authenticator's code is next"""
    body = _body()
    if not body.get("name") or not body.get("password"):
        return error_response(400, "invalid_body", 'send {"name": ..., "password": ...}')
    try:
        step = _people().begin(
            str(body.get("name") or ""), str(body.get("password") or ""), _remote()
        )
    except SignInRefused as e:
        return _refused(e)
    if step.stage == "totp":
        resp = _json(SignInAnswer(signed_in=False, next="code"))
        _set_cookie(resp, PENDING_COOKIE, step.token, lax=True)
        return resp
    return _signed_in(step.token, step.person)


@bp.post(f"{SIGN_IN_PAGE}/code")
@operation(
    "signInCode",
    public=True,
    body=CodeBody,
    answers={200: (SignInAnswer, "signed in (a `pa_bridge_session` cookie)")},
    errors=_REFUSALS,
)
def sign_in_code() -> Response | tuple[Response, int]:
    """The authenticator's code"""
    pending = request.cookies.get(PENDING_COOKIE)
    if not pending:
        return error_response(400, "sign_in_not_started", "start with your name and password")
    try:
        step = _people().second_factor(pending, str(_body().get("code") or ""), _remote())
    except SignInRefused as e:
        return _refused(e)
    return _signed_in(step.token, step.person)


@bp.post("/console/sign-out")
@operation("signOut", public=True, answers={200: (SignOutAnswer, "signed out")})
def sign_out() -> Response:
    """End this session"""
    token = request.cookies.get(COOKIE)
    ended = _people().sign_out(token, _remote()) if token else False
    resp = _json(SignOutAnswer(signed_out=ended))
    _clear(resp, COOKIE)
    return resp


@bp.get("/console/session")
@operation(
    "session",
    public=True,
    security=[{"personSession": []}],
    answers={200: (SessionState, "who is signed in")},
    errors={401: "`sign_in_required` or `session_ended` (`detail.why`)"},
)
def session_state() -> Response | tuple[Response, int]:
    """Who is signed in

    A request without `X-PA-Bridge-Background: 1` keeps the session alive: the pages
    send the header on what they do by themselves."""
    token = request.cookies.get(COOKIE)
    people = _people()
    if not token:
        return error_response(
            401, "sign_in_required", "not signed in", {"required": people.required()}
        )
    activity = request.headers.get(BACKGROUND) != "1"
    try:
        who = people.session(token, activity=activity, remote=_remote())
    except SessionEnded as e:
        resp, status = error_response(
            401, "session_ended", "your session ended: sign in again",
            {"why": e.why, "required": people.required()},
        )  # fmt: skip
        _clear(resp, COOKIE)
        return resp, status
    return _json(SessionState.model_validate(people.state(who)))


# ---- OpenID Connect --------------------------------------------------------------------


def _oidc() -> Oidc:
    _people()  # makes the client too
    found: Oidc | None = current_app.extensions.get("pa_bridge.oidc")
    if found is None:
        raise NotFound("not_found", "sign-in through an identity provider is not set up")
    return found


def _redirect_uri(oidc: Oidc) -> str:
    return oidc.s.redirect_url or f"{request.host_url.rstrip('/')}/console/oidc/callback"


@bp.get(f"{SIGN_IN_PAGE}/oidc")
@operation(
    "signInOidc",
    public=True,
    answers={302: (None, "to the identity provider")},
    errors={404: "single sign-on is not set up", 502: "the identity provider failed"},
)
def oidc_start() -> BaseResponse | tuple[Response, int]:
    """To the identity provider (OpenID Connect)"""
    oidc = _oidc()
    try:
        url, pending = oidc.start(_redirect_uri(oidc))
    except OidcFailed as e:
        log_event("sign_in.oidc_failed", error=str(e))
        return error_response(502, "identity_provider_failed", str(e))
    pending["next"] = _safe_next(request.args.get("next"))
    token = secrets.token_urlsafe(32)
    _people().pending(token, pending, _remote())
    resp = private_redirect(url)
    _set_cookie(resp, PENDING_COOKIE, token, lax=True)
    return resp


@bp.get("/console/oidc/callback")
@operation(
    "oidcCallback",
    public=True,
    answers={302: (None, "signed in, to the page asked for; else to the sign-in page")},
    errors={404: "single sign-on is not set up"},
)
def oidc_callback() -> BaseResponse | tuple[Response, int]:
    """Back from the identity provider"""
    oidc = _oidc()
    people = _people()
    token = request.cookies.get(PENDING_COOKIE)
    pending = people.take_pending(token) if token else None
    if pending is None:
        return redirect(f"{SIGN_IN_PAGE}?failed=expired", code=302)
    try:
        who = oidc.finish(pending, {k: request.args.get(k, "") for k in ("code", "state", "error")})
        step = people.activate_external(who.name, who.display_name, _remote(), "oidc")
    except OidcFailed as e:
        log_event("sign_in.oidc_failed", error=str(e))
        people.record(f"unknown@{_remote()}", "sign_in.failed", None, f"oidc: {e}")
        return redirect(f"{SIGN_IN_PAGE}?failed=oidc", code=302)
    except SignInRefused:
        return redirect(f"{SIGN_IN_PAGE}?failed=refused", code=302)
    resp = redirect(_safe_next(pending.get("next")), code=302)
    _set_cookie(resp, COOKIE, step.token)
    _clear(resp, PENDING_COOKIE)
    resp.headers["Cache-Control"] = "no-store"
    return resp
