"""`pa-bridge claim parse|format`, run as the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import builders as b

PA_BRIDGE = Path(sys.executable).with_name("pa-bridge")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(PA_BRIDGE), "claim", *args], input=stdin, capture_output=True, timeout=60
    )


@pytest.fixture
def claim_file(tmp_path: Path) -> Path:
    p = tmp_path / "claim.bin"
    p.write_bytes(b.request_bytes())
    return p


def test_parse_prints_named_and_decoded_fields(claim_file: Path) -> None:
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


def test_parse_then_format_gives_the_same_bytes(tmp_path: Path) -> None:
    for raw in (b.request_bytes(), b.response_bytes([b.REJECT_75, b.PAID])):
        src = tmp_path / "in.bin"
        src.write_bytes(raw)
        parsed = run("parse", str(src))
        assert parsed.returncode == 0
        (tmp_path / "c.json").write_bytes(parsed.stdout)
        formatted = run("format", str(tmp_path / "c.json"))
        assert formatted.returncode == 0, formatted.stderr
        assert formatted.stdout == raw


def test_stdin_and_lenient_round_trip() -> None:
    framed = b"\x02" + b.response_bytes([b.REJECT_MR]) + b"\x03\r\n"
    strict = run("parse", "-", stdin=framed)
    assert strict.returncode == 2
    lenient = run("parse", "--lenient", "-", stdin=framed)
    assert lenient.returncode == 0
    doc = json.loads(lenient.stdout)
    assert "STX framing before the header" in doc["tolerated"]
    assert run("format", "-", stdin=lenient.stdout).stdout == framed


def test_malformed_input_one_line_with_offset_segment_field(tmp_path: Path) -> None:
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


def test_unreadable_file(tmp_path: Path) -> None:
    r = run("parse", str(tmp_path / "missing.bin"))
    assert r.returncode == 2
    assert r.stderr.decode().startswith("error: cannot read")
    assert len(r.stderr.decode().splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b'{"kind": "request", "header": []}', b"\xff\xfe"],
)
def test_format_rejects_bad_json(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    r = run("format", str(p))
    assert r.returncode == 2 and r.stdout == b""
    err = r.stderr.decode()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
