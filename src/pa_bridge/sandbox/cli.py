"""`pa-bridge sandbox`: run the simulated PA service alone until Ctrl-C or SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import click

from .config import SandboxConfig

#: not the embedded sandbox's port (sandbox.listen, 127.0.0.1:8480), so this one runs
#: beside `make run` / `pa-bridge serve` on the embedded default
DEFAULT_PORT = 8490


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=int,
    default=DEFAULT_PORT,
    show_default=True,
    help="0 picks a free port (8480 is the embedded sandbox's, in `pa-bridge serve`).",
)
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
@click.option(
    "--outcomes-delay",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds every outcomes answer waits (a real service is tens to hundreds of ms away).",
)
@click.option(
    "--switch-port",
    type=int,
    default=None,
    help="Also run the sandbox's switch (claims over TCP, for inline mode) on this port"
    " (0 picks a free one).",
)
@click.option(
    "--switch-framing",
    type=click.Choice(["stx_etx", "etx", "length_prefix"]),
    default="stx_etx",
    show_default=True,
    help="The switch's framing profile (length_prefix: 4 ASCII digits, not counting themselves).",
)
@click.option(
    "--switch-delay",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds the switch waits before each answer (a real one takes about 2).",
)
def sandbox(
    host: str,
    port: int,
    callback_url: str | None,
    callback_username: str | None,
    callback_password: str | None,
    callback_ca: str | None,
    step_seconds: float,
    db_path: str | None,
    outcomes_delay: float,
    switch_port: int | None,
    switch_framing: str,
    switch_delay: float,
) -> None:
    """Run the simulated PA service alone (and its switch, with --switch-port)."""
    from ncpdp.framing import Framing

    from . import SandboxServer
    from .switch import SandboxSwitch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = SandboxConfig(
        step_seconds=step_seconds,
        callback_url=callback_url,
        callback_username=callback_username,
        callback_password=callback_password,
        callback_verify=callback_ca or True,
        db_path=db_path,
        outcomes_delay_seconds=outcomes_delay,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    server = SandboxServer(config, host=host, port=port)
    try:
        server.start()
    except OSError as e:
        server.stop()
        click.echo(
            f"error: --port {port} ({host}): {e.strerror or e}; another program holds it"
            " (the embedded sandbox of `pa-bridge serve` is on 8480): give --port N, or"
            " --port 0 for a free one",
            err=True,
        )
        sys.exit(1)
    previous = signal.signal(signal.SIGTERM, on_signal)
    switch = None
    if switch_port is not None:
        switch = SandboxSwitch(
            Framing(kind=switch_framing), host, switch_port, delay_seconds=switch_delay
        ).start()
        server.state.switch = switch
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
        if switch is not None:
            click.echo(
                f"  switch:   {switch.address} ({switch_framing}; faults: POST"
                f" {server.url}/sandbox/switch)"
            )
        click.echo("Ctrl-C or SIGTERM stops it.", nl=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        if switch is not None:
            switch.stop()
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        click.echo("pa-bridge sandbox stopped")
