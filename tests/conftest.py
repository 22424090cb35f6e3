"""Shared fixtures: temporary databases that are always closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pa_bridge.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "pa-bridge.sqlite3")
    try:
        yield s
    finally:
        s.close()
