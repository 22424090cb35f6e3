"""`pa-bridge serve|queue|doctor|backup` (being written)."""

import click


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
def serve(config_path: str | None) -> None:
    """Run the daemon."""
    raise click.ClickException("serve is not built yet")


@click.group()
def queue() -> None:
    """Inspect and re-drive the durable outbound queue."""


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
def doctor(config_path: str | None) -> None:
    """Check the installation."""
    raise click.ClickException("doctor is not built yet")


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
def backup(file: str, config_path: str | None) -> None:
    """Make a consistent online copy of the database."""
    raise click.ClickException("backup is not built yet")
