"""Configuration: one TOML file, validated once at start-up.

Every key can also be set by environment variable ``PA_BRIDGE_<SECTION>__<KEY>``
(environment wins over the file). Each secret may instead name a file with
``<key>_file``; a relative ``_file`` path is resolved against systemd's
``$CREDENTIALS_DIRECTORY`` when that is set (``LoadCredential=``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

__all__ = [
    "RELOADABLE",
    "ConfigError",
    "Settings",
    "changed_keys",
    "load_settings",
    "load_ops_settings",
    "load_storage_settings",
    "parse_listen",
    "is_loopback",
    "secret_file_path",
    "secrets_from_credentials_directory",
]

DEFAULT_INTAKE_LISTEN = "127.0.0.1:8470"
DEFAULT_CALLBACK_LISTEN = "127.0.0.1:8471"
#: intake tokens and the callback password: shorter ones are refused at start
MIN_SECRET_CHARS = 12


class ConfigError(Exception):
    """A configuration that cannot run; ``problems`` has one line per key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


def parse_listen(value: str) -> tuple[str, int]:
    """``"127.0.0.1:8470"`` / ``"[::1]:8470"`` -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected host:port, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"port out of range in {value!r}")
    return host, p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _empty_is_unset(cls, data: Any) -> Any:
        # `key = ""` in the file (or an empty environment variable) means "not set"
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v != ""}
        return data


def _listen_ok(v: str) -> str:
    parse_listen(v)
    return v


class ServiceSettings(_Section):
    claim_url: str | None = None
    outcomes_url: str | None = None
    dashboard_url: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    timeout_seconds: float = Field(default=15.0, gt=0)
    #: CA bundle path for the service's TLS, or true for the system store.
    verify: bool | str = True
    #: how often the daemon reaches for the service to tell /healthz and /metrics
    #: whether it answers and takes our credentials (0: never; traffic still tells)
    probe_seconds: float = Field(default=300.0, ge=0)
    #: how claims go on the wire: STX ... ETX (as every reference claim) or bare
    claim_framing: Literal["stx_etx", "none"] = "stx_etx"
    #: the requests resource (``GET /requests/{id}``, ``POST /requests/search``): its
    #: base address and the developer account's api_id (reconciliation, issue 28)
    api_url: str | None = None
    api_id: str | None = None

    def configured(self) -> bool:
        return any(
            v is not None
            for v in (
                self.claim_url,
                self.outcomes_url,
                self.dashboard_url,
                self.username,
                self.password,
                self.password_file,
                self.api_key,
                self.api_key_file,
            )
        )


class ScopedTokenSettings(_Section):
    """``[[intake.scoped_tokens]]``: an intake token limited to some pharmacies (their
    ``provider_id`` in ``[[pharmacies]]``): their claims, PAs and dashboard only."""

    token: SecretStr | None = None
    token_file: Path | None = None
    pharmacies: list[str] = Field(min_length=1)


class IntakeSettings(_Section):
    listen: str = DEFAULT_INTAKE_LISTEN
    tokens: list[SecretStr] = Field(default_factory=list)
    tokens_file: Path | None = None
    scoped_tokens: list[ScopedTokenSettings] = Field(default_factory=list)
    max_body_bytes: int = Field(default=1_048_576, gt=0)
    default_button_label: str = "Submit PA"
    #: host names (beyond IP addresses, localhost and this machine's own name) that
    #: workstations use to reach the API; any other name in Host is refused (403)
    allowed_hosts: list[str] = Field(default_factory=list)
    #: the console lists a PA still without a decision this long after it was started
    #: under "Waiting too long" (the plan's usual answer time is 72 hours)
    pending_alert_hours: float = Field(default=72.0, gt=0)

    _v_listen = field_validator("listen")(_listen_ok)


class CallbackSettings(_Section):
    listen: str = DEFAULT_CALLBACK_LISTEN
    tls_cert: Path | None = None
    tls_key: Path | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    forward_url: str | None = None
    #: signs each webhook POST (PA-Bridge-Signature: HMAC-SHA256 over the exact body)
    forward_secret: SecretStr | None = None
    forward_secret_file: Path | None = None
    max_body_bytes: int = Field(default=1_048_576, gt=0)
    #: the URL the service (or the sandbox) posts to; derived from listen if unset
    public_url: str | None = None

    _v_listen = field_validator("listen")(_listen_ok)


class StorageSettings(_Section):
    path: Path = Path("./var/pa-bridge.sqlite3")
    retention_days: int = Field(default=30, ge=1)
    metadata_retention_days: int = Field(default=365, ge=1)
    #: how long a write waits for a lock held by another process before it fails
    busy_timeout_ms: int = Field(default=5000, ge=0)
    #: PostgreSQL instead of the SQLite file at ``path``, for several daemons on one
    #: database: ``postgresql://user@host:5432/dbname`` (libpq's URL). A secret: give
    #: it with ``url_file``, or keep the password out of it with ``password_file``.
    url: SecretStr | None = None
    url_file: Path | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    #: PostgreSQL: the connections one daemon opens at most, its writer included (the
    #: rest are pooled for reads, advisory locks and snapshots)
    max_connections: int = Field(default=10, ge=2, le=1000)

    def database_url(self) -> str | None:
        """The PostgreSQL URL with its password, or None for SQLite."""
        if self.url is None:
            return None
        url = self.url.get_secret_value().strip()
        if self.password is None:
            return url
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]  # one host[:port] or several, as given
        user = quote(unquote(parts.username or ""), safe="")
        secret = quote(self.password.get_secret_value(), safe="")
        return urlunsplit((parts.scheme, f"{user}:{secret}@{host}", parts.path, parts.query, ""))


class PharmacySettings(_Section):
    """``[[pharmacies]]``: one store of a chain served by this deployment. Its claims
    (201-B1 service provider id = ``provider_id``) go to the service with its own
    credentials, never another store's."""

    provider_id: str
    #: a label for the console and ``doctor`` (the store's name or number), optional
    name: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    #: the store's own developer account for the requests resource, when it differs
    #: from ``service.api_id`` (reconciliation reads its PAs with it)
    api_id: str | None = None
    #: the store's phone and fax, passed to the PA service's hosted page with the
    #: person who opens a PA (``remote_user``); default ``[console]``'s
    phone_number: str | None = None
    fax_number: str | None = None

    @field_validator("provider_id")
    @classmethod
    def _provider_id_plain(cls, v: str) -> str:
        v = v.strip()
        if not v or len(v) > 15 or not v.isprintable():
            raise ValueError("must be the store's 201-B1 service provider id (NPI or NCPDP id)")
        return v


