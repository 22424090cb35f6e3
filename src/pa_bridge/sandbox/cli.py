"""`pa-bridge sandbox`: run the simulated PA service alone until Ctrl-C or SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from .config import SandboxConfig


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8480, show_default=True, help="0 picks a free port.")
@click.option("--callback-url", default=None, help="Where to POST status callbacks.")
@click.option("--callback-username", default=None, help="HTTP Basic user for callbacks.")
@click.option(
    "--callback-password",
    default=None,
    envvar="PA_BRIDGE_SANDBOX_CALLBACK_PASSWORD",
    help="HTTP Basic password for callbacks (or PA_BRIDGE_SANDBOX_CALLBACK_PASSWORD).",
)
@click.option(
    "--callback-ca",
    default=None,
    type=click.Path(exists=True),
    help="CA bundle to verify an HTTPS callback target.",
)
@click.option("--step-seconds", type=float, default=1.0, show_default=True)
@click.option("--db", "db_path", default=None, help="SQLite file (default: in memory).")
def sandbox(
    host: str,
    port: int,
    callback_url: str | None,
    callback_username: str | None,
    callback_password: str | None,
    callback_ca: str | None,
    step_seconds: float,
    db_path: str | None,
) -> None:
    """Run the simulated PA service alone."""
    from . import SandboxServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = SandboxConfig(
        step_seconds=step_seconds,
        callback_url=callback_url,
        callback_username=callback_username,
        callback_password=callback_password,
        callback_verify=callback_ca or True,
        db_path=db_path,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    server = SandboxServer(config, host=host, port=port).start()
    try:
        click.echo(f"pa-bridge sandbox listening on {server.url}")
        click.echo(f"  claim interface:    {server.claim_url}  (json, empty)")
        click.echo(f"  outcomes interface: {server.outcomes_url}  (/outcomes.txt, /outcomes)")
        click.echo(f"  dashboard:          {server.dashboard_url}  (POST /dashboard/login)")
        click.echo(f"  requests resource:  {server.url}/requests  (service.api_url: {server.url})")
        click.echo(f"  username: {config.username}")
        click.echo(f"  password: {config.password}")
        click.echo(f"  api_key:  {config.api_key}")
        click.echo(f"  api_id:   {config.api_id}")
        click.echo("Ctrl-C or SIGTERM stops it.", nl=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        click.echo("pa-bridge sandbox stopped")
