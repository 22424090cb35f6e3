"""The daemon: the process serving the intake API, running the scheduler, owning the
database, and committing what its callback listener (a child process, decision 0008)
hands over. Started by ``pa-bridge serve``."""

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
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from .app import build_services, make_client
from .callbacks.ingest import CallbackReceiver, CallbackService
from .callbacks.supervisor import CallbackFront
from .client import PaServiceClient
from .config import Settings, parse_listen
from .logs import log_event
from .metrics import Metrics
from .outbox import Outbox, queue_summary
from .restore import adopt_restored, lock_database_dir
from .service import Services
from .service_health import ServiceHealth
from .store import PgStore, Status, Store, create_private, redact_url
from .wsgi import Listening, WsgiServer

__all__ = ["Daemon", "WsgiServer", "build_services"]  # WsgiServer re-exported for the tests


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


class Daemon:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.store: Store | None = None
        self.sandbox: Any = None
        self.client: PaServiceClient | None = None
        self.bridge: Services | None = None
        self.scheduler: BackgroundScheduler | None = None
        self.intake_server: WsgiServer | None = None
        self.callback_server: CallbackFront | None = None
        self.callback_receiver: CallbackReceiver | None = None
        #: [tap] and [inline] (issue 30), and the sandbox's switch behind [inline]
        self.wire: Any = None
        self.switch: Any = None
        self._stopped = threading.Event()
        self._stopping = False
        self.service_health = ServiceHealth(clock)
        self._lock_fd: int | None = None
        self._db_problem: str | None = None

    # ---- start -----------------------------------------------------------------
    def start(self) -> None:
        s = self.settings
        raise_open_files_limit()
        url = s.storage.database_url()
        if url is not None:  # PostgreSQL: several daemons may share it (issue 18)
            self.store = PgStore(
                url,
                max_connections=s.storage.max_connections,
                lock_timeout_ms=s.storage.busy_timeout_ms,
            )
            log_event("daemon.database_ready", engine="postgresql", url=redact_url(url))
        else:
            self._lock_database()
            self.store = Store(s.storage.path, busy_timeout_ms=s.storage.busy_timeout_ms)
            log_event("daemon.database_ready", path=str(s.storage.path))
        self._after_restore()
        # Start the callback listener first: the sandbox needs its real address. It
        # commits with the store alone and wakes the queue, built first for it; the
        # queue's deliverers are registered with the services, which need the client.
        metrics = Metrics()
        outbox = Outbox(self.store, None, s.queue, clock=self.clock)
        service = CallbackService(
            self.store,
            forward=bool(s.callbacks.forward_url),
            pharmacies=[p.provider_id for p in s.pharmacies],  # a callback-only PA's store
        )
        receiver = CallbackReceiver(service, metrics, on_stored=outbox.wake)
        self.callback_receiver = receiver
        self.callback_server = CallbackFront(s, receiver.handle).start()
        callback_url = s.callbacks.public_url or self._callback_url(self.callback_server)
        if s.sandbox_enabled:
            self._start_sandbox(callback_url)
        self.client = self._make_client()
        self.bridge = build_services(
            s, self.store, self.client, metrics=metrics, clock=self.clock, outbox=outbox
        )
        self.bridge.outbox.observer = self.service_health.delivery
        metrics.watch_service(self.service_health)
        self.scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone="UTC",
        )
        self.bridge.outbox.start()
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

        app = create_intake_app(
            self.bridge,
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
        self.sandbox.start()
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
        assert self.bridge is not None
        self.wire = WireListeners(s, self.bridge, switch=switch).start()

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
        if self.bridge is None or not self.bridge.outbox.running:
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
        """Merged into ``/healthz`` after the bridge's own checks: booleans decide
        readiness (503 when one is false); ``degraded`` lists what works but needs
        store IT (answered 200, status ``degraded``)."""
        sched = self.scheduler is not None and self.scheduler.running
        # the queue's delivery thread counts as part of the scheduling
        sched = sched and self.bridge is not None and self.bridge.outbox.running
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
        if problem is None and self.bridge is not None:
            counts, _ = queue_summary(self.store)  # type: ignore[arg-type]
            out["queue"] = {
                str(k): counts.get(k, 0) for k in (Status.PENDING, Status.FAILED, Status.HELD)
            }
            if counts.get(Status.HELD):
                degraded.append("queue_held_after_restore")
            if counts.get(Status.FAILED):
                degraded.append("queue_failed")
        out["degraded"] = degraded
        return out

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
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.bridge is not None:
            self.bridge.close()
        if self.client is not None:
            self.client.close()
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

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        self.start()
        # What start-up made (modules, the app, settings) lives as long as the process:
        # out of the collector's sight, each collection a claim triggers is shorter.
        gc.collect()
        gc.freeze()
        while not self._stopped.wait(0.5):
            pass
