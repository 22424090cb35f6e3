"""`pa-bridge serve | queue | doctor | backup`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .config import ConfigError, Settings, load_settings

__all__ = ["serve", "queue", "doctor", "backup"]

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="PA_BRIDGE_CONFIG",
    help="TOML config file (default: the embedded default: SQLite under ./var, sandbox in-process).",
)


def _settings(config_path: str | None) -> Settings:
    try:
        return load_settings(config_path)
    except ConfigError as e:
        for p in e.problems:
            click.echo(f"config error: {p}", err=True)
        sys.exit(2)


@click.command()
@config_option
def serve(config_path: str | None) -> None:
    """Run the daemon: intake API, callback receiver, scheduler."""
    from .logs import configure_logging
    from .runtime import Daemon

    settings = _settings(config_path)
    configure_logging(settings.logging.level)
    daemon = Daemon(settings)
    try:
        daemon.run_forever()
    except OSError as e:
        click.echo(f"error: cannot start: {e.strerror or e}", err=True)
        daemon.stop()
        sys.exit(1)


def _outbox(config_path: str | None) -> Any:
    from .outbox import Outbox
    from .store import Store

    settings = _settings(config_path)
    store = Store(settings.storage.path)
    return store, Outbox(store, {}, settings.queue)


@click.group()
def queue() -> None:
    """Inspect and re-drive the durable outbound queue."""


@queue.command("list")
@config_option
@click.option("--status", type=click.Choice(["pending", "failed", "delivered"]), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def queue_list(config_path: str | None, status: str | None, as_json: bool) -> None:
    """List queued items (newest first) with their attempts and last error."""
    store, outbox = _outbox(config_path)
    try:
        items = outbox.list(status)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo("the queue is empty")
        return
    click.echo(f"{'ID':>6}  {'KIND':<15} {'STATUS':<10} {'TRIES':>5}  {'CREATED':<24} LAST ERROR")
    for it in items:
        click.echo(
            f"{it['id']:>6}  {it['kind']:<15} {it['status']:<10} {it['attempts']:>5}  "
            f"{it['created_at']:<24} {it['last_error'] or ''}"
        )


@queue.command("retry")
@config_option
@click.argument("item_id", type=int)
def queue_retry(config_path: str | None, item_id: int) -> None:
    """Make item ID due now (the running daemon delivers it on its next pass)."""
    store, outbox = _outbox(config_path)
    try:
        ok = outbox.retry(item_id)
    finally:
        store.close()
    if not ok:
        click.echo(f"error: no undelivered queue item {item_id}", err=True)
        sys.exit(1)
    click.echo(f"queue item {item_id} is due now")


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
    the daemon runs; checks the copy with PRAGMA integrity_check."""
    from .backup import BackupError, backup_database

    settings = _settings(config_path)
    src = settings.storage.path
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
