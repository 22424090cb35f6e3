"""Restores (decision 0009): putting a ``pa-bridge backup`` copy back in place, and what
the daemon does the first time it serves one.

A backup is a snapshot of the past. Two things in it must not be taken as the present:

- **Queued work.** An item undelivered in the copy may have been delivered after the
  copy was taken (a B2 sent again can delete a newer PA for the same prescription).
  The first daemon to serve a restored copy puts every undelivered item on hold
  (``queue list --status held``); store IT releases each with ``queue retry ID`` or
  drops it with ``queue drop ID``.
- **The PA feed's cursor.** Clients hold cursors handed out after the copy was taken.
  Cursors are times (microseconds, never going backwards within a database), and a
  restored copy's feed starts again at the time it is adopted, so every change after
  the restore sorts after every cursor handed out before it.

``pa-bridge backup`` writes ``backup.taken_at`` into the copy's ``meta`` table; that
mark is how the daemon knows (whether the copy was put back by ``pa-bridge restore``
or by hand), and it is removed when the copy is adopted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .outbox import hold_undelivered
from .store import Database, now_iso

__all__ = [
    "BACKUP_MARK",
    "DatabaseInUse",
    "RestoreError",
    "RestoreResult",
    "adopt_restored",
    "database_in_use",
    "lock_database_dir",
    "restore_database",
]

BACKUP_MARK = "backup.taken_at"
FEED_FLOOR = "feed.seq_floor"


class RestoreError(Exception):
    """The restore was not made; the message says why and what to do."""


class DatabaseInUse(RestoreError):
    """A daemon serves the database."""


def _lock_path(db: Path) -> Path:
    return Path(f"{db}.lock")


def lock_database_dir(db: Path) -> int:
    """Take ``<db>.lock`` with flock for the caller's life; the descriptor. flock
    locks are apart from the POSIX locks SQLite uses, and this file is never opened by
    SQLite, so opening and closing it cannot drop SQLite's locks."""
    path = _lock_path(db)
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatabaseInUse(
            f"another pa-bridge daemon serves {db} (it holds {path}); stop it first"
        ) from None
    return fd


def database_in_use(db: Path) -> bool:
    """Whether a daemon holds ``<db>.lock`` now."""
    path = _lock_path(db)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def mark_backup(conn: sqlite3.Connection, taken_at: str) -> None:
    """Write the backup mark into a fresh copy (called by ``backup_database``)."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [BACKUP_MARK, taken_at]
        )


def adopt_restored(db: Database, now: float) -> dict[str, Any] | None:
    """Run in a write job when the daemon opens its database: if it is a backup copy
    served for the first time, hold its queued work, set the feed's floor, remove the
    mark and audit it. None when it is not a restored copy."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", [BACKUP_MARK]).fetchone()
    if row is None:
        return None
    taken_at = str(row[0])
    held = hold_undelivered(
        db,
        f"held: restored from the backup taken at {taken_at}; it may have been delivered "
        "after that. Check, then `pa-bridge queue retry ID` or `pa-bridge queue drop ID`",
        now,
    )
    floor = int(time.time() * 1_000_000)
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [FEED_FLOOR, str(floor)])
    db.execute("DELETE FROM meta WHERE key = ?", [BACKUP_MARK])
    db.execute(
        "INSERT INTO audit (at, actor, action, object_id, detail) VALUES (?, 'daemon',"
        " 'database.restored', NULL, ?)",
        [now_iso(now), f"backup taken at {taken_at}; {held} queue item(s) held"],
    )
    return {"backup_taken_at": taken_at, "held": held}


@dataclass(frozen=True)
class RestoreResult:
    path: Path
    moved_aside: Path | None
    backup_taken_at: str | None
    queued: int


def _check_backup(backup: Path) -> tuple[str | None, int]:
    """(the mark, undelivered items) of a sound pa-bridge backup; RestoreError else."""
    if not backup.is_file():
        raise RestoreError(f"no backup file at {backup}")
    try:
        conn = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise RestoreError(f"cannot open {backup}: {e}") from None
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        integrity = "; ".join(str(r[0]) for r in rows)
        if integrity != "ok":
            raise RestoreError(f"{backup} fails its integrity check: {integrity[:300]}")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"outbox", "meta", "pas"} <= names:
            raise RestoreError(f"{backup} is not a pa-bridge database")
        mark = conn.execute("SELECT value FROM meta WHERE key = ?", [BACKUP_MARK]).fetchone()
        queued = conn.execute(
            "SELECT count(*) FROM outbox WHERE status IN ('pending', 'failed')"
        ).fetchone()[0]
    except sqlite3.Error as e:
        raise RestoreError(f"cannot read {backup}: {e}") from None
    finally:
        conn.close()
    return (None if mark is None else str(mark[0])), int(queued)


def restore_database(
    backup: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> RestoreResult:
    """Put ``backup`` in place as the database at ``dest``, the daemon stopped.

    The current database, with its -wal and -shm, is moved aside to
    ``<dest>.before-restore-<time>`` (nothing is deleted). The copy is checked, copied
    to ``<dest>.partial`` (0600), marked as a backup if it is not, and renamed into
    place; the daemon that serves it next holds its queued work."""
    backup_p, dest_p = Path(backup), Path(dest)
    say = progress or (lambda _msg: None)
    with contextlib.suppress(OSError):
        if backup_p.resolve() == dest_p.resolve():
            raise RestoreError("the backup file is the database itself")
    if not dest_p.parent.is_dir():
        raise RestoreError(f"no directory {dest_p.parent} (check storage.path)")
    lock_fd = lock_database_dir(dest_p) if dest_p.parent.is_dir() else None
    try:
        mark, queued = _check_backup(backup_p)
        say(f"{backup_p}: integrity ok, {queued} undelivered queue item(s) to hold")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
        aside: Path | None = None
        if dest_p.exists():
            aside = dest_p.with_name(f"{dest_p.name}.before-restore-{stamp}")
            for suffix in ("", "-wal", "-shm"):
                src = Path(f"{dest_p}{suffix}")
                if src.exists():
                    os.replace(src, Path(f"{aside}{suffix}"))
            say(f"moved the current database aside to {aside}")
        else:
            for suffix in ("-wal", "-shm"):  # strays of a database that is gone
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(Path(f"{dest_p}{suffix}"))
        tmp = dest_p.with_name(dest_p.name + ".partial")
        old_umask = os.umask(0o077)
        try:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            shutil.copyfile(backup_p, tmp)
            os.chmod(tmp, 0o600)
            if mark is None:  # a copy made otherwise: treat it the same way
                mark = now_iso(backup_p.stat().st_mtime)
                conn = sqlite3.connect(str(tmp), isolation_level=None)
                try:
                    mark_backup(conn, mark)
                finally:
                    conn.close()
            os.replace(tmp, dest_p)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise RestoreError(f"cannot write {dest_p}: {e.strerror}") from None
        finally:
            os.umask(old_umask)
        return RestoreResult(dest_p, aside, mark, queued)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
