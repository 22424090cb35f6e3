"""`pa-bridge claim parse|format` (being written)."""

import click


@click.group()
def claim() -> None:
    """Read and write NCPDP claims."""
