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

    def _run(self, args: list[str], *, check: bool = True) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        subprocess.run(cmd, check=check, user=self.user, capture_output=True, timeout=60)


@contextlib.contextmanager
def running_server(*, durable: bool = False) -> Iterator[PgServer]:
    """``durable``: fsync and synchronous commits on (the benchmark)."""
    bindir = bin_dir()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="pa-bridge-pg-"))
    user = None
    if os.geteuid() == 0:
        user = "nobody"
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    os.chmod(root, 0o700)
    data = root / "data"
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
    server = PgServer(_free_port(), data, bindir, user)
    try:
        server._run(
            ["initdb", "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "--locale=C.UTF-8", "--encoding=UTF8", "--no-sync"]
        )  # fmt: skip
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={server.port}"
            f" -c unix_socket_directories='{root}' -c unix_socket_permissions=0700"
            " -c max_connections=300 -c shared_buffers=32MB -c deadlock_timeout=200ms"
        )
        if not durable:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        server._run(
            ["pg_ctl", "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "-t", "60",
             "start"]
        )  # fmt: skip
        wait_until(
            lambda: server.admin().close() or True, timeout=30, what="PostgreSQL to take logins"
        )
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
