from __future__ import annotations

import typing
from pathlib import Path

import pytest

from pa_bridge.config import ConfigError, load_settings


def test_embedded_default_uses_sandbox_and_local_paths() -> None:
    s = load_settings()
    assert s.sandbox_enabled
    assert s.intake.listen == "127.0.0.1:8470"
    assert s.callbacks.listen == "127.0.0.1:8471"
    assert s.outcomes.budget_ms == 1500
    assert str(s.storage.path).startswith("var")


def test_toml_file_and_environment_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[outcomes]\nbudget_ms = 900\n[storage]\nretention_days = 10\n")
    monkeypatch.setenv("PA_BRIDGE_OUTCOMES__BUDGET_MS", "1200")
    s = load_settings(cfg)
    assert s.outcomes.budget_ms == 1200  # environment wins over the file
    assert s.storage.retention_days == 10


def test_every_problem_is_named_by_its_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[outcomes]\nbudget_ms = "soon"\n[intake]\nlisten = "nowhere"\nbogus = 1\n')
    with pytest.raises(ConfigError) as ei:
        load_settings(cfg)
    text = "\n".join(ei.value.problems)
    assert "outcomes.budget_ms" in text
    assert "intake.listen" in text
    assert "intake.bogus: unknown key" in text


def test_real_service_requires_its_credentials(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[service]\nclaim_url = "https://pa.invalid/claim"\n')
    with pytest.raises(ConfigError) as ei:
        load_settings(cfg)
    problems = ei.value.problems
    assert any(p.startswith("service.password:") for p in problems)
    assert any(p.startswith("service.api_key:") for p in problems)
    assert not any("https://pa.invalid" in p and "password" in p for p in problems)


def test_secret_files_and_credentials_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "pw").write_text("s3cret-pw\n")
    (tmp_path / "key").write_text("k3y")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[service]\n"
        'claim_url = "https://pa.invalid/c"\noutcomes_url = "https://pa.invalid/o"\n'
        'username = "u"\npassword_file = "pw"\n'
        f'api_key_file = "{tmp_path / "key"}"\n'
    )
    s = load_settings(cfg)
    assert s.secret(s.service.password) == "s3cret-pw"
    assert s.secret(s.service.api_key) == "k3y"
    assert "s3cret" not in repr(s)
    assert not s.sandbox_enabled


def test_open_listen_without_tokens_is_refused() -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(intake={"listen": "0.0.0.0:8470"})
    assert any(p.startswith("intake.tokens:") for p in ei.value.problems)
    long = "t" * 24
    assert load_settings(intake={"listen": "0.0.0.0:8470", "tokens": [long]}).intake_tokens() == [
        long
    ]


@pytest.mark.parametrize("token", ["", " ", "a", "short-tok", " padded-token-value "])
def test_empty_or_trivial_intake_tokens_are_refused(token: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(intake={"listen": "0.0.0.0:8470", "tokens": [token]})
    text = "\n".join(ei.value.problems)
    assert "intake.tokens" in text
    if len(token.strip()) > 3:
        assert token.strip() not in text  # the token itself is never printed


def test_empty_or_short_callback_password_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "callback-password"
    empty.write_text("\n")
    for cb in (
        {"username": "svc", "password_file": str(empty)},
        {"username": "svc", "password": "abc"},
    ):
        with pytest.raises(ConfigError) as ei:
            load_settings(callbacks=cb)
        # an empty file is named as such, a short password as too short
        assert any(
            p.startswith(("callbacks.password:", f"callbacks.password_file: {empty} is empty"))
            for p in ei.value.problems
        )
    ok = load_settings(callbacks={"username": "svc", "password": "a-long-callback-pw"})
    assert ok.secret(ok.callbacks.password) == "a-long-callback-pw"


def test_example_config_is_valid_and_documents_every_key() -> None:
    example = Path(__file__).parent.parent / "config" / "pa-bridge.example.toml"
    import tomllib

    from pa_bridge.config import Settings

    data = tomllib.loads(example.read_text())
    text = example.read_text()
    for section, model in Settings.model_fields.items():
        sub = model.annotation
        if typing.get_origin(sub) is list:  # [[pharmacies]]: an array of tables
            sub = typing.get_args(sub)[0]
        for key in sub.model_fields:  # type: ignore[union-attr]
            assert f"{key} =" in text or f"# {key} =" in text or f"[[{section}.{key}]]" in text, (
                f"[{section}] {key} is not documented"
            )
        assert section in data or f"[{section}]" in text


def test_example_config_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).parent.parent / "config" / "pa-bridge.example.toml"
    (tmp_path / "service-password").write_text("pw")
    (tmp_path / "service-api-key").write_text("key")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    s = load_settings(example)
    assert not s.sandbox_enabled
    assert s.intake.tokens_file is None and s.callbacks.tls_cert is None
    assert s.secret(s.service.api_key) == "key"


