"""JSON with bounded nesting. Python's decoder recurses once per level, so a body of a
thousand ``[`` raises RecursionError (a 500, and on the callback path a whole commit
batch failing). Bodies nested deeper than :data:`MAX_DEPTH` are refused before they
are decoded; nothing we read is nested more than a few levels."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "TooDeep", "loads_bounded", "nesting_depth"]

MAX_DEPTH = 64


class TooDeep(ValueError):
    """The JSON text is nested deeper than allowed."""


def nesting_depth(raw: bytes | str, stop_at: int = MAX_DEPTH) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (strings skipped), or
    ``stop_at + 1`` as soon as it is exceeded. Cheap when there are few brackets."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= stop_at:
        return 0  # cannot be deeper than the number of openers
    depth = deepest = 0
    in_string = escaped = False
    for c in data:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_at:
                    return deepest
        elif c in (0x5D, 0x7D):
            depth -= 1
    return deepest


def loads_bounded(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises :class:`TooDeep` (a ValueError) for deep nesting."""
    if nesting_depth(raw, max_depth) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    return json.loads(raw)
