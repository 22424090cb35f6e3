"""The daemon: the process serving the intake API and the callback receiver (decision
0045), running the scheduler, owning the database. Started by ``pa-bridge serve``."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from .app import build_use_cases, make_client, make_reconciler
from .audit_trail import schedule_anchors
from .callbacks.ingest import CallbackIntake, CallbackReceiver
from .callbacks.receiver import create_callback_app
from .client import PaServiceClient
from .config import (
    RELOADABLE,
    ConfigError,
    Settings,
    changed_keys,
    load_settings,
    parse_listen,
    secrets_from_credentials_directory,
)
from .encryption import open_store
from .logs import log_event
from .metrics import Metrics
from .outbox import Hold, Outbox, held_summary, queue_summary
from .restore import RestoreError, adopt_restored, interrupted_restore, lock_database_dir
from .service import UseCases
from .service.expiry import ExpiryWatch
from .service.reconcile import Reconciler
from .service.reconcile import health as reconcile_health
from .service_health import ServiceHealth
from .store import Status, Store, create_private, redact_url
from .store.files import starts_with
from .wsgi import Listening, WsgiServer, certificate_not_after, server_tls_context

#: a callback certificate this close to its end makes /healthz degraded (doctor warns
#: at the same time)
CERT_WARN_DAYS = 30

__all__ = [
    "Daemon",
    "StartupError",
    "WsgiServer",  # re-exported for the tests
    "build_use_cases",
    "check_database_path",
]


#: how often the scheduler asks whether a reconciliation pass is due, and answers
#: `pa-bridge reconcile` commands waiting for it (the pass itself: reconcile.interval_minutes)
RECONCILE_TICK_S = 5

#: Descriptors the daemon asks for (its soft limit, raised up to the hard one): each
#: open connection holds one, and the listeners serve many slow or idle ones at once
#: without a thread each (decision 0013). systemd's default soft limit is 1024.
OPEN_FILES = 8192


def raise_open_files_limit(wanted: int = OPEN_FILES) -> int:
    """Raise RLIMIT_NOFILE's soft limit to ``wanted`` (never past the hard limit,
    never lower); returns the soft limit in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


