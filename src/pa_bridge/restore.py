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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .store import Database, DatabaseError, audit, files, meta, now_iso
from .store.files import CannotOpen
from .store.outbox import hold_undelivered
from .store.pg_backup import backup_running

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


def adopt_restored(db: Database, now: float) -> dict[str, Any] | None:
    """Run in a write job when the daemon opens its database: if it is a backup copy
    served for the first time, hold its queued work, set the feed's floor, remove the
    mark and audit it. None when it is not a restored copy."""
    if meta.get(db, BACKUP_MARK) is None:
        return None
    if backup_running(db):  # PostgreSQL: the live database, its mark for the copy only
        return None
    taken_at = meta.take(db, BACKUP_MARK)  # one daemon of a fleet adopts it
    if taken_at is None:
        return None
    held = hold_undelivered(
        db,
        f"held: restored from the backup taken at {taken_at}; it may have been delivered "
        "after that. Check, then `pa-bridge queue retry ID` or `pa-bridge queue drop ID`",
        now,
    )
    floor = int(time.time() * 1_000_000)
    meta.put(db, FEED_FLOOR, str(floor))
    audit.add(
        db,
        "daemon",
        "database.restored",
        None,
        f"backup taken at {taken_at}; {held} queue item(s) held",
        at=now_iso(now),
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
    if files.starts_with(backup, b"PGDMP"):  # pg_dump's custom format
        raise RestoreError(
            f"{backup} is a PostgreSQL backup (pg_dump archive), but this config's storage"
            " is SQLite (storage.path): restore it with the config that has its storage.url"
        )
    try:
        facts = files.copy_facts(backup, BACKUP_MARK)
    except CannotOpen as e:
        raise RestoreError(f"cannot open {backup}: {e}") from None
    except DatabaseError as e:
        raise RestoreError(f"cannot read {backup}: {e}") from None
    if facts.integrity != "ok":
        raise RestoreError(f"{backup} fails its integrity check: {facts.integrity[:300]}")
    if not facts.is_pa_bridge:
        raise RestoreError(f"{backup} is not a pa-bridge database")
    return facts.mark, facts.undelivered


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
                files.mark_file(tmp, BACKUP_MARK, mark)
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