class ReconcileSettings(_Section):
    """``[reconcile]``: read open PAs back from the service's requests resource and
    apply what the callbacks missed (issue 28, decision 0031). Off without an api_id."""

    enabled: bool = True
    #: one pass over the PAs every this many minutes, for the whole fleet
    interval_minutes: float = Field(default=60.0, ge=1, le=7 * 24 * 60)
    #: PAs changed within this many days are read too, whatever their state
    recent_days: int = Field(default=7, ge=0, le=365)
    #: tokens per POST /requests/search (the service neither filters nor pages)
    batch_size: int = Field(default=50, ge=1, le=500)
    #: at most this many calls to the requests resource a minute (0: no pause)
    calls_per_minute: int = Field(default=30, ge=0, le=6000)


class WorklistSettings(_Section):
    """``[worklist]``: what the console's "Needs you" shows beyond the statuses."""

    #: an approval ending within this many days is "Expiring soon" (and announced once
    #: by a ``pa.expiring`` webhook and feed entry)
    expiring_days: int = Field(default=21, ge=1, le=365)
    #: an "Expiring soon" entry acknowledged earlier comes back this many days before
    #: the approval ends
    expiring_reminder_days: int = Field(default=7, ge=0, le=365)


class OutcomesSettings(_Section):
    budget_ms: int = Field(default=1500, ge=50, le=60_000)
    #: kept back from the budget for pa-bridge's own work, so the answer (not just the
    #: outcomes call) is in time
    safety_margin_ms: int = Field(default=100, ge=0, le=1000)


class QueueSettings(_Section):
    poll_seconds: float = Field(default=1.0, gt=0)
    backoff_base_seconds: float = Field(default=2.0, gt=0)
    backoff_max_seconds: float = Field(default=3600.0, gt=0)
    batch_size: int = Field(default=20, ge=1)


