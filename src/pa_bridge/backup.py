"""`pa-bridge backup FILE`: a consistent online copy of the database.

The copy is made with SQLite's backup API while the daemon keeps running. The source
connection holds one read transaction for the whole copy, so every step reads the
same snapshot (WAL: the daemon's writes go on meanwhile and are simply not in the
copy) and the copy never restarts. The copy is written to ``FILE.partial`` (mode
0600), switched to a single self-contained file (``journal_mode=DELETE``), checked
with ``PRAGMA integrity_check``, and only then put in place. Migrations are never
run on the live database. The copy carries the mark ``backup.taken_at`` (see
restore.py): the daemon that first serves it as a restore holds its queued work.

The live database is only ever opened through SQLite here: opening and closing a
descriptor of it ourselves would drop the daemon's POSIX locks if this ran in the
daemon's process (see store.create_private).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .restore import BACKUP_MARK
from .store import DatabaseError, now_iso
from .store.files import Snapshot, destination_problem, staged

__all__ = ["BackupError", "BackupResult", "backup_database"]

Progress = Callable[[int, int], None]


class BackupError(Exception):
    """The backup could not be made; the message says why and what to do."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int
    integrity: str
    pages: int


def backup_database(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    force: bool = False,
    pages: int = 1024,
    progress: Progress | None = None,
) -> BackupResult:
    """Copy ``src`` to ``dest``; raise :class:`BackupError` with a clear message."""
    src_p, dest_p = Path(src), Path(dest)
    why = destination_problem(dest_p, force=force)
    if why is not None:
        raise BackupError(why)
    with contextlib.suppress(OSError):
        if dest_p.resolve() == src_p.resolve():
            raise BackupError("the backup file must not be the database itself")
    source = None
    try:
        with staged(dest_p, force=force, error=BackupError) as tmp:
            source = Snapshot(src_p, BackupError)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a leftover of an interrupted backup
            try:
                fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.close(fd)
            except OSError as e:
                raise BackupError(f"cannot create {tmp}: {e.strerror}") from None
            try:
                # the restore mark: a daemon serving this copy holds its queued work
                # and moves the feed's cursor on (decision 0009, restore.py)
                copy = source.copy_to(
                    tmp, pages=pages, progress=progress, mark=(BACKUP_MARK, now_iso())
                )
            except DatabaseError as e:
                raise BackupError(f"backup failed: {e}") from None
            integrity, total = copy.integrity, copy.pages
            if integrity != "ok":
                raise BackupError(f"the copy failed its integrity check: {integrity[:500]}")
        return BackupResult(dest_p, dest_p.stat().st_size, integrity, total)
    finally:
        if source is not None:
            source.close()
