"""The audit log as a hash chain (issue 29, decision 0035): `audit verify` finds a
changed, removed or inserted entry and a truncated end; `audit export --since` writes
JSON lines; retention keeps its own period and the chain still verifies; commands and
API actions are recorded without PHI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.audit_trail import anchor_path, purge, write_anchor
from pa_bridge.config import load_settings
from pa_bridge.store import Store, audit, now_iso
from tests import builders as b


def fill(store: Store, n: int, start: float = 1_700_000_000.0) -> None:
    for i in range(n):
        store.write(
            lambda db, i=i: audit.add(
                db, f"user:u{i % 3}@10.0.0.{i % 7}", "pa.open", f"PA{i:04d}", None,
                at=now_iso(start + i * 3600),
            )
        )  # fmt: skip


def config(tmp_path: Path, where: str) -> Path:
    cfg = tmp_path / "audit.toml"
    key = "url" if where.startswith("postgresql://") else "path"
    cfg.write_text(
        f'[storage]\n{key} = "{where}"\n[audit]\nanchor_file = "{tmp_path / "anchors.jsonl"}"\n'
    )
    return cfg


def test_each_entry_carries_the_hash_of_the_one_before(store: Store) -> None:
    fill(store, 5)
    rows = store.query(
        "SELECT seq, at, actor, action, object_id, detail, remote, hash FROM audit ORDER BY seq"
    )
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["actor"] == "user:u0" and rows[0]["remote"] == "10.0.0.0"
    prev = "0" * 64
    for r in rows:
        want = audit.entry_hash(
            prev,
            r["seq"],
            r["at"],
            r["actor"],
            r["action"],
            r["object_id"],
            r["detail"],
            r["remote"],
        )
        assert r["hash"] == want
        prev = want
    v = audit.verify(store.reader())
    assert v.problem is None and v.entries == 5 and v.head_hash == prev


def test_a_direct_sql_update_is_found_by_audit_verify(
    store: Store, store_url: str, cli: Any, tmp_path: Path
) -> None:
    fill(store, 6)
    cfg = config(tmp_path, store_url)
    ok = cli("audit", "verify", "--config", str(cfg))
    assert ok.exit_code == 0, ok.output
    assert "audit: ok: 6 chained (entries 1-6)" in ok.output
    store.write(lambda db: db.execute("UPDATE audit SET actor = 'user:someone-else' WHERE seq = 4"))
    bad = cli("audit", "verify", "--config", str(cfg))
    assert bad.exit_code == 1
    assert "audit: FAILED at entry 4: entry 4 (id" in bad.output and "it was changed" in bad.output
    assert "3 entries fit before it" in bad.output


def test_a_removed_entry_shows(store: Store) -> None:
    fill(store, 8)
    store.write(lambda db: db.execute("DELETE FROM audit WHERE seq = 3"))
    v = audit.verify(store.reader())
    assert v.bad_seq == 4 and "entries were removed" in (v.problem or "")


def test_a_truncated_end_shows_against_the_head_and_the_anchors(store: Store) -> None:
    fill(store, 8)
    six = store.query("SELECT hash FROM audit WHERE seq = 6")[0]["hash"]
    five = store.query("SELECT hash FROM audit WHERE seq = 5")[0]["hash"]
    store.write(lambda db: db.execute("DELETE FROM audit WHERE seq > 6"))
    v = audit.verify(store.reader())
    assert (
        v.problem is not None
        and "the chain ends at entry 6 but the head names entry 8" in v.problem
    )
    # the head rewritten to match, and one more entry gone: the anchor still shows it
    store.write(lambda db: db.execute("DELETE FROM audit WHERE seq = 6"))
    store.write(lambda db: db.execute("UPDATE audit_head SET seq = 5, hash = ?", [five]))
    assert audit.verify(store.reader()).problem is None
    v = audit.verify(store.reader(), anchors=[(6, six)])
    assert (
        v.problem
        == "an anchor recorded entry 6 but the chain ends at entry 5: entries were removed from its end"
    )


def test_an_entry_inserted_around_the_chain_shows(store: Store) -> None:
    fill(store, 3)
    store.write(
        lambda db: db.execute(
            "INSERT INTO audit (at, actor, action) VALUES (?, 'x', 'pa.open')", [now_iso()]
        )
    )
    v = audit.verify(store.reader())
    assert v.problem is not None and "is not in the chain" in v.problem


def test_anchors_are_written_outside_the_database_and_checked(
    sqlite_store: Store, cli: Any, tmp_path: Path
) -> None:
    fill(sqlite_store, 4)
    cfg = config(tmp_path, str(sqlite_store.path))
    path = tmp_path / "anchors.jsonl"
    last: dict[str, Any] = {}
    assert write_anchor(sqlite_store, path, last) is True
    assert write_anchor(sqlite_store, path, last) is False  # nothing new
    line = json.loads(path.read_text().splitlines()[-1])
    assert line["seq"] == 4 and len(line["hash"]) == 64
    three = sqlite_store.query("SELECT hash FROM audit WHERE seq = 3")[0]["hash"]
    sqlite_store.write(lambda db: db.execute("DELETE FROM audit WHERE seq = 4"))
    sqlite_store.write(lambda db: db.execute("UPDATE audit_head SET seq = 3, hash = ?", [three]))
    r = cli("audit", "verify", "--config", str(cfg))
    assert (
        r.exit_code == 1 and "an anchor recorded entry 4 but the chain ends at entry 3" in r.output
    )
    assert anchor_path(load_settings(audit={"anchor_file": str(path)})) == path


def test_export_since_writes_json_lines_and_is_recorded(
    store: Store, store_url: str, cli: Any, tmp_path: Path
) -> None:
    fill(store, 10)  # one an hour from 2023-11-14T22:13:20Z
    cfg = config(tmp_path, store_url)
    r = cli("audit", "export", "--config", str(cfg), "--since", "2023-11-15T05:00:00Z")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["seq"] for x in lines] == [8, 9, 10]
    assert set(lines[0]) == {
        "seq",
        "at",
        "actor",
        "action",
        "object_id",
        "detail",
        "remote",
        "hash",
    }
    last = store.query("SELECT actor, action, detail FROM audit ORDER BY seq DESC LIMIT 1")[0]
    assert last["action"] == "audit.export" and last["detail"].startswith("3 entries since")
    bad = cli("audit", "export", "--config", str(cfg), "--since", "last tuesday")
    assert bad.exit_code == 2 and "is not a time" in bad.output


def test_retention_keeps_its_own_period_and_the_chain_verifies(store: Store) -> None:
    fill(store, 10, start=1_500_000_000.0)  # 2017
    now = 1_500_000_000.0 + 2192 * 86400 + 5 * 3600 + 1  # six years and five hours on
    settings = load_settings(audit={"retention_days": 2192})
    removed = purge(store, settings, now, chunk=3)
    assert removed == 6
    kept = [r["seq"] for r in store.query("SELECT seq FROM audit ORDER BY seq")]
    assert kept == [7, 8, 9, 10, 11]  # 11: the purge says what it did
    assert store.query("SELECT detail FROM audit WHERE seq = 11")[0]["detail"].startswith(
        "6 entries before"
    )
    v = audit.verify(store.reader())
    assert v.problem is None and v.first_seq == 7
    # the floor is the chain's own: removing the oldest kept entry by hand still shows
    store.write(lambda db: db.execute("DELETE FROM audit WHERE seq = 7"))
    assert audit.verify(store.reader()).bad_seq == 8


def test_requests_and_commands_are_recorded_without_phi(
    make_daemon: Any, cli: Any, tmp_path: Path
) -> None:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        body = {
            "request": b.request_bytes().decode("latin-1"),
            "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
            "metadata": {"patient": b.PATIENT_LAST},
        }
        claim = api.post("/v1/claims", json=body).json()
        api.post(f"/v1/claims/{claim['claim_id']}/pa")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\npath = "{d.store.path}"\n')
    assert cli("backup", "--config", str(cfg), str(tmp_path / "b.sqlite3")).exit_code == 0
    assert cli("queue", "drop", "--config", str(cfg), "999").exit_code == 1  # no such item: nothing
    rows = d.store.query("SELECT actor, action, object_id, detail, remote FROM audit ORDER BY seq")
    actions = [r["action"] for r in rows]
    assert actions[:2] == ["claim.accepted", "pa.submit"] and actions[-1] == "backup"
    assert rows[0]["remote"] == "127.0.0.1" and rows[0]["actor"] == "anonymous"
    assert "queue.drop" not in actions
    text = json.dumps(rows)
    for phi in (b.PATIENT_FIRST, b.PATIENT_LAST, b.PATIENT_DOB, b.CARDHOLDER_ID):
        assert phi not in text
    assert audit.verify(d.store.reader()).problem is None


def test_a_postgresql_daemons_anchors_go_to_its_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No database directory on PostgreSQL: the unit's StateDirectory= (systemd's
    $STATE_DIRECTORY, the first of several), else the working directory; never the
    database's path, and anchor_file wins."""
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text('[storage]\nurl = "postgresql://pa@127.0.0.1:1/pa"\n')
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/pa-bridge:/var/lib/other")
    assert anchor_path(load_settings(str(cfg))) == Path("/var/lib/pa-bridge/audit-anchors.jsonl")
    monkeypatch.delenv("STATE_DIRECTORY")
    assert anchor_path(load_settings(str(cfg))) == Path("audit-anchors.jsonl")
    cfg.write_text(cfg.read_text() + f'[audit]\nanchor_file = "{tmp_path / "a.jsonl"}"\n')
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/pa-bridge")
    assert anchor_path(load_settings(str(cfg))) == tmp_path / "a.jsonl"


