"""`pa-bridge users add | list | disable | reset NAME`: the people who sign in to the
console (issue 29, decision 0034). Safe while the daemon serves; each change is an
audit entry by the command-line user who made it."""

from __future__ import annotations

import json
import secrets
import sys
from typing import Any

import click

from .cli_daemon import config_option, ops_settings, require_database

__all__ = ["users"]


def open_ops_store(config_path: str | None) -> Any:
    """The database with its key (``users`` seals TOTP secrets, ``keys`` re-seals):
    errors printed, exit 2 for the config, 1 for the rest (a database that is not
    there among them)."""
    from .encryption import open_store
    from .store import StoreError
    from .store.crypto import KeyProblem

    settings = ops_settings(config_path)
    require_database(config_path, settings)
    try:
        return settings, open_store(settings)
    except KeyProblem as e:
        click.echo(f"error: encryption key: {e}", err=True)
        sys.exit(1)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


def _password(generate: bool) -> str:
    from .auth.people import MIN_PASSWORD

    if generate:
        pw = secrets.token_urlsafe(15)
        click.echo(f"password: {pw}  (give it to the person; shown once)")
        return pw
    while True:
        pw = str(click.prompt("password", hide_input=True, confirmation_prompt=True))
        if len(pw) >= MIN_PASSWORD:
            return pw
        click.echo(f"at least {MIN_PASSWORD} characters, please", err=True)


def _show_totp(settings: Any, name: str, secret: str) -> None:
    from .auth.people import totp_uri

    click.echo(f"authenticator: {totp_uri(secret, name)}")
    click.echo(
        f"  (or type the key: {' '.join(secret[i : i + 4] for i in range(0, len(secret), 4))})"
    )
    required = settings.console.totp == "required" or (
        settings.console.totp == "auto" and _exposed(settings)
    )
    if not required:
        click.echo(
            "  (this configuration does not ask for the code: [console] totp, intake.listen)"
        )


def _exposed(settings: Any) -> bool:
    from .config import is_loopback, parse_listen

    return not is_loopback(parse_listen(settings.intake.listen)[0])


@click.group()
def users() -> None:
    """The people who sign in to the console (safe while the daemon serves)."""


@users.command("add")
@config_option
@click.argument("name")
@click.option(
    "--display-name", help="The name the PA service shows in a PA's history (default NAME)."
)
@click.option("--generate-password", is_flag=True, help="Make a password and print it once.")
def users_add(
    config_path: str | None, name: str, display_name: str | None, generate_password: bool
) -> None:
    """Add NAME with a password (asked twice, or generated) and a TOTP key for an
    authenticator app."""
    from .audit_trail import record
    from .auth.people import hash_password, new_totp_secret
    from .store import now_iso
    from .store import users as table

    name = name.strip()
    if not name or len(name) > 64 or not name.isprintable() or " " in name:
        click.echo("error: NAME is one word of at most 64 characters", err=True)
        sys.exit(2)
    settings, store = open_ops_store(config_path)
    try:
        if table.get(store.reader(), name) is not None:
            click.echo(f"error: {name} exists already (pa-bridge users reset {name})", err=True)
            sys.exit(1)
        pw_hash = hash_password(_password(generate_password))
        secret = new_totp_secret()
        shown = (display_name or name).strip()

        def job(db: Any) -> None:
            table.insert(db, name, shown, "local", pw_hash, secret, now_iso())
            record(db, "user.add", name, f"display name {shown!r}")

        store.write(job)
        click.echo(f"added {name} ({shown})")
        _show_totp(settings, name, secret)
    finally:
        store.close()


@users.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def users_list(config_path: str | None, as_json: bool) -> None:
    """Everyone who may sign in, disabled or locked, and when they last did."""
    import time

    from .store import users as table

    _settings, store = open_ops_store(config_path)
    try:
        rows = table.list_all(store.reader())
    finally:
        store.close()
    now = time.time()
    out = []
    for r in rows:
        locked = r["locked_until"] is not None and float(r["locked_until"]) > now
        state = "disabled" if r["disabled"] else "locked" if locked else "active"
        out.append(
            {
                "name": r["name"],
                "display_name": r["display_name"],
                "source": r["source"],
                "state": state,
                "totp": bool(r.get("has_totp")),
                "failed_sign_ins": r["failed_count"],
                "last_sign_in_at": r["last_sign_in_at"],
            }
        )
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not out:
        click.echo("no one yet: pa-bridge users add NAME")
        return
    click.echo(
        f"{'NAME':<20} {'STATE':<9} {'SOURCE':<6} {'TOTP':<4} {'LAST SIGN-IN':<24} DISPLAY NAME"
    )
    for u in out:
        click.echo(
            f"{u['name']:<20} {u['state']:<9} {u['source']:<6} {'yes' if u['totp'] else 'no':<4} "
            f"{u['last_sign_in_at'] or '-':<24} {u['display_name']}"
        )


@users.command("disable")
@config_option
@click.argument("name")
def users_disable(config_path: str | None, name: str) -> None:
    """NAME may no longer sign in; their sessions end now."""
    import time

    from .audit_trail import record
    from .store import now_iso
    from .store import users as table

    _settings, store = open_ops_store(config_path)
    try:

        def job(db: Any) -> int | None:
            if not table.update(db, name, now_iso(), disabled=1):
                return None
            ended = table.end_sessions_of(db, name, time.time(), "disabled")
            record(db, "user.disable", name, f"{ended} session(s) ended")
            return ended

        ended = store.write(job)
    finally:
        store.close()
    if ended is None:
        click.echo(f"error: no user {name}", err=True)
        sys.exit(1)
    click.echo(f"{name} is disabled ({ended} session(s) ended)")


@users.command("reset")
@config_option
@click.argument("name")
@click.option("--generate-password", is_flag=True, help="Make a password and print it once.")
@click.option("--keep-totp", is_flag=True, help="Keep the authenticator key (default: a new one).")
def users_reset(
    config_path: str | None, name: str, generate_password: bool, keep_totp: bool
) -> None:
    """A new password (and TOTP key), the lock-out cleared, NAME enabled again; their
    sessions end now."""
    import time

    from .audit_trail import record
    from .auth.people import hash_password, new_totp_secret
    from .store import now_iso
    from .store import users as table

    settings, store = open_ops_store(config_path)
    try:
        row = table.get(store.reader(), name)
        if row is None or row["source"] != "local":
            why = "no user" if row is None else "signs in through the identity provider:"
            click.echo(f"error: {why} {name}", err=True)
            sys.exit(1)
        pw_hash = hash_password(_password(generate_password))
        secret = row["totp_secret"] if keep_totp else new_totp_secret()

        def job(db: Any) -> None:
            values: dict[str, Any] = {
                "password_hash": pw_hash,
                "disabled": 0,
                "failed_count": 0,
                "locked_until": None,
            }
            if not keep_totp:
                values["totp_secret"] = secret
                values["totp_last_step"] = None
            table.update(db, name, now_iso(), **values)
            ended = table.end_sessions_of(db, name, time.time(), "reset")
            what = "password" + ("" if keep_totp else " and authenticator key")
            record(db, "user.reset", name, f"{what}; {ended} session(s) ended")

        store.write(job)
        click.echo(f"{name}: new password" + ("" if keep_totp else " and authenticator key"))
        if not keep_totp and secret:
            _show_totp(settings, name, secret)
    finally:
        store.close()
