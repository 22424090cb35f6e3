"""`pa-bridge reconcile [--pa ID]`: read PAs back from the service now (issue 28).

With a daemon serving the SQLite database, the command asks it (a request in
``meta``, answered at its next scheduler tick, within seconds) and waits for its
answer: one writer per SQLite file. Otherwise (no daemon on this SQLite file, or
PostgreSQL, where the command is one more member of the fleet and the fleet's lock
keeps passes one at a time) it runs the pass itself.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import click

from .cli_daemon import _settings, config_option
from .config import Settings, parse_listen

__all__ = ["reconcile"]

_OUTCOMES = {
    "changed": "changed: the service had news the callbacks missed; applied as its callback"
    " would have been",
    "unchanged": "unchanged: pa-bridge already had what the service has",
    "completed": "completed: the service had the approval period or links its callbacks lacked",
    "gone": "gone: the service no longer returns it (no access token left); shown as deleted",
    "back": "back: the service returns it again",
    "unknown_pa": "unknown: pa-bridge holds no PA with that id",
    "no_token": "cannot be read: pa-bridge knows no access token of it (no link with token_id)",
    "no_api_id": "cannot be read: no api_id for its store",
    "credentials_refused": "the service refused the api_id",
    "failed": "the service could not be read",
    "off": "reconciliation is off",
}


@click.command()
@config_option
@click.option("--pa", "pa_id", default=None, help="Read this one PA back, whatever its state.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(1, 24 * 3600),
    default=900.0,
    show_default=True,
    help="Seconds to wait for the pass (another pass running first, or the daemon's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pass's report as JSON.")
def reconcile(config_path: str | None, pa_id: str | None, wait_s: float, as_json: bool) -> None:
    """Read PAs back from the service now and apply what the callbacks missed (every
    open PA, or --pa ID). Exit 0 when every PA asked for was read, 1 when not."""
    from .logs import configure_logging

    settings = _settings(config_path)
    off = settings.reconcile_off()
    if off is not None:
        click.echo(f"reconciliation is off: {off}", err=True)
        sys.exit(1)
    # the pass's own lines (a change found, a call that failed) as the daemon writes
    # them: JSON on stderr, redacted; the summary goes to stdout. (A host that set up
    # logging already, such as a test runner, keeps its own.)
    if not logging.getLogger().handlers:
        configure_logging("WARNING")
    report = _run(settings, pa_id, wait_s, config_path)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(_describe(report))
    ok = report.get("complete") and not report.get("skipped")
    sys.exit(0 if ok else 1)


def _run(
    settings: Settings, pa_id: str | None, wait_s: float, config_path: str | None
) -> dict[str, Any]:
    from pathlib import Path

    from .restore import DatabaseInUse, database_in_use, lock_database_dir

    url = settings.storage.database_url()
    if url is not None:
        return _here(settings, pa_id, wait_s)
    path = settings.storage.path
    if not Path(path).is_file():  # never create one: a pass over nothing proves nothing
        hint = (
            "no --config: the embedded default; give the daemon's, e.g."
            " --config /etc/pa-bridge/pa-bridge.toml"
            if config_path is None
            else f"storage.path in {config_path}; has the daemon run?"
        )
        click.echo(f"error: no database at {Path(path).absolute()} ({hint})", err=True)
        sys.exit(1)
    if database_in_use(path):
        return _ask_daemon(settings, pa_id, wait_s)
    try:
        fd = lock_database_dir(path)  # no daemon starts on it meanwhile
    except DatabaseInUse:
        return _ask_daemon(settings, pa_id, wait_s)
    try:
        return _here(settings, pa_id, wait_s)
    finally:
        import os

        os.close(fd)


def _sandbox_url(settings: Settings) -> str | None:
    if not settings.sandbox_enabled:
        return None
    host, port = parse_listen(settings.sandbox.listen)
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 - a wildcard listen is reached on loopback
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _here(settings: Settings, pa_id: str | None, wait_s: float) -> dict[str, Any]:
    """The pass (or the one PA) in this process."""
    from .app import make_reconciler
    from .callbacks.ingest import CallbackIntake
    from .metrics import Metrics
    from .store import PgStore, Store, StoreError

    url = settings.storage.database_url()
    try:
        store: Store = (
            PgStore(url, max_connections=4)
            if url is not None
            else Store(settings.storage.path, busy_timeout_ms=settings.storage.busy_timeout_ms)
        )
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    service = CallbackIntake(
        store,
        forward=bool(settings.callbacks.forward_url),
        pharmacies=[p.provider_id for p in settings.pharmacies],
    )
    reconciler = make_reconciler(
        settings, store, service, metrics=Metrics(), sandbox_url=_sandbox_url(settings)
    )
    try:
        if pa_id is not None:
            report = reconciler.read_one(pa_id)
        else:
            report = reconciler.run_pass(wait=True, wait_s=wait_s)
        return json.loads(report.as_json())  # type: ignore[no-any-return]
    finally:
        reconciler.close()
        store.close()


def _ask_daemon(settings: Settings, pa_id: str | None, wait_s: float) -> dict[str, Any]:
    """Ask the daemon serving this SQLite file, and wait for its answer."""
    from .service.reconcile import new_request_id
    from .store import files, meta, now_iso
    from .store import reconcile as rows

    rid = new_request_id()
    asked = json.dumps({"pa": pa_id, "at": now_iso()})
    db = files.open_database(settings.storage.path, write=True)
    try:
        with files.transaction(db):
            meta.put(db, rows.REQUEST_PREFIX + rid, asked)
        click.echo("asked the serving daemon; waiting for its answer", err=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with files.transaction(db):
                answer = meta.take(db, rows.RESULT_PREFIX + rid)
            if answer is not None:
                return json.loads(answer)  # type: ignore[no-any-return]
            time.sleep(0.5)
        with files.transaction(db):
            meta.take(db, rows.REQUEST_PREFIX + rid)  # not taken up: withdrawn
    finally:
        db.conn.close()
    click.echo(f"error: the daemon did not answer within {wait_s:.0f} s", err=True)
    sys.exit(1)


def _describe(r: dict[str, Any]) -> str:
    if r.get("pa"):
        outcome = r.get("outcome") or "failed"
        line = f"PA {r['pa']}: {_OUTCOMES.get(outcome, outcome)}"
    elif r.get("skipped"):
        line = "no pass: another pass was running and did not end in time"
    else:
        state = "complete" if r.get("complete") else "incomplete (some PAs were not read)"
        line = (
            f"reconciliation pass {state}: {r.get('read', 0)} of {r.get('candidates', 0)} PAs"
            f" read in {r.get('calls', 0)} call(s); {r.get('changes', 0)} change(s) found"
            f" ({r.get('changed', 0)} changed, {r.get('gone', 0)} gone, {r.get('back', 0)} back)"
        )
        if r.get("completed"):
            line += f"; {r['completed']} completed (approval period or links)"
        unread = (r.get("no_token") or 0) + (r.get("no_api_id") or 0)
        if unread:
            line += f"; {unread} cannot be read (no token or no api_id)"
        if r.get("changes"):
            line += (
                "\nchanges found mean callbacks were lost: check that the service reaches"
                " callbacks.listen (certificate, firewall, `pa-bridge doctor`)"
            )
    errors = r.get("errors") or []
    if errors:
        line += "\n" + "\n".join(f"  {e}" for e in errors[:10])
    return line