def test_storage_url_takes_its_password_from_a_file(tmp_path: Path) -> None:
    pw = tmp_path / "db-password"
    pw.write_text("s3cret/with:odd@chars\n")
    s = load_settings(
        storage={"url": "postgresql://pa_bridge@db.internal:5433/pa", "password_file": str(pw)}
    )
    assert s.storage.database_url() == (
        "postgresql://pa_bridge:s3cret%2Fwith%3Aodd%40chars@db.internal:5433/pa"
    )
    url_file = tmp_path / "db-url"
    url_file.write_text("postgresql://u:p@127.0.0.1/pa\n")
    s = load_settings(storage={"url_file": str(url_file)})
    assert s.storage.database_url() == "postgresql://u:p@127.0.0.1/pa"
    assert "p@127" not in repr(s.storage)  # a secret: never shown
    assert load_settings().storage.database_url() is None  # SQLite by default
    # a daemon on the database's host: libpq's Unix-socket URL
    s = load_settings(
        storage={"url": "postgresql://pa_bridge@/pa?host=/run/postgresql", "password_file": str(pw)}
    )
    assert s.storage.database_url() == (
        "postgresql://pa_bridge:s3cret%2Fwith%3Aodd%40chars@/pa?host=/run/postgresql"
    )
    # a primary and its standby: libpq tries each host, and takes the one that writes
    # (issue 32: the daemon finds the promoted standby by itself)
    two = "postgresql://pa_bridge@db1:5432,[fd00::2]:5433/pa?target_session_attrs=read-write"
    s = load_settings(storage={"url": two, "password_file": str(pw)})
    assert s.storage.database_url() == two.replace(
        "pa_bridge@", "pa_bridge:s3cret%2Fwith%3Aodd%40chars@"
    )


@pytest.mark.parametrize(
    ("storage", "named"),
    [
        ({"url": "mysql://u@h/db"}, "storage.url: must be postgresql://"),
        ({"url": "postgresql://u@h"}, "storage.url: names no database"),
        ({"url": "postgresql://u@h1:5432,h2:x/db"}, "storage.url: not a URL"),
        ({"url": "postgresql://u:p@h/db", "password": "x" * 20}, "storage.password_file:"),
        ({"password": "x" * 20}, "storage.password_file: only with storage.url"),
    ],
)
def test_storage_url_problems_are_named_at_start(storage: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(storage=storage)
    assert any(p.startswith(named) for p in ei.value.problems), ei.value.problems
    assert "p@h" not in str(ei.value)


@pytest.mark.parametrize(
    ("var", "value", "names"),
    [
        ("PA_BRIDGE_PHARMACIES", '[{"provider_id": "1234567", "password": "pw-not-shown-1"', "PA_BRIDGE_PHARMACIES"),
        ("PA_BRIDGE_INTAKE__TOKENS", '["token-not-shown-1', "PA_BRIDGE_INTAKE"),
    ],
)  # fmt: skip
def test_environment_value_that_is_not_json_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, names: str
) -> None:
    """A list given by environment must be JSON; a broken one is a config error naming
    the variable (one line, exit 2 at start), not a traceback, and never echoes it."""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as ei:
        load_settings()
    text = "\n".join(ei.value.problems)
    assert names in text and "JSON" in text
    assert "not-shown" not in text


def test_weak_intake_tokens_are_named_plain_and_scoped() -> None:
    good = "t" * 24
    with pytest.raises(ConfigError) as ei:
        load_settings(
            intake={
                "tokens": [good, "short", f" {good}"],
                "scoped_tokens": [
                    {"token": "short-too", "pharmacies": ["1234567"]},
                    {"token": "s" * 24, "pharmacies": ["1234567"]},
                ],
            }
        )
    why = "is empty, too short or padded with blanks (at least 12 characters, e.g. `openssl rand -hex 24`)"
    weak = [p for p in ei.value.problems if "padded with blanks" in p]
    assert weak == [
        f"intake.scoped_tokens #1: the token {why}",
        f"intake.tokens: token #2 {why}",
        f"intake.tokens: token #3 {why}",
    ]
    assert not any(good in p or "short-too" in p for p in ei.value.problems)  # no token shown
