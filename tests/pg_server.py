"""A real PostgreSQL server for the tests: Debian's package, started in a temporary
directory on a free loopback port, as ``nobody`` when the tests run as root
(PostgreSQL refuses to run as root), stopped at the end of the session.

Durability is switched off (``fsync=off``): the tests are about behaviour, not about
surviving a power cut, and a fresh database per test costs a few milliseconds then.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.support import wait_until

SUPERUSER = "pa_bridge_test"
PASSWORD = "synthetic-test-password"


def bin_dir() -> Path | None:
    """Where initdb and pg_ctl are (the newest Debian version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def missing_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or None."""
    if bin_dir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql; make test does it as root)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    port: int
    data: Path
    bindir: Path
    user: str | None  # the OS user the server runs as (None: ours)
    _next: int = 0
    _shared: bool = False

    def url(self, dbname: str = "postgres", *, password: bool = True, unix: bool = False) -> str:
        """libpq's URL, over loopback TCP, or (``unix``) over the server's Unix socket."""
        secret = f":{quote(PASSWORD)}" if password else ""
        if unix:
            where = quote(str(self.data.parent), safe="")
            return f"postgresql://{SUPERUSER}{secret}@/{dbname}?host={where}&port={self.port}"
        return f"postgresql://{SUPERUSER}{secret}@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.url(), autocommit=True)

    def new_schema(self) -> str:
        """A fresh, empty schema in the tests' shared database (far cheaper than a
        database each on a loaded machine); the URL that uses it."""
        self._next += 1
        name = f"t{os.getpid()}_{self._next}"
        if not self._shared:
            with self.admin() as conn:
                conn.execute('CREATE DATABASE "pa_bridge_tests"')
            self._shared = True
        import psycopg

        with psycopg.connect(self.url("pa_bridge_tests"), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return self.url("pa_bridge_tests") + f"?options=-csearch_path%3D{name}"

    def drop_schema(self, url: str) -> None:
        import psycopg

        name = url.rsplit("%3D", 1)[1]
        with psycopg.connect(self.url("pa_bridge_tests"), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database; its name."""
        self._next += 1
        name = f"{prefix}{os.getpid()}_{self._next}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"], check=False)

    def start(self) -> None:
        """Start the server on its data directory (again, after :meth:`stop`)."""
        self._run(
            ["pg_ctl", "-D", str(self.data), "-o", self.options, "-l",
             str(self.data.parent / "log"), "-w", "-t", "60", "start"]
        )  # fmt: skip
        wait_until(lambda: self.admin().close() or True, timeout=30, what="PostgreSQL logins")

    def promote(self) -> None:
        """A standby becomes a primary (``pg_ctl promote``, waiting until it is)."""
        self._run(["pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote"])

    def _run(self, args: list[str], *, check: bool = True) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        env = {**os.environ, "PGPASSWORD": PASSWORD}  # pg_basebackup's login
        subprocess.run(cmd, check=check, user=self.user, capture_output=True, timeout=60, env=env)

    options: str = ""


def _private_root(user: str | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix="pa-bridge-pg-"))
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    os.chmod(root, 0o700)
    return root


def _options(port: int, root: Path, *, durable: bool, extra: str = "") -> str:
    opts = (
        f"-c listen_addresses=127.0.0.1 -c port={port}"
        f" -c unix_socket_directories='{root}' -c unix_socket_permissions=0700"
        " -c max_connections=300 -c shared_buffers=32MB -c deadlock_timeout=200ms"
    )
    if not durable:
        opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    return f"{opts} {extra}".strip()


@contextlib.contextmanager
def running_server(*, durable: bool = False, options: str = "") -> Iterator[PgServer]:
    """``durable``: fsync and synchronous commits on (the benchmark); ``options``:
    more ``-c name=value`` settings (after the others, so they win)."""
    bindir = bin_dir()
    assert bindir is not None
    user = "nobody" if os.geteuid() == 0 else None
    root = _private_root(user)
    data = root / "data"
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
    server = PgServer(_free_port(), data, bindir, user)
    server.options = _options(server.port, root, durable=durable, extra=options)
    try:
        server._run(
            ["initdb", "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "--locale=C.UTF-8", "--encoding=UTF8", "--no-sync"]
        )  # fmt: skip
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def running_standby(primary: PgServer, *, options: str = "") -> Iterator[PgServer]:
    """A streaming standby of ``primary`` (``pg_basebackup -R``: a base copy, then the
    primary's WAL as it is written), on its own port, named ``standby`` for the
    primary's ``synchronous_standby_names``; stopped at the end."""
    user = primary.user
    root = _private_root(user)
    data = root / "data"
    server = PgServer(_free_port(), data, primary.bindir, user)
    server.options = _options(
        server.port, root, durable=False, extra=f"-c cluster_name=standby {options}"
    )
    try:
        conninfo = f"host=127.0.0.1 port={primary.port} user={SUPERUSER} application_name=standby"
        server._run(
            ["pg_basebackup", "-D", str(data), "-d", conninfo, "-R", "-X", "stream",
             "--checkpoint=fast", "--no-sync"]
        )  # fmt: skip
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
