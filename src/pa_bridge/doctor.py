"""`pa-bridge doctor`: check an installation without changing it.

One line per check: ``ok``, ``warn`` or ``FAIL``, the check, what was found and, for
warn/FAIL, what to do. Nothing here writes to the database (it is opened read-only,
migrations are compared, never applied), and no secret value or PHI is ever printed:
secrets are reported as present or missing, the database only by counts.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket
import ssl
import stat
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsError

from .client import (
    DASHBOARD_LOGIN_VARIABLES,
    dashboard_login_url,
    error_text,
    failure_kind,
    missing_variables,
    origin,
    verify_context,
)
from .config import (
    ConfigError,
    Settings,
    as_list,
    is_loopback,
    load_settings,
    parse_listen,
    secret_file_path,
)
from .restore import BACKUP_MARK, interrupted_restore
from .store import DatabaseError, PgError, files, migrations

__all__ = ["Check", "run_checks", "format_check", "WARN_DAYS"]

WARN_DAYS = 30
REACH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    status: str  # "ok", "warn" or "FAIL"
    name: str
    message: str
    fix: str = ""


def format_check(c: Check) -> str:
    line = f"{c.status:<4}  {c.name}: {c.message}"
    if c.fix and c.status != "ok":
        line += f" -> {c.fix}"
    return line


def ok(name: str, message: str) -> Check:
    return Check("ok", name, message)


def warn(name: str, message: str, fix: str) -> Check:
    return Check("warn", name, message, fix)


def fail(name: str, message: str, fix: str) -> Check:
    return Check("FAIL", name, message, fix)


# ---- config ---------------------------------------------------------------------------
def _partial_settings(path: str | None) -> Settings | None:
    """The settings as far as they parse, for the other checks when the config has
    problems (secret files unresolved, cross-key rules unchecked)."""
    data: dict[str, Any] = {}
    try:
        if path is not None:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        return Settings(**data)
    except (OSError, tomllib.TOMLDecodeError, ValidationError, SettingsError):
        return None


def check_config(path: str | None) -> tuple[list[Check], Settings | None, bool]:
    """(checks, settings, fully loaded?)"""
    try:
        settings = load_settings(path)
    except ConfigError as e:
        where = path or "the environment (PA_BRIDGE_*)"
        checks = [
            fail("config", p, "fix this environment variable")
            if p.startswith("PA_BRIDGE_")
            else fail("config", p, f"fix this key in {where}")
            for p in e.problems
        ]
        return checks, _partial_settings(path), False
    if path is None:
        msg = "no --config: the embedded default (SQLite under ./var, sandbox in-process)"
    else:
        msg = f"{path} is valid"
    return [ok("config", msg)], settings, True


# ---- secrets --------------------------------------------------------------------------
def _secret_state(section: Any, key: str) -> tuple[bool, str]:
    value: SecretStr | None = getattr(section, key)
    if value is not None and value.get_secret_value().strip():
        return True, "present"
    file: Path | None = getattr(section, f"{key}_file", None)
    if value is None and file is not None:  # not resolved (the config did not load)
        path, where = secret_file_path(file)
        try:
            if path.read_text(encoding="utf-8").strip():
                return True, f"present (in {file})"
            return False, f"missing: {where} is empty"
        except (OSError, UnicodeDecodeError) as e:
            return False, f"missing: cannot read {where} ({getattr(e, 'strerror', None) or e})"
    if value is not None:
        return False, "missing: it is empty"
    return False, "missing"


def check_secrets(s: Settings) -> list[Check]:
    wanted: list[tuple[str, Any, str]] = []
    chain_only = bool(s.pharmacies) and not s.service.username  # each store's own
    if not s.sandbox_enabled and not chain_only:
        wanted += [("service", s.service, "password"), ("service", s.service, "api_key")]
    if s.callbacks.username is not None:
        wanted.append(("callbacks", s.callbacks, "password"))
    out: list[Check] = []
    for sec, section, key in wanted:
        present, msg = _secret_state(section, key)
        name = f"secret {sec}.{key}"
        if present:
            out.append(ok(name, msg))
        else:
            env = f"PA_BRIDGE_{sec.upper()}__{key.upper()}"
            out.append(
                fail(
                    name,
                    msg,
                    f"set {sec}.{key}_file (systemd LoadCredential=) or {env}",
                )
            )
    if not s.sandbox_enabled and not s.service.username and not chain_only:
        out.append(fail("secret service.username", "missing", "set service.username"))
    out += check_pharmacies(s)
    if not wanted and not s.pharmacies:
        out.append(ok("secrets", "none needed (sandbox in-process, no callback credentials)"))
    n = len(s.intake.tokens)
    host, _ = parse_listen(s.intake.listen)
    if n:
        out.append(ok("intake tokens", f"{n} present"))
    elif is_loopback(host):
        out.append(ok("intake tokens", f"none: the API answers on loopback only ({host})"))
    return out


def check_pharmacies(s: Settings) -> list[Check]:
    """Each store of ``[[pharmacies]]``: its provider id and whether its credentials
    are all there (never a secret, never a username's password)."""
    out: list[Check] = []
    seen: set[str] = set()
    for p in s.pharmacies:
        name = f"pharmacy {p.provider_id}" + (f" ({p.name})" if p.name else "")
        states = {key: _secret_state(p, key) for key in ("password", "api_key")}
        missing = [f"{k} {msg}" for k, (present, msg) in states.items() if not present]
        if not p.username:
            missing.insert(0, "username missing")
        fixes = []
        if missing:
            fixes.append(
                "give this store's username, password(_file) and api_key(_file)"
                " under its [[pharmacies]] entry"
            )
        if p.provider_id in seen:
            missing.append("provider id listed more than once")
            fixes.append("keep one [[pharmacies]] entry per provider id")
        seen.add(p.provider_id)
        if missing:
            out.append(fail(name, "; ".join(missing), "; ".join(fixes)))
        else:
            out.append(ok(name, "credentials present (username, password, api_key)"))
    if s.intake.scoped_tokens:
        out.append(ok("intake scoped tokens", f"{len(s.intake.scoped_tokens)} present"))
    return out


# ---- database -------------------------------------------------------------------------
def _nearest_existing(p: Path) -> Path:
    p = p.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_postgres(url: str) -> list[Check]:
    """``storage.url``: the connection, the schema's version and this user's
    privileges (read only; migrations are applied by ``serve``)."""
    from .store import StoreError, files, redact_url

    where = redact_url(url)
    try:
        facts = files.pg_facts(url, BACKUP_MARK)
    except StoreError as e:
        return [fail("database", str(e), "check storage.url (host, port, database, user)"
                     " and its password (storage.password_file)")]  # fmt: skip
    out = [ok("database", f"PostgreSQL {facts.server_version // 10000} at {where}")]
    if facts.server_version < 120000:
        out.append(fail("database", "PostgreSQL 12 or later is needed", "upgrade the server"))
    if facts.schema_problem is not None:
        out.append(fail("database schema", facts.schema_problem, "GRANT USAGE ON SCHEMA to the"
                        " service's user (a `pa-bridge restore` re-creates the schema, owned"
                        " by the user that ran it), or fix the search_path in storage.url"))  # fmt: skip
        out.append(check_backup_tools(facts.server_version // 10000))
        return out
    known = migrations.known()
    applied = facts.applied or []
    pending = [n for n in known if n not in applied]
    unknown = [n for n in applied if n not in known]
    if facts.applied is None:
        out.append(fail("database schema", "this user may not read pa_bridge_migrations, so"
                        " its version is unknown", "GRANT SELECT, INSERT, UPDATE, DELETE on"
                        " pa-bridge's tables to its user"))  # fmt: skip
    elif unknown:
        out.append(fail("database schema", f"newer than this version ({', '.join(unknown)})",
                        "run the pa-bridge version that created it"))  # fmt: skip
    elif pending and not facts.can_create:
        out.append(fail("database schema", f"{len(pending)} migrations to apply and this user"
                        " may not create tables", "GRANT CREATE ON SCHEMA to the service's"
                        " user, or apply them as the owner with `pa-bridge serve` once"))  # fmt: skip
    elif pending:
        out.append(ok("database schema", f"{len(pending)} migrations are applied at start"))
    else:
        out.append(ok("database schema", f"current ({len(known)} migrations applied)"))
    if facts.missing_privileges:
        out.append(fail("database privileges", "missing " + ", ".join(facts.missing_privileges),
                        "GRANT SELECT, INSERT, UPDATE, DELETE on pa-bridge's tables to its"
                        " user"))  # fmt: skip
    elif facts.applied:
        out.append(ok("database privileges", "read and write on every table"))
    if facts.failed:
        out.append(warn("queue", f"{facts.failed} items failed for good",
                        "pa-bridge queue list --status failed; queue retry ID"))  # fmt: skip
    out += _held_checks(facts.held)
    if facts.restore_mark is not None:
        out.append(warn("database restore", f"a backup taken at {facts.restore_mark},"
                        " restored and not yet served", "the first daemon to start holds"
                        " its queued items for review: `pa-bridge queue list --status held`"))  # fmt: skip
    out.append(check_backup_tools(facts.server_version // 10000))
    return out


def check_backup_tools(server_major: int) -> Check:
    """``pa-bridge backup`` and ``restore`` on PostgreSQL run pg_dump and pg_restore,
    which refuse a server newer than themselves."""
    from .pg_tools import PgToolError, find_tool, tool_version

    try:
        tool = find_tool("pg_dump")
        find_tool("pg_restore")
    except PgToolError as e:
        return warn("backup tools", f"`pa-bridge backup` cannot run: {e}",
                    f"apt-get install postgresql-client-{server_major}")  # fmt: skip
    version = tool_version(tool)
    if version < server_major:
        return warn("backup tools", f"{tool} is version {version}, older than the server"
                    f" ({server_major}): it refuses to dump it",
                    f"apt-get install postgresql-client-{server_major}")  # fmt: skip
    return ok("backup tools", f"pg_dump {version} ({tool})")


def check_database(s: Settings, config_path: str | None = None) -> list[Check]:
    url = s.storage.database_url()
    if url is not None:
        return check_postgres(url)
    path = Path(s.storage.path)
    out: list[Check] = []
    d = path.parent if str(path.parent) else Path(".")
    if d.exists() and not d.is_dir():
        out.append(fail("database directory", f"{d} is not a directory", "fix storage.path"))
        return out
    # the directory, or the nearest one that exists, where it will be created
    exists = d.is_dir()
    anc = d if exists else _nearest_existing(d)
    if anc.is_dir() and os.access(anc, os.W_OK | os.X_OK):
        said = f"{d} is writable" if exists else f"{d} does not exist yet; it will be created"
        out.append(ok("database directory", said))
    elif exists:
        out.append(
            fail(
                "database directory",
                f"{d} is not writable by this user",
                "make it owned by the service user (systemd StateDirectory= does this);"
                " run doctor as that user",
            )
        )
    else:
        out.append(
            fail(
                "database directory",
                f"{d} does not exist and {anc} is not writable",
                "create it for the service user, or fix storage.path",
            )
        )
    half_done = interrupted_restore(path, config_path)
    if half_done is not None:  # serve refuses to start until it is finished
        out.append(fail("database restore", half_done.what, half_done.how))
    if not path.exists():
        if half_done is None:
            said = f"{path} does not exist yet; `pa-bridge serve` creates it (mode 0600)"
            out.append(ok("database", said))
        return out
    if not path.is_file():
        out.append(fail("database", f"{path} is not a file", "fix storage.path"))
        return out
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    size = f"{st.st_size / 1_048_576:.1f} MiB"
    if not os.access(path, os.R_OK | os.W_OK):
        out.append(
            fail(
                "database",
                f"{path} ({size}) is not readable and writable by this user",
                "run doctor as the service user, or chown the file to it",
            )
        )
    elif mode & 0o077:
        out.append(
            warn(
                "database",
                f"{path} ({size}) has mode {mode:04o}; it holds PHI",
                f"chmod 600 {path}",
            )
        )
    else:
        out.append(ok("database", f"{path} exists ({size}), mode 0600"))
    if not os.access(path, os.R_OK):
        return out
    out.extend(_check_schema(path))
    return out


def _check_schema(path: Path) -> list[Check]:
    out: list[Check] = []
    known = migrations.known()
    try:
        facts = files.inspect_file(path, BACKUP_MARK)
    except DatabaseError as e:
        out.append(
            fail(
                "database schema",
                f"cannot read {path}: {e}",
                "is it a pa-bridge database? restore a backup (see the operations README)",
            )
        )
        return out
    applied, restored_from, failed = facts.applied, facts.backup_taken_at, facts.failed
    pending = [n for n in known if n not in applied]
    unknown = [n for n in applied if n not in known]
    if unknown:
        out.append(
            fail(
                "database schema",
                f"written by a newer pa-bridge (unknown migrations: {', '.join(unknown)})",
                "upgrade pa-bridge, or restore a backup made by this version",
            )
        )
    elif pending:
        out.append(
            warn(
                "database schema",
                f"{len(pending)} migration(s) pending: {', '.join(pending)}",
                "`pa-bridge serve` applies them at start; take a `pa-bridge backup` first",
            )
        )
    else:
        out.append(ok("database schema", f"current ({len(known)} migrations applied)"))
    if failed:
        out.append(
            warn(
                "queue",
                f"{failed} item(s) failed for good",
                "see `pa-bridge queue list --status failed`; re-drive with `pa-bridge queue retry ID`",
            )
        )
    out += _held_checks(facts.held)
    if restored_from is not None:
        out.append(
            warn(
                "database restore",
                f"this is a backup copy taken at {restored_from}, not yet served",
                "the daemon that serves it holds its queued items for review: "
                "`pa-bridge queue list --status held` after it starts",
            )
        )
    return out


def _held_checks(held: dict[str, int]) -> list[Check]:
    """Held queue items: waiting for the configuration (sent by themselves once it is
    fixed and the daemon reloads or restarts), or for review after a restore."""
    out: list[Check] = []
    waiting = held.get("configuration", 0) + held.get("pharmacy", 0)
    if waiting:
        out.append(
            warn(
                "queue",
                f"{waiting} item(s) held for pa-bridge's configuration (credentials, an"
                " address, a store not in [[pharmacies]])",
                "`pa-bridge queue list --status held` says why; fix it, then"
                " `systemctl reload pa-bridge` sends them (`systemctl restart pa-bridge`"
                " after changing a LoadCredential= file)",
            )
        )
    if held.get("restore"):
        out.append(
            warn(
                "queue",
                f"{held['restore']} item(s) held after a restore, for review",
                "`pa-bridge queue list --status held`, then `pa-bridge queue retry ID` or"
                " `pa-bridge queue drop ID`",
            )
        )
    return out


# ---- TLS ------------------------------------------------------------------------------
def _host_matches(host: str, names: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for n in names:
        n = n.lower().rstrip(".")
        if n == host:
            return True
        if n.startswith("*.") and "." in host and host.split(".", 1)[1] == n[2:]:
            return True
    return False


def check_tls(s: Settings, *, now: float) -> list[Check]:
    """The callback listener's TLS (the service wants HTTPS), and the certificates of
    the tap and inline listeners and of inline's client side to the switch, each in
    date and with its own key."""
    cb = s.callbacks
    host, _ = parse_listen(cb.listen)
    out: list[Check]
    if cb.tls_cert is not None:
        out = _certificate_checks(
            "tls",
            Path(cb.tls_cert),
            cb.tls_key,
            now=now,
            public_url=cb.public_url,
            public_key="callbacks.public_url",
        )
    elif is_loopback(host):
        out = [ok("tls", f"not configured: callbacks over HTTP on loopback ({cb.listen})")]
    else:
        out = [
            warn(
                "tls",
                f"callbacks are served over plain HTTP on {cb.listen}",
                "set callbacks.tls_cert and callbacks.tls_key (the service wants HTTPS)",
            )
        ]
    for section, mode in (("tap", s.tap), ("inline", s.inline)):
        if mode.listen is not None and mode.tls_cert is not None:
            out += _certificate_checks(f"{section} tls", Path(mode.tls_cert), mode.tls_key, now=now)
    sw = s.inline
    if sw.listen is not None and sw.switch_tls and sw.switch_cert_file is not None:
        out += _certificate_checks(
            "inline switch client", Path(sw.switch_cert_file), sw.switch_key_file, now=now
        )
    return out


def _certificate_checks(
    label: str,
    cert_path: Path,
    key_file: Path | None,
    *,
    now: float,
    public_url: str | None = None,
    public_key: str = "",
) -> list[Check]:
    """A listener's (or a client's) certificate and key: readable, in date (a warning
    within WARN_DAYS of its end), naming ``public_url``'s host, the key its own and
    private. Each line's name starts with ``label``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509.oid import NameOID
    except ImportError:  # pragma: no cover - cryptography is a dependency
        return [warn(label, "cannot inspect the certificate", "install cryptography")]
    out: list[Check] = []
    cert_name, key_name = f"{label} certificate", f"{label} key"
    try:
        data = cert_path.read_bytes()
    except OSError as e:
        return [
            fail(
                cert_name,
                f"cannot read {cert_path}: {e.strerror}",
                "fix the path or its permissions",
            )
        ]
    try:
        leaf = x509.load_pem_x509_certificates(data)[0]
    except ValueError:
        return [
            fail(
                cert_name,
                f"{cert_path} is not a PEM certificate",
                "give the PEM chain, leaf first",
            )
        ]
    cns = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    names: list[str] = []
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = list(san.get_values_for_type(x509.DNSName))
        names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    expires = leaf.not_valid_after_utc
    starts = leaf.not_valid_before_utc
    now_dt = datetime.fromtimestamp(now, UTC)
    days = (expires - now_dt).total_seconds() / 86400
    who = f"subject CN={cns[0] if cns else '-'}, names {', '.join(names) or '-'}"
    when = f"expires {expires:%Y-%m-%d %H:%M} UTC"
    if expires <= now_dt:
        out.append(fail(cert_name, f"{who}; EXPIRED {expires:%Y-%m-%d}", "renew it"))
    elif starts > now_dt:
        out.append(
            fail(
                cert_name,
                f"{who}; not valid before {starts:%Y-%m-%d}",
                "check the clock or the certificate",
            )
        )
    elif days < WARN_DAYS:
        out.append(warn(cert_name, f"{who}; {when}, in {int(days)} day(s)", "renew it soon"))
    else:
        out.append(ok(cert_name, f"{who}; {when} ({int(days)} days)"))
    if public_url:
        ph = httpx.URL(public_url).host
        if ph and not _host_matches(ph, names or cns):
            out.append(
                warn(
                    cert_name,
                    f"does not name {ph} ({public_key})",
                    "issue it for the name the service calls",
                )
            )
    if key_file is None:
        return out
    key_path = Path(key_file)
    try:
        key_data = key_path.read_bytes()
        key_mode = stat.S_IMODE(key_path.stat().st_mode)
    except OSError as e:
        out.append(
            fail(
                key_name,
                f"cannot read {key_path}: {e.strerror}",
                "fix the path or its permissions",
            )
        )
        return out
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        out.append(
            fail(key_name, f"{key_path} is encrypted", "give an unencrypted key (mode 0600)")
        )
        return out
    except ValueError:
        out.append(fail(key_name, f"{key_path} is not a PEM private key", "give the PEM key"))
        return out
    der = serialization.Encoding.DER
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(der, spki) != leaf.public_key().public_bytes(der, spki):
        out.append(
            fail(
                key_name,
                f"{key_path} does not match the certificate",
                "give the certificate's own key",
            )
        )
    elif key_mode & 0o077:
        out.append(
            warn(key_name, f"matches the certificate; mode {key_mode:04o}", f"chmod 600 {key_path}")
        )
    else:
        out.append(ok(key_name, "matches the certificate"))
    return out


# ---- service --------------------------------------------------------------------------
def check_service(s: Settings) -> list[Check]:
    if s.sandbox_enabled:
        return [ok("service", "sandbox (in-process, nothing to reach)")]
    origins: dict[str, list[str]] = {}
    out: list[Check] = []
    for key in ("claim_url", "outcomes_url", "dashboard_url"):
        url = getattr(s.service, key)
        if not url:
            continue
        try:
            u = httpx.URL(url)
        except httpx.InvalidURL:
            out.append(fail("service", f"service.{key} is not a valid URL", f"fix service.{key}"))
            continue
        if u.scheme not in ("http", "https") or not u.host:
            out.append(
                fail("service", f"service.{key} is not an http(s) URL", f"fix service.{key}")
            )
            continue
        # the origin only: never the path, query or user info (they may carry secrets)
        origins.setdefault(origin(url), []).append(key.removesuffix("_url"))
    timeout = min(REACH_TIMEOUT_S, s.service.timeout_seconds)
    try:
        verify = verify_context(s.service.verify)
    except (OSError, ssl.SSLError) as e:
        return [
            *out,
            fail(
                "service",
                f"cannot load service.verify CA bundle ({type(e).__name__})",
                "fix service.verify",
            ),
        ]
    # like the daemon's client: the environment's proxy settings apply
    headers = {"User-Agent": "pa-bridge doctor"}
    with httpx.Client(
        verify=verify, timeout=timeout, follow_redirects=False, headers=headers
    ) as http:
        for host, uses in origins.items():
            name = f"service {host} ({', '.join(uses)})"
            started = time.monotonic()
            try:
                r = http.head(host + "/")
            except httpx.HTTPError as e:
                out.append(
                    fail(
                        name,
                        f"unreachable: {failure_kind(e)}",
                        "check the URL, DNS, firewall and proxy",
                    )
                )
                continue
            ms = (time.monotonic() - started) * 1000
            out.append(ok(name, f"reachable (HTTP {r.status_code}, {ms:.0f} ms)"))
        reached = {
            o
            for o, _ in origins.items()
            if not any(c.name.startswith(f"service {o} ") and c.status == "FAIL" for c in out)
        }
        out += _check_endpoints(s, http, reached)
    return out


def _answered(what: str, key: str, r: httpx.Response) -> Check | None:
    """The common verdicts on an endpoint's answer; None when the caller decides."""
    if 300 <= r.status_code < 400:
        return fail(
            what,
            f"service.{key} redirects (HTTP {r.status_code})",
            f"set service.{key} to the address it redirects to (https, exact path)",
        )
    if r.status_code in (401, 403):
        return fail(
            what,
            f"the service refused the credentials (HTTP {r.status_code})",
            f"check {_whose_credentials(what)} with the service's account manager",
        )
    if r.status_code >= 500:
        return warn(what, f"the service answered HTTP {r.status_code}", "try again later")
    return None


def _probe(
    what: str,
    key: str,
    send: Callable[[], httpx.Response],
    judge: Callable[[str, httpx.Response], Check],
) -> Check:
    """One endpoint, ``service.<key>``: unreachable, an answer every endpoint reads
    alike (redirects, refused credentials, 5xx), or the endpoint's own ``judge``."""
    try:
        r = send()
    except httpx.HTTPError as e:
        return fail(what, f"unreachable: {failure_kind(e)}", f"check service.{key}")
    return _answered(what, key, r) or judge(what, r)


#: the claim interface's variables that carry our credentials
_CREDENTIAL_VARIABLES = ("username", "password", "api_key")


def _claim_interface(what: str, r: httpx.Response, whose: str) -> Check:
    """The claim interface's answer to our credentials without a claim. The service
    checks credentials first (a wrong one is 403 before any 404), so a 404 that asks
    only for the claim means they were taken; a 404 asking for a credential means it
    went empty; a 404 naming nothing is a wrong address."""
    if r.status_code == 404:
        asked = missing_variables(error_text(r)[:4000])
        ours = [v for v in asked if v in _CREDENTIAL_VARIABLES]
        if ours:
            return fail(
                what,
                f"HTTP 404: the service asks for {', '.join(ours)}, sent empty",
                f"give {whose}'s {', '.join(ours)}",
            )
        if asked:
            return ok(what, f"{whose}: credentials accepted (the service asks only for the claim)")
        return fail(
            what,
            "HTTP 404: nothing answers at service.claim_url",
            "check the path of service.claim_url (…/cmmimport/)",
        )
    if 200 <= r.status_code < 300 or r.status_code in (400, 422):
        return ok(
            what, f"{whose}: credentials not refused (HTTP {r.status_code} to an empty claim)"
        )
    return warn(
        what, f"unexpected HTTP {r.status_code} to an empty claim", "check service.claim_url"
    )


def _dashboard_login(what: str, r: httpx.Response, login: str, whose: str) -> Check:
    if r.status_code == 404:
        text = error_text(r)[:4000]
        ours = [v for v in DASHBOARD_LOGIN_VARIABLES if v in text]
        if ours:
            return fail(
                what,
                f"HTTP 404: the login asks for {', '.join(ours)}, sent empty",
                f"give {whose}'s username and password",
            )
        return fail(what, f"HTTP 404 at {urlsplit(login).path}", "check service.dashboard_url")
    if 200 <= r.status_code < 300 and r.text.strip():
        return ok(what, f"{whose}: credentials accepted (a login token came back)")
    return warn(what, f"HTTP {r.status_code} without a token", "check service.dashboard_url")


def _outcomes_interface(what: str, r: httpx.Response) -> Check:
    if r.status_code == 404:
        return fail(what, "HTTP 404 at service.outcomes_url", "check service.outcomes_url")
    return ok(what, f"answers (HTTP {r.status_code})")


def _secret_value(section: Any, key: str) -> str | None:
    """A secret's value, read from its ``_file`` when the config did not load (None
    when it is missing: its ``secret`` line says why)."""
    value: SecretStr | None = getattr(section, key)
    if value is not None:
        return value.get_secret_value().strip() or None
    file: Path | None = getattr(section, f"{key}_file", None)
    if file is None:
        return None
    try:
        return secret_file_path(file)[0].read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class _Whose:
    """One set of credentials to try: whose they are, and what is missing of them."""

    label: str
    credentials: tuple[str, str, str]
    missing: tuple[str, ...]


def _credential_sets(s: Settings) -> list[_Whose]:
    """Each store's own credentials (``[[pharmacies]]``), and ``[service]``'s when it
    names a username (or there is no store): every set the daemon sends."""
    entries: list[tuple[str, Any]] = []
    for p in s.pharmacies:
        entries.append((f"pharmacy {p.provider_id}" + (f" ({p.name})" if p.name else ""), p))
    if not s.pharmacies or s.service.username:
        entries.append(("[service]", s.service))
    out = []
    for label, entry in entries:
        password, api_key = _secret_value(entry, "password"), _secret_value(entry, "api_key")
        missing = [
            k
            for k, v in (("username", entry.username), ("password", password), ("api_key", api_key))
            if not v
        ]
        out.append(
            _Whose(label, (entry.username or "", password or "", api_key or ""), tuple(missing))
        )
    return out


def _check_endpoints(s: Settings, http: httpx.Client, reached: set[str]) -> list[Check]:
    """Each configured endpoint itself, not just its host, with each store's own
    credentials (every line says whose): the claim interface with no claim (nothing is
    created: 403 means refused credentials; a 404 asking only for the claim means they
    were taken; any other 404 is a wrong address or an empty credential), the dashboard
    login (proves the username and password), and the outcomes URL (its base answers
    with a page). A set with a secret missing is not tried: its ``secret`` line says
    why."""
    out: list[Check] = []
    svc = s.service
    claim_url = svc.claim_url if svc.claim_url and origin(svc.claim_url) in reached else None
    login = None
    if svc.dashboard_url and origin(svc.dashboard_url) in reached:
        login = dashboard_login_url(svc.dashboard_url)
    for whose in _credential_sets(s) if claim_url or login else []:
        if whose.missing:
            out.append(
                warn(
                    f"service credentials ({whose.label})",
                    f"not tried: {', '.join(whose.missing)} missing (see above)",
                    "give them first",
                )
            )
            continue
        user, password, api_key = whose.credentials
        if claim_url is not None:
            form = {"username": user, "password": password, "api_key": api_key}
            out.append(
                _probe(
                    f"service claim interface ({whose.label})",
                    "claim_url",
                    partial(http.post, claim_url, data=form),
                    partial(_claim_interface, whose=whose.label),
                )
            )
        if login is not None:
            login_form = dict(zip(DASHBOARD_LOGIN_VARIABLES, (user, password), strict=True))
            out.append(
                _probe(
                    f"service dashboard login ({whose.label})",
                    "dashboard_url",
                    partial(http.post, login, data=login_form),
                    partial(_dashboard_login, login=login, whose=whose.label),
                )
            )
    if svc.outcomes_url and origin(svc.outcomes_url) in reached:
        outcomes_url = svc.outcomes_url
        out.append(
            _probe(
                "service outcomes interface",
                "outcomes_url",
                lambda: http.get(outcomes_url),
                _outcomes_interface,
            )
        )
    return out


def _whose_credentials(what: str) -> str:
    """``[service]``'s keys, or a store's entry, from a check's name."""
    if "(pharmacy " in what:
        return "that store's username, password and api_key under its [[pharmacies]] entry"
    return "service.username, service.password and service.api_key"


# ---- listeners and the webhook --------------------------------------------------------
def _bind_problem(host: str, port: int) -> int | None:
    """None when ``host:port`` can be bound now (as the daemon binds it), else errno."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            return e.errno or errno.EADDRINUSE
    return None


def _loopback_for(host: str) -> str:
    if host in ("", "0.0.0.0"):  # noqa: S104 - a wildcard listen is reached on loopback
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _get_json(url: str, *, verify: bool = True) -> Any:
    try:
        r = httpx.get(url, timeout=2.0, verify=verify, follow_redirects=False)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


#: the ``/healthz`` field that says the running daemon serves that listener (any other
#: listener: the daemon itself)
_SERVED_BY = {"callbacks.listen": "callbacks", "tap.listen": "wire", "inline.listen": "wire"}


def check_listeners(s: Settings) -> list[Check]:
    """Each address the daemon listens on is free now, or held by the daemon this
    configuration runs (its intake ``/healthz`` answers as pa-bridge, and on SQLite it
    holds this database), not by another program."""
    listens = [("intake.listen", s.intake.listen), ("callbacks.listen", s.callbacks.listen)]
    if s.sandbox_enabled:
        listens.append(("sandbox.listen", s.sandbox.listen))
    # the tap and inline listeners (issue 30), and the sandbox's switch inline uses when
    # it names none
    wire = [("tap.listen", s.tap.listen), ("inline.listen", s.inline.listen)]
    listens += [(key, listen) for key, listen in wire if listen is not None]
    if s.inline.listen is not None and not as_list(s.inline.switch) and s.sandbox_enabled:
        listens.append(("sandbox.switch_listen", s.sandbox.switch_listen))
    intake_host, intake_port = parse_listen(s.intake.listen)
    running = _get_json(f"http://{_loopback_for(intake_host)}:{intake_port}/healthz")
    ours = isinstance(running, dict) and "daemon_id" in running
    if ours and s.storage.database_url() is None:
        from .restore import database_in_use

        ours = database_in_use(Path(s.storage.path))
    out: list[Check] = []
    for key, listen in listens:
        name = f"listen {key}"
        host, port = parse_listen(listen)
        if port == 0:
            out.append(ok(name, f"{listen}: a free port is picked at start"))
            continue
        problem = _bind_problem(host, port)
        if problem is None:
            out.append(ok(name, f"{listen} is free"))
        elif problem != errno.EADDRINUSE:
            out.append(
                fail(name, f"{listen} cannot be bound: {os.strerror(problem)}", f"fix {key}")
            )
        elif ours and running.get(_SERVED_BY.get(key, "daemon_id")):
            out.append(
                ok(name, f"{listen} is held by this pa-bridge (daemon {running['daemon_id']})")
            )
        elif key == "sandbox.listen" and ours:
            out.append(ok(name, f"{listen} is held by this pa-bridge's sandbox"))
        else:
            out.append(
                fail(
                    name,
                    f"{listen} is in use by another program",
                    f"stop it (`ss -ltnp 'sport = :{port}'` names it), or set {key} to a free port",
                )
            )
    return out


#: how long the switch check listens after a TLS handshake for a refusal
_AFTER_HANDSHAKE_S = 0.5


def check_switch(s: Settings) -> list[Check]:
    """Each ``inline.switch`` address (issue 30) takes a connection within
    ``inline.connect_timeout_seconds``, and with ``switch_tls`` completes a TLS
    handshake verified as the relay verifies it. Nothing is sent."""
    st = s.inline
    if st.listen is None:
        return []
    from .tap.runner import switch_tls

    try:
        ctx = switch_tls(s)
    except (OSError, ssl.SSLError) as e:
        return [
            fail(
                "switch",
                f"TLS to the switch cannot be set up: {e}",
                "check inline.switch_ca_file, switch_cert_file and switch_key_file",
            )
        ]
    out: list[Check] = []
    for address in as_list(st.switch):
        name = f"switch {address}"
        try:
            out.append(
                ok(
                    name,
                    _reach_switch(address, ctx, st.switch_server_name, st.connect_timeout_seconds),
                )
            )
        except ssl.SSLCertVerificationError as e:
            out.append(
                fail(
                    name,
                    f"TLS: the switch's certificate is not trusted: {e.verify_message}",
                    "set inline.switch_ca_file to the switch's CA (or switch_server_name to the"
                    " name in its certificate)",
                )
            )
        except (ssl.SSLError, _ClosedAfterHandshake) as e:
            out.append(
                fail(
                    name,
                    f"TLS: {getattr(e, 'reason', None) or e}",
                    "does the switch speak TLS here, and want a client certificate?"
                    " (inline.switch_tls, switch_cert_file, switch_key_file)",
                )
            )
        except TimeoutError:
            out.append(
                fail(
                    name,
                    f"unreachable: no answer within {st.connect_timeout_seconds:g} s",
                    "check inline.switch and the store's route to the switch",
                )
            )
        except OSError as e:
            why = "connection refused" if isinstance(e, ConnectionRefusedError) else str(e)
            out.append(
                fail(
                    name, f"unreachable: {why}", "check inline.switch (host:port, as written down)"
                )
            )
    return out


class _ClosedAfterHandshake(Exception):
    """The switch closed the connection right after the TLS handshake."""


def _reach_switch(
    address: str, ctx: ssl.SSLContext | None, server_name: str | None, timeout: float
) -> str:
    """Connect to the switch (and shake hands) as the relay does; what it took."""
    host, port = parse_listen(address)
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        if ctx is None:
            return f"reachable (plain TCP, {round((time.monotonic() - started) * 1000)} ms)"
        name = server_name or host
        with ctx.wrap_socket(raw, server_hostname=name) as tls:
            ms = round((time.monotonic() - started) * 1000)
            # TLS 1.3: a switch refuses a client certificate after the handshake
            tls.settimeout(_AFTER_HANDSHAKE_S)
            try:
                if tls.recv(1) == b"":
                    raise _ClosedAfterHandshake(
                        "the switch closed the connection right after the handshake"
                    )
            except TimeoutError:
                pass  # it waits for a claim, as a switch does
            return f"reachable ({tls.version()}, certificate verified for {name}, {ms} ms)"


def check_forward_url(s: Settings) -> list[Check]:
    """``callbacks.forward_url`` (the dispensing system's webhook) answers: any HTTP
    answer to a HEAD (a signed POST is only ever a real change)."""
    url = s.callbacks.forward_url
    if not url:
        return []
    name = "webhook callbacks.forward_url"
    shown = origin(url) if url.startswith(("http://", "https://")) else "(not an http URL)"
    try:
        r = httpx.head(url, timeout=REACH_TIMEOUT_S, follow_redirects=False)
    except httpx.HTTPError as e:
        return [
            fail(
                name,
                f"{shown}: unreachable: {failure_kind(e)}",
                "check callbacks.forward_url and that the dispensing system's receiver runs",
            )
        ]
    if r.status_code >= 500:
        return [warn(name, f"{shown} answers HTTP {r.status_code}", "check the receiver")]
    return [ok(name, f"{shown} answers (HTTP {r.status_code} to a HEAD)")]


# ---- reconciliation (issue 28) ----------------------------------------------------------
def check_reconcile(s: Settings) -> list[Check]:
    """Whether reconciliation is on (it needs an api_id), and what its last complete
    pass found: changes mean callbacks are being lost."""
    from .service.reconcile import summary
    from .store import StoreError

    off = s.reconcile_off()
    if off is not None:
        return [warn("reconciliation", f"off: {off}; callbacks the service fails to"
                     " deliver are never found", "set service.api_id and service.api_url"
                     " (the requests resource) from the service's developer account")]  # fmt: skip
    every = f"every {s.reconcile.interval_minutes:g} min"
    out = [ok("reconciliation", f"on ({'the sandbox' if s.sandbox_enabled else s.service.api_url},"
              f" {every})")]  # fmt: skip
    url = s.storage.database_url()
    try:
        if url is not None:
            db: Any = files.open_url(url)
        elif Path(s.storage.path).is_file():
            db = files.open_database(s.storage.path)
        else:
            return out
    except (StoreError, DatabaseError, OSError):
        return out  # the database check says why
    try:
        _, last = summary(db)
    except Exception:  # an older schema, a lacking privilege: the database checks say
        last = None
    finally:
        db.conn.close()
    if last is None:
        out.append(ok("reconciliation pass", "no complete pass yet"))
    elif last.get("changes"):
        out.append(warn("reconciliation pass", f"the last complete pass ({last.get('finished_at')})"
                        f" found {last['changes']} change(s) the callbacks had missed:"
                        " callbacks are being lost", "check that the service reaches"
                        " callbacks.listen (its certificate, the firewall, the URL registered"
                        " with the service); /healthz says callbacks_lost until a pass finds"
                        " none"))  # fmt: skip
    else:
        out.append(ok("reconciliation pass", f"{last.get('finished_at')}: {last.get('read')}"
                      " PAs read, no change the callbacks had missed"))  # fmt: skip
    return out


# ---- all ------------------------------------------------------------------------------
def run_checks(config_path: str | None, *, now: float | None = None) -> list[Check]:
    t = time.time() if now is None else now
    checks, settings, _loaded = check_config(config_path)
    if settings is None:
        checks.append(
            warn(
                "checks",
                "the remaining checks need a configuration that parses",
                "fix the config first",
            )
        )
        return checks
    checks += check_secrets(settings)
    checks += check_database(settings, config_path)
    checks += check_tls(settings, now=t)
    checks += check_listeners(settings)
    checks += check_switch(settings)
    checks += check_security(settings)
    checks += check_service(settings)
    checks += check_forward_url(settings)
    checks += check_reconcile(settings)
    return checks


# ---- issue 29: the encryption key, the console's sign-in, the audit chain -------------


def check_security(s: Settings) -> list[Check]:
    """The key PHI is sealed with (found, private, the database's), values still in
    plain text, who can sign in to the console, and the audit log's chain."""
    from .encryption import key_source
    from .store import StoreError, crypto, files

    out: list[Check] = []
    try:
        src = key_source(s)
    except crypto.KeyProblem as e:
        return [fail("encryption key", str(e), "set [encryption] key_file")]
    url = s.storage.database_url()
    db: Any = None
    try:
        if url is not None:
            db = files.open_url(url)
        elif Path(s.storage.path).exists():
            db = files.open_database(s.storage.path)
    except StoreError:
        db = None  # check_database said why
    try:
        return _check_security(s, src, db, out)
    except (DatabaseError, PgError) as e:
        if not _migrations_pending(s):  # every table is there by its schema: one went
            out.append(
                fail(
                    "audit log",
                    f"cannot read the audit log: {e}".splitlines()[0],
                    "its tables (or the keys' and people's) were changed or removed:"
                    " `pa-bridge audit verify`; restore a backup",
                )
            )
            return out
        out.append(  # an older schema: the daemon migrates it at start
            warn(
                "encryption key",
                "the database's schema is older: checked at the daemon's start",
                "start the daemon once (it migrates), then run doctor again",
            )
        )
        return out
    finally:
        if db is not None:
            db.conn.close()


def _migrations_pending(s: Settings) -> bool:
    """Whether the database misses migrations this version has (or cannot say)."""
    from .store import StoreError

    url = s.storage.database_url()
    try:
        if url is not None:
            applied = files.pg_facts(url, BACKUP_MARK).applied
        else:
            applied = files.inspect_file(Path(s.storage.path), BACKUP_MARK).applied
    except (StoreError, DatabaseError, PgError):
        return True
    return applied is None or any(n not in applied for n in migrations.known())


def _check_security(s: Settings, src: Any, db: Any, out: list[Check]) -> list[Check]:
    from .audit_trail import anchor_path, check_reset, read_anchors
    from .store import audit, crypto, users

    sealed = db is not None and crypto.has_sealed(db)
    keys = None
    if not src.path.exists():
        if not (src.default and not sealed):
            out.append(
                fail(
                    "encryption key",
                    f"{src.words}: no such file",
                    "put the key file back (the backups of it), or fix [encryption] key_file",
                )
            )
            return out
        out.append(ok("encryption key", f"{src.words}: created at the first start"))
    else:
        try:
            keys = crypto.Keyring(src.path, src.words)
        except crypto.KeyProblem as e:
            out.append(fail("encryption key", str(e), "restore the key file from its copy"))
            return out
        mode = stat.S_IMODE(src.path.stat().st_mode)
        if mode & 0o077:
            out.append(
                warn("encryption key", f"{src.words} has mode {mode:04o}", f"chmod 600 {src.path}")
            )
        elif src.default:
            out.append(
                warn(
                    "encryption key",
                    f"{src.words}, beside the database: a copy of the disk has both",
                    "move it off the database's disk, or into a systemd credential; set [encryption] key_file",
                )
            )
        else:
            out.append(
                ok("encryption key", f"{src.words}, mode {mode:04o}, key {keys.current_id} seals")
            )
    if db is not None:
        problems = crypto.check_keys(db, keys) if keys is not None else []
        for p in problems:
            out.append(fail("encryption key", p, "give the key file this database was sealed with"))
        if not problems:
            counts = crypto.count_by_key(db)
            plain = counts.pop("plain", 0)
            current = keys.current_id if keys is not None else None
            older = {k: n for k, n in counts.items() if k != current}
            if plain:
                out.append(
                    warn(
                        "PHI at rest",
                        f"{plain} value(s) stored in plain text (from before encryption)",
                        "pa-bridge keys encrypt-existing (it takes a backup first)",
                    )
                )
            else:
                out.append(ok("PHI at rest", f"{sum(counts.values())} value(s), every one sealed"))
            if older:
                said = ", ".join(f"{n} under key {k}" for k, n in older.items())
                out.append(
                    warn(
                        "PHI at rest",
                        f"{said} (older keys)",
                        "`pa-bridge keys rotate --reseal` seals them with the current key (no new key)",
                    )
                )
    out.extend(_check_people(s, db, users))
    if db is not None:
        path = anchor_path(s)
        v = audit.verify(db, read_anchors(path))
        if v.problem is None:
            problem, _note = check_reset(db, path)
            v = dataclasses.replace(v, problem=problem)
        if v.problem is not None:
            out.append(
                fail(
                    "audit log",
                    v.problem,
                    "pa-bridge audit verify; see docs/operations.md, Security",
                )
            )
        else:
            out.append(ok("audit log", f"{v.entries} entries chained, anchors in {path} checked"))
    return out


def _check_people(s: Settings, db: Any, users: Any) -> list[Check]:
    host, _ = parse_listen(s.intake.listen)
    exposed = not is_loopback(host)
    anyone = db is not None and users.any_users(db)
    totp = s.console.totp == "required" or (s.console.totp == "auto" and exposed)
    if exposed and not anyone:
        return [
            warn(
                "console sign-in",
                f"intake.listen {s.intake.listen} asks everyone to sign in, and no one is added",
                "pa-bridge users add NAME",
            )
        ]
    if not anyone and not s.oidc.enabled():
        return [
            ok("console sign-in", "loopback only, no one added: the console asks no one to sign in")
        ]
    how = "password and TOTP code" if totp else "password (no TOTP code on loopback)"
    if s.oidc.enabled():
        how += f", or the identity provider {s.oidc.issuer}"
    return [ok("console sign-in", f"required: {how}; idle time-out {s.console.idle_minutes:g} min")]
