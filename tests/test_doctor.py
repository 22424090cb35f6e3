"""`pa-bridge doctor` (in process, on click's CliRunner) against real files,
certificates and sockets."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path

import pytest
import trustme
from click.testing import Result

from pa_bridge.store import MIGRATIONS, SqliteDatabase, Store, migrations
from tests.support import Cli, RecordingService, free_port

PASSWORD = "PW-do-not-print-7781"
API_KEY = "AK-do-not-print-9923"


class Doctor:
    """``doctor(cfg)``: `pa-bridge doctor [--config cfg]` in the test's directory."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli

    def __call__(self, config: Path | None = None) -> Result:
        return self.cli("doctor", *(["--config", str(config)] if config else []))


@pytest.fixture
def doctor(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> Doctor:
    # The listen addresses' own checks are in test_doctor_service.py: here the ports
    # are picked at start, so a pa-bridge (or anything) on this machine holding the
    # default ports 8470, 8471 and 8480 does not fail these tests.
    for key in ("INTAKE", "CALLBACKS", "SANDBOX"):
        monkeypatch.setenv(f"PA_BRIDGE_{key}__LISTEN", "127.0.0.1:0")
    return Doctor(cli)


def lines(r: Result, status: str) -> list[str]:
    return [ln for ln in r.stdout.splitlines() if ln.startswith(status + " ")]


def write_config(tmp_path: Path, text: str) -> Path:
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\npath = "{tmp_path / "db" / "pa.sqlite3"}"\n' + text)
    return cfg


def service_section(port: int, **secrets: str) -> str:
    body = (
        "[service]\n"
        f'claim_url = "http://127.0.0.1:{port}/claim"\n'
        f'outcomes_url = "http://127.0.0.1:{port}/outcomes"\n'
        'username = "pharmacy"\n'
    )
    return body + "".join(f'{k} = "{v}"\n' for k, v in secrets.items())


def cert_files(
    tmp_path: Path, *, days: float, not_before_days: float = -1, key_from_other: bool = False
) -> tuple[Path, Path]:
    ca = trustme.CA()
    now = dt.datetime.now(dt.UTC)
    leaf = ca.issue_cert(
        "pa-bridge.store.example",
        "127.0.0.1",
        not_before=now + dt.timedelta(days=not_before_days),
        not_after=now + dt.timedelta(days=days),
    )
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    other = ca.issue_cert("other.example") if key_from_other else leaf
    other.private_key_pem.write_to_path(str(key))
    os.chmod(key, 0o600)
    return cert, key


def test_embedded_default_is_all_ok(tmp_path: Path, doctor: Doctor) -> None:
    r = doctor()
    assert r.exit_code == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    checks = out[:-1]
    assert checks and all(ln.startswith("ok ") for ln in checks), r.stdout
    assert any("sandbox (in-process, nothing to reach)" in ln for ln in checks)
    assert "0 FAIL, 0 warn" in out[-1]
    # doctor changes nothing: no database, no directory
    assert not (tmp_path / "var").exists()


def test_missing_secret_file_fails_without_printing_secrets(tmp_path: Path, doctor: Doctor) -> None:
    with RecordingService(port := free_port()):
        cfg = write_config(
            tmp_path,
            service_section(
                port, password_file=str(tmp_path / "missing-password"), api_key=API_KEY
            ),
        )
        r = doctor(cfg)
    assert r.exit_code == 1
    fails = lines(r, "FAIL")
    assert any("service.password_file" in ln and "cannot read" in ln for ln in fails), r.stdout
    assert any(ln.startswith("FAIL  secret service.password: missing") for ln in fails)
    assert any(
        ln.startswith("ok    secret service.api_key: present") for ln in r.stdout.splitlines()
    )
    # the other checks still ran on what parses
    assert any(
        f"service http://127.0.0.1:{port}" in ln and "reachable" in ln for ln in lines(r, "ok")
    )
    assert API_KEY not in r.stdout + r.stderr


def test_set_secrets_are_reported_present_never_printed(tmp_path: Path, doctor: Doctor) -> None:
    with RecordingService(port := free_port()):
        cfg = write_config(
            tmp_path,
            service_section(port, password=PASSWORD, api_key=API_KEY)
            + f'[callbacks]\nusername = "svc"\npassword = "{PASSWORD}"\n',
        )
        r = doctor(cfg)
    assert r.exit_code == 0, r.stdout
    assert "secret service.password: present" in r.stdout
    assert "secret callbacks.password: present" in r.stdout
    assert PASSWORD not in r.stdout + r.stderr and API_KEY not in r.stdout + r.stderr


def test_unreachable_service_fails(tmp_path: Path, doctor: Doctor) -> None:
    port = free_port()  # nothing listens there
    cfg = write_config(tmp_path, service_section(port, password=PASSWORD, api_key=API_KEY))
    r = doctor(cfg)
    assert r.exit_code == 1
    (line,) = lines(r, "FAIL")
    assert f"service http://127.0.0.1:{port} (claim, outcomes)" in line
    assert "unreachable: connection refused" in line
    assert PASSWORD not in r.stdout + r.stderr


def test_expiring_certificate_warns(tmp_path: Path, doctor: Doctor) -> None:
    cert, key = cert_files(tmp_path, days=10)
    cfg = write_config(tmp_path, f'[callbacks]\ntls_cert = "{cert}"\ntls_key = "{key}"\n')
    r = doctor(cfg)
    assert r.exit_code == 0, r.stdout
    (line,) = lines(r, "warn")
    assert line.startswith("warn  tls certificate:")
    assert "pa-bridge.store.example" in line and "127.0.0.1" in line
    assert "in 9 day(s)" in line or "in 10 day(s)" in line
    assert "renew" in line
    assert "ok    tls key: matches the certificate" in r.stdout


def test_expired_certificate_and_wrong_key_fail(tmp_path: Path, doctor: Doctor) -> None:
    cert, key = cert_files(tmp_path, days=-1, not_before_days=-30, key_from_other=True)
    cfg = write_config(tmp_path, f'[callbacks]\ntls_cert = "{cert}"\ntls_key = "{key}"\n')
    r = doctor(cfg)
    assert r.exit_code == 1
    fails = lines(r, "FAIL")
    assert any(ln.startswith("FAIL  tls certificate:") and "EXPIRED" in ln for ln in fails)
    assert any(ln.startswith("FAIL  tls key:") and "does not match" in ln for ln in fails)


def test_tap_and_inline_certificates_are_checked_too(tmp_path: Path, doctor: Doctor) -> None:
    """The dispensing system's TLS to tap or inline, and inline's client certificate to
    the switch, fail as quietly as the callbacks' when they expire: doctor says so."""
    dirs = {n: tmp_path / n for n in ("tap", "inline", "client")}
    for d in dirs.values():
        d.mkdir()
    tap_cert, tap_key = cert_files(dirs["tap"], days=-1, not_before_days=-30)
    in_cert, in_key = cert_files(dirs["inline"], days=10)
    cl_cert, cl_key = cert_files(dirs["client"], days=-2, not_before_days=-30)
    cfg = write_config(
        tmp_path,
        f'[tap]\nlisten = "127.0.0.1:0"\ntls_cert = "{tap_cert}"\ntls_key = "{tap_key}"\n'
        f'[inline]\nlisten = "127.0.0.1:0"\nswitch = "127.0.0.1:{free_port()}"\n'
        f'tls_cert = "{in_cert}"\ntls_key = "{in_key}"\n'
        f'switch_cert_file = "{cl_cert}"\nswitch_key_file = "{cl_key}"\n',
    )
    r = doctor(cfg)
    assert r.exit_code == 1
    out = r.stdout.splitlines()
    assert any(ln.startswith("FAIL  tap tls certificate:") and "EXPIRED" in ln for ln in out)
    assert "ok    tap tls key: matches the certificate" in out
    (soon,) = [ln for ln in out if ln.startswith("warn  inline tls certificate:")]
    assert "in 9 day(s)" in soon or "in 10 day(s)" in soon
    assert any(
        ln.startswith("FAIL  inline switch client certificate:") and "EXPIRED" in ln for ln in out
    ), r.stdout
    # the callbacks' own line is unchanged: plain HTTP on loopback
    assert any(ln.startswith("ok    tls: not configured") for ln in out)


def test_database_checks_read_but_never_migrate(tmp_path: Path, doctor: Doctor) -> None:
    db_path = tmp_path / "db" / "pa.sqlite3"
    with Store(db_path):
        pass
    cfg = write_config(tmp_path, "")
    r = doctor(cfg)
    assert r.exit_code == 0, r.stdout
    assert "ok    database schema: current" in r.stdout
    assert "mode 0600" in r.stdout

    # an older database: one migration pending, and a loose mode
    os.remove(db_path)
    conn = sqlite3.connect(db_path)
    MIGRATIONS.apply(SqliteDatabase(conn), stop_before="m002_callbacks")
    conn.close()
    os.chmod(db_path, 0o644)
    before = db_path.read_bytes()
    r = doctor(cfg)
    assert r.exit_code == 0, r.stdout
    later = migrations.known()[1:]
    assert later[0] == "m002_callbacks" and later[-1] == "m011_idempotency_created"
    assert f"warn  database schema: {len(later)} migration(s) pending: {', '.join(later)}" in (
        r.stdout
    )
    assert f"chmod 600 {db_path}" in r.stdout
    assert db_path.read_bytes() == before  # not migrated
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["pa.sqlite3"]


def test_invalid_config_lists_every_problem(tmp_path: Path, doctor: Doctor) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[storage]\nretention_days = 0\n[nonsense]\nkey = "x"\n')
    r = doctor(cfg)
    assert r.exit_code == 1
    fails = lines(r, "FAIL")
    assert any("storage.retention_days" in ln for ln in fails)
    assert any("nonsense" in ln and "unknown key" in ln for ln in fails)


def test_environment_list_that_is_not_json_fails_as_a_check(
    tmp_path: Path, doctor: Doctor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken JSON list in the environment is one FAIL naming the variable (not a
    traceback), and its value, which may hold a password, is not printed."""
    monkeypatch.setenv("PA_BRIDGE_PHARMACIES", '[{"provider_id": "1234567", "password": "pw-zq9')
    r = doctor(write_config(tmp_path, ""))
    assert r.exit_code == 1, r.output
    fails = lines(r, "FAIL")
    assert any("PA_BRIDGE_PHARMACIES" in ln and "JSON" in ln for ln in fails), r.output
    assert "Traceback" not in r.output and "pw-zq9" not in r.output


def test_the_database_directory_is_checked_before_the_file(tmp_path: Path, doctor: Doctor) -> None:
    def directory_line(storage_path: Path) -> str:
        cfg = tmp_path / "dir.toml"
        cfg.write_text(f'[storage]\npath = "{storage_path}"\n')
        r = doctor(cfg)
        (line,) = (ln for ln in r.stdout.splitlines() if "database directory" in ln)
        return line

    here = tmp_path / "state"
    here.mkdir()
    assert directory_line(here / "pa.sqlite3") == f"ok    database directory: {here} is writable"
    later = tmp_path / "later" / "deeper"
    assert directory_line(later / "pa.sqlite3") == (
        f"ok    database directory: {later} does not exist yet; it will be created"
    )
    assert not later.exists()  # doctor creates nothing
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    line = directory_line(a_file / "pa.sqlite3")
    assert line.startswith("FAIL  database directory:") and "is not a directory" in line
