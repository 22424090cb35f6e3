"""The daemon's hold on the callback listener's child process (decision 0008).

The daemon's own process keeps the single writer (decision 0004); the HTTP side of
``POST /callbacks/pharmacy`` runs in a child (``python -m pa_bridge.callbacks.child``)
so that it does not share the daemon's GIL with the SQL. :class:`CallbackFront`
starts it, restarts it on the same address when it exits on its own, and stops it.

The child stops when its stdin (a pipe from the daemon) reaches end of file: the
daemon closes it to stop the child, which then finishes the requests in flight; the
child ignores SIGTERM and SIGINT, and asks the kernel for SIGKILL when the daemon
goes (Linux), so a killed daemon leaves no listener behind.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import select
import subprocess
import sys
import threading

from ..config import Settings
from ..logs import log_event
from ..wsgi import Listening
from .framing import FrameServer, Handler

__all__ = ["CHILD_MODULE", "CallbackFront", "CallbackFrontError"]

#: What the daemon runs, as ``python -m``, for the listener.
CHILD_MODULE = "pa_bridge.callbacks.child"


class CallbackFrontError(OSError):
    """The callback listener could not start (the message names the key)."""


def _readable(fd: int, timeout_s: float) -> bool:
    """poll, not select: with many connections open, descriptors pass 1023."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _stop_child(proc: subprocess.Popen[bytes] | None) -> None:
    """End of file on its stdin is how the child is told to stop: it finishes the
    requests in flight and exits. (It ignores SIGTERM, which systemd sends to every
    process of the unit at once.)"""
    if proc is None:
        return
    if proc.poll() is None:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _close_pipes(proc)


class CallbackFront(Listening):
    """Starts, watches and stops the child; its :class:`FrameServer` reads what the
    child hands over and replies.

    ``handle`` gets every message waiting at once and returns one ``(status, payload)``
    per message, in order, after the commit. It runs on one thread of the daemon.
    Its ``address``/``port``/``scheme``/``url`` are those of :class:`WsgiServer`.
    """

    def __init__(
        self,
        settings: Settings,
        handle: Handler,
        *,
        restart_delay_s: float = 1.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self._frames = FrameServer(handle)
        self._restart_delay_s = restart_delay_s
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._bound: tuple[str, int] | None = None
        self._scheme = "http"
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    # -- lifecycle --
    def start(self) -> CallbackFront:
        self._frames.start()
        try:
            self._spawn(self.settings.callbacks.listen)
        except BaseException:
            self.stop()
            raise
        self._watcher = threading.Thread(target=self._watch, name="callbacks-watch", daemon=True)
        self._watcher.start()
        return self

    def _spawn(self, listen: str) -> None:
        assert self._frames.directory is not None
        proc = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        # settings (with their secrets) go through the pipe, never argv or environment;
        # the pipe then stays open: its end of file tells the child to stop
        proc.stdin.write(pickle.dumps((self.settings, listen, self._frames.directory)))
        proc.stdin.flush()
        if not _readable(proc.stdout.fileno(), self._start_timeout_s):
            proc.kill()
            proc.wait()
            _close_pipes(proc)
            raise CallbackFrontError(
                f"callbacks.listen {listen}: the listener did not start within"
                f" {self._start_timeout_s:g} s"
            )
        line = proc.stdout.readline().decode("utf-8", "replace").strip()
        if not line.startswith("ready "):
            proc.wait()
            _close_pipes(proc)
            raise CallbackFrontError(line.removeprefix("error ") or "the callback listener exited")
        _, host, port, scheme = line.split(" ")
        self._bound, self._scheme, self._proc = (host, int(port)), scheme, proc

    def _watch(self) -> None:
        """Restart the child on the same address if it exits while we run."""
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.is_set():
                return
            _close_pipes(proc)
            log_event("callbacks.listener_exited", level=logging.ERROR, returncode=code)
            while not self._stopping.wait(self._restart_delay_s):
                host, port = self.address
                try:
                    self._spawn(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
                except (CallbackFrontError, OSError) as e:
                    log_event(
                        "callbacks.listener_restart_failed", level=logging.ERROR, error=str(e)
                    )
                    continue
                self.restarts += 1
                log_event(
                    "callbacks.listener_restarted", pid=self._proc.pid if self._proc else None
                )
                break

    def stop(self) -> None:
        """Stop the child (it finishes the requests in flight), then our threads."""
        self._stopping.set()
        _stop_child(self._proc)
        watcher = self._watcher  # it ends once the child is gone
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=self._start_timeout_s + 5)
        _stop_child(self._proc)  # one that a restart under way started meanwhile
        self._frames.stop()  # its thread ends once the child's sockets close

    @property
    def alive(self) -> bool:
        """The child runs and the thread that commits for it too."""
        return self._frames.alive and self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def scheme(self) -> str:
        return self._scheme
