"""The audit log beyond its table (decision 0035): who a command-line user is, the
anchors kept outside the database, retention, and ``audit verify`` / ``audit export``.

Anchors: now and then (``[audit] anchor_minutes``) the daemon appends the chain's head
(``{"seq", "hash", "at"}``) to ``[audit] anchor_file`` as one JSON line, and logs it
(``audit.anchor``), so the journal holds it too. ``pa-bridge audit verify`` checks the
chain against every anchor in the file: entries removed from the chain's end, with the
head row rewritten to match, still show. Keep the file where the database's writers
cannot rewrite it (``chattr +a``, another disk, a log shipper).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from .config import Settings
from .logs import log_event
from .store import Database, Store, audit, now_iso
from .store.users import purge_sessions

__all__ = [
    "anchor_path",
    "check_reset",
    "cli_actor",
    "parse_when",
    "purge",
    "read_anchors",
    "record",
    "schedule_anchors",
    "write_anchor",
]

DAY = 86400.0


def cli_actor() -> tuple[str, str]:
    """(who, where) for a command store IT runs: ``cli:<login>`` (and the sudo user
    behind it), on this host."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = str(os.getuid())
    sudo = os.environ.get("SUDO_USER")
    who = f"cli:{login}" + (f" (sudo by {sudo})" if sudo and sudo != login else "")
    return who, f"cli@{socket.gethostname()}"


def record(
    db: Database, action: str, object_id: str | None = None, detail: str | None = None
) -> int:
    """Append a command-line user's entry (inside the caller's transaction)."""
    who, where = cli_actor()
    return audit.add(db, who, action, object_id, detail, remote=where)


def anchor_path(settings: Settings) -> Path:
    if settings.audit.anchor_file is not None:
        return settings.audit.anchor_file
    if settings.storage.database_url() is not None:
        # no database directory: the unit's StateDirectory= (systemd sets
        # $STATE_DIRECTORY, the first of a colon-separated list), else the working one
        state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
        return Path(state or ".") / "audit-anchors.jsonl"
    return settings.storage.path.parent / "audit-anchors.jsonl"


def _anchor_lines(path: Path) -> list[dict[str, Any]]:
    """The anchor file's lines that are JSON objects (none when it does not exist)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in lines:
        with contextlib.suppress(ValueError):
            a = json.loads(line)
            if isinstance(a, dict):
                out.append(a)
    return out


def read_anchors(path: Path) -> list[tuple[int, str]]:
    """Every (seq, hash) in the anchor file (none when it does not exist); lines that
    are not an anchor are skipped."""
    out: list[tuple[int, str]] = []
    for a in _anchor_lines(path):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            if a.get("reset"):  # a restore: the anchors before it were another chain's
                out.clear()
            out.append((int(a["seq"]), str(a["hash"])))
    return out


def last_reset(path: Path) -> dict[str, Any] | None:
    """The anchor file's last ``reset`` line (a restore), or None."""
    found: dict[str, Any] | None = None
    for a in _anchor_lines(path):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            if a.get("reset"):
                found = {"seq": int(a["seq"]), "hash": str(a["hash"]), "at": a.get("at")}
    return found


def check_reset(db: Database, path: Path) -> tuple[str | None, str | None]:
    """(problem, note) about the anchor file's last ``reset`` line. ``restore`` writes
    one naming the restored chain's head, its own ``restore`` entry, and the anchors
    before it are not checked; so a reset line that names an entry that is not a
    restore was appended to hide entries cut from the chain's end (a file made
    append-only takes an appended line too)."""
    reset = last_reset(path)
    if reset is None:
        return None, None
    seq, at = reset["seq"], reset["at"]
    floor = audit.head(db).floor_seq
    entry = audit.entry_at(db, seq) if seq > floor else None
    if seq > floor and (entry is None or entry.action != "restore"):
        return (
            f"the anchor file's reset line ({at}) names entry {seq}, which is not a"
            " restore: entries were removed from the chain's end and a reset line"
            " appended to hide it",
            None,
        )
    return None, (
        f"the database was restored at {at} (entry {seq}): the anchors before that reset"
        " line name the chain it replaced and are not checked; compare it with your"
        " restores"
    )


