"""The one error hierarchy of :mod:`ncpdp`.

Callers branch on the type and read the attributes; the message is for people.
"""

from __future__ import annotations

__all__ = ["NcpdpError", "ParseError", "SerializeError", "CodecError", "ModelError"]


class NcpdpError(Exception):
    """Base of every error this package raises."""


def _place(segment_id: str | None, field_id: str | None) -> list[str]:
    """The segment and field as people read them, those that are known."""
    out: list[str] = []
    if segment_id is not None:
        out.append(f"segment AM{segment_id}")
    if field_id is not None:
        out.append(f"field {field_id}")
    return out


class ParseError(NcpdpError):
    """Input that is not a well-formed NCPDP transmission.

    ``offset`` is the 0-based byte offset where the problem was found;
    ``segment_id`` (e.g. ``"07"``) and ``field_id`` (e.g. ``"D2"``) name the place
    when it is known, else they are ``None``; ``where`` says all three for people.
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
        super().__init__(f"{reason} (at {self.where})")

    @property
    def where(self) -> str:
        """``byte offset 112, segment AM11, field DU``: the place, without the input."""
        return ", ".join([f"byte offset {self.offset}", *_place(self.segment_id, self.field_id)])


class SerializeError(NcpdpError):
    """An object that cannot be written as NCPDP bytes (e.g. a separator in a value)."""

    def __init__(
        self, reason: str, *, segment_id: str | None = None, field_id: str | None = None
    ) -> None:
        self.reason = reason
        self.segment_id = segment_id
        self.field_id = field_id
        where = ", ".join(_place(segment_id, field_id))
        super().__init__(f"{reason} ({where})" if where else reason)


class CodecError(NcpdpError, ValueError):
    """A value that does not match its field format (date, implied decimal, overpunch)."""

    def __init__(self, reason: str, *, value: str) -> None:
        self.reason = reason
        self.value = value
        super().__init__(f"{reason}: {value!r}")


class ModelError(NcpdpError, ValueError):
    """An object that cannot be built: a value holding a separator, a bad id or width."""
