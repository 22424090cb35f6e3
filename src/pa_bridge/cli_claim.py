"""`pa-bridge claim parse|format`: NCPDP claim bytes to JSON and back.

A thin layer over :mod:`ncpdp`: read the input, call the package, print. Malformed
input exits with status 2 and one line on stderr naming the byte offset, segment and
field, as :class:`ncpdp.ParseError` renders them.
"""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click

import ncpdp


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror or e}")


@click.group()
def claim() -> None:
    """Read and write NCPDP claims (D.0 and 5.1)."""


@claim.command("parse")
@click.option(
    "--lenient",
    is_flag=True,
    help="Accept STX/ETX framing, trailing CR/LF or separator, and 109-A9 count "
    "mismatches; the JSON lists what was tolerated.",
)
@click.argument("file", metavar="FILE|-")
def parse_cmd(lenient: bool, file: str) -> None:
    """Print a claim as JSON: header, segments, field names, decoded values."""
    data = _read(file)
    try:
        t = ncpdp.parse(data, strict=not lenient)
    except ncpdp.ParseError as e:
        _fail(str(e))
    click.echo(json.dumps(ncpdp.to_jsonable(t), indent=2))


@claim.command("format")
@click.argument("file", metavar="FILE|-")
def format_cmd(file: str) -> None:
    """Turn `claim parse` JSON back into the claim's exact bytes (raw, to stdout)."""
    data = _read(file)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        _fail(f"{file} is not valid JSON: {e}")
    try:
        t = ncpdp.from_jsonable(doc)
        out = ncpdp.serialize(t)
    except ncpdp.NcpdpError as e:
        _fail(f"{file} is not a claim description from `claim parse`: {e}")
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
