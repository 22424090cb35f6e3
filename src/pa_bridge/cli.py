"""The `pa-bridge` command: a thin layer; each command group lives in its own module."""

from __future__ import annotations

import click

from . import __version__
from .cli_audit import audit
from .cli_claim import claim
from .cli_daemon import backup, doctor, queue, restore, serve
from .cli_keys import keys
from .cli_reconcile import reconcile
from .cli_users import users
from .sandbox.cli import sandbox


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pa-bridge")
def main() -> None:
    """pa-bridge: electronic prior authorization for a pharmacy dispensing system."""


main.add_command(serve)
main.add_command(sandbox)
main.add_command(claim)
main.add_command(queue)
main.add_command(doctor)
main.add_command(backup)
main.add_command(restore)
main.add_command(reconcile)
main.add_command(users)
main.add_command(audit)
main.add_command(keys)
