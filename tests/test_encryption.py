"""PHI encrypted at rest (issue 29, decision 0033): no synthetic patient name in the
database file, its WAL or a backup; values read back; a missing or wrong key stops the
daemon naming the key's source; rotation while serving; encrypt-existing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.config import load_settings
from pa_bridge.encryption import create_key_file, open_store
from pa_bridge.store import Store, audit, callbacks, crypto, exchanges, now_iso
from tests import builders as b
from tests.real_shapes import callback_body
from tests.support import pa_bridge_process, wait_until

NAMES = (b.PATIENT_FIRST.encode(), b.PATIENT_LAST.encode(), b.CARDHOLDER_ID.encode())


def strings(path: Path) -> bytes:
    """What `strings` prints for the file (printable runs of 4 or more), or the file's
    bytes when binutils is not installed (a stricter search)."""
    tool = shutil.which("strings")
    if tool is None:
        return path.read_bytes()
    return subprocess.run([tool, "-a", str(path)], capture_output=True, check=True).stdout


def found(path: Path) -> list[bytes]:
    text = strings(path)
    return [n for n in NAMES if n in text]


def claim_body() -> dict[str, Any]:
    return {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
        "metadata": {"patient_name": f"{b.PATIENT_FIRST} {b.PATIENT_LAST}"},
    }


def test_no_patient_name_in_the_database_its_wal_or_a_backup(
    make_daemon: Any, cli: Any, tmp_path: Path
) -> None:
    d = make_daemon(callbacks={"listen": "127.0.0.1:0"})
    api = httpx.Client(base_url=d.intake_server.url, timeout=10)
    claim = api.post("/v1/claims", json=claim_body()).json()
    pa = api.post(f"/v1/claims/{claim['claim_id']}/pa").json()
    cb = f"{d.callback_server.url}/callbacks/pharmacy"
    ok = httpx.post(
        cb,
        content=callback_body(pa["pa_id"], "PA Request"),
        headers={"Content-Type": "application/json"},
    )
    assert ok.status_code == 200
    dead = httpx.post(
        cb, content=b"not json " + b.PATIENT_LAST.encode(), headers={"Content-Type": "text/plain"}
    )
    assert dead.status_code == 200
    # what was stored reads back whole
    got = exchanges.get(d.store.reader(), claim["claim_id"])
    assert got is not None and got["request_raw"] == b.request_bytes()
    assert json.loads(got["metadata_json"] or "{}")["patient_name"].endswith(b.PATIENT_LAST)
    assert api.get(f"/v1/claims/{claim['claim_id']}").status_code == 200
    api.close()
    db = Path(d.store.path)
    wal = Path(f"{db}-wal")
    assert wal.exists() and wal.stat().st_size > 0
    assert found(db) == [] and found(wal) == []
    backup = tmp_path / "copy.sqlite3"
    cfg = tmp_path / "b.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n')
    r = cli("backup", "--config", str(cfg), str(backup))
    assert r.exit_code == 0, r.output
    assert found(backup) == []
    d.stop()
    assert found(db) == []  # after the last checkpoint too
    # the key is not in the database: it is beside it, in its own file
    key = db.parent / "pa-bridge.key"
    assert key.exists() and oct(key.stat().st_mode & 0o777) == "0o600"
    _kid, secret = key.read_text().split("\n")[-2].split()
    assert secret.encode() not in db.read_bytes()


def test_the_same_writes_without_a_key_are_found_by_the_search(tmp_path: Path) -> None:
    """The search above can fail: a store without a key keeps the claim in plain text."""
    with Store(tmp_path / "plain.sqlite3") as s:
        row = {"id": "c1", "received_at": now_iso(), "actor": "t", "kind": "claim",
               "version": "D0", "transaction_code": "B1", "bin": None, "pcn": None,
               "group_id": None, "provider_id": None, "date_of_service": None,
               "request_raw": b.request_bytes()}  # fmt: skip
        s.write(lambda db: exchanges.insert(db, row))  # type: ignore[arg-type]
        assert b.PATIENT_LAST.encode() in strings(Path(f"{s.path}-wal"))


def test_sealed_values_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    key = tmp_path / "k"
    create_key_file(key)
    settings = load_settings(storage={"url": pg_url}, encryption={"key_file": str(key)})
    store = open_store(settings)
    try:
        row = {"id": "c1", "received_at": now_iso(), "actor": "t", "kind": "claim",
               "version": "D0", "transaction_code": "B1", "bin": None, "pcn": None,
               "group_id": None, "provider_id": None, "date_of_service": None,
               "request_raw": b.request_bytes(), "metadata_json": json.dumps({"n": b.PATIENT_LAST})}  # fmt: skip
        store.write(lambda db: exchanges.insert(db, row))  # type: ignore[arg-type]
        store.write(
            lambda db: callbacks.insert_once(
                db, "k1", now_iso(), "PA1", callback_body("PA1", "New")
            )
        )
        raw = store.query("SELECT request_raw, metadata_json FROM exchanges")[0]
        body = store.query("SELECT body FROM callbacks")[0]["body"]
        assert b.PATIENT_LAST.encode() not in bytes(raw["request_raw"])
        assert b.PATIENT_LAST not in raw["metadata_json"] and raw["metadata_json"].startswith(
            "pab1:"
        )
        assert b.PATIENT_LAST.encode() not in bytes(body)
        got = exchanges.get(store.reader(), "c1")
        assert got is not None and got["request_raw"] == b.request_bytes()
    finally:
        store.close()


def test_a_value_moved_to_another_row_does_not_open(tmp_path: Path) -> None:
    key = tmp_path / "k"
    create_key_file(key)
    settings = load_settings(
        storage={"path": str(tmp_path / "db.sqlite3")}, encryption={"key_file": str(key)}
    )
    with open_store(settings) as s:
        for cid in ("c1", "c2"):
            row = {"id": cid, "received_at": now_iso(), "actor": "t", "kind": "claim",
                   "version": "D0", "transaction_code": "B1", "bin": None, "pcn": None,
                   "group_id": None, "provider_id": None, "date_of_service": None,
                   "request_raw": b.request_bytes()}  # fmt: skip
            s.write(lambda db, r=row: exchanges.insert(db, r))  # type: ignore[arg-type, misc]
        s.write(lambda db: db.execute(
            "UPDATE exchanges SET request_raw = (SELECT request_raw FROM exchanges WHERE id = 'c1') WHERE id = 'c2'"
        ))  # fmt: skip
        with pytest.raises(crypto.SealError, match="does not open"):
            exchanges.get(s.reader(), "c2")


def serve_fails(tmp_path: Path, cfg: str) -> str:
    (tmp_path / "c.toml").write_text(cfg)
    r = pa_bridge_process("serve", "--config", "c.toml", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stderr


@pytest.mark.slow
def test_a_missing_or_wrong_key_stops_the_start_naming_its_source(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    key = tmp_path / "keys" / "pa.key"
    create_key_file(key)
    settings = load_settings(storage={"path": str(db)}, encryption={"key_file": str(key)})
    with open_store(settings) as s:  # a value sealed with this key
        s.write(lambda db_: callbacks.add_dead_letter(db_, now_iso(), "x", "text/plain", b"x"))
    base = (
        f'[storage]\npath = "{db}"\n[intake]\nlisten = "127.0.0.1:0"\n'
        '[callbacks]\nlisten = "127.0.0.1:0"\n[sandbox]\nlisten = "127.0.0.1:0"\n'
    )
    missing = serve_fails(tmp_path, base + f'[encryption]\nkey_file = "{tmp_path / "nope.key"}"\n')
    assert (
        f"encryption key: key file {tmp_path / 'nope.key'} (encryption.key_file): no such file"
        in missing
    )
    other = tmp_path / "other.key"
    create_key_file(other)
    wrong = serve_fails(tmp_path, base + f'[encryption]\nkey_file = "{other}"\n')
    assert f"key file {other} (encryption.key_file) does not hold" in wrong
    key.write_text(key.read_text().replace(key.read_text().split()[-1][:8], "AAAAAAAA"))
    changed = serve_fails(tmp_path, base + f'[encryption]\nkey_file = "{key}"\n')
    assert "is not the key that sealed this database's values" in changed
    # the default beside the database, gone: said, and not replaced by a new key
    settings2 = load_settings(storage={"path": str(tmp_path / "d2" / "db.sqlite3")})
    with open_store(settings2) as s:
        s.write(lambda db_: callbacks.add_dead_letter(db_, now_iso(), "x", "text/plain", b"x"))
    (tmp_path / "d2" / "pa-bridge.key").unlink()
    gone = serve_fails(tmp_path, base.replace(str(db), str(tmp_path / "d2" / "db.sqlite3")))
    assert "pa-bridge.key (the default beside the database): no such file" in gone
    assert not (tmp_path / "d2" / "pa-bridge.key").exists()


def test_rotation_while_the_daemon_serves(make_daemon: Any, cli: Any, tmp_path: Path) -> None:
    key = tmp_path / "rot.key"
    create_key_file(key)
    d = make_daemon(encryption={"key_file": str(key)})
    api = httpx.Client(base_url=d.intake_server.url, timeout=10)
    before = [api.post("/v1/claims", json=claim_body()).json()["claim_id"] for _ in range(3)]
    old = d.store.keys.current_id
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[storage]\npath = "{d.store.path}"\n[encryption]\nkey_file = "{key}"\n')
    r = cli("keys", "rotate", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert "exchanges.request_raw: 3 value(s) sealed" in r.output
    new = r.output.split("added key ", 1)[1].split()[0]
    assert new != old
    # the daemon reads the changed file by itself (looked at once a second at most)
    wait_until(lambda: d.store.keys.refresh() or d.store.keys.current_id == new)
    # the serving daemon reads what the command re-sealed, and seals new claims with the new key
    for cid in before:
        assert api.get(f"/v1/claims/{cid}").status_code == 200
    after = api.post("/v1/claims", json=claim_body()).json()["claim_id"]
    counts = crypto.count_by_key(d.store.reader())
    assert set(counts) == {new}, counts
    assert exchanges.get(d.store.reader(), after) is not None
    api.close()
    entry = d.store.query("SELECT actor, action, object_id FROM audit WHERE action = 'keys.rotate'")
    assert entry and entry[0]["object_id"] == new and entry[0]["actor"].startswith("cli:")


def test_encrypt_existing_after_a_backup(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "old.sqlite3"
    with Store(db) as s:  # a database from before encryption
        for cid in ("c1", "c2"):
            row = {"id": cid, "received_at": now_iso(), "actor": "t", "kind": "claim",
                   "version": "D0", "transaction_code": "B1", "bin": None, "pcn": None,
                   "group_id": None, "provider_id": None, "date_of_service": None,
                   "request_raw": b.request_bytes(), "response_raw": b.response_bytes(),
                   "metadata_json": json.dumps({"n": b.PATIENT_LAST})}  # fmt: skip
            s.write(lambda d_, r=row: exchanges.insert(d_, r))  # type: ignore[arg-type, misc]
        s.write(
            lambda d_: callbacks.insert_once(
                d_, "k1", now_iso(), "PA1", callback_body("PA1", "New")
            )
        )
    assert found(db) or found(Path(f"{db}-wal")) or b.PATIENT_LAST.encode() in db.read_bytes()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n')
    r = cli("keys", "encrypt-existing", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert "backup first:" in r.output and "holds the plain text" in r.output
    backups = list(tmp_path.glob("old.sqlite3.before-encryption-*"))
    assert len(backups) == 1 and b.PATIENT_LAST.encode() in backups[0].read_bytes()
    assert found(db) == []
    wal = Path(f"{db}-wal")
    assert not wal.exists() or found(wal) == []
    settings = load_settings(storage={"path": str(db)})
    with open_store(settings) as s:
        got = exchanges.get(s.reader(), "c1")
        assert got is not None and got["request_raw"] == b.request_bytes()
        assert crypto.count_by_key(s.reader()).get("plain") is None


def test_doctor_checks_the_key_the_plain_values_and_the_audit_chain(
    tmp_path: Path, cli: Any
) -> None:
    db = tmp_path / "d" / "pa.sqlite3"
    with Store(db) as s:  # before encryption: one plain claim
        row = {"id": "c1", "received_at": now_iso(), "actor": "t", "kind": "claim",
               "version": "D0", "transaction_code": "B1", "bin": None, "pcn": None,
               "group_id": None, "provider_id": None, "date_of_service": None,
               "request_raw": b.request_bytes()}  # fmt: skip
        s.write(lambda d_: exchanges.insert(d_, row))  # type: ignore[arg-type]
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n')
    r = cli("doctor", "--config", str(cfg))
    assert "ok    encryption key: key file" in r.stdout and "created at the first start" in r.stdout
    assert "warn  PHI at rest: 1 value(s) stored in plain text" in r.stdout
    assert "pa-bridge keys encrypt-existing" in r.stdout
    assert "ok    audit log: 0 entries chained" in r.stdout
    with open_store(load_settings(storage={"path": str(db)})) as s:
        s.write(lambda d_: exchanges.insert(d_, {**row, "id": "c2"}))  # type: ignore[arg-type]
        s.write(lambda d_: audit.add(d_, "t", "x", None))
        s.write(lambda d_: d_.execute("UPDATE audit SET action = 'y'"))
    r = cli("doctor", "--config", str(cfg))
    assert "warn  encryption key: key file" in r.stdout and "beside the database" in r.stdout
    assert "FAIL  audit log: entry 1 (id" in r.stdout
    other = tmp_path / "other.key"
    create_key_file(other)
    cfg.write_text(f'[storage]\npath = "{db}"\n[encryption]\nkey_file = "{other}"\n')
    r = cli("doctor", "--config", str(cfg))
    assert (
        r.exit_code == 1
        and "FAIL  encryption key: the database holds values sealed with key id" in r.stdout
    )


def _sign_in(url: str, name: str, password: str, secret: str) -> int:
    """Sign in over HTTP with a password and a TOTP code; the last answer's status."""
    import pyotp

    with httpx.Client(base_url=url, timeout=10) as c:
        r = c.post("/console/sign-in", json={"name": name, "password": password})
        if r.status_code == 200 and r.json().get("next") == "code":
            r = c.post("/console/sign-in/code", json={"code": pyotp.TOTP(secret).now()})
        return r.status_code


