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
import errno
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .restore import mark_backup
from .store import now_iso

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


def _open_source(src: Path) -> sqlite3.Connection:
    if not src.exists():
        raise BackupError(f"no database at {src} (check storage.path; has the daemon run?)")
    if not src.is_file():
        raise BackupError(f"{src} is not a file")
    try:
        # a plain connection (it may need to create the -shm of a WAL database);
        # query_only: this command never writes to the live database
        conn = sqlite3.connect(f"file:{src}?mode=rw", uri=True, isolation_level=None, timeout=10)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA query_only = ON")
        # one read transaction for the whole copy: a consistent snapshot
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        raise BackupError(f"cannot read {src}: {e}") from None
    return conn


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
    if dest_p.is_dir():
        raise BackupError(f"{dest_p} is a directory; give a file name")
    if dest_p.exists() and not force:
        raise BackupError(f"{dest_p} exists; choose another name or pass --force")
    if not dest_p.parent.is_dir():
        raise BackupError(f"no directory {dest_p.parent}")
    with contextlib.suppress(OSError):
        if dest_p.resolve() == src_p.resolve():
            raise BackupError("the backup file must not be the database itself")
    tmp = dest_p.with_name(dest_p.name + ".partial")
    old_umask = os.umask(0o077)
    source = None
    try:
        source = _open_source(src_p)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a leftover of an interrupted backup
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
        except OSError as e:
            raise BackupError(f"cannot create {tmp}: {e.strerror}") from None
        try:
            target = sqlite3.connect(str(tmp), isolation_level=None)
            try:

                def step(status: int, remaining: int, total: int) -> None:
                    if progress is not None:
                        progress(total - remaining, total)

                source.backup(target, pages=pages, progress=step)
                total = int(target.execute("PRAGMA page_count").fetchone()[0])
                # the restore mark: a daemon serving this copy holds its queued work
                # and moves the feed's cursor on (decision 0009, restore.py)
                mark_backup(target, now_iso())
                target.execute("PRAGMA journal_mode = DELETE").fetchone()
                rows = target.execute("PRAGMA integrity_check").fetchall()
            finally:
                target.close()
        except sqlite3.Error as e:
            raise BackupError(f"backup failed: {e}") from None
        integrity = "; ".join(str(r[0]) for r in rows)
        if integrity != "ok":
            raise BackupError(f"the copy failed its integrity check: {integrity[:500]}")
        os.chmod(tmp, 0o600)
        try:
            if force:
                os.replace(tmp, dest_p)
            else:
                os.link(tmp, dest_p)  # fails if someone created dest meanwhile
                tmp.unlink()
        except FileExistsError:
            raise BackupError(f"{dest_p} exists; choose another name or pass --force") from None
        except OSError as e:
            if force or e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise BackupError(f"cannot write {dest_p}: {e.strerror}") from None
            # no hard links on this file system
            if dest_p.exists():
                raise BackupError(f"{dest_p} exists; choose another name or pass --force") from None
            os.replace(tmp, dest_p)
        return BackupResult(dest_p, dest_p.stat().st_size, integrity, total)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.umask(old_umask)
        if source is not None:
            with contextlib.suppress(sqlite3.Error):
                source.execute("COMMIT")
            source.close()
