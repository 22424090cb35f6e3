"""``pa-bridge backup`` and ``pa-bridge restore`` on PostgreSQL (``storage.url``, decision
0023): Debian's ``pg_dump`` and ``pg_restore``, found on ``PATH`` or under
``/usr/lib/postgresql/*/bin`` (the newest), run with the password in ``PGPASSWORD``
(never on a command line, which every user of the machine can read in ``ps``).

A backup is pg_dump's custom format (one compressed file, what ``pg_restore`` reads) of
the schema pa-bridge uses, copied from one snapshot that carries the restore mark (see
``store.pg_backup``). A restore checks the file, refuses while any pa-bridge daemon is
connected, dumps the current database beside the backup first (nothing is lost), then
replaces pa-bridge's tables in one transaction.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from .store import StoreError, now_iso, redact_url
from .store.files import destination_problem, staged, starts_with
from .store.pg_backup import BackupSession, pa_bridge_sessions, settle_restored

__all__ = [
    "DumpResult",
    "PgToolError",
    "RestoreDumpResult",
    "dump_database",
    "find_tool",
    "tool_version",
    "restore_dump",
]

Say = Callable[[str], None]

#: where Debian installs each PostgreSQL version's programs
DEBIAN_BINS = "/usr/lib/postgresql/*/bin"

#: the live database holds the backup lock this long at most waiting for another backup
LOCK_WAIT_S = 10.0


class PgToolError(Exception):
    """pg_dump or pg_restore could not do it; the message says why and what to do."""


def find_tool(name: str) -> Path:
    """``name`` (pg_dump, pg_restore) on PATH, else the newest Debian version's."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    found = sorted(
        glob.glob(f"{DEBIAN_BINS}/{name}"),
        key=lambda p: int(re.sub(r"\D", "", Path(p).parent.parent.name) or 0),
    )
    if found:
        return Path(found[-1])
    raise PgToolError(
        f"{name} is not installed (not on PATH nor in {DEBIAN_BINS}): install "
        "PostgreSQL's client programs (Debian: apt-get install postgresql-client), at least "
        "the server's major version"
    )