class SandboxSettings(_Section):
    enabled: bool | None = None
    step_seconds: float = Field(default=1.0, ge=0)
    #: a fixed port by default, so the PA links stored earlier still open after a restart
    listen: str = "127.0.0.1:8480"
    #: keep the sandbox's PAs in sandbox.sqlite3 beside the database (else in memory)
    persist: bool = True

    _v_listen = field_validator("listen")(_listen_ok)


class EncryptionSettings(_Section):
    """``[encryption]``: the key PHI columns are sealed with (decision 0033)."""

    #: the key file (``pa-bridge keys rotate`` adds keys to it). A relative path is a
    #: systemd credential's name when ``$CREDENTIALS_DIRECTORY`` is set. Unset on
    #: SQLite: ``pa-bridge.key`` beside the database, created at the first start;
    #: required with ``storage.url`` (every daemon must read the same key).
    key_file: Path | None = None


class AuditSettings(_Section):
    """``[audit]``: the hash-chained audit log (decision 0035)."""

    #: how long entries are kept (default six years, HIPAA's documentation period)
    retention_days: int = Field(default=2192, ge=365)
    #: where the daemon appends the chain's head now and then (JSON lines), outside
    #: the database; default ``audit-anchors.jsonl`` beside the SQLite database, or
    #: in the working directory with ``storage.url``
    anchor_file: Path | None = None
    anchor_minutes: float = Field(default=10.0, gt=0, le=1440)


class ConsoleSettings(_Section):
    """``[console]``: people signing in to the pharmacist console (decision 0034)."""

    #: a session ends after this long without the person doing anything
    idle_minutes: float = Field(default=15.0, ge=1, le=60)
    #: and after this long in any case
    session_max_hours: float = Field(default=12.0, ge=1, le=24)
    #: the second factor: auto (asked for when intake.listen is not loopback),
    #: required, or off (loopback only)
    totp: Literal["auto", "required", "off"] = "auto"
    #: failed sign-ins in a row before the name is locked; each lock-out doubles
    lockout_after: int = Field(default=5, ge=1, le=20)
    lockout_minutes: float = Field(default=1.0, gt=0, le=60)
    #: the store's phone and fax for the hosted PA page (a chain: per [[pharmacies]])
    phone_number: str | None = None
    fax_number: str | None = None


