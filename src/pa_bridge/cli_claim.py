"""`pa-bridge claim parse|format`: NCPDP claim bytes to JSON and back.

A thin layer over :mod:`ncpdp`: read the input, call the package, print. Malformed
input exits with status 2 and one line on stderr naming the byte offset, segment and
field, as :class:`ncpdp.ParseError` renders them.

A batch file is detected from its first bytes, by the fixed layout of its Batch 1.x
header record (STX, ``00``, the transmission type letter, ...: a claim framed STX/ETX
whose BIN starts with ``00`` is a claim, not a batch file), and read in chunks, one
record at a time, so a file of any size runs in constant memory: one JSON document per
record (``--jsonl``: one per line), progress on stderr for a large file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import IO, Any, NoReturn

import click

import ncpdp

CHUNK = 1 << 16
#: Inputs at least this large report their progress on stderr.
PROGRESS_BYTES = 1 << 20
PROGRESS_SECONDS = 1.0


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _open(path: str) -> tuple[IO[bytes], int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    try:
        f = open(path, "rb")
        return f, os.fstat(f.fileno()).st_size
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror or e}")


def _read(path: str) -> bytes:
    f, _ = _open(path)
    try:
        return f.read()
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror or e}")
    finally:
        if f is not sys.stdin.buffer:
            f.close()


@click.group()
def claim() -> None:
    """Read and write NCPDP claims (D.0, 5.1 and F6) and NCPDP batch files."""


def _dump(doc: Any, jsonl: bool) -> None:
    click.echo(json.dumps(doc) if jsonl else json.dumps(doc, indent=2))


class _Progress:
    """Counts the bytes read and reports on stderr, at most once a second."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.read = 0
        self.records = 0
        self.enabled = total is None or total >= PROGRESS_BYTES
        self._last = time.monotonic()

    def chunks(self, first: bytes, f: IO[bytes]) -> Iterator[bytes]:
        self.read = len(first)
        yield first
        while chunk := f.read(CHUNK):
            self.read += len(chunk)
            yield chunk

    def record(self) -> None:
        self.records += 1
        now = time.monotonic()
        if self.enabled and now - self._last >= PROGRESS_SECONDS:
            self._last = now
            self.show()

    def show(self) -> None:
        mib = self.read / (1 << 20)
        of = ""
        if self.total:
            of = f" of {self.total / (1 << 20):.1f} MiB ({100 * self.read // self.total}%)"
        click.echo(f"batch: {self.records} records, {mib:.1f} MiB{of}", err=True)


def _parse_batch(first: bytes, f: IO[bytes], total: int | None, lenient: bool, jsonl: bool) -> None:
    progress = _Progress(total)
    details = problems = 0
    try:
        for record in ncpdp.iter_batch(progress.chunks(first, f), strict=not lenient):
            _dump(ncpdp.record_to_jsonable(record), jsonl)
            progress.record()
            if isinstance(record, ncpdp.BatchDetail):
                details += 1
                problems += record.error is not None
    except ncpdp.ParseError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"cannot read: {e.strerror or e}")
    if progress.enabled:  # a large input ends with its final figures
        progress.show()
    unparsed = f", {problems} of them kept unparsed (see 'error')" if problems else ""
    click.echo(
        f"batch: {details} detail record(s){unparsed}; the trailer's count agrees"
        if not lenient
        else f"batch: {details} detail record(s){unparsed}",
        err=True,
    )


@claim.command("parse")
@click.option(
    "--lenient",
    is_flag=True,
    help="Accept STX/ETX framing, trailing CR/LF or separator, 109-A9 count mismatches, "
    "bytes outside printable ASCII and malformed header slots; the JSON lists what was "
    "tolerated. In a batch file, keep a transmission that does not parse as raw text.",
)
@click.option(
    "--jsonl",
    is_flag=True,
    help="One JSON document per line (for a batch file: one per record).",
)
@click.argument("file", metavar="FILE|-")
def parse_cmd(lenient: bool, jsonl: bool, file: str) -> None:
    """Print a claim as JSON: header, segments, field names, decoded values.

    A batch file (detected from its first bytes) prints one JSON document per record:
    the header, each detail record with its reference and transmission, the trailer.
    """
    f, total = _open(file)
    try:
        try:
            first = f.read(CHUNK)
            while 0 < len(first) < 128:  # a pipe may give less: enough to see a batch header
                more = f.read(CHUNK)
                if not more:
                    break
                first += more
        except OSError as e:
            _fail(f"cannot read {file}: {e.strerror or e}")
        if ncpdp.is_batch(first):
            _parse_batch(first, f, total, lenient, jsonl)
            return
        try:
            data = first + f.read()
        except OSError as e:
            _fail(f"cannot read {file}: {e.strerror or e}")
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    try:
        t = ncpdp.parse(data, strict=not lenient)
    except ncpdp.ParseError as e:
        _fail(str(e))
    _dump(ncpdp.to_jsonable(t), jsonl)


def _documents(text: str) -> Iterator[Any]:
    """The JSON documents of ``text``, one after another (pretty or one per line)."""
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return
        doc, pos = decoder.raw_decode(text, pos)
        yield doc


@claim.command("format")
@click.argument("file", metavar="FILE|-")
def format_cmd(file: str) -> None:
    """Turn `claim parse` JSON back into the exact bytes (raw, to stdout): a claim, or
    the records of a batch file."""
    data = _read(file)
    try:
        docs = list(_documents(data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as e:
        _fail(f"{file} is not valid JSON: {e}")
    if not docs:
        _fail(f"{file} is not valid JSON: no document")
    try:
        if len(docs) == 1 and isinstance(docs[0], dict) and "record" not in docs[0]:
            out = ncpdp.serialize(ncpdp.from_jsonable(docs[0]))
        else:
            out = "".join(ncpdp.record_from_jsonable(d).to_text() for d in docs).encode("latin-1")
    except ncpdp.NcpdpError as e:
        _fail(f"{file} is not a claim or batch description from `claim parse`: {e}")
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