def test_a_dropped_audit_table_is_a_failure_not_a_traceback(
    store: Store, store_url: str, cli: Any, tmp_path: Path
) -> None:
    """Someone removed the audit log's tables: `audit verify` and `export` fail naming
    why, and doctor FAILs the audit log (it took the error for an older schema and
    said nothing about the audit log)."""
    from pa_bridge.encryption import create_key_file

    fill(store, 3)
    cfg = config(tmp_path, store_url)
    key = tmp_path / "pa.key"
    create_key_file(key)
    cfg.write_text(cfg.read_text() + f'[encryption]\nkey_file = "{key}"\n')
    r = cli("audit", "export", "--since", "7d", "-o", str(tmp_path / "no" / "x.jsonl"),
            "--config", str(cfg))  # fmt: skip
    assert r.exit_code == 1 and "error: --output " in r.stderr
    for table in ("audit_head", "audit"):
        store.write(lambda db, t=table: db.execute(f"DROP TABLE {t}"))
        r = cli("audit", "verify", "--config", str(cfg))
        assert r.exit_code == 1, r.output
        assert "audit: FAILED: cannot read the audit log: " in r.output and table in r.output
        r = cli("audit", "export", "--since", "7d", "--config", str(cfg))
        assert r.exit_code == 1 and "error: cannot read the audit log: " in r.stderr
        r = cli("doctor", "--config", str(cfg))
        assert "FAIL  audit log: cannot read the audit log: " in r.stdout, r.stdout
        assert "schema is older" not in r.stdout


