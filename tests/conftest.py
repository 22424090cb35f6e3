"""Shared fixtures: temporary databases that are always closed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pa_bridge.store import PgStore, Store

from . import pg_server
from .support import Cli

ENGINES = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def _state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What systemd's StateDirectory= gives the daemon: where a PostgreSQL daemon
    keeps its audit anchors by default. Each test has its own, so no test writes
    into the checkout (a daemon, or a process started by a test, inherits it)."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))


@pytest.fixture(scope="session")
def pg() -> Iterator[pg_server.PgServer]:
    """A PostgreSQL server for the whole session (skips when it is not installed)."""
    why = pg_server.missing_reason()
    if why is not None:
        pytest.skip(why)
    with pg_server.running_server() as server:
        yield server


@pytest.fixture
def pg_url(pg: pg_server.PgServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the test server (a schema of its own in
    a shared database: the URL's ``options`` set the search path)."""
    url = pg.new_schema()
    try:
        yield url
    finally:
        pg.drop_schema(url)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn: a test taking ``store`` (or ``engine``) runs on both."""
    return str(request.param)


@pytest.fixture
def store_url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's database is: a SQLite path, or a PostgreSQL URL."""
    if engine == "sqlite":
        return str(tmp_path / "pa-bridge.sqlite3")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def daemon_storage(engine: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``[storage]`` for ``make_daemon`` on each engine in turn (SQLite: its default
    file in the test's directory)."""
    if engine == "sqlite":
        return {}
    return {"url": str(request.getfixturevalue("pg_url"))}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``pa-bridge`` in process through click's ``CliRunner``, run the way store IT runs
    it: in the test's directory (the embedded default's ``./var`` is there), with no
    ``PA_BRIDGE_*`` variable from the environment. Exit codes, stdout and stderr are
    the command's own; an exception that escapes the command fails the test with its
    traceback. The real entry point as a process is covered in ``test_cli_process.py``."""
    from pa_bridge.cli import main

    for key in list(os.environ):
        if key.startswith("PA_BRIDGE_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(
        *args: str, input: bytes | str | None = None, env: dict[str, str] | None = None
    ) -> Result:
        return runner.invoke(main, list(args), input=input, env=env, catch_exceptions=False)

    return run


def open_store(where: str) -> Store:
    return PgStore(where) if where.startswith("postgresql://") else Store(where)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """SQLite only: for what is about the file (modes, WAL, pages)."""
    s = Store(tmp_path / "pa-bridge.sqlite3")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Any]:
    """Start an in-process daemon on loopback with free ports (sandbox by default)."""
    from pa_bridge.config import load_settings
    from pa_bridge.runtime import Daemon

    started: list[Daemon] = []

    def make(**sections: Any) -> Daemon:
        base: dict[str, dict[str, Any]] = {
            "storage": {"path": str(tmp_path / f"d{len(started)}.sqlite3")},
            "intake": {"listen": "127.0.0.1:0"},
            "callbacks": {"listen": "127.0.0.1:0"},
            "sandbox": {"step_seconds": 0.05, "listen": "127.0.0.1:0", "persist": False},
            "queue": {"poll_seconds": 0.1, "backoff_base_seconds": 0.1, "backoff_max_seconds": 0.5},
        }
        for k, v in sections.items():
            if isinstance(v, list):  # an array of tables: [[pharmacies]]
                base[k] = v  # type: ignore[assignment]
            else:
                base.setdefault(k, {}).update(v)
        with_key(base, tmp_path)
        d = Daemon(load_settings(**base))
        started.append(d)
        d.start()
        return d

    yield make
    for d in started:
        d.stop()


def with_key(base: dict[str, Any], tmp_path: Path) -> None:
    """A PostgreSQL daemon names its encryption key (SQLite's is made beside the
    database): one key file per test, unless the test gives ``[encryption]``."""
    from pa_bridge.encryption import create_key_file

    if "url" in base.get("storage", {}) and "key_file" not in base.get("encryption", {}):
        key = tmp_path / "test-encryption.key"
        if not key.exists():
            create_key_file(key)
        base.setdefault("encryption", {})["key_file"] = str(key)
    if "url" in base.get("storage", {}) and "anchor_file" not in base.get("audit", {}):
        # the default is the working directory's: keep it in the test's
        base.setdefault("audit", {})["anchor_file"] = str(tmp_path / "audit-anchors.jsonl")


class AppAnswer:
    """A Flask test response read the way the tests read httpx's."""

    def __init__(self, resp: Any) -> None:
        self.status_code: int = resp.status_code
        self.headers = resp.headers
        self.text: str = resp.get_data(as_text=True)
        self._resp = resp

    def json(self) -> Any:
        return self._resp.get_json(force=True)


class AppClient:
    """The intake app's ``test_client()`` with httpx's call shapes (``json=``,
    ``content=``, ``params=``), and the app's services and store."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.client = app.test_client()
        self.services = app.extensions["pa_bridge"]
        self.store: Store = self.services.store

    def post(
        self,
        path: str,
        *,
        json: Any = None,
        content: bytes | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> AppAnswer:
        if content is not None:
            return AppAnswer(self.client.post(path, data=content, headers=headers))
        if json is not None:
            return AppAnswer(self.client.post(path, json=json, headers=headers))
        return AppAnswer(self.client.post(path, headers=headers))

    def get(self, path: str, *, params: dict[str, str] | None = None) -> AppAnswer:
        return AppAnswer(self.client.get(path, query_string=params))


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Any]:
    """One in-process sandbox on loopback for the app tests (it sends no callbacks)."""
    from pa_bridge.sandbox import SandboxConfig, SandboxServer

    server = SandboxServer(SandboxConfig(step_seconds=0.05)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_app(tmp_path: Path, sandbox: Any) -> Iterator[Any]:
    """Build the intake app (``pa_bridge.app.create_app``) on a temporary store and the
    in-process sandbox: no daemon, no listener, no scheduler, no child process."""
    from pa_bridge.app import create_app, make_client
    from pa_bridge.config import load_settings
    from pa_bridge.encryption import open_store

    made: list[tuple[Any, Store, Any]] = []

    def make(**sections: dict[str, Any]) -> AppClient:
        base: dict[str, dict[str, Any]] = {
            "storage": {"path": str(tmp_path / f"app{len(made)}.sqlite3")},
            "intake": {"listen": "127.0.0.1:0"},
            "callbacks": {"listen": "127.0.0.1:0"},
        }
        for k, v in sections.items():
            base.setdefault(k, {}).update(v)
        with_key(base, tmp_path)
        settings = load_settings(**base)
        store = open_store(settings)
        client = make_client(settings, sandbox.url)
        app = create_app(settings, store=store, client=client)
        made.append((app, store, client))
        return AppClient(app)

    yield make
    for app, store, client in made:
        app.extensions["pa_bridge"].close()
        client.close()
        store.close()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """The system Chromium driven by Playwright (skipped without it). Two made-up host
    names resolve to 127.0.0.1 inside it (``attacker.test``, ``rebind.test``), for the
    cross-origin tests: no traffic leaves the machine."""
    if CHROMIUM is None:
        pytest.skip("no system Chromium on PATH (`make browser` installs it with apt-get)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--host-resolver-rules=MAP attacker.test 127.0.0.1, MAP rebind.test 127.0.0.1",
            ],
        )
        try:
            yield br
        finally:
            br.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page of its own in the module's Chromium (1280x800)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        context.close()
