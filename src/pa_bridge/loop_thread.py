"""An asyncio event loop on a thread of its own, for the parts of the daemon (and of the
sandbox) that serve TCP with asyncio streams beside the threaded rest: started with a
coroutine that binds, stopped with one that winds down, and then every task left is
cancelled and every transport given the loop iterations it needs to close, so no
socket outlives the loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["LoopThread", "close_writers"]

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, setup: Callable[[], Awaitable[Any]]) -> None:
        """Run ``setup()`` on the new loop; raise what it raises (the thread is then
        gone), else return once it is done and the loop runs."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(setup())
            except BaseException as e:
                errors.append(e)
                ready.set()
                self._wind_down(loop)
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._wind_down(loop)

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            self._thread.join()
            raise errors[0]

    @staticmethod
    def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            for _ in range(3):  # closing transports call connection_lost soon after
                loop.run_until_complete(asyncio.sleep(0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def call(self, coro: Callable[[], Awaitable[T]], timeout: float | None = 10.0) -> T:
        """Run ``coro()`` on the loop and wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(_run(coro), self.loop).result(timeout)

    def stop(self, teardown: Callable[[], Awaitable[Any]] | None, timeout: float = 10.0) -> None:
        """Run ``teardown()`` (up to ``timeout``), stop the loop, wind it down, join."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        if teardown is not None:
            with contextlib.suppress(Exception):
                self.call(teardown, timeout=timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


async def _run(coro: Callable[[], Awaitable[T]]) -> T:
    return await coro()


async def close_writers(writers: set[asyncio.StreamWriter] | list[asyncio.StreamWriter]) -> None:
    """Close each writer and wait (briefly) until its transport is closed."""
    todo = list(writers)
    for w in todo:
        w.close()
    if todo:
        await asyncio.wait([asyncio.ensure_future(_closed(w)) for w in todo], timeout=2.0)


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await writer.wait_closed()