def test_an_older_key_can_be_removed_once_rotation_is_done(
    make_daemon: Any, cli: Any, tmp_path: Path
) -> None:
    """The docs' way to retire a key: rotate, then remove the older key from the file
    once doctor shows no value under it. The daemon then starts again, and a person
    added before the rotation still signs in (their TOTP key was re-sealed too)."""
    import re

    key = tmp_path / "rot.key"
    create_key_file(key)
    old = key.read_text().split()[-2]
    db = tmp_path / "retire.sqlite3"
    sections: dict[str, Any] = {
        "storage": {"path": str(db)},
        "encryption": {"key_file": str(key)},
        "console": {"totp": "required"},
    }
    d = make_daemon(**sections)
    cfg = tmp_path / "ops.toml"
    cfg.write_text(
        f'[storage]\npath = "{db}"\n[encryption]\nkey_file = "{key}"\n'
        '[console]\ntotp = "required"\n'
    )
    added = cli("users", "add", "pat", "--generate-password", "--config", str(cfg))
    assert added.exit_code == 0, added.output
    password = re.search(r"password: (\S+)", added.output).group(1)  # type: ignore[union-attr]
    secret = re.search(r"secret=([A-Z2-7]+)", added.output).group(1)  # type: ignore[union-attr]
    httpx.post(f"{d.intake_server.url}/v1/claims", json=claim_body(), timeout=10)
    r = cli("keys", "rotate", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert f"key {old} seals no stored value now" in r.output
    doctor = cli("doctor", "--config", str(cfg))
    assert f"under key {old}" not in doctor.stdout, doctor.stdout
    d.stop()
    # the older key out of the file, as the docs say
    key.write_text("".join(ln + "\n" for ln in key.read_text().splitlines() if old not in ln))
    listed = cli("users", "list", "--config", str(cfg))
    assert listed.exit_code == 0 and "pat" in listed.output, listed.output
    doctor = cli("doctor", "--config", str(cfg))
    assert "FAIL  encryption key" not in doctor.stdout, doctor.stdout
    again = make_daemon(**sections)
    assert _sign_in(again.intake_server.url, "pat", password, secret) == 200


def test_rotation_under_writes_leaves_no_value_under_the_older_key(
    make_daemon: Any, cli: Any, tmp_path: Path
) -> None:
    """Claims keep coming while `keys rotate` runs: the daemon takes the new key within a
    second, and the command seals what it sealed with the older one meanwhile."""
    import threading

    key = tmp_path / "rot.key"
    create_key_file(key)
    d = make_daemon(encryption={"key_file": str(key)})
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[storage]\npath = "{d.store.path}"\n[encryption]\nkey_file = "{key}"\n')
    stop = threading.Event()
    sent: list[int] = []

    def writer() -> None:
        with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
            while not stop.is_set():
                sent.append(api.post("/v1/claims", json=claim_body()).status_code)

    t = threading.Thread(target=writer)
    t.start()
    try:
        wait_until(lambda: len(sent) >= 5, timeout=30, what="claims before the rotation")
        r = cli("keys", "rotate", "--config", str(cfg))
        assert r.exit_code == 0, r.output
        new = r.output.split("added key ", 1)[1].split()[0]
        wait_until(lambda: len(sent) >= 5 + 20, timeout=60, what="claims after the rotation")
    finally:
        stop.set()
        t.join()
    assert set(sent) == {200}
    counts = crypto.count_by_key(d.store.reader())
    assert set(counts) == {new}, counts


def test_reseal_adds_no_key_and_seals_what_an_older_key_holds(tmp_path: Path, cli: Any) -> None:
    """A fleet's daemons that read the new key file late sealed with the older key:
    `keys rotate --reseal` seals those with the current key, adding none."""
    key = tmp_path / "fleet.key"
    create_key_file(key)
    db = tmp_path / "fleet.sqlite3"
    settings = load_settings(storage={"path": str(db)}, encryption={"key_file": str(key)})
    with open_store(settings) as s:  # sealed with the first key
        s.write(lambda db_: callbacks.add_dead_letter(db_, now_iso(), "x", "text/plain", b"x"))
    older = key.read_text().split()[-2]
    newer, secret = crypto.new_key()
    lines = [ln for ln in key.read_text().splitlines() if ln and not ln.startswith("#")]
    crypto.write_keyring(key, [*lines, crypto.key_line(newer, secret)])
    before = key.read_text()
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n[encryption]\nkey_file = "{key}"\n')
    doctor = cli("doctor", "--config", str(cfg))
    assert f"1 under key {older} (older keys)" in doctor.stdout
    assert "pa-bridge keys rotate --reseal" in doctor.stdout
    r = cli("keys", "rotate", "--reseal", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert f"dead_letters.body: 1 value(s) sealed with key {newer}" in r.output
    assert f"key {older} seals no stored value now" in r.output
    assert key.read_text() == before  # no key added
    with open_store(settings) as s:
        assert crypto.count_by_key(s.reader()) == {newer: 1}
        assert crypto.checked_ids(s.reader()) == [newer]
    bad = cli("keys", "rotate", "--reseal", "--stage", "--config", str(cfg))
    assert bad.exit_code == 2


def test_rotate_names_a_key_file_it_cannot_use(tmp_path: Path, cli: Any) -> None:
    """A key file rotate cannot write, or a file that is not a key file, is said in one
    line (exit 1) and left as it was; both were a Python traceback, and a file of
    another kind got a key line added."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = cli("keys", "rotate", "--key-file", str(blocker / "pa.key"))
    assert r.exit_code == 1 and f"error: cannot write {blocker / 'pa.key'}: " in r.stderr
    for content in (b"\xee\xff binary", b"password = 'not a key file'\n"):
        other = tmp_path / "other.key"
        other.write_bytes(content)
        r = cli("keys", "rotate", "--key-file", str(other))
        assert r.exit_code == 1, r.output
        assert r.stderr.startswith(f"error: key file {other}: "), r.stderr
        assert other.read_bytes() == content
