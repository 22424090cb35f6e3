"""`pa-bridge sandbox` (being written)."""

import click


@click.command()
@click.option("--port", type=int, default=8480)
def sandbox(port: int) -> None:
    """Run the simulated PA service alone."""
    raise click.ClickException("sandbox is not built yet")
