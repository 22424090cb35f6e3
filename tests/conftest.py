"""Shared fixtures: temporary databases that are always closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pa_bridge.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "pa-bridge.sqlite3")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Any]:
    """Start an in-process daemon on loopback with free ports (sandbox by default)."""
    from pa_bridge.config import load_settings
    from pa_bridge.runtime import Daemon

    started: list[Daemon] = []

    def make(**sections: dict[str, Any]) -> Daemon:
        base: dict[str, dict[str, Any]] = {
            "storage": {"path": str(tmp_path / f"d{len(started)}.sqlite3")},
            "intake": {"listen": "127.0.0.1:0"},
            "callbacks": {"listen": "127.0.0.1:0"},
            "sandbox": {"step_seconds": 0.05, "listen": "127.0.0.1:0", "persist": False},
            "queue": {"poll_seconds": 0.1, "backoff_base_seconds": 0.1, "backoff_max_seconds": 0.5},
        }
        for k, v in sections.items():
            base.setdefault(k, {}).update(v)
        d = Daemon(load_settings(**base))
        started.append(d)
        d.start()
        return d

    yield make
    for d in started:
        d.stop()
