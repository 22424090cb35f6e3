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
import json
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
    "HalfDoneRestore",
    "RestoreError",
    "RestoreResult",
    "adopt_restored",
    "database_in_use",
    "interrupted_restore",
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


def _journal_path(db: Path) -> Path:
    return Path(f"{db}.restoring")


@dataclass(frozen=True)
class HalfDoneRestore:
    """A restore of a SQLite file that was interrupted: what happened, and how to finish."""

    what: str
    how: str

    def __str__(self) -> str:
        return f"{self.what}. {self.how}"


def interrupted_restore(
    db: str | os.PathLike[str], config: str | os.PathLike[str] | None = None
) -> HalfDoneRestore | None:
    """A restore of the SQLite file ``db`` that was interrupted (its journal
    ``<db>.restoring`` is there), or None. ``serve`` refuses to start and ``doctor``
    FAILs with it: serving then would make a new, empty database. ``config``: the
    config file the command was given, for the command that finishes it."""
    db_p = Path(db)
    try:
        journal = json.loads(_journal_path(db_p).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        journal = {}
    backup = journal.get("backup") or "the same backup file"
    aside = journal.get("aside")
    where = f" (the database it replaces is moved aside to {aside})" if aside else ""
    return HalfDoneRestore(
        f"a restore of {backup} into {db_p} was interrupted{where}",
        "finish it before starting the daemon: `pa-bridge restore"
        f"{'' if config is None else f' --config {config}'} {backup}` (the same file again)",
    )


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_durably(backup: Path, tmp: Path, mark: str | None) -> str:
    """``backup`` to ``tmp`` (0600, marked as a backup), on disk before it returns; the
    mark."""
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    shutil.copyfile(backup, tmp)
    os.chmod(tmp, 0o600)
    if mark is None:  # a copy made otherwise: treat it the same way
        mark = now_iso(backup.stat().st_mtime)
        files.mark_file(tmp, BACKUP_MARK, mark)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return mark


def restore_database(
    backup: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> RestoreResult:
    """Put ``backup`` in place as the database at ``dest``, the daemon stopped.

    Resumable, so that no interruption leaves the directory without a database that
    the daemon would then replace by a new, empty one (issue 32):

    1. the copy is checked and written to ``<dest>.partial`` (0600, marked as a backup
       if it is not), on disk;
    2. a journal, ``<dest>.restoring``, names the backup and where the current database
       goes; from here ``serve`` and ``doctor`` refuse to go on, saying how to finish;
    3. the current database, with its -wal and -shm, is moved aside to
       ``<dest>.before-restore-<time>`` (nothing is deleted);
    4. the copy is renamed into place, and the journal removed.

    Run again with the same backup after an interruption, it finishes the steps left
    (with the same name aside); with another backup it refuses. The daemon that serves
    the copy next holds its queued work."""
    backup_p, dest_p = Path(backup), Path(dest)
    say = progress or (lambda _msg: None)
    with contextlib.suppress(OSError):
        if backup_p.resolve() == dest_p.resolve():
            raise RestoreError("the backup file is the database itself")
    if not dest_p.parent.is_dir():
        raise RestoreError(f"no directory {dest_p.parent} (check storage.path)")
    lock_fd = lock_database_dir(dest_p)
    journal_p = _journal_path(dest_p)
    tmp = dest_p.with_name(dest_p.name + ".partial")
    old_umask = os.umask(0o077)
    try:
        mark, queued = _check_backup(backup_p)
        say(f"{backup_p}: integrity ok, {queued} undelivered queue item(s) to hold")
        journal = _read_journal(journal_p)
        if journal is not None:
            if Path(journal["backup"]) != backup_p.resolve():
                raise RestoreError(str(interrupted_restore(dest_p)))
            say(f"finishing the interrupted restore of {backup_p}")
            mark = journal["mark"]
        else:
            mark = _copy_durably(backup_p, tmp, mark)
            journal = {
                "backup": str(backup_p.resolve()),
                "mark": mark,
                "aside": str(_aside_name(dest_p, clock())) if dest_p.exists() else None,
            }
            _write_journal(journal_p, journal)
        aside = Path(journal["aside"]) if journal["aside"] else None
        if not tmp.exists() and not dest_p.exists():  # the copy went missing: again
            _copy_durably(backup_p, tmp, journal["mark"])
        if tmp.exists():  # not in place yet: what is at dest is the database replaced
            _move_aside(dest_p, aside, say)
            os.replace(tmp, dest_p)
            _fsync_dir(dest_p.parent)
        journal_p.unlink()
        _fsync_dir(dest_p.parent)
        return RestoreResult(dest_p, aside, mark, queued)
    except OSError as e:
        raise RestoreError(
            f"cannot write {dest_p}: {e.strerror or e}"
            + (f" ({interrupted_restore(dest_p)})" if journal_p.exists() else "")
        ) from None
    finally:
        os.umask(old_umask)
        os.close(lock_fd)


def _aside_name(dest: Path, now: float) -> Path:
    """``<dest>.before-restore-<time>``, with ``-2``, ``-3``... when a restore in the
    same second (putting back the database just moved aside) took that name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = dest.with_name(f"{dest.name}.before-restore-{stamp}")
    n = 1
    while any(Path(f"{aside}{suffix}").exists() for suffix in ("", "-wal", "-shm")):
        n += 1
        aside = dest.with_name(f"{dest.name}.before-restore-{stamp}-{n}")
    return aside


def _read_journal(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RestoreError(f"cannot read {path}: {e}; move it away and restore again") from None
    if not isinstance(data, dict) or not {"backup", "mark", "aside"} <= data.keys():
        raise RestoreError(f"{path} is not a restore journal; move it away and restore again")
    return data


def _write_journal(path: Path, journal: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(journal, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _move_aside(dest: Path, aside: Path | None, say: Callable[[str], None]) -> None:
    """The database at ``dest`` with its -wal and -shm to ``aside`` (each part once:
    a part already there was moved by the run that was interrupted)."""
    moved = False
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{dest}{suffix}")
        if not src.exists():
            continue
        if aside is None and suffix:  # there was no database: strays of one gone
            src.unlink()
            continue
        if aside is None:
            raise RestoreError(
                f"{dest} was made after the restore began (there was no database then):"
                " move it away and restore again"
            )
        target = Path(f"{aside}{suffix}")
        if target.exists():
            raise RestoreError(
                f"both {src} and {target} exist: a daemon may have served {dest} after the"
                " restore was interrupted. Keep both, move the one you do not want away,"
                " and restore again"
            )
        os.replace(src, target)
        moved = True
    if moved:
        _fsync_dir(dest.parent)
        say(f"moved the current database aside to {aside}")