def tool_version(tool: Path) -> int:
    """The major version of a PostgreSQL program (``pg_dump --version``), 0 if unknown."""
    try:
        r = subprocess.run(
            [str(tool), "--version"], capture_output=True, text=True, timeout=30,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return 0
    m = re.search(r"\) (\d+)", r.stdout)
    return int(m.group(1)) if m else 0


def _login(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its password, the environment that carries the password)."""
    parts = urlsplit(url)
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    query = parse_qsl(parts.query, keep_blank_values=True)
    in_query = [v for k, v in query if k == "password"]
    if parts.password is None and not in_query:
        return url, env
    env["PGPASSWORD"] = unquote(parts.password) if parts.password is not None else in_query[-1]
    rest = urlencode([(k, v) for k, v in query if k != "password"], quote_via=quote)
    host = parts.netloc.rpartition("@")[2]  # one host[:port] or several, as given
    user = parts.username or ""
    bare = urlunsplit((parts.scheme, f"{user}@{host}" if user else host, parts.path, rest, ""))
    return bare, env


def _run(cmd: list[str], env: dict[str, str], say: Say, progress: re.Pattern[str], verb: str,
         secret: str | None) -> list[str]:  # fmt: skip
    """Run ``cmd``; pass each progress line of its stderr to ``say``; the last lines of
    its stderr (the password never in them) if it fails, as PgToolError."""
    tail: deque[str] = deque(maxlen=12)
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, errors="replace",
    )  # fmt: skip
    assert proc.stderr is not None
    with proc:
        for raw in proc.stderr:
            line = raw.rstrip("\n")
            if secret:
                line = line.replace(secret, "***")
            m = progress.search(line)
            if m:
                say(f"{verb} {m.group(1)}")
            else:
                tail.append(line)
    if proc.returncode != 0:
        why = "; ".join(x for x in tail if "error" in x or "FATAL" in x) or "; ".join(tail)
        raise PgToolError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {why[-800:]}")
    return list(tail)


@dataclass(frozen=True)
class ArchiveFacts:
    schema: str
    tables: list[str]
    created: str  # "2026-11-25 08:01:02 UTC"


_LIST_TABLE_DATA = re.compile(r"^\d+; \d+ \d+ TABLE DATA (\S+) (\S+) ")
_LIST_CREATED = re.compile(r"^;\s+Archive created at (.+)$")


def archive_facts(file: Path) -> ArchiveFacts:
    """What ``pg_restore --list`` says of a pa-bridge backup; PgToolError if it is not
    one."""
    if starts_with(file, b"SQLite format 3\x00"):
        raise PgToolError(
            f"{file} is a SQLite backup, but this config's storage is PostgreSQL"
            " (storage.url): restore it with the config that has its storage.path"
        )
    tool = find_tool("pg_restore")
    r = subprocess.run(
        [str(tool), "--list", str(file)], capture_output=True, text=True, errors="replace",
        timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["?"])[0]
        raise PgToolError(f"{file} is not a pg_dump archive pg_restore can read: {first}")
    tables: dict[str, list[str]] = {}
    created = ""
    for line in r.stdout.splitlines():
        m = _LIST_TABLE_DATA.match(line)
        if m:
            tables.setdefault(m.group(1), []).append(m.group(2))
        m = _LIST_CREATED.match(line)
        if m:
            created = m.group(1).strip()
    ours = [s for s, names in tables.items() if {"meta", "outbox", "pas"} <= set(names)]
    if len(ours) != 1:
        raise PgToolError(f"{file} is not a backup of one pa-bridge database")
    return ArchiveFacts(ours[0], sorted(tables[ours[0]]), created)


def _check_dest(dest: Path, force: bool) -> None:
    why = destination_problem(dest, force=force)
    if why is not None:
        raise PgToolError(why)


@dataclass(frozen=True)
class DumpResult:
    path: Path
    size: int
    schema: str
    tables: int
    mark: str | None


_DUMPING = re.compile(r'dumping contents of table "([^"]+)"')


def dump_database(
    url: str, dest: str | os.PathLike[str], *, mark: tuple[str, str], force: bool = False,
    say: Say | None = None,
) -> DumpResult:  # fmt: skip
    """pg_dump the schema pa-bridge uses to ``dest`` (custom format, mode 0600), from
    a snapshot that carries ``mark`` (key, value)."""
    dest_p = Path(dest)
    tell = say or (lambda _m: None)
    _check_dest(dest_p, force)
    tool = find_tool("pg_dump")
    try:
        session = BackupSession(url)
    except StoreError as e:
        raise PgToolError(str(e)) from None
    try:
        with staged(dest_p, force=force, error=PgToolError) as tmp:
            if not session.take_lock(LOCK_WAIT_S):
                raise PgToolError("another pa-bridge backup of this database is running; try later")
            schema = session.schema()
            if schema is None:
                raise PgToolError(
                    f"{redact_url(url)}: the schema in its search_path does not exist"
                )
            snapshot, in_copy = session.snapshot_with_mark(*mark)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a leftover of an interrupted backup
            bare, env = _login(url)
            tell(f"backup: pg_dump {tool} of schema {schema} at {redact_url(url)}")
            _run(
                [str(tool), "--format=custom", "--verbose", f"--snapshot={snapshot}",
                 f"--schema={schema}", f"--file={tmp}", f"--dbname={bare}"],
                env, tell, _DUMPING, "backup: dumped table", env.get("PGPASSWORD"),
            )  # fmt: skip
            facts = archive_facts(tmp)  # it reads back
        return DumpResult(dest_p, dest_p.stat().st_size, schema, len(facts.tables), in_copy)
    except StoreError as e:
        raise PgToolError(str(e)) from None
    finally:
        session.close()


@dataclass(frozen=True)
class RestoreDumpResult:
    schema: str
    before: Path | None  # the current database, dumped first
    mark: str
    queued: int


_RESTORING = re.compile(r'processing data for table "([^"]+)"')


def restore_dump(
    url: str, file: str | os.PathLike[str], *, mark_key: str, say: Say | None = None,
    clock: Callable[[], float] = time.time,
) -> RestoreDumpResult:  # fmt: skip
    """Replace pa-bridge's tables at ``url`` with the backup ``file``, every daemon
    stopped. The current database is dumped first to
    ``<file's directory>/pa-bridge-before-restore-<time>.dump``."""
    file_p = Path(file)
    tell = say or (lambda _m: None)
    if not file_p.is_file():
        raise PgToolError(f"no backup file at {file_p}")
    tool = find_tool("pg_restore")
    facts = archive_facts(file_p)
    tell(
        f"{file_p}: a pg_dump archive of schema {facts.schema}, {len(facts.tables)} tables,"
        f" made {facts.created or 'at an unknown time'}"
    )
    try:
        session = BackupSession(url)
        try:
            schema, current = session.schema(), session.has_table("meta")
        finally:
            session.close()
        if schema is not None and schema != facts.schema:
            raise PgToolError(
                f"the backup holds schema {facts.schema} but storage.url uses {schema}"
                " (its search_path): restore into the schema it was taken from"
            )
        busy = pa_bridge_sessions(url)
    except StoreError as e:
        raise PgToolError(str(e)) from None
    if busy:
        raise PgToolError(
            f"{busy} pa-bridge connection(s) to {redact_url(url)}: stop every daemon "
            "(systemctl stop pa-bridge on each host) and wait for its commands to end"
        )
    before = None
    if current:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
        before = file_p.parent / f"pa-bridge-before-restore-{stamp}.dump"
        n = 1
        while before.exists():  # restoring, within the same second, the one just kept
            n += 1
            before = file_p.parent / f"pa-bridge-before-restore-{stamp}-{n}.dump"
        dump_database(url, before, mark=(mark_key, now_iso(clock())), say=tell)
        tell(f"the current database is kept in {before}")
    bare, env = _login(url)
    _run(
        [str(tool), "--verbose", "--clean", "--if-exists", "--no-owner", "--no-privileges",
         "--single-transaction", "--exit-on-error", f"--dbname={bare}", str(file_p)],
        env, tell, _RESTORING, "restore: table", env.get("PGPASSWORD"),
    )  # fmt: skip
    try:
        mark, queued = settle_restored(url, mark_key, now_iso(file_p.stat().st_mtime))
    except StoreError as e:
        raise PgToolError(str(e)) from None
    return RestoreDumpResult(facts.schema, before, mark, queued)
