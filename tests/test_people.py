"""People signing in to the console (issue 29): passwords, TOTP, lock-out with
back-off, idle and maximum session times on a moved clock, sign-out, the cookie, and
the embedded default left as it was."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyotp
import pytest

from pa_bridge.app import create_app, make_client
from pa_bridge.auth.people import hash_password, new_totp_secret
from pa_bridge.config import load_settings
from pa_bridge.encryption import open_store
from pa_bridge.store import now_iso, users

PASSWORD = "correct horse battery"


class Clock:
    def __init__(self) -> None:
        self.t = 1_750_000_000.0

    def __call__(self) -> float:
        return self.t

    def move(self, seconds: float) -> None:
        self.t += seconds


class App:
    def __init__(self, app: Any, clock: Clock) -> None:
        self.app, self.clock = app, clock
        self.client = app.test_client()
        self.services = app.extensions["pa_bridge"]
        self.store = self.services.store

    def add_user(self, name: str = "alice", display: str = "Alice Pharmacist") -> str:
        secret = new_totp_secret()
        h = hash_password(PASSWORD)
        self.store.write(lambda db: users.insert(db, name, display, "local", h, secret, now_iso()))
        return secret

    def code(self, secret: str, offset_steps: int = 0) -> str:
        t = pyotp.TOTP(secret)
        step = t.timecode(datetime.fromtimestamp(self.clock(), tz=UTC)) + offset_steps
        return t.generate_otp(step)

    def page(self, path: str) -> int:
        """A page's status (its file response closed)."""
        r = self.client.get(path)
        r.close()
        return int(r.status_code)

    def sign_in(self, name: str = "alice", password: str = PASSWORD) -> Any:
        return self.client.post("/console/sign-in", json={"name": name, "password": password})

    def audit(self) -> list[dict[str, Any]]:
        return self.store.query(
            "SELECT seq, actor, action, object_id, detail, remote FROM audit ORDER BY id"
        )


@pytest.fixture
def make(tmp_path: Path, sandbox: Any) -> Iterator[Any]:
    made: list[Any] = []

    def build(**sections: dict[str, Any]) -> App:
        base: dict[str, dict[str, Any]] = {
            "storage": {"path": str(tmp_path / f"p{len(made)}.sqlite3")},
            "intake": {"listen": "127.0.0.1:0"},
            "callbacks": {"listen": "127.0.0.1:0"},
        }
        for k, v in sections.items():
            base.setdefault(k, {}).update(v)
        settings = load_settings(**base)
        clock = Clock()
        store = open_store(settings)
        client = make_client(settings, sandbox.url)
        app = create_app(settings, store=store, client=client, clock=clock)
        made.append((app, store, client))
        return App(app, clock)

    yield build
    for app, store, client in made:
        app.extensions["pa_bridge"].close()
        client.close()
        store.close()


def test_loopback_without_anyone_added_is_the_console_as_before(make: Any) -> None:
    a = make()
    assert a.page("/") == 200
    assert a.client.get("/v1/console/worklist").status_code == 200
    opts = a.client.get("/console/sign-in/options").get_json()
    assert opts["required"] is False


def test_once_someone_is_added_the_console_asks_who_it_is(make: Any) -> None:
    a = make()
    a.add_user()
    page = a.client.get("/console/pa/ABC123")
    assert page.status_code == 302
    assert page.headers["Location"] == "/console/sign-in?next=/console/pa/ABC123"
    r = a.client.get("/v1/console/worklist")
    assert r.status_code == 401 and r.get_json()["error"]["code"] == "sign_in_required"
    # the dispensing system's API on loopback without tokens is as it was
    assert a.client.get("/v1/pa").status_code == 200