class StartupError(Exception):
    """The daemon cannot start for a reason store IT fixes: ``key`` names the setting,
    the message the path or address and what to do (one line, no traceback)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


#: the first bytes of every SQLite 3 database file
_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_database_path(path: Path) -> None:
    """Before anything opens it: the SQLite file's directory is writable by this user
    (SQLite writes ``-wal`` and ``-shm`` beside it), and the file, if there, readable
    and writable; else :class:`StartupError` naming the path and what to do."""
    user = _user()
    run_as = (
        "or run pa-bridge as the user that owns it (the unit's User=pa-bridge;"
        " its StateDirectory= makes /var/lib/pa-bridge that user's)"
    )
    d = path.absolute().parent
    if not d.exists():
        nearest = d
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not os.access(nearest, os.W_OK | os.X_OK):
            raise StartupError(
                "storage.path",
                f"{d} does not exist and user {user} may not create it in {nearest}:"
                f" create it (`install -d -o {user} -m 0700 {d}`), {run_as}",
            )
        return
    if not d.is_dir():
        raise StartupError("storage.path", f"{d} is not a directory: fix storage.path")
    if path.is_dir():
        raise StartupError(
            "storage.path",
            f"{path} is a directory, not the database file: name the file in it"
            f' (e.g. storage.path = "{path / "pa-bridge.sqlite3"}")',
        )
    # read before SQLite opens it: no lock of this process is lost by the read
    if path.is_file() and path.stat().st_size > 0 and not starts_with(path, _SQLITE_MAGIC):
        raise StartupError(
            "storage.path",
            f"{path} is not an SQLite database (it does not start as one): storage.path"
            " names another file (the config? a file of another program?); point it at"
            " pa-bridge's database, or at a path where it may create one",
        )
    needed = (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}.lock"))
    if not os.access(d, os.W_OK | os.X_OK) and not all(p.exists() for p in needed):
        # SQLite creates its -wal and -shm beside the file, the daemon its lock: with
        # all of them there already (a directory made read-only while it served, issue
        # 32), it can start; otherwise it cannot, and says so before SQLite does
        raise StartupError(
            "storage.path",
            f"the directory {d} is not writable by user {user} (the database's -wal and"
            f" -shm files live beside it): `chown {user} {d}`, {run_as}",
        )
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            raise StartupError(
                "storage.path",
                f"{p} is not readable and writable by user {user}: `chown {user} {p}`"
                f" (and the database's -wal and -shm), {run_as}",
            )


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        config_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.settings = settings
        #: the file :meth:`reload` reads again (None: the environment alone)
        self.config_path = config_path
        self.clock = clock
        self.store: Store | None = None
        self.sandbox: Any = None
        self.client: PaServiceClient | None = None
        self.use_cases: UseCases | None = None
        self.scheduler: BackgroundScheduler | None = None
        self.intake_server: WsgiServer | None = None
        self.callback_server: WsgiServer | None = None
        self.callback_receiver: CallbackReceiver | None = None
        self.callback_intake: CallbackIntake | None = None
        self.intake_app: Any = None
        self._reload_lock = threading.Lock()
        self.reconciler: Reconciler | None = None
        self.expiry: ExpiryWatch | None = None
        #: [tap] and [inline] (issue 30), and the sandbox's switch behind [inline]
        self.wire: Any = None
        self.switch: Any = None
        self._stopped = threading.Event()
        self._stopping = False
        self.service_health = ServiceHealth(clock)
        self._lock_fd: int | None = None
        self._db_problem: str | None = None
        #: when the callback listener's certificate expires (None: no TLS)
        #: when each TLS certificate pa-bridge presents expires, by its health name
        self._cert_not_after: dict[str, float] = {}

    # ---- start -----------------------------------------------------------------
    def start(self) -> None:
        s = self.settings
        raise_open_files_limit()
        url = s.storage.database_url()
        if url is not None:  # PostgreSQL: several daemons may share it (issue 18)
            self.store = open_store(s)  # with its encryption key (decision 0033)
            log_event("daemon.database_ready", engine="postgresql", url=redact_url(url))
        else:
            half_done = interrupted_restore(s.storage.path, self.config_path)
            if half_done is not None:  # serving now would make a new, empty database
                raise RestoreError(str(half_done))
            check_database_path(Path(s.storage.path))
            self._lock_database()
            self.store = open_store(s)
            log_event("daemon.database_ready", path=str(s.storage.path))
        self._after_restore()
        # Start the callback receiver first: the sandbox needs its real address. It
        # commits with the store alone and wakes the queue, built first for it; the
        # queue's deliverers are registered with the use cases, which need the client.
        metrics = Metrics()
        outbox = Outbox(self.store, None, s.queue, clock=self.clock)
        intake = CallbackIntake(
            self.store,
            forward=bool(s.callbacks.forward_url),
            pharmacies=[p.provider_id for p in s.pharmacies],  # a callback-only PA's store
        )
        receiver = CallbackReceiver(intake, metrics, on_stored=outbox.wake)
        self.callback_intake, self.callback_receiver = intake, receiver
        self.callback_server = self._start_callbacks(receiver)
        self._check_certificate()
        callback_url = s.callbacks.public_url or self._callback_url(self.callback_server)
        if s.sandbox_enabled:
            self._start_sandbox(callback_url)
        self.client = self._make_client()
        self.use_cases = build_use_cases(
            s, self.store, self.client, metrics=metrics, clock=self.clock, outbox=outbox
        )
        self.use_cases.outbox.observer = self.service_health.delivery
        metrics.watch_service(self.service_health)
        # what was held for our configuration is tried again: it may have changed
        self.use_cases.outbox.release(Hold.CONFIGURATION)
        # issue 28: missed callbacks read back, and approvals about to lapse
        self.reconciler = make_reconciler(
            s,
            self.store,
            intake,
            metrics=metrics,
            sandbox_url=self.sandbox.url if self.sandbox is not None else None,
            clock=self.clock,
            on_change=outbox.wake,
        )
        self.expiry = ExpiryWatch(
            s, self.store, forward=intake.forward, clock=self.clock, on_change=outbox.wake
        )
        self.scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone="UTC",
        )
        self.use_cases.outbox.start()
        self._extra_jobs(self.scheduler)
        if s.service.probe_seconds > 0:
            self.scheduler.add_job(
                self.probe_service,
                "interval",
                seconds=s.service.probe_seconds,
                id="service-probe",
                next_run_time=datetime.now(UTC) + timedelta(seconds=2),
            )
        self.scheduler.start()
        from .web.intake import create_intake_app

        app = self.intake_app = create_intake_app(
            self.use_cases,
            tokens=s.intake_tokens(),
            scoped_tokens=s.scoped_intake_tokens(),
            max_body_bytes=s.intake.max_body_bytes,
            health=self._health,
            allowed_hosts=s.intake.allowed_hosts,
        )
        self.intake_server = WsgiServer.from_listen(app, s.intake.listen, name="intake")
        try:
            self.intake_server.start()
        except OSError as e:
            reason = e.strerror or str(e)
            raise OSError(e.errno, f"intake.listen {s.intake.listen}: {reason}") from e
        self._start_wire()
        self._notify("READY=1\nSTATUS=serving")
        self._start_watchdog()
        log_event(
            "daemon.ready",
            intake=self.intake_server.url,
            callbacks=self.callback_server.url,
            sandbox=self.sandbox.url if self.sandbox else None,
        )

    def _start_callbacks(self, receiver: CallbackReceiver) -> WsgiServer:
        """The callback receiver on ``callbacks.listen`` (TLS when configured)."""
        s = self.settings
        app = create_callback_app(
            receiver,
            username=s.callbacks.username,
            password=s.secret(s.callbacks.password) if s.callbacks.password else "",
            max_body_bytes=s.callbacks.max_body_bytes,
        )
        cert, key = s.callbacks.tls_cert, s.callbacks.tls_key
        try:
            tls = server_tls_context(cert, key) if cert is not None and key is not None else None
            return WsgiServer.from_listen(
                app, s.callbacks.listen, name="callbacks", ssl_context=tls
            ).start()
        except (OSError, ValueError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            errno = e.errno if isinstance(e, OSError) else None
            raise OSError(errno, f"callbacks.listen {s.callbacks.listen}: {reason}") from e

    @staticmethod
    def _callback_url(server: Listening) -> str:
        host, port = server.address
        if host in ("0.0.0.0", "::", ""):  # noqa: S104 - a wildcard listen is reached on loopback
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{server.scheme}://{host}:{port}/callbacks/pharmacy"

    def _start_sandbox(self, callback_url: str) -> None:
        from .sandbox import SandboxConfig, SandboxPharmacy, SandboxServer

        s = self.settings
        host, port = parse_listen(s.sandbox.listen)
        db_path = None
        if s.sandbox.persist:
            path = s.storage.path.parent / "sandbox.sqlite3"
            create_private(path)  # never an open/close of a file SQLite may hold
            db_path = str(path)
        cfg = SandboxConfig(
            db_path=db_path,
            step_seconds=s.sandbox.step_seconds,
            callback_url=callback_url,
            callback_username=s.callbacks.username,
            callback_password=s.secret(s.callbacks.password) or None,
            callback_verify=False,
            # a chain tried on the sandbox: each store's own credentials, for its claims
            pharmacies=tuple(
                SandboxPharmacy(*s.credentials(p), p.provider_id) for p in s.pharmacies
            ),
        )
        self.sandbox = SandboxServer(cfg, host=host, port=port)
        try:
            self.sandbox.start()
        except OSError as e:
            reason = e.strerror or str(e)
            raise OSError(
                e.errno,
                f"sandbox.listen {s.sandbox.listen}: {reason} (another pa-bridge, or"
                " `pa-bridge sandbox`, may hold it: set sandbox.listen to a free port)",
            ) from e
        log_event("daemon.sandbox_started", url=self.sandbox.url)

    def _start_wire(self) -> None:
        """``[tap]`` and ``[inline]`` when they listen; behind ``[inline]`` without a
        ``switch``, the sandbox's switch (the sandbox is on: the config says so)."""
        s = self.settings
        if s.tap.listen is None and s.inline.listen is None:
            return
        from .tap import WireListeners

        switch = None
        if s.inline.listen is not None and not s.inline.switch:
            from .sandbox.switch import SandboxSwitch

            host, port = parse_listen(s.sandbox.switch_listen)
            self.switch = SandboxSwitch(s.framing_profile(s.inline.framing), host, port).start()
            if self.sandbox is not None:
                self.sandbox.state.switch = self.switch
            switch = [(host, self.switch.port)]
            log_event("daemon.sandbox_switch_started", listen=self.switch.address)
        assert self.use_cases is not None
        self.wire = WireListeners(s, self.use_cases, switch=switch).start()

    def _make_client(self) -> PaServiceClient:
        return make_client(self.settings, self.sandbox.url if self.sandbox is not None else None)

    def _extra_jobs(self, scheduler: BackgroundScheduler) -> None:
        """Retention purge and VACUUM (see maintenance.py)."""
        assert self.store is not None
        try:
            from .maintenance import schedule_maintenance
        except ImportError:  # pragma: no cover - during development only
            return
        schedule_maintenance(scheduler, self.store, self.settings, clock=self.clock)
        schedule_anchors(scheduler, self.store, self.settings)
        if self.reconciler is not None and self.expiry is not None:
            soon = datetime.now(UTC) + timedelta(seconds=RECONCILE_TICK_S)
            scheduler.add_job(
                self.reconciler.tick,
                "interval",
                seconds=RECONCILE_TICK_S,
                id="reconcile-tick",
                next_run_time=soon,
            )
            scheduler.add_job(
                self._expiry_scan, "interval", seconds=60, id="expiry-scan", next_run_time=soon
            )

    def _expiry_scan(self) -> None:
        """Announce approvals entering the expiring window; never raises."""
        try:
            if self.expiry is not None:
                self.expiry.scan()
        except Exception as e:
            log_event("expiry.scan_failed", level=logging.ERROR, error=type(e).__name__)

    # ---- systemd ------------------------------------------------------------------
    def _notify(self, message: str) -> None:
        """sd_notify; a no-op when not started by systemd (no NOTIFY_SOCKET)."""
        if not os.environ.get("NOTIFY_SOCKET"):
            return
        import sdnotify

        sdnotify.SystemdNotifier().notify(message)

    def _start_watchdog(self) -> None:
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
            return
        interval = int(usec) / 1_000_000 / 2
        threading.Thread(
            target=self._watchdog, args=(interval,), name="watchdog", daemon=True
        ).start()

    def alive(self, timeout: float = 5.0) -> bool:
        """True while the scheduler runs and the write path commits (a probe write)."""
        sched = self.scheduler
        thread = getattr(sched, "_thread", None)
        if sched is None or not sched.running or (thread is not None and not thread.is_alive()):
            return False
        if self.use_cases is None or not self.use_cases.outbox.running:
            return False
        if self.store is None or not self.store.writer_alive:
            return False
        try:
            self.store.write(lambda db: None, timeout=timeout)
        except Exception:
            return False
        return True

    def _watchdog(self, interval: float) -> None:
        while not self._stopping and not self._stopped.wait(interval):
            if self._stopping:
                return
            if self.alive(timeout=interval):
                self._notify("WATCHDOG=1")
            else:
                log_event("daemon.watchdog_withheld", level=logging.ERROR)

    def _health(self) -> dict[str, Any]:
        """Merged into ``/healthz`` after the use cases' own checks: booleans decide
        readiness (503 when one is false); ``degraded`` lists what works but needs
        store IT (answered 200, status ``degraded``)."""
        sched = self.scheduler is not None and self.scheduler.running
        # the queue's delivery thread counts as part of the scheduling
        sched = sched and self.use_cases is not None and self.use_cases.outbox.running
        problem = self.store.problem() if self.store is not None else "not started"
        if problem != self._db_problem:
            if problem is not None:
                log_event("database.unhealthy", level=logging.ERROR, error=problem)
            elif self._db_problem is not None:
                log_event("database.recovered")
            self._db_problem = problem
        out: dict[str, Any] = {
            "database": problem is None,
            "database_error": problem,
            "scheduler": sched,
            "writer": self.store is not None and self.store.writer_alive,
            "callbacks": self.callback_server is not None and self.callback_server.alive,
            # which daemon answered, on what: several may share one PostgreSQL database
            "daemon_id": f"{socket.gethostname()}:{os.getpid()}",
            "database_engine": self.store.dialect if self.store is not None else None,
        }
        if self.wire is not None:  # [tap] / [inline]: their event loop runs
            out["wire"] = self.wire.alive
        out.update(self.service_health.snapshot())
        degraded = self.service_health.degraded_reasons()
        for name, not_after in self._cert_not_after.items():
            out[f"{name}_certificate_expires_at"] = datetime.fromtimestamp(
                not_after, UTC
            ).isoformat()
            state = self._certificate_state(name)
            if state is not None:
                degraded.append(f"{name}_{state}")
        if problem is None and self.use_cases is not None:
            counts, _ = queue_summary(self.store)  # type: ignore[arg-type]
            out["queue"] = {
                str(k): counts.get(k, 0) for k in (Status.PENDING, Status.FAILED, Status.HELD)
            }
            held = held_summary(self.store) if counts.get(Status.HELD) else {}  # type: ignore[arg-type]
            # why the held ones wait: restore, configuration, pharmacy
            out["queue_held_for"] = {k: held.get(k, 0) for k in (h.value for h in Hold)}
            if held.get(Hold.RESTORE):
                degraded.append("queue_held_after_restore")
            if held.get(Hold.CONFIGURATION) or held.get(Hold.PHARMACY):
                degraded.append("queue_held_for_configuration")
            if counts.get(Status.FAILED):
                degraded.append("queue_failed")
        if problem is None and self.reconciler is not None:  # issue 28
            out["reconcile"], reasons = reconcile_health(self.store.reader(), self.reconciler.off)  # type: ignore[union-attr]
            degraded += reasons
        out["degraded"] = degraded
        return out

    def _check_certificate(self) -> None:
        """Note when each certificate pa-bridge presents expires, and say so at start
        when one has expired or soon will (issue 32): the callback listener's (the
        service refuses an expired one, so no callback would arrive), the tap and inline
        listeners' (the dispensing system refuses it), inline's client certificate to
        the switch. ``/healthz`` says it while it lasts."""
        s = self.settings
        certs: dict[str, Path | None] = {"callbacks": s.callbacks.tls_cert}
        if s.tap.listen is not None:
            certs["tap"] = s.tap.tls_cert
        if s.inline.listen is not None:
            certs["inline"] = s.inline.tls_cert
            if s.inline.switch_tls:
                certs["inline_switch_client"] = s.inline.switch_cert_file
        self._cert_not_after = {}
        for name, cert in certs.items():
            not_after = None if cert is None else certificate_not_after(cert)
            if not_after is None:
                continue
            self._cert_not_after[name] = not_after
            state = self._certificate_state(name)
            if state is not None:
                log_event(
                    f"{name}.{state}",
                    level=logging.ERROR if state.endswith("expired") else logging.WARNING,
                    certificate=str(cert),
                    expires_at=datetime.fromtimestamp(not_after, UTC).isoformat(),
                )

    def _certificate_state(self, name: str) -> str | None:
        """``certificate_expired``, ``certificate_expiring`` (within CERT_WARN_DAYS) or
        None, for the certificate of that health name."""
        not_after = self._cert_not_after.get(name)
        if not_after is None:
            return None
        left = not_after - self.clock()
        if left <= 0:
            return "certificate_expired"
        return "certificate_expiring" if left < CERT_WARN_DAYS * 86400 else None

    def probe_service(self) -> None:
        """Reach for the service once and tell :attr:`service_health` what happened."""
        client = self.client
        if client is None:
            return
        from .client import ServiceError

        if client.dashboard_url:
            try:
                client.dashboard_login()
            except ServiceError as e:
                self.service_health.service_failed("probe.dashboard_login", e.code)
            except Exception as e:  # never let the probe stop the scheduler
                self.service_health.service_failed("probe.dashboard_login", type(e).__name__)
            else:
                self.service_health.service_answered("probe.dashboard_login")
            return
        import httpx

        s = self.settings.service
        try:
            r = httpx.get(
                client.outcomes_url,
                timeout=min(10.0, s.timeout_seconds),
                verify=s.verify,
                follow_redirects=False,
            )
        except httpx.TimeoutException:
            self.service_health.service_failed("probe.outcomes", "timeout")
        except httpx.HTTPError:
            self.service_health.service_failed("probe.outcomes", "unreachable")
        else:
            if r.status_code >= 500:
                self.service_health.service_failed("probe.outcomes", "http_error")
            else:  # the page for exploration, or a 4xx: something answered
                self.service_health.service_answered("probe.outcomes", credentials_checked=False)

    # ---- reload (SIGHUP) ------------------------------------------------------------
    def reload(self) -> bool:
        """Read the configuration again and apply what a running daemon can take
        (:data:`~pa_bridge.config.RELOADABLE`: stores, credentials, tokens, log level);
        then try again what was held for the configuration. A configuration with
        problems, or one changing a key that needs a restart, is refused as a whole
        (one log line per problem or key, never a value) and the running one stays.
        True when applied."""
        with self._reload_lock:
            self._notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")
            try:
                applied = self._reload()
                self._audit_reload(applied)
                return applied
            finally:
                self._notify("READY=1\nSTATUS=serving")

    def _audit_reload(self, applied: bool) -> None:
        """A reload is an administrative action: one audit entry (never a value)."""
        from .store import audit

        if self.store is None:
            return
        action = "config.reload" if applied else "config.reload_refused"
        try:
            self.store.write(
                lambda db: audit.add(db, "daemon", action, None, None, remote="signal:SIGHUP")
            )
        except Exception as e:  # the audit entry never stops a reload
            log_event("audit.write_failed", level=logging.ERROR, error=type(e).__name__)

    def _reload(self) -> bool:
        try:
            new = load_settings(self.config_path)
        except ConfigError as e:
            for problem in e.problems:
                log_event("config.reload_refused", level=logging.ERROR, problem=problem)
            return False
        changed = changed_keys(self.settings, new)
        restart = [k for k in changed if k not in RELOADABLE]
        for key in restart:
            log_event(
                "config.reload_refused",
                level=logging.ERROR,
                key=key,
                reason="needs a restart (systemctl restart pa-bridge); the running"
                " configuration stays",
            )
        if restart:
            return False
        self._apply(new)
        released = self.use_cases.outbox.release(Hold.CONFIGURATION) if self.use_cases else 0
        secrets = ("pharmacies", "service.password", "service.api_key", "intake.tokens")
        if secrets_from_credentials_directory(new) and not any(k in changed for k in secrets):
            # store IT fixed a credential file and reloaded: systemd did not copy it again
            log_event(
                "config.reloaded",
                level=logging.WARNING,
                changed=changed,
                released=released,
                note="no secret changed: the files in $CREDENTIALS_DIRECTORY are systemd's"
                " copies made when the service started (LoadCredential=); a changed"
                " credential file takes effect at `systemctl restart pa-bridge`",
            )
        else:
            log_event("config.reloaded", changed=changed, released=released)
        logging.getLogger().setLevel(new.logging.level)  # after its own line
        return True

    def _apply(self, new: Settings) -> None:
        """Swap in what :meth:`reload` may change (the log level aside); each use from
        now on sees it."""
        from .client import Credentials
        from .service.pharmacies import Pharmacies
        from .web.intake import set_tokens

        if self.use_cases is not None:
            self.use_cases.pharmacies.replace(Pharmacies.from_settings(new))
        if self.callback_intake is not None:  # a callback-only PA's store
            self.callback_intake.pharmacies = frozenset(p.provider_id for p in new.pharmacies)
        if self.client is not None and self.sandbox is None:  # the sandbox's are its own
            self.client.credentials = Credentials(*new.own_credentials())
        if self.intake_app is not None:
            set_tokens(self.intake_app, new.intake_tokens(), new.scoped_intake_tokens())
        self.settings = new

    # ---- one daemon per database, and restores ----------------------------------
    def _lock_database(self) -> None:
        """Hold ``<db>.lock`` (flock, not a POSIX lock: it cannot disturb SQLite's) for
        the daemon's life, so a second daemon and ``pa-bridge restore`` see it runs."""
        path = self.settings.storage.path
        create_private(path)
        self._lock_fd = lock_database_dir(path)

    def _after_restore(self) -> None:
        """A database that is a ``pa-bridge backup`` copy is being served for the first
        time: hold its undelivered queue items (they may have been delivered after the
        backup was taken), move the PA feed's cursor past anything handed out before,
        and record it (decision 0009)."""
        assert self.store is not None
        note = self.store.write(lambda db: adopt_restored(db, self.clock()))
        if note is not None:
            log_event(
                "database.restored",
                level=logging.WARNING,
                backup_taken_at=note["backup_taken_at"],
                held=note["held"],
            )

    # ---- stop -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop taking requests, finish those in flight, flush the writer, close."""
        if self._stopping:
            return
        self._stopping = True
        self._notify("STOPPING=1")
        log_event("daemon.stopping")
        if self.wire is not None:  # first: its requests in flight use what follows
            self.wire.stop()
        if self.switch is not None:
            self.switch.stop()
        for srv in (self.intake_server, self.callback_server):
            if srv is not None:
                srv.stop()
        if self.callback_receiver is not None:
            self.callback_receiver.unauthorized_log.flush()
        if self.reconciler is not None:
            self.reconciler.stop()  # a pass in progress ends at its next call
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.use_cases is not None:
            self.use_cases.close()
        if self.client is not None:
            self.client.close()
        if self.reconciler is not None:
            self.reconciler.close()
        if self.sandbox is not None:
            self.sandbox.stop()
        if self.store is not None:
            self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the .lock file: SQLite never opens it
            self._lock_fd = None
        log_event("daemon.stopped")
        self._stopped.set()

    def run_forever(self) -> None:
        """Start, then wait for SIGTERM/SIGINT; a second signal exits at once."""
        count = {"n": 0}

        def handler(signum: int, frame: Any) -> None:
            count["n"] += 1
            if count["n"] > 1:
                log_event("daemon.forced_exit", level=logging.WARNING)
                raise SystemExit(1)
            threading.Thread(target=self.stop, name="stopper", daemon=True).start()

        def on_hup(signum: int, frame: Any) -> None:  # systemctl reload pa-bridge
            threading.Thread(target=self.reload, name="reload", daemon=True).start()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGHUP, on_hup)
        self.start()
        # What start-up made (modules, the app, settings) lives as long as the process:
        # out of the collector's sight, each collection a claim triggers is shorter.
        gc.collect()
        gc.freeze()
        while not self._stopped.wait(0.5):
            pass
