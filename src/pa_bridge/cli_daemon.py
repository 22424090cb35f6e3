"""`pa-bridge serve | queue | doctor | backup`."""

from __future__ import annotations

import faulthandler
import json
import logging
import sys
from typing import Any

import click

from .config import ConfigError, Settings, StorageSettings, load_settings

__all__ = ["serve", "queue", "doctor", "backup", "restore"]

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="PA_BRIDGE_CONFIG",
    help="TOML config file (default: the embedded default: SQLite under ./var, sandbox in-process).",
)


def _settings(config_path: str | None, *, log: bool = False) -> Settings:
    """The settings, or each problem on its own line and exit 2 (``log``: also as one
    JSON log line, for the daemon's journal)."""
    try:
        return load_settings(config_path)
    except ConfigError as e:
        for p in e.problems:
            click.echo(f"config error: {p}", err=True)
        if log:
            from .logs import write_event

            write_event("daemon.start_failed", reason="config", problems=e.problems)
        sys.exit(2)


@click.command()
@config_option
def serve(config_path: str | None) -> None:
    """Run the daemon: intake API, callback receiver, scheduler."""
    from .logs import configure_logging, log_event
    from .restore import RestoreError
    from .runtime import Daemon, StartupError
    from .store import StoreError
    from .store.crypto import KeyProblem

    settings = _settings(config_path, log=True)
    configure_logging(settings.logging.level)
    # A fatal signal (SIGBUS when SQLite's shared-memory file can no longer be
    # written, SIGSEGV) kills the process in C; faulthandler writes the signal and
    # the threads' stacks to stderr (the journal) first, so it is never silent.
    faulthandler.enable()
    daemon = Daemon(settings, config_path=config_path)

    def cannot_start(why: str, code: int, **fields: Any) -> None:
        # one line for a person, one JSON line for a log shipper
        log_event("daemon.start_failed", level=logging.ERROR, error=why, **fields)
        click.echo(f"error: cannot start: {why}", err=True)
        daemon.stop()
        sys.exit(code)

    try:
        daemon.run_forever()
    except StartupError as e:
        cannot_start(str(e), 2, key=e.key)
    except (RestoreError, StoreError) as e:
        cannot_start(str(e), 1)
    except KeyProblem as e:
        cannot_start(f"encryption key: {e}", 1)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""  # which file, never a bare errno
        cannot_start(f"{where}{e.strerror or e}", 1)
    except Exception as e:  # unforeseen: the traceback follows, the journal has why
        log_event("daemon.start_failed", level=logging.ERROR, error=type(e).__name__)
        daemon.stop()
        raise


def _storage_settings(config_path: str | None) -> StorageSettings:
    """``[storage]`` alone (the database's path, or ``storage.url`` with its secret):
    these commands need nothing else (not the service's secrets, which only systemd's
    credentials directory holds). Its problems are printed, exit 2."""
    from .config import load_storage_settings

    try:
        return load_storage_settings(config_path)
    except ConfigError as e:
        for p in e.problems:
            click.echo(f"config error: {p}", err=True)
        sys.exit(2)


def ops_settings(config_path: str | None) -> Any:
    """What the operators' commands (users, keys, audit) read: the settings without
    the service's secrets. Its problems are printed, exit 2."""
    from .config import load_ops_settings

    try:
        return load_ops_settings(config_path)
    except ConfigError as e:
        for p in e.problems:
            click.echo(f"config error: {p}", err=True)
        sys.exit(2)


def _open_queue(config_path: str | None, *, write: bool) -> Any:
    from .store import StoreError, StoreMissing, files

    st = _storage_settings(config_path)
    url = st.database_url()
    try:
        if url is not None:  # PostgreSQL (storage.url)
            return files.open_url(url, write=write)
        return files.open_database(st.path, write=write)
    except StoreMissing:  # where it looked, and where that came from
        click.echo(
            f"error: no database at {_queue_where(config_path)}; has the daemon run?", err=True
        )
        sys.exit(1)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


@click.group()
def queue() -> None:
    """Inspect and re-drive the durable outbound queue (safe while the daemon serves)."""


