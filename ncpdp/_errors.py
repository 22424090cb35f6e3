"""The one error hierarchy of :mod:`ncpdp`.

Callers branch on the type and read the attributes; the message is for people.
"""

from __future__ import annotations

__all__ = ["NcpdpError", "ParseError", "SerializeError", "CodecError", "ModelError"]


class NcpdpError(Exception):
    """Base of every error this package raises."""


class ParseError(NcpdpError):
    """Input that is not a well-formed NCPDP transmission.

    ``offset`` is the 0-based byte offset where the problem was found;
    ``segment_id`` (e.g. ``"07"``) and ``field_id`` (e.g. ``"D2"``) name the place
    when it is known, else they are ``None``.
    """

    def __init__(
        self,
        reason: str,
        *,
        offset: int,
        segment_id: str | None = None,
        field_id: str | None = None,
    ) -> None:
        self.reason = reason
        self.offset = offset
        self.segment_id = segment_id
        self.field_id = field_id
        super().__init__(self._render())

    def _render(self) -> str:
        where = [f"byte offset {self.offset}"]
        if self.segment_id is not None:
            where.append(f"segment AM{self.segment_id}")
        if self.field_id is not None:
            where.append(f"field {self.field_id}")
        return f"{self.reason} (at {', '.join(where)})"


class SerializeError(NcpdpError):
    """An object that cannot be written as NCPDP bytes (e.g. a separator in a value)."""

    def __init__(
        self, reason: str, *, segment_id: str | None = None, field_id: str | None = None
    ) -> None:
        self.reason = reason
        self.segment_id = segment_id
        self.field_id = field_id
        where = ", ".join(
            p
            for p in (
                f"segment AM{segment_id}" if segment_id is not None else "",
                f"field {field_id}" if field_id is not None else "",
            )
            if p
        )
        super().__init__(f"{reason} ({where})" if where else reason)


class CodecError(NcpdpError, ValueError):
    """A value that does not match its field format (date, implied decimal, overpunch)."""

    def __init__(self, reason: str, *, value: str) -> None:
        self.reason = reason
        self.value = value
        super().__init__(f"{reason}: {value!r}")


class ModelError(NcpdpError, ValueError):
    """An object that cannot be built: a value holding a separator, a bad id or width."""