def test_sign_in_sets_a_cookie_never_a_url_and_the_person_is_recorded(make: Any) -> None:
    a = make()
    a.add_user()
    r = a.sign_in()
    assert r.status_code == 200 and r.get_json() == {
        "signed_in": True,
        "display_name": "Alice Pharmacist",
    }
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("pa_bridge_session=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    token = cookie.split(";", 1)[0].split("=", 1)[1]
    assert "Location" not in r.headers
    assert a.client.get("/v1/console/worklist").status_code == 200
    assert a.page("/") == 200
    who = a.client.get("/console/session").get_json()
    assert who["name"] == "alice" and who["display_name"] == "Alice Pharmacist"
    # the database keeps a hash of the secret, never the secret
    ids = [row["id"] for row in a.store.query("SELECT id FROM sessions")]
    assert token not in ids and len(ids) == 1
    signed = [e for e in a.audit() if e["action"] == "sign_in"]
    assert signed and signed[0]["actor"] == "user:alice" and signed[0]["remote"] == "127.0.0.1"


def test_wrong_password_and_unknown_name_answer_alike_and_name_no_password(make: Any) -> None:
    a = make()
    a.add_user()
    wrong = a.sign_in(password="not the password")
    unknown = a.sign_in(name="correct horse battery", password="x")
    for r in (wrong, unknown):
        assert r.status_code == 401 and r.get_json()["error"]["code"] == "sign_in_failed"
    trail = a.audit()
    assert [e["actor"] for e in trail if e["action"] == "sign_in.failed"] == [
        "user:alice",
        "unknown",
    ]
    assert all("correct horse" not in str(e) for e in trail)


def test_totp_is_asked_for_and_a_code_is_good_once(make: Any) -> None:
    a = make(console={"totp": "required"})
    secret = a.add_user()
    r = a.sign_in()
    assert r.get_json() == {"signed_in": False, "next": "code"}
    assert a.client.get("/v1/console/worklist").status_code == 401  # half signed in
    bad = a.client.post(
        "/console/sign-in/code", json={"code": "000000" if a.code(secret) != "000000" else "111111"}
    )
    assert bad.status_code == 401
    code = a.code(secret)
    ok = a.client.post("/console/sign-in/code", json={"code": code})
    assert ok.status_code == 200 and ok.get_json()["signed_in"] is True
    assert a.client.get("/v1/console/worklist").status_code == 200
    # the same code again, for a second sign-in, is refused
    a.client.post("/console/sign-out", json={})
    a.sign_in()
    again = a.client.post("/console/sign-in/code", json={"code": code})
    assert again.status_code == 401
    assert any(
        e["detail"].startswith("code used already")
        for e in a.audit()
        if e["action"] == "sign_in.failed"
    )


def test_totp_is_on_by_default_on_a_listener_others_reach(make: Any) -> None:
    a = make(intake={"listen": "0.0.0.0:0", "tokens": ["t" * 24]})
    assert a.page("/") == 302  # nobody added yet: still sign-in
    a.add_user()
    assert a.sign_in().get_json()["next"] == "code"
    # the dispensing system's token still works on the API, not on the console's JSON
    auth = {"Authorization": "Bearer " + "t" * 24}
    assert a.client.get("/v1/pa", headers=auth).status_code == 200
    assert a.client.get("/v1/console/worklist", headers=auth).status_code == 401


def test_totp_off_is_refused_on_a_listener_others_reach() -> None:
    from pa_bridge.config import ConfigError

    with pytest.raises(ConfigError, match=r"console\.totp: off only on a loopback"):
        load_settings(
            intake={"listen": "0.0.0.0:8470", "tokens": ["t" * 24]}, console={"totp": "off"}
        )


def test_lock_out_with_back_off(make: Any) -> None:
    a = make(console={"lockout_after": 3, "lockout_minutes": 1})
    a.add_user()
    for _ in range(3):
        assert a.sign_in(password="wrong wrong wrong").status_code == 401
    locked = a.sign_in()  # even the right password
    assert locked.status_code == 429 and locked.get_json()["error"]["code"] == "locked"
    assert 55 <= int(locked.headers["Retry-After"]) <= 61
    a.clock.move(61)
    assert a.sign_in(password="wrong again wrong").status_code == 401  # 4th in a row: 2 minutes
    a.clock.move(61)
    assert a.sign_in().status_code == 429
    a.clock.move(60)
    assert a.sign_in().status_code == 200  # the lock ran out; success clears the count
    a.client.post("/console/sign-out", json={})
    assert a.sign_in(password="wrong wrong wrong").status_code == 401
    assert a.sign_in().status_code == 200


def test_idle_log_off_on_a_moved_clock(make: Any) -> None:
    a = make()
    a.add_user()
    a.sign_in()
    bg = {"X-PA-Bridge-Background": "1"}
    for _ in range(3):  # the page polling on its own does not keep the session alive
        a.clock.move(5 * 60)
        assert a.client.get("/v1/console/worklist", headers=bg).status_code == 200
    a.clock.move(60 + 1)
    r = a.client.get("/v1/console/worklist", headers=bg)
    assert r.status_code == 401
    assert r.get_json()["error"] == {
        "code": "session_ended",
        "message": "your session ended: sign in again",
        "detail": {"why": "idle"},
    }
    assert "pa_bridge_session=;" in r.headers["Set-Cookie"]
    ended = [e for e in a.audit() if e["action"] == "session.ended"]
    assert ended and ended[0]["detail"] == "idle" and ended[0]["actor"] == "user:alice"


def test_activity_keeps_a_session_until_its_fixed_maximum(make: Any) -> None:
    a = make(console={"idle_minutes": 15, "session_max_hours": 2})
    a.add_user()
    a.sign_in()
    for _ in range(11):  # something done every 10 minutes: 110 minutes
        a.clock.move(10 * 60)
        assert a.client.get("/console/session").status_code == 200
    a.clock.move(11 * 60)
    r = a.client.get("/console/session")
    assert r.status_code == 401 and r.get_json()["error"]["detail"]["why"] == "max_age"


def test_sign_out_ends_the_session_for_good(make: Any) -> None:
    a = make()
    a.add_user()
    token = a.sign_in().headers["Set-Cookie"].split(";", 1)[0].split("=", 1)[1]
    out = a.client.post("/console/sign-out", json={})
    assert out.get_json() == {"signed_out": True}
    other = a.app.test_client()  # the old cookie's value, sent again
    other.set_cookie("pa_bridge_session", token)
    r = other.get("/v1/console/worklist")
    assert r.status_code == 401 and r.get_json()["error"]["detail"]["why"] == "signed_out"
    assert [e["action"] for e in a.audit()][-1] == "sign_out"


def test_disabled_and_reset_people_lose_their_sessions(make: Any, cli: Any, tmp_path: Path) -> None:
    a = make()
    a.add_user()
    a.sign_in()
    path = a.store.path
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[storage]\npath = "{path}"\n')
    r = cli("users", "disable", "alice", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert "1 session(s) ended" in r.output
    gone = a.client.get("/v1/console/worklist")
    assert gone.status_code == 401 and gone.get_json()["error"]["detail"]["why"] == "disabled"
    assert a.sign_in().status_code == 401
    entry = next(e for e in a.audit() if e["action"] == "user.disable")
    assert entry["actor"].startswith("cli:") and entry["remote"].startswith("cli@")


def test_acknowledge_and_open_record_the_person(make: Any) -> None:
    from tests import builders as b

    a = make(console={"phone_number": "555-0100", "fax_number": "555-0101"})
    a.add_user(display="Pat Q. Pharmacist")
    a.sign_in()
    claim = a.client.post(
        "/v1/claims",
        json={
            "request": b.request_bytes().decode("latin-1"),
            "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
        },
    ).get_json()
    pa = a.client.post(f"/v1/claims/{claim['claim_id']}/pa").get_json()
    opened = a.client.get(f"/v1/pa/{pa['pa_id']}/open")
    assert opened.status_code == 302
    loc = opened.headers["Location"]
    assert "remote_user%5Bdisplay_name%5D=Pat+Q.+Pharmacist" in loc
    assert (
        "remote_user%5Bphone_number%5D=555-0100" in loc
        and "remote_user%5Bfax_number%5D=555-0101" in loc
    )
    ack = a.client.post(f"/v1/pa/{pa['pa_id']}/acknowledge")
    assert ack.status_code == 200 and ack.get_json()["acknowledged"]["by"] == "user:alice"
    actions = {(e["action"], e["actor"]) for e in a.audit()}
    assert {
        ("pa.submit", "user:alice"),
        ("pa.open", "user:alice"),
        ("pa.acknowledged", "user:alice"),
    } <= actions


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_burst_of_wrong_passwords_is_held_to_the_lock_out(
    make_daemon: Any, engine: str, request: pytest.FixtureRequest
) -> None:
    """16 clients at once guessing one name's password: no more guesses are tried than
    the lock-out allows (one more at most, in flight when it locked), at most two
    passwords are checked at a time (each check holds 64 MiB and a CPU: the rest are
    told to try again), and the audit log gets one entry per lock, not one per
    refused attempt."""
    import threading
    import time

    import httpx

    storage = {"url": request.getfixturevalue("pg_url")} if engine == "postgresql" else {}
    d = make_daemon(console={"lockout_after": 5, "lockout_minutes": 10}, storage=storage)
    h = hash_password(PASSWORD)
    d.store.write(lambda db: users.insert(db, "alice", "Alice", "local", h, None, now_iso()))
    url = d.intake_server.url
    start = threading.Barrier(16)
    statuses: list[int] = []

    def guesser(n: int) -> None:
        # each guesser keeps guessing until the lock-out answers it (a 503 "busy" is
        # instant, so a fixed number of tries could all be busy on a loaded machine and
        # the lock never reached: the test must not depend on the machine's speed)
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=url, timeout=30) as c:
            start.wait()
            i = 0
            while time.monotonic() < deadline:
                i += 1
                r = c.post(
                    "/console/sign-in", json={"name": "alice", "password": f"guess {n} {i} xx"}
                )
                statuses.append(r.status_code)
                if r.status_code == 429:
                    return

    threads = [threading.Thread(target=guesser, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(statuses) <= {401, 429, 503}, statuses
    assert statuses.count(429) >= 16, "every guesser ends at the lock-out"
    tried = statuses.count(401)
    assert tried <= 5 + 1, f"{tried} guesses tried against a lock-out after 5"
    right = httpx.post(f"{url}/console/sign-in", json={"name": "alice", "password": PASSWORD})
    assert right.status_code == 429  # still locked
    trail = d.store.query("SELECT action FROM audit WHERE action LIKE 'sign_in%'")
    failed = [e for e in trail if e["action"] == "sign_in.failed"]
    locked = [e for e in trail if e["action"] == "sign_in.locked"]
    assert len(failed) == tried
    assert 1 <= len(locked) <= 3, f"{len(locked)} entries for {statuses.count(429) + 1} refusals"
