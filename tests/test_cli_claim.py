"""`pa-bridge claim parse|format` in process (click's CliRunner: the bytes on stdin,
stdout and stderr are the command's own); the console script as a process is in
test_cli_process.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import builders as b
from tests.conftest import Cli


class Run:
    """The shape the tests read: exit code and the raw bytes of stdout and stderr."""

    def __init__(self, cli: Cli, args: tuple[str, ...], stdin: bytes | None) -> None:
        r = cli("claim", *args, input=stdin)
        self.returncode: int = r.exit_code
        self.stdout: bytes = r.stdout_bytes
        self.stderr: bytes = r.stderr_bytes


@pytest.fixture
def run(cli: Cli) -> Callable[..., Run]:
    def call(*args: str, stdin: bytes | None = None) -> Run:
        return Run(cli, args, stdin)

    return call


@pytest.fixture
def claim_file(tmp_path: Path) -> Path:
    p = tmp_path / "claim.bin"
    p.write_bytes(b.request_bytes())
    return p


def test_parse_prints_named_and_decoded_fields(claim_file: Path, run: Callable[..., Run]) -> None:
    r = run("parse", str(claim_file))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "request" and doc["version"] == "D0"
    claim = doc["transactions"][0]["segments"][0]
    assert claim["name"] == "Claim"
    e7 = next(f for f in claim["fields"] if f["id"] == "E7")
    assert e7 == {
        "id": "E7",
        "number": 442,
        "name": "Quantity Dispensed",
        "value": "30000",
        "decoded": "30.000",
    }
    hdr = {h["id"]: h for h in doc["header"]}
    assert hdr["D1"]["decoded"] == "2026-11-23"


def test_parse_then_format_gives_the_same_bytes(tmp_path: Path, run: Callable[..., Run]) -> None:
    for raw in (b.request_bytes(), b.response_bytes([b.REJECT_75, b.PAID])):
        src = tmp_path / "in.bin"
        src.write_bytes(raw)
        parsed = run("parse", str(src))
        assert parsed.returncode == 0
        (tmp_path / "c.json").write_bytes(parsed.stdout)
        formatted = run("format", str(tmp_path / "c.json"))
        assert formatted.returncode == 0, formatted.stderr
        assert formatted.stdout == raw


def test_stdin_and_lenient_round_trip(run: Callable[..., Run]) -> None:
    framed = b"\x02" + b.response_bytes([b.REJECT_MR]) + b"\x03\r\n"
    strict = run("parse", "-", stdin=framed)
    assert strict.returncode == 2
    lenient = run("parse", "--lenient", "-", stdin=framed)
    assert lenient.returncode == 0
    doc = json.loads(lenient.stdout)
    assert "STX framing before the header" in doc["tolerated"]
    assert run("format", "-", stdin=lenient.stdout).stdout == framed


def test_malformed_input_one_line_with_offset_segment_field(
    tmp_path: Path, run: Callable[..., Run]
) -> None:
    raw = b.request_bytes()
    at = raw.index(b"\x1cDN")  # in the Pricing segment
    bad = tmp_path / "bad.bin"
    bad.write_bytes(raw[:at] + b"\x1c" + raw[at:])
    r = run("parse", str(bad))
    assert r.returncode == 2 and r.stdout == b""
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: empty field")
    assert lines[0].endswith(f"(at byte offset {at}, segment AM11, field DU)")


def test_unreadable_file(tmp_path: Path, run: Callable[..., Run]) -> None:
    r = run("parse", str(tmp_path / "missing.bin"))
    assert r.returncode == 2
    assert r.stderr.decode().startswith("error: cannot read")
    assert len(r.stderr.decode().splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b'{"kind": "request", "header": []}', b"\xff\xfe"],
)
def test_format_rejects_bad_json(tmp_path: Path, content: bytes, run: Callable[..., Run]) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    r = run("format", str(p))
    assert r.returncode == 2 and r.stdout == b""
    err = r.stderr.decode()
    assert err.startswith("error: ") and len(err.splitlines()) == 1


# --- issue 17: F6 and batch files --------------------------------------------------


def test_parse_and_format_an_f6_claim(tmp_path: Path, run: Callable[..., Run]) -> None:
    raw = b.request_bytes(version="F6", bin="61001400")
    src = tmp_path / "f6.bin"
    src.write_bytes(raw)
    r = run("parse", str(src))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["version"] == "F6" and len(doc["transactions"]) == 1
    hdr = {h["id"]: h for h in doc["header"]}
    assert hdr["A1"]["value"] == "61001400" and hdr["A1"]["name"] == "IIN"
    assert run("format", "-", stdin=r.stdout).stdout == raw


def _documents(text: str) -> list[dict[str, object]]:
    decoder, pos, out = json.JSONDecoder(), 0, []
    while text[pos:].strip():
        while text[pos].isspace():
            pos += 1
        doc, pos = decoder.raw_decode(text, pos)
        out.append(doc)
    return out


def _batch(n: int, between: bytes = b"\r\n") -> bytes:
    claims = [
        b.request_bytes(),
        b.response_bytes([b.REJECT_75]),
        b.request_bytes(version="F6", bin="61001400"),
    ]
    return b.batch_bytes([claims[i % 3] for i in range(n)], between=between)


def test_parse_a_batch_file_one_document_per_record(
    tmp_path: Path, run: Callable[..., Run]
) -> None:
    data = _batch(3)
    src = tmp_path / "batch.bin"
    src.write_bytes(data)
    r = run("parse", str(src))
    assert r.returncode == 0, r.stderr
    docs = _documents(r.stdout.decode())
    assert [d["record"] for d in docs] == ["header", "detail", "detail", "detail", "trailer"]
    assert docs[2]["transmission"]["kind"] == "response"
    assert "3 detail record(s)" in r.stderr.decode()
    # the same with --jsonl, and back to the very bytes with `claim format`
    jl = run("parse", "--jsonl", str(src))
    lines = jl.stdout.decode().splitlines()
    assert len(lines) == 5 and json.loads(lines[1])["reference"] == "SYNREF0001"
    assert run("format", "-", stdin=jl.stdout).stdout == data
    assert run("format", "-", stdin=r.stdout).stdout == data


def test_a_large_batch_reports_progress_on_stderr(tmp_path: Path, run: Callable[..., Run]) -> None:
    data = _batch(4000, between=b"\n")
    assert len(data) > 1 << 20
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    r = run("parse", "--jsonl", str(src))
    assert r.returncode == 0, r.stderr[-500:]
    assert len(r.stdout.splitlines()) == 4002
    err = r.stderr.decode().splitlines()
    assert any(line.startswith("batch: ") and "MiB" in line for line in err), err
    assert err[-1].startswith("batch: 4000 detail record(s)")


def test_a_batch_with_a_bad_count_fails_strict_and_passes_lenient(
    tmp_path: Path, run: Callable[..., Run]
) -> None:
    data = b.batch_bytes([b.request_bytes()], count=9)
    src = tmp_path / "batch.bin"
    src.write_bytes(data)
    r = run("parse", str(src))
    assert r.returncode == 2
    assert "record count says '0000000009'" in r.stderr.decode().splitlines()[-1]
    lenient = run("parse", "--lenient", "--jsonl", str(src))
    assert lenient.returncode == 0
    trailer = json.loads(lenient.stdout.splitlines()[-1])
    assert any("record count" in x for x in trailer["tolerated"])


def test_a_single_detail_record_says_what_it_is(run: Callable[..., Run]) -> None:
    record = b.batch_detail(b.request_bytes(), "SYNREF0001")
    r = run("parse", "-", stdin=record)
    assert r.returncode == 2
    assert "batch detail record" in r.stderr.decode() and "parse_batch" in r.stderr.decode()