def write_anchor(store: Store, path: Path, last: dict[str, Any]) -> bool:
    """Append the head to ``path`` when it moved since ``last`` (updated); whether
    one was written."""
    h = audit.head(store.reader())
    if h.seq == 0 or last.get("seq") == h.seq:
        return False
    line = json.dumps({"seq": h.seq, "hash": h.hash, "at": now_iso()}, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    last["seq"] = h.seq
    log_event("audit.anchor", seq=h.seq, hash=h.hash)
    return True


def schedule_anchors(scheduler: Any, store: Store, settings: Settings) -> None:
    path = anchor_path(settings)
    last: dict[str, Any] = {}

    def job() -> None:
        try:
            write_anchor(store, path, last)
        except Exception as e:  # never into the scheduler
            log_event("audit.anchor_failed", level=logging.ERROR, error=type(e).__name__)

    scheduler.add_job(
        job,
        "interval",
        minutes=settings.audit.anchor_minutes,
        id="audit-anchor",
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC) + timedelta(seconds=30),
    )


def purge(store: Store, settings: Settings, now: float, chunk: int = 500) -> int:
    """Audit entries past ``[audit] retention_days`` (the floor follows, so the chain
    still verifies), an entry saying so, and sessions a day past their end."""
    cut = now_iso(now - settings.audit.retention_days * DAY)
    total = 0
    while True:
        n = store.write(lambda db: audit.purge_before(db, cut, chunk))
        total += n
        if n < chunk:
            break
    if total:
        store.write(
            lambda db: audit.add(
                db, "daemon", "audit.purged", None, f"{total} entries before {cut}"
            )
        )
    store.write(lambda db: purge_sessions(db, now - DAY))
    return total


def parse_when(text: str, now: float | None = None) -> str:
    """``--since``: an ISO 8601 date or time (UTC unless it says), or a span back from
    now (``90m``, ``24h``, ``7d``); the ISO time it means."""
    t = time.time() if now is None else now
    s = text.strip()
    units = {"m": 60, "h": 3600, "d": DAY}
    if s[:-1].isdigit() and s[-1:] in units:
        return now_iso(t - int(s[:-1]) * units[s[-1]])
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give 2025-01-31, 2025-01-31T08:00:00Z, or 24h / 7d"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return now_iso(dt.timestamp())


def export_lines(db: Database, since_iso: str) -> Iterator[str]:
    for e in audit.entries_since(db, since_iso):
        yield json.dumps(e.as_json(), separators=(",", ":"), ensure_ascii=False)


def with_transaction(db: Database, fn: Callable[[Database], Any]) -> Any:
    """``fn(db)`` in one write transaction of a command's connection."""
    from .store import files

    with files.transaction(cast(Any, db)) as tx:
        return fn(tx)


def record_command(
    storage: Any, action: str, object_id: str | None = None, detail: str | None = None
) -> str | None:
    """An entry for a command store IT ran (``backup``, ``restore``, ``queue``) in the
    database of ``storage`` (``[storage]``), in its own transaction; what went wrong,
    or None."""
    from .store import StoreError, files

    url = storage.database_url()
    try:
        db = (
            files.open_url(url, write=True)
            if url
            else files.open_database(storage.path, write=True)
        )
    except StoreError as e:
        return str(e)
    try:
        with_transaction(db, lambda tx: record(tx, action, object_id, detail))
    except Exception as e:  # the command's own work is done: say it, do not undo it
        return f"{type(e).__name__}: {e}"[:300]
    finally:
        db.conn.close()
    return None


def mark_restored(path: Path, db_head: tuple[int, str]) -> None:
    """After a restore the chain is the backup's, shorter than the anchors recorded
    since: a ``reset`` line says so (anchors before it are of the database moved
    aside), with the restored chain's head."""
    line = json.dumps(
        {"reset": "restore", "seq": db_head[0], "hash": db_head[1], "at": now_iso()},
        separators=(",", ":"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
