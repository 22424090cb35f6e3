"""`pa-bridge keys rotate | encrypt-existing`: the key PHI is sealed with (issue 29,
decision 0033)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from .cli_daemon import config_option, ops_settings, require_database

__all__ = ["keys"]


def reseal_all(store: Any, say: Any, batch: int = 200) -> int:
    """Every stored value not sealed with the current key (PHI, and the people's TOTP
    keys), sealed with it, ``batch`` rows per short transaction (the daemon's writes
    go on between them)."""
    from .store import crypto

    keys = store.keys
    total = 0
    for col in crypto.SEALED_COLUMNS:
        after: Any = None
        done = 0
        while True:
            last, seen, sealed = store.write(
                lambda db, a=after, c=col: crypto.reseal_batch(db, keys, c, a, batch), timeout=60
            )
            done += sealed
            if last is None or seen < batch:
                break
            after = last
        if done:
            say(f"{col.table}.{col.column}: {done} value(s) sealed with key {keys.current_id}")
        total += done
    return total


#: a serving daemon looks at its key file at most once a second (``Keyring``): after
#: this long it seals with the new key, and what it sealed with the older one meanwhile
#: is committed
DAEMONS_TAKE_IT_S = 2.5
#: passes after the first, for what daemons sealed with the older key meanwhile
MORE_PASSES = 3


def reseal_until_done(
    store: Any, say: Any, *, wait_s: float = DAEMONS_TAKE_IT_S, passes: int = MORE_PASSES
) -> int:
    """:func:`reseal_all`, then again after the daemons took the key file as it is now,
    until a pass finds nothing left (at most ``passes`` more)."""
    total = reseal_all(store, say)
    for _ in range(passes):
        time.sleep(wait_s)
        n = reseal_all(store, say)
        total += n
        if n == 0:
            break
    return total


def retire_unused(store: Any, key_file: Path | None, say: Any) -> None:
    """Say which keys seal no stored value any more, and forget their check rows (a
    key file without them is then still this database's); say which still do."""
    from .store import crypto

    keys = store.keys
    counts = crypto.count_by_key(store.reader())
    where = f" from {key_file}" if key_file is not None else ""
    for kid in crypto.checked_ids(store.reader()):
        if kid == keys.current_id:
            continue
        if counts.get(kid, 0) == 0:
            store.write(lambda db, k=kid: crypto.forget_check(db, k))
            say(
                f"keys: key {kid} seals no stored value now: remove it{where} once no"
                " backup you keep needs it"
            )
    left = {k: n for k, n in counts.items() if k not in (keys.current_id, "plain")}
    for kid, n in left.items():
        say(
            f"keys: {n} value(s) are still sealed with key {kid}: a daemon that has not read"
            " the new key file (another host's?) seals with it; copy the file there, then"
            " `pa-bridge keys rotate --reseal`"
        )


@click.group()
def keys() -> None:
    """The encryption key of the PHI at rest ([encryption] key_file)."""


@keys.command("rotate")
@config_option
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The key file to change (default: [encryption] key_file; a systemd "
    "credential's source file must be named here).",
)
@click.option(
    "--stage",
    is_flag=True,
    help="Add the new key without sealing with it yet (a fleet: copy the file to "
    "every daemon's host, then run `keys rotate` again).",
)
@click.option(
    "--reseal",
    is_flag=True,
    help="Add no key: seal with the current key every value still sealed with an older "
    "one (a fleet, after copying the key file to every host; or when doctor shows values "
    "under older keys).",
)
def keys_rotate(config_path: str | None, key_file: Path | None, stage: bool, reseal: bool) -> None:
    """Add a new key and make it the one that seals; then seal every stored value
    under it, in small transactions, while the daemon serves (it reads the changed key
    file by itself). Older keys stay in the file: backups made before need them; a key
    that seals no stored value any more is said, and may go once no backup needs it."""
    from .audit_trail import record
    from .encryption import KeyProblem, key_source
    from .store import crypto

    settings = ops_settings(config_path)
    if key_file is None:
        try:
            src = key_source(settings)
        except KeyProblem as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        if src.credential:
            click.echo(
                f"error: {src.words} is a copy systemd makes at the daemon's start: name its"
                " source with --key-file (see docs/operations.md, Security)",
                err=True,
            )
            sys.exit(2)
        key_file = src.path
    if reseal and stage:
        click.echo("error: --reseal adds no key; --stage adds one: give one of them", err=True)
        sys.exit(2)
    lines = _key_lines(key_file)
    if (lines and not stage) or reseal:  # the database is sealed again: it must be there
        require_database(config_path, settings)
    if reseal:
        _reseal(settings, key_file)
        return
    staged = [ln for ln in lines if ln.endswith(" staged")]
    if not lines:
        kid, key = crypto.new_key()
        _write_keys(key_file, [crypto.key_line(kid, key)])
        click.echo(f"keys: created {key_file} with key {kid}")
        return
    if staged and not stage:
        promoted = staged[-1][: -len(" staged")]
        lines = [ln for ln in lines if ln != staged[-1]] + [promoted]
        kid = promoted.split()[0]
        click.echo(f"keys: key {kid} (staged) now seals new values")
    else:
        kid, key = crypto.new_key()
        lines.append(crypto.key_line(kid, key, staged=stage))
        click.echo(f"keys: added key {kid} to {key_file}" + (" (staged)" if stage else ""))
    _write_keys(key_file, lines)
    if stage:
        click.echo("copy the file to every daemon's host, then run `pa-bridge keys rotate` again")
        return
    store = _open_with(settings, key_file)
    try:
        started = time.monotonic()
        n = reseal_until_done(store, click.echo)
        store.write(
            lambda db: record(db, "keys.rotate", kid, f"{n} value(s) sealed with the new key")
        )
        click.echo(
            f"keys: {n} value(s) sealed with key {kid} in {time.monotonic() - started:.1f} s"
        )
        click.echo("the older keys stay in the file: backups made before today need them")
        retire_unused(store, key_file, click.echo)
    finally:
        store.close()


def _key_lines(key_file: Path) -> list[str]:
    """The key lines of ``key_file`` (none when it is not there yet); a file that is
    not a key file, or cannot be read, is said (exit 1) before anything is written."""
    from .store import crypto

    if not key_file.exists():
        return []
    try:
        text = key_file.read_text(encoding="ascii")
    except UnicodeDecodeError:
        click.echo(f"error: key file {key_file}: not a pa-bridge key file", err=True)
        sys.exit(1)
    except OSError as e:
        click.echo(f"error: key file {key_file}: cannot read it ({e.strerror or e})", err=True)
        sys.exit(1)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if lines:
        try:
            crypto.Keyring(key_file, f"key file {key_file}")  # its lines, checked
        except crypto.KeyProblem as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
    return lines


def _write_keys(key_file: Path, lines: list[str]) -> None:
    from .store import crypto

    try:
        crypto.write_keyring(key_file, lines)
    except OSError as e:
        click.echo(f"error: cannot write {key_file}: {e.strerror or e}", err=True)
        sys.exit(1)


def _open_with(settings: Any, key_file: Path) -> Any:
    """The database opened with the keys in ``key_file``; a key problem is one line,
    exit 1."""
    from .encryption import KeyProblem, open_store

    settings.encryption.key_file = key_file.resolve()
    try:
        return open_store(settings, create_default=False)
    except KeyProblem as e:
        click.echo(f"error: encryption key: {e}", err=True)
        sys.exit(1)


def _reseal(settings: Any, key_file: Path) -> None:
    """``keys rotate --reseal``: no new key, every value under the current one."""
    from .audit_trail import record

    store = _open_with(settings, key_file)
    try:
        assert store.keys is not None  # open_store loads them
        kid = store.keys.current_id
        n = reseal_until_done(store, click.echo)
        store.write(lambda db: record(db, "keys.reseal", kid, f"{n} value(s) sealed"))
        click.echo(f"keys: {n} value(s) sealed with key {kid}")
        retire_unused(store, key_file, click.echo)
    finally:
        store.close()


@keys.command("encrypt-existing")
@config_option
@click.option(
    "--backup",
    "backup_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where the backup taken first goes (default: beside the database).",
)
def keys_encrypt_existing(config_path: str | None, backup_file: str | None) -> None:
    """Seal every value stored before encryption, after a backup of the database as it
    is (which holds the plain text: keep it offline, delete it once the daemon runs
    well). SQLite: with the daemon stopped, and VACUUMed after so no plain page is
    left in the file or its WAL."""
    from .audit_trail import record
    from .encryption import KeyProblem, open_store
    from .store import now_iso

    settings = ops_settings(config_path)
    stamp = now_iso().replace(":", "").replace("-", "")[:15]
    url = settings.storage.database_url()
    if url is None:
        from .backup import BackupError, backup_database
        from .restore import database_in_use

        db_path = settings.storage.path
        if not db_path.exists():
            click.echo(f"error: no database at {db_path}", err=True)
            sys.exit(1)
        if database_in_use(db_path):
            click.echo(
                f"error: a pa-bridge daemon serves {db_path}; stop it first"
                " (systemctl stop pa-bridge), then encrypt",
                err=True,
            )
            sys.exit(1)
        dest = backup_file or f"{db_path}.before-encryption-{stamp}"
        try:
            result = backup_database(db_path, dest)
        except BackupError as e:
            click.echo(f"error: the backup first failed, nothing was changed: {e}", err=True)
            sys.exit(1)
        click.echo(f"backup first: {result.path} ({result.integrity})")
    else:
        from .pg_tools import PgToolError, dump_database
        from .restore import BACKUP_MARK

        dest = backup_file or f"pa-bridge-before-encryption-{stamp}.dump"
        try:
            dump = dump_database(url, dest, mark=(BACKUP_MARK, now_iso()))
        except PgToolError as e:
            click.echo(f"error: the backup first failed, nothing was changed: {e}", err=True)
            sys.exit(1)
        click.echo(f"backup first: {dump.path}")
    try:
        store = open_store(settings)
    except KeyProblem as e:
        click.echo(f"error: encryption key: {e}", err=True)
        sys.exit(1)
    current = store.keys.current_id if store.keys is not None else "-"
    try:
        n = reseal_all(store, click.echo)
        store.write(
            lambda db: record(
                db, "keys.encrypt_existing", None, f"{n} value(s) sealed; backup {dest}"
            )
        )
        from .store import retention

        pages = retention.vacuum(store)
    finally:
        store.close()
    click.echo(f"keys: {n} value(s) sealed with key {current}; database rewritten ({pages} pages)")
    click.echo(
        f"the backup {dest} holds the plain text: keep it offline, delete it once the daemon runs well"
    )