class OidcSettings(_Section):
    """``[oidc]``: sign-in through the chain's identity provider (OpenID Connect)."""

    issuer: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    client_secret_file: Path | None = None
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    #: the ID token claim that is the person's display name, and the one that is
    #: their sign-in name in the audit log
    display_name_claim: str = "name"
    username_claim: str = "preferred_username"
    #: the callback URL registered with the provider; default: this listener's
    #: ``/console/oidc/callback`` as the browser reached it
    redirect_url: str | None = None
    button_label: str = "Sign in with your organisation's account"

    def enabled(self) -> bool:
        return self.issuer is not None


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LoggingSettings(_Section):
    level: str = "INFO"

    @field_validator("level")
    @classmethod
    def _known_level(cls, v: str) -> str:
        up = v.strip().upper()
        if up not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)} (got {v!r})")
        return up


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PA_BRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    service: ServiceSettings = Field(default_factory=ServiceSettings)
    intake: IntakeSettings = Field(default_factory=IntakeSettings)
    callbacks: CallbackSettings = Field(default_factory=CallbackSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    outcomes: OutcomesSettings = Field(default_factory=OutcomesSettings)
    queue: QueueSettings = Field(default_factory=QueueSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    reconcile: ReconcileSettings = Field(default_factory=ReconcileSettings)
    worklist: WorklistSettings = Field(default_factory=WorklistSettings)
    encryption: EncryptionSettings = Field(default_factory=EncryptionSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    oidc: OidcSettings = Field(default_factory=OidcSettings)
    #: a chain's stores; empty for a single store (its credentials are in [service])
    pharmacies: list[PharmacySettings] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file, which is passed as init values.
        return (env_settings, init_settings)

    @property
    def sandbox_enabled(self) -> bool:
        if self.sandbox.enabled is not None:
            return self.sandbox.enabled
        return not self.service.configured()

    def secret(self, value: SecretStr | None) -> str:
        return value.get_secret_value() if value is not None else ""

    def credentials(self, entry: ServiceSettings | PharmacySettings) -> tuple[str, str, str]:
        """(username, password, api_key) of ``[service]`` or of a ``[[pharmacies]]``
        entry, each "" when not given."""
        return (entry.username or "", self.secret(entry.password), self.secret(entry.api_key))

    def own_credentials(self) -> tuple[str, str, str]:
        """The credentials that go with no one claim (the client's own, the health
        probe, ``doctor``): ``[service]``'s, or for a chain whose ``[service]`` names no
        username, the first pharmacy's."""
        if self.pharmacies and not self.service.username:
            return self.credentials(self.pharmacies[0])
        return self.credentials(self.service)

    def api_id_for(self, provider_id: str | None) -> str | None:
        """The api_id that reads a PA of the store ``provider_id`` from the requests
        resource: its ``[[pharmacies]]`` entry's, else ``service.api_id``."""
        for p in self.pharmacies:
            if provider_id is not None and p.provider_id == provider_id.strip() and p.api_id:
                return p.api_id
        return self.service.api_id or None

    def reconcile_off(self) -> str | None:
        """Why reconciliation is off (None: it is on). Without the sandbox it needs
        ``service.api_url`` and an api_id (``service.api_id``, or a store's)."""
        if not self.reconcile.enabled:
            return "[reconcile] enabled = false"
        if self.sandbox_enabled:
            return None
        if not self.service.api_id and not any(p.api_id for p in self.pharmacies):
            return "no service.api_id (nor a [[pharmacies]] api_id)"
        if not self.service.api_url:
            return "no service.api_url (the requests resource's address)"
        return None

    def intake_tokens(self) -> list[str]:
        """The tokens for every pharmacy (``[intake] tokens``)."""
        return [t.get_secret_value() for t in self.intake.tokens]

    def scoped_intake_tokens(self) -> list[tuple[str, frozenset[str]]]:
        """(token, the provider ids it may act for) of ``[[intake.scoped_tokens]]``."""
        return [
            (t.token.get_secret_value(), frozenset(p.strip() for p in t.pharmacies))
            for t in self.intake.scoped_tokens
            if t.token is not None
        ]


#: what ``systemctl reload pa-bridge`` (SIGHUP) applies to a running daemon: the
#: stores, the credentials, the tokens and the log level. A change to any other key
#: needs a restart (listen addresses, storage, ...), and a reload that brings one is
#: refused as a whole, naming it.
RELOADABLE = frozenset(
    {
        "pharmacies",
        "service.username",
        "service.password",
        "service.api_key",
        "intake.tokens",
        "intake.scoped_tokens",
        "logging.level",
    }
)


def _keys(s: Settings) -> dict[str, Any]:
    """Every key's value as the daemon uses it, by ``section.key``: a secret by its
    value (whether it came from the file, a ``_file`` or the environment), so a
    ``_file`` key itself is left out; ``[[pharmacies]]`` as one key."""
    out: dict[str, Any] = {"pharmacies": s.pharmacies}
    for name in type(s).model_fields:
        section = getattr(s, name)
        if not isinstance(section, BaseModel):
            continue
        for key in type(section).model_fields:
            if not key.endswith("_file"):
                out[f"{name}.{key}"] = getattr(section, key)
    return out


def changed_keys(old: Settings, new: Settings) -> list[str]:
    """The keys whose value differs between ``old`` and ``new`` (names only: never a
    value, which may be a secret)."""
    a, b = _keys(old), _keys(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def secrets_from_credentials_directory(s: Settings) -> bool:
    """Whether a secret a reload applies is read from systemd's ``$CREDENTIALS_DIRECTORY``
    (a relative ``_file``): systemd copies ``LoadCredential=`` files there when the
    service starts and (before systemd 260) not again at a reload."""
    if not os.environ.get("CREDENTIALS_DIRECTORY"):
        return False
    files: list[Path | None] = [
        s.service.password_file,
        s.service.api_key_file,
        s.intake.tokens_file,
        *(getattr(p, f"{k}_file") for p in s.pharmacies for k in ("password", "api_key")),
        *(t.token_file for t in s.intake.scoped_tokens),
    ]
    return any(f is not None and not Path(f).is_absolute() for f in files)


def secret_file_path(path: Path) -> tuple[Path, str]:
    """Where a secret's ``_file`` is read from, and how to say so: a relative path is
    read from systemd's ``$CREDENTIALS_DIRECTORY`` (``LoadCredential=``), or without
    it from the current directory, which is then named with the reason."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if path.is_absolute():
        return path, str(path)
    if creds:
        p = Path(creds) / path
        return p, f"{p} (in $CREDENTIALS_DIRECTORY)"
    p = Path.cwd() / path
    return p, (
        f"{p} (a relative path, and $CREDENTIALS_DIRECTORY is not set: systemd sets it"
        " for LoadCredential=; elsewhere give an absolute path, or set it)"
    )


class _Unreadable(Exception):
    """A secret's ``_file`` that cannot be read: ``str()`` says where it was looked for
    and why."""


def _read_secret_file(path: Path, *, may_be_empty: bool = False) -> str:
    """The secret in ``path``, stripped. An empty file is a mistake (``printf %s "$PW"``
    with ``$PW`` unset) named here, once, unless ``may_be_empty`` (a tokens file)."""
    p, where = secret_file_path(path)
    try:
        value = p.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise _Unreadable(f"cannot read {where}: {e.strerror or type(e).__name__}") from None
    except UnicodeDecodeError:
        raise _Unreadable(f"cannot read {where}: not UTF-8 text") from None
    if not value and not may_be_empty:
        raise _Unreadable(f"{where} is empty")
    return value


def _env_var(name: str) -> str | None:
    """The environment variable ``name`` as it is spelled where it is set
    (case-insensitive, as the settings read it), when set to something other than
    the empty string."""
    want = name.upper()
    return next((k for k, v in os.environ.items() if k.upper() == want and v != ""), None)


def _from_env(section: str, key: str) -> bool:
    """Whether ``PA_BRIDGE_<SECTION>__<KEY>`` is set (case-insensitive, as the
    settings read it) to something other than the empty string."""
    return _env_var(f"PA_BRIDGE_{section}__{key}") is not None


def _naming_the_variable(problems: list[str]) -> list[str]:
    """Each problem with a key that came from the environment names the variable too
    (``intake.listen (from PA_BRIDGE_INTAKE__LISTEN): ...``): the file is not where
    to look for it."""
    out = []
    for problem in problems:
        where, sep, rest = problem.partition(":")
        parts = [p for p in re.split(r"[.\s#(]+", where.strip()) if p]
        var = None
        if parts and not where.startswith("PA_BRIDGE_"):
            section = parts[0]
            if len(parts) > 1 and not parts[1].isdigit():
                var = _env_var(f"PA_BRIDGE_{section}__{parts[1]}")
            var = var or _env_var(f"PA_BRIDGE_{section}")
        out.append(f"{where} (from {var}){sep}{rest}" if var and sep else problem)
    return out


def _resolve_secret_files(
    s: Settings, problems: list[str], file_data: dict[str, Any] | None = None
) -> set[str]:
    """Fill each secret from its ``_file``. The environment wins over the file: a
    secret given by environment variable replaces the file's ``key`` or ``key_file``,
    and an environment ``key_file`` replaces the file's ``key``. Both ``key`` and
    ``key_file`` from the same place is a mistake, named. Returns the secrets whose
    file could not be read (``section.key``; a store's ``pharmacies <id>.key``), so
    that what their absence causes is not reported again."""
    unreadable: set[str] = set()
    pairs: list[tuple[BaseModel, str, str]] = [
        (s.service, "password", "service"),
        (s.service, "api_key", "service"),
        (s.callbacks, "password", "callbacks"),
        (s.callbacks, "forward_secret", "callbacks"),
        (s.storage, "url", "storage"),
        (s.storage, "password", "storage"),
        (s.oidc, "client_secret", "oidc"),
    ]
    file_data = file_data or {}
    for section, key, name in pairs:
        path = getattr(section, f"{key}_file")
        if path is None:
            continue
        value_env, path_env = _from_env(name, key), _from_env(name, f"{key}_file")
        in_file = file_data.get(name, {}) if isinstance(file_data.get(name), dict) else {}
        value_file = in_file.get(key) not in (None, "")
        if value_env:
            if path_env:
                problems.append(
                    f"{name}.{key}_file: give either PA_BRIDGE_{name.upper()}__{key.upper()}"
                    f" or PA_BRIDGE_{name.upper()}__{key.upper()}_FILE, not both"
                )
            setattr(section, f"{key}_file", None)  # the environment's value wins
            continue
        if getattr(section, key) is not None and not (path_env and value_file):
            problems.append(f"{name}.{key}_file: give either {key} or {key}_file, not both")
            continue
        try:
            setattr(section, key, SecretStr(_read_secret_file(path)))
        except _Unreadable as e:
            problems.append(f"{name}.{key}_file: {e}")
            unreadable.add(f"{name}.{key}")
    for ph in s.pharmacies:
        for key in ("password", "api_key"):
            where = f"pharmacies (provider id {ph.provider_id})"
            if not _entry_secret(ph, key, where, problems):
                unreadable.add(f"pharmacies {ph.provider_id}.{key}")
    for i, st in enumerate(s.intake.scoped_tokens, start=1):
        _entry_secret(st, "token", f"intake.scoped_tokens #{i}", problems)
    if s.intake.tokens_file is not None:
        try:
            lines = _read_secret_file(s.intake.tokens_file, may_be_empty=True).splitlines()
            s.intake.tokens.extend(SecretStr(x.strip()) for x in lines if x.strip())
        except _Unreadable as e:
            problems.append(f"intake.tokens_file: {e}")
            unreadable.add("intake.tokens")
    return unreadable


def _entry_secret(entry: BaseModel, key: str, where: str, problems: list[str]) -> bool:
    """A list entry's secret from its ``<key>_file`` (a list comes whole from the file
    or whole from the environment, so there is no precedence to settle); False when
    the file cannot be read."""
    path = getattr(entry, f"{key}_file")
    if path is None:
        return True
    if getattr(entry, key) is not None:
        problems.append(f"{where}: give either {key} or {key}_file, not both")
        return True
    try:
        setattr(entry, key, SecretStr(_read_secret_file(path)))
    except _Unreadable as e:
        problems.append(f"{where}: {key}_file: {e}")
        return False
    return True


#: what is wrong with a token :func:`_weak_token` refuses
_WEAK_TOKEN = (
    "is empty, too short or padded with blanks"
    f" (at least {MIN_SECRET_CHARS} characters, e.g. `openssl rand -hex 24`)"
)


def _weak_token(token: str) -> bool:
    """An intake token shorter than :data:`MIN_SECRET_CHARS` (blanks aside), or
    padded with blanks."""
    return len(token.strip()) < MIN_SECRET_CHARS or token != token.strip()


def _check_pharmacies(s: Settings, problems: list[str], unreadable: Collection[str]) -> None:
    """Each provider id once, each store with its three credentials (named by provider
    id, never by secret; one whose file could not be read is named once, there);
    scoped tokens name configured stores."""
    seen: set[str] = set()
    for ph in s.pharmacies:
        if ph.provider_id in seen:
            problems.append(f"pharmacies: provider id {ph.provider_id} is listed more than once")
        seen.add(ph.provider_id)
        lacking = [
            k
            for k in ("username", "password", "api_key")
            if f"pharmacies {ph.provider_id}.{k}" not in unreadable
            and (
                getattr(ph, k) is None
                or (isinstance(getattr(ph, k), SecretStr) and not getattr(ph, k).get_secret_value())
            )
        ]
        if lacking:
            problems.append(
                f"pharmacies: provider id {ph.provider_id} lacks "
                + ", ".join(f"{k} (or {k}_file)" if k != "username" else k for k in lacking)
            )
    plain = {t.get_secret_value() for t in s.intake.tokens}
    for i, st in enumerate(s.intake.scoped_tokens, start=1):
        where = f"intake.scoped_tokens #{i}"
        if st.token is None:
            if st.token_file is None:
                problems.append(f"{where}: give token or token_file")
            continue
        t = st.token.get_secret_value()
        if _weak_token(t):
            problems.append(f"{where}: the token {_WEAK_TOKEN}")
        if t in plain:
            problems.append(f"{where}: the same token is in intake.tokens (for every pharmacy)")
        unknown = sorted({p.strip() for p in st.pharmacies} - seen)
        if unknown:
            problems.append(f"{where}: provider id {', '.join(unknown)} is not in [[pharmacies]]")


def _check_storage(st: StorageSettings, problems: list[str], unreadable: Collection[str]) -> None:
    if st.url is None:
        if "storage.url" in unreadable:
            return  # named once, where its file could not be read
        if st.password is not None:
            problems.append("storage.password_file: only with storage.url (PostgreSQL)")
        return
    try:
        parts = urlsplit(st.url.get_secret_value().strip())
        for host in parts.netloc.rpartition("@")[2].split(","):  # libpq: host1:p1,host2:p2
            urlsplit(f"//{host}").port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        problems.append("storage.url: not a URL (postgresql://user@host:5432/dbname)")
        return
    socket = "host" in parse_qs(parts.query)  # libpq's postgresql://user@/db?host=/dir
    if parts.scheme not in ("postgresql", "postgres") or not (parts.hostname or socket):
        problems.append(
            "storage.url: must be postgresql://user@host[:port]/dbname, or"
            " postgresql://user@/dbname?host=/run/postgresql for a Unix socket"
            " (the SQLite file is storage.path)"
        )
    elif not parts.path.strip("/"):
        problems.append("storage.url: names no database (postgresql://user@host/dbname)")
    if st.password is not None and parts.password is not None:
        problems.append(
            "storage.password_file: storage.url carries a password already; keep it in one"
        )


def _check(s: Settings, problems: list[str], unreadable: Collection[str] = ()) -> None:
    """The rules across keys. A secret whose file could not be read is named once
    (``unreadable``): the rules its absence breaks are not reported on top of it."""
    _check_storage(s.storage, problems, unreadable)
    _check_pharmacies(s, problems, unreadable)
    if not s.sandbox_enabled:
        # a chain's credentials are each store's own ([[pharmacies]])
        keys: tuple[str, ...] = ("claim_url", "outcomes_url")
        if not s.pharmacies:
            keys += ("username", "password", "api_key")
        for key in keys:
            if f"service.{key}" in unreadable:
                continue
            if getattr(s.service, key) in (None, ""):
                problems.append(f"service.{key}: required when the sandbox is not enabled")
    for i, token in enumerate(s.intake.tokens, start=1):
        if _weak_token(token.get_secret_value()):
            problems.append(f"intake.tokens: token #{i} {_WEAK_TOKEN}")
    cb_pw = s.callbacks.password.get_secret_value() if s.callbacks.password is not None else None
    if cb_pw is not None and len(cb_pw.strip()) < MIN_SECRET_CHARS:
        problems.append(
            "callbacks.password: empty or too short"
            f" (at least {MIN_SECRET_CHARS} characters; the service sends it with every callback)"
        )
    secret = s.callbacks.forward_secret
    if secret is not None and len(secret.get_secret_value().strip()) < MIN_SECRET_CHARS:
        problems.append(
            "callbacks.forward_secret: empty or too short"
            f" (at least {MIN_SECRET_CHARS} characters, e.g. `openssl rand -hex 32`)"
        )
    host, _ = parse_listen(s.intake.listen)
    unread_tokens = "intake.tokens" in unreadable
    if not (s.intake.tokens or s.intake.scoped_tokens or unread_tokens or is_loopback(host)):
        problems.append(
            "intake.tokens: required when intake.listen is not a loopback address "
            f"({s.intake.listen}); without tokens the API is served on loopback only"
        )
    _check_console(s, problems)
    if (s.callbacks.tls_cert is None) != (s.callbacks.tls_key is None):
        problems.append("callbacks.tls_cert / callbacks.tls_key: give both or neither")
    for key in ("tls_cert", "tls_key"):
        p = getattr(s.callbacks, key)
        if p is not None and not Path(p).is_file():
            problems.append(f"callbacks.{key}: no such file {p}")
    if (s.callbacks.username is None) != (s.callbacks.password is None) and (
        "callbacks.password" not in unreadable
    ):
        problems.append("callbacks.username / callbacks.password: give both or neither")
    if s.storage.metadata_retention_days < s.storage.retention_days:
        problems.append("storage.metadata_retention_days: must be at least storage.retention_days")
    if s.worklist.expiring_reminder_days >= s.worklist.expiring_days:
        problems.append("worklist.expiring_reminder_days: must be less than worklist.expiring_days")
    if s.service.api_url:
        parts = urlsplit(s.service.api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append("service.api_url: must be an http(s) URL (the requests resource)")


def _check_console(s: Settings, problems: list[str]) -> None:
    """A console others can reach asks for a second factor; OIDC needs its three keys."""
    host, _ = parse_listen(s.intake.listen)
    if s.console.totp == "off" and not is_loopback(host):
        problems.append(
            f"console.totp: off only on a loopback intake.listen ({s.intake.listen}):"
            " people signing in from other machines give a second factor"
        )
    o = s.oidc
    if o.enabled() or o.client_id is not None:
        for key in ("issuer", "client_id", "client_secret"):
            if getattr(o, key) in (None, ""):
                problems.append(f"oidc.{key}: required for sign-in through OpenID Connect")
        if o.issuer is not None and not o.issuer.startswith(("https://", "http://")):
            problems.append("oidc.issuer: must be the provider's https:// URL")


def _format_env_error(e: SettingsError) -> list[str]:
    """An environment variable pydantic-settings could not decode (a list or table
    must be JSON there): name the variable, never its value (it may hold a secret)."""
    m = re.search(r'field "([^"]+)"', str(e))
    name = f"PA_BRIDGE_{m.group(1).upper()}" if m else "PA_BRIDGE_*"
    return [
        f"{name} (environment): not valid JSON; a list or table given by environment"
        " must be JSON, e.g. PA_BRIDGE_INTAKE__TOKENS='[\"...\"]'"
    ]


def _format_validation(e: ValidationError) -> list[str]:
    out = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(f"{loc}: {msg}")
    return out


class _StorageOnly(BaseSettings):
    """The ``[storage]`` section alone, for commands that need only the database."""

    model_config = SettingsConfigDict(
        env_prefix="PA_BRIDGE_", env_nested_delimiter="__", extra="ignore"
    )

    storage: StorageSettings = Field(default_factory=StorageSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror}"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{path}: not valid TOML: {e}"]) from None


def load_storage_settings(path: str | os.PathLike[str] | None = None) -> StorageSettings:
    """Only ``[storage]`` (file, then environment), for ``backup``, ``restore`` and
    ``queue``: they need the database's path, not the service's secrets, so they run
    as the service user outside systemd (no ``$CREDENTIALS_DIRECTORY``) and with a
    config whose other sections are for another version."""
    data = _read_toml(path) if path is not None else {}
    try:
        st = _StorageOnly(storage=data.get("storage", {})).storage
    except ValidationError as e:
        raise ConfigError(_naming_the_variable(_format_validation(e))) from None
    except SettingsError as e:
        raise ConfigError(_format_env_error(e)) from None
    problems: list[str] = []
    unreadable: set[str] = set()
    for key in ("url", "password"):  # PostgreSQL's URL and password: secrets in files
        file = getattr(st, f"{key}_file")
        if file is not None and getattr(st, key) is None:
            try:
                setattr(st, key, SecretStr(_read_secret_file(file)))
            except _Unreadable as e:
                problems.append(f"storage.{key}_file: {e}")
                unreadable.add(f"storage.{key}")
    _check_storage(st, problems, unreadable)
    if problems:
        raise ConfigError(_naming_the_variable(problems))
    return st


#: what the commands store IT runs beside the daemon (users, audit, keys) read
_OPS_SECTIONS = ("storage", "encryption", "audit", "console", "intake", "pharmacies")


def load_ops_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """``[storage]``, ``[encryption]``, ``[audit]``, ``[console]``, ``[intake]`` and
    ``[[pharmacies]]`` of the file (then the environment), for ``users``, ``audit``
    and ``keys``: like ``load_storage_settings``, never the service's secrets."""
    data = _read_toml(path) if path is not None else {}
    picked = {k: data[k] for k in _OPS_SECTIONS if k in data}
    try:
        settings = Settings(**picked)
    except ValidationError as e:
        raise ConfigError(_format_validation(e)) from None
    except SettingsError as e:
        raise ConfigError(_format_env_error(e)) from None
    settings.storage = load_storage_settings(path)
    return settings


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (if any), apply the environment, validate; raise
    :class:`ConfigError` listing every problem."""
    data: dict[str, Any] = _read_toml(path) if path is not None else {}
    for section, values in overrides.items():
        if isinstance(values, list):  # an array of tables: [[pharmacies]]
            data[section] = values
        else:
            data.setdefault(section, {}).update(values)
    try:
        settings = Settings(**data)
    except ValidationError as e:
        raise ConfigError(_naming_the_variable(_format_validation(e))) from None
    except SettingsError as e:
        raise ConfigError(_format_env_error(e)) from None
    problems: list[str] = []
    unreadable = _resolve_secret_files(settings, problems, data)
    _check(settings, problems, unreadable)
    if problems:
        raise ConfigError(_naming_the_variable(problems))
    return settings