@queue.command("list")
@config_option
@click.option(
    "--status",
    # store.outbox.QUEUE_STATUSES, spelled here so that the CLI starts without sqlite-utils
    type=click.Choice(["pending", "failed", "held", "dropped", "delivered"]),
    default=None,
    help="pending: not tried yet; failed: the last attempt failed; held: waiting for "
    "store IT (a restore to review, or our configuration: LAST ERROR says why); dropped; "
    "delivered.",
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def queue_list(config_path: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """List queue items (newest first): attempts, next attempt, last error. Times are
    UTC, ISO 8601."""
    from .outbox import list_items

    db = _open_queue(config_path, write=False)
    try:
        items = list_items(db, status, limit)
    finally:
        db.conn.close()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo(f"no {status} items" if status else "the queue is empty")
        return
    click.echo(
        f"{'ID':>6}  {'KIND':<15} {'FOR':<39} {'STATUS':<10} {'TRIES':>5}  {'CREATED':<24} "
        f"{'NEXT ATTEMPT':<31} LAST ERROR"
    )
    for it in items:
        click.echo(
            f"{it['id']:>6}  {it['kind']:<15} {_item_for(it):<39} {it['status']:<10} "
            f"{it['attempts']:>5}  {it['created_at']:<24} {_next_attempt(it):<31} "
            f"{it['last_error'] or ''}"
        )


def _item_for(it: Any) -> str:
    """What the item belongs to: a webhook's PA, else its claim (or reversal)."""
    if it.get("pa_id"):
        return f"PA {it['pa_id']}"
    return f"claim {it['claim_id']}" if it.get("claim_id") else "-"


def _next_attempt(it: Any) -> str:
    """When the daemon tries the item again, in store IT's words."""
    if it["next_attempt_at"]:
        return str(it["next_attempt_at"])
    held_for = str(it.get("held_for") or "")
    if it["status"] == "held" and held_for == "configuration":
        return "at the next reload or start"
    if it["status"] == "held" and held_for.startswith("pharmacy:"):
        return f"by a daemon listing {held_for.split(':', 1)[1]}"
    if it["status"] in ("failed", "held"):
        return "by hand (queue retry)"
    return "-"


def _queue_where(config_path: str | None) -> str:
    """The database the queue commands read, as store IT needs it when an item is not
    there: the path (or the PostgreSQL URL without its password), and where it came
    from."""
    from pathlib import Path

    from .store import redact_url

    st = _storage_settings(config_path)
    url = st.database_url()
    where = redact_url(url) if url is not None else str(Path(st.path).absolute())
    if config_path is None:
        return (
            f"{where} (no --config: the embedded default; give the daemon's, e.g."
            " --config /etc/pa-bridge/pa-bridge.toml)"
        )
    return f"{where} (storage in {config_path})"


def require_database(config_path: str | None, settings: Any) -> None:
    """A SQLite database that is not there is said, exit 1, never made: a typo in
    ``storage.path``, or no --config outside the daemon's directory, would otherwise
    get a new database no daemon reads."""
    if settings.storage.database_url() is None and not settings.storage.path.exists():
        click.echo(
            f"error: no database at {_queue_where(config_path)}; has the daemon run?", err=True
        )
        sys.exit(1)


def _queue_write(config_path: str | None, fn: Any) -> bool:
    from .store import DatabaseError, PgError, files

    db = _open_queue(config_path, write=True)
    try:
        with files.transaction(db):
            ok = bool(fn(db))
    except (DatabaseError, PgError) as e:
        click.echo(f"error: the database did not take the change: {e}", err=True)
        sys.exit(1)
    finally:
        db.conn.close()
    return ok


@queue.command("retry")
@config_option
@click.argument("item_id", type=int)
def queue_retry(config_path: str | None, item_id: int) -> None:
    """Make item ID due now (failed and held ones too); the running daemon delivers
    it within its poll interval."""
    import time

    from .audit_trail import record
    from .store.outbox import retry_item

    def retry(db: Any) -> bool:
        done = retry_item(db, item_id, time.time())
        if done:
            record(db, "queue.retry", str(item_id))
        return bool(done)

    if not _queue_write(config_path, retry):
        click.echo(
            f"error: no undelivered queue item {item_id} in {_queue_where(config_path)}", err=True
        )
        sys.exit(1)
    click.echo(f"queue item {item_id} is due now")


@queue.command("drop")
@config_option
@click.argument("item_id", type=int)
def queue_drop(config_path: str | None, item_id: int) -> None:
    """Never deliver item ID (for a held item that was already delivered before the
    restore). The item stays listed as dropped."""
    import time

    from .audit_trail import record
    from .store.outbox import drop_item

    why = "dropped by store IT (pa-bridge queue drop)"

    def drop(db: Any) -> bool:
        done = drop_item(db, item_id, time.time(), why)
        if done:
            record(db, "queue.drop", str(item_id))
        return bool(done)

    if not _queue_write(config_path, drop):
        click.echo(
            f"error: no undelivered queue item {item_id} in {_queue_where(config_path)}", err=True
        )
        sys.exit(1)
    click.echo(f"queue item {item_id} is dropped")


@click.command()
@config_option
def doctor(config_path: str | None) -> None:
    """Check the installation: config, secrets present, database, TLS certificate,
    service reachable. One line per check; exit 1 if any FAIL. Changes nothing."""
    from .doctor import format_check, run_checks

    checks = run_checks(config_path)
    for c in checks:
        click.echo(format_check(c))
    fails = sum(c.status == "FAIL" for c in checks)
    warns = sum(c.status == "warn" for c in checks)
    click.echo(f"{len(checks)} checks: {fails} FAIL, {warns} warn")
    if fails:
        sys.exit(1)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@config_option
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def backup(file: str, config_path: str | None, force: bool) -> None:
    """Make a consistent online copy of the database to FILE (mode 0600), safe while
    the daemon runs. SQLite: checked with PRAGMA integrity_check. PostgreSQL
    (storage.url): pg_dump's custom format, read back with pg_restore --list."""
    st = _storage_settings(config_path)
    url = st.database_url()
    if url is not None:
        _backup_postgres(st, url, file, force)
        return
    from .backup import BackupError, backup_database

    src = st.path
    shown = {"last": -1}

    def progress(done: int, total: int) -> None:
        pct = 100 * done // total if total else 100
        if pct != shown["last"]:
            shown["last"] = pct
            click.echo(f"backup: {done}/{total} pages ({pct}%)", err=True)

    try:
        result = backup_database(src, file, force=force, progress=progress)
    except BackupError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(f"backup: {result.path}")
    click.echo(f"size: {result.size} bytes ({result.pages} pages)")
    click.echo(f"integrity_check: {result.integrity}")
    _audited(st, "backup", str(result.path))


def _audited(st: StorageSettings, action: str, detail: str) -> None:
    """The command's audit entry (issue 29); a failure to write it is said, not fatal:
    the command's work is done."""
    from .audit_trail import record_command

    problem = record_command(st, action, None, detail)
    if problem is not None:
        click.echo(f"warning: not recorded in the audit log: {problem}", err=True)


def _backup_postgres(st: StorageSettings, url: str, file: str, force: bool) -> None:
    from .pg_tools import PgToolError, dump_database
    from .restore import BACKUP_MARK
    from .store import now_iso

    try:
        result = dump_database(
            url, file, mark=(BACKUP_MARK, now_iso()), force=force,
            say=lambda m: click.echo(m, err=True),
        )  # fmt: skip
    except PgToolError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(f"backup: {result.path}")
    click.echo(f"size: {result.size} bytes (pg_dump custom format, schema {result.schema})")
    click.echo(f"tables: {result.tables}; restore mark: {result.mark}")
    _audited(st, "backup", str(result.path))


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@config_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def restore(file: str, config_path: str | None, yes: bool) -> None:
    """Put the backup FILE back as the database, with the daemon stopped. The current
    database is moved aside (nothing is deleted). The daemon that serves the restored
    copy holds its undelivered queue items for review and moves the PA feed's cursor
    past every one handed out before."""
    st = _storage_settings(config_path)
    url = st.database_url()
    if url is not None:
        _restore_postgres(config_path, st, url, file, yes)
        return
    from .restore import RestoreError, database_in_use, restore_database

    dest = st.path
    if database_in_use(dest):
        click.echo(
            f"error: a pa-bridge daemon serves {dest}; stop it first "
            "(systemctl stop pa-bridge), then restore",
            err=True,
        )
        sys.exit(1)
    if not yes and sys.stdin.isatty():
        click.confirm(f"replace {dest} with {file}?", abort=True)
    try:
        result = restore_database(file, dest, progress=lambda m: click.echo(m, err=True))
    except RestoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    _say_restored(
        str(result.path), result.backup_taken_at, result.moved_aside, result.queued, "the"
    )
    _restored_audit(config_path, st, file, result.backup_taken_at)


def _restored_audit(config_path: str | None, st: StorageSettings, file: str, taken: object) -> None:
    """The restore's audit entry in the restored database, and a reset line in the
    anchor file (its anchors named the chain moved aside)."""
    from .audit_trail import anchor_path, mark_restored
    from .config import load_ops_settings
    from .store import audit, files

    _audited(st, "restore", f"{file} (backup taken at {taken})")
    try:
        url = st.database_url()
        db = files.open_url(url) if url else files.open_database(st.path)
        try:
            h = audit.head(db)
        finally:
            db.conn.close()
        mark_restored(anchor_path(load_ops_settings(config_path)), (h.seq, h.hash))
    except Exception as e:  # the restore is done: say it
        click.echo(f"warning: the audit anchor file was not marked: {e}", err=True)


def _say_restored(what: str, taken_at: object, before: object, queued: int, daemon: str) -> None:
    """What a restore did, the same lines for both engines (``daemon``: "the" daemon of
    a SQLite file, "a" daemon of a PostgreSQL fleet)."""
    click.echo(f"restored: {what} from the backup taken at {taken_at}")
    if before is not None:
        click.echo(f"previous database: {before}")
    click.echo(
        f"held for review when {daemon} daemon starts: {queued} queue item(s); "
        "list them with `pa-bridge queue list --status held`"
    )


def _restore_postgres(
    config_path: str | None, st: StorageSettings, url: str, file: str, yes: bool
) -> None:
    from .pg_tools import PgToolError, restore_dump
    from .restore import BACKUP_MARK
    from .store import redact_url

    if not yes and sys.stdin.isatty():
        click.confirm(f"replace pa-bridge's tables at {redact_url(url)} with {file}?", abort=True)
    try:
        result = restore_dump(
            url, file, mark_key=BACKUP_MARK, say=lambda m: click.echo(m, err=True)
        )
    except PgToolError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    _say_restored(f"schema {result.schema}", result.mark, result.before, result.queued, "a")
    _restored_audit(config_path, st, file, result.mark)