def test_a_reset_line_must_name_a_restore(sqlite_store: Store, cli: Any, tmp_path: Path) -> None:
    """A restore writes a `reset` line to the anchor file (the anchors before it name the
    chain moved aside): verify says so. Someone who cut entries from the chain's end
    and appended a reset line naming the new end (a file made append-only takes that
    too) is found: the entry a reset names must be the restore's own entry."""
    fill(sqlite_store, 6)
    cfg = config(tmp_path, str(sqlite_store.path))
    path = tmp_path / "anchors.jsonl"
    write_anchor(sqlite_store, path, {})  # anchors entry 6
    backup = tmp_path / "nightly.sqlite3"
    assert cli("backup", str(backup), "--config", str(cfg)).exit_code == 0
    fill(sqlite_store, 2)  # entries 7-8 (and the backup's own entry before them)
    write_anchor(sqlite_store, path, {})
    sqlite_store.close()
    r = cli("restore", str(backup), "--yes", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    ok = cli("audit", "verify", "--config", str(cfg))
    assert ok.exit_code == 0, ok.output
    assert "note: the database was restored at " in ok.output
    # the forgery: two entries cut from the end, the head rewritten, a reset appended
    with Store(sqlite_store.path) as s:
        head = audit.head(s.reader())
        keep = head.seq - 2
        kept = s.query("SELECT hash FROM audit WHERE seq = ?", [keep])[0]["hash"]
        s.write(lambda db: db.execute("DELETE FROM audit WHERE seq > ?", [keep]))
        s.write(lambda db: db.execute("UPDATE audit_head SET seq = ?, hash = ?", [keep, kept]))
    with path.open("a") as fh:
        fh.write(json.dumps({"reset": "restore", "seq": keep, "hash": kept, "at": now_iso()}))
        fh.write("\n")
    bad = cli("audit", "verify", "--config", str(cfg))
    assert bad.exit_code == 1, bad.output
    assert (
        "reset line" in bad.output and f"names entry {keep}, which is not a restore" in bad.output
    )
    doctor = cli("doctor", "--config", str(cfg))
    assert "FAIL  audit log: the anchor file's reset line" in doctor.stdout
