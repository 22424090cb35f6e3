"""`pa-bridge audit verify | export --since WHEN`: the hash-chained audit log (issue 29,
decision 0035). Both read the database only (safe while the daemon serves); an export
is itself an audit entry."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from .cli_daemon import config_option, ops_settings

__all__ = ["audit"]


def _open(config_path: str | None, *, write: bool) -> tuple[Any, Any]:
    from .store import StoreError, files

    settings = ops_settings(config_path)
    url = settings.storage.database_url()
    try:
        if url is not None:
            return settings, files.open_url(url, write=write)
        return settings, files.open_database(settings.storage.path, write=write)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


@click.group()
def audit() -> None:
    """The audit log: who did what, when, from where (no PHI), hash-chained."""


@audit.command("verify")
@config_option
@click.option(
    "--anchor",
    "extra",
    multiple=True,
    metavar="SEQ:HASH",
    help="Also check an anchor kept elsewhere (the journal's audit.anchor, a SIEM).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def audit_verify(config_path: str | None, extra: tuple[str, ...], as_json: bool) -> None:
    """Walk the chain: exit 0 when every entry fits, else 1 naming the first entry that
    does not (changed, removed, inserted), or the anchor the chain no longer reaches."""
    from .audit_trail import anchor_path, check_reset, read_anchors
    from .store import audit as table

    settings, db = _open(config_path, write=False)
    path = anchor_path(settings)
    anchors = read_anchors(path)
    for a in extra:
        seq, _, digest = a.partition(":")
        if not seq.isdigit() or len(digest) != 64:
            click.echo(f"error: --anchor {a!r} is not SEQ:HASH", err=True)
            sys.exit(2)
        anchors.append((int(seq), digest))
    from .store import DatabaseError, PgError

    try:
        v = table.verify(db, anchors)
        reset_problem, reset_note = check_reset(db, path) if v.problem is None else (None, None)
        if reset_problem is not None:
            v = dataclasses.replace(v, problem=reset_problem)
    except (DatabaseError, PgError) as e:  # its tables changed or gone
        click.echo(f"audit: FAILED: cannot read the audit log: {e}".splitlines()[0])
        click.echo(f"anchors: {len(anchors)} in {path}, not checked")
        sys.exit(1)
    finally:
        db.conn.close()
    if as_json:
        click.echo(
            json.dumps(
                {**v.__dict__, "anchors": len(anchors), "anchor_file": str(path),
                 "restored": reset_note}
            )
        )  # fmt: skip
    elif v.problem is None:
        span = f"entries {v.first_seq}-{v.last_seq}" if v.entries else "no entries yet"
        click.echo(f"audit: ok: {v.entries} chained ({span}), head {v.head_hash}")
        click.echo(f"anchors checked: {len(anchors)} ({path})")
        if v.unchained:
            click.echo(f"note: {v.unchained} entries from before the chain started are not chained")
        if reset_note is not None:
            click.echo(f"note: {reset_note}")
    else:
        where = f"entry {v.bad_seq}" if v.bad_seq is not None else "the chain's end"
        click.echo(f"audit: FAILED at {where}: {v.problem}")
        click.echo(f"{v.entries} entries fit before it; anchors checked: {len(anchors)} ({path})")
    if v.problem is not None:
        sys.exit(1)


@audit.command("export")
@config_option
@click.option(
    "--since",
    "since",
    required=True,
    metavar="WHEN",
    help="2025-01-31, 2025-01-31T08:00:00Z, or back from now: 90m, 24h, 7d.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default="-",
    help="Write here instead of standard output.",
)
def audit_export(config_path: str | None, since: str, output: str) -> None:
    """Entries at or after WHEN as JSON lines (seq, at, actor, action, object_id,
    detail, remote, hash), for a SIEM. Recorded as an audit entry."""
    from .audit_trail import export_lines, parse_when, record, with_transaction

    try:
        since_iso = parse_when(since)
    except ValueError as e:
        click.echo(f"error: --since: {e}", err=True)
        sys.exit(2)
    from .store import DatabaseError, PgError

    _settings, db = _open(config_path, write=True)
    n = 0
    try:
        try:
            out = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")
        except OSError as e:
            click.echo(f"error: --output {output}: {e.strerror or e}", err=True)
            sys.exit(1)
        try:
            for line in export_lines(db, since_iso):
                out.write(line + "\n")
                n += 1
            with_transaction(
                db, lambda tx: record(tx, "audit.export", None, f"{n} entries since {since_iso}")
            )
        except (DatabaseError, PgError) as e:  # its tables changed or gone
            click.echo(f"error: cannot read the audit log: {e}".splitlines()[0], err=True)
            sys.exit(1)
        finally:
            if out is not sys.stdout:
                out.close()
    finally:
        db.conn.close()
    if output != "-":
        click.echo(f"audit: {n} entries since {since_iso} to {output}", err=True)
