"""Writing a transmission: the exact inverse of :func:`ncpdp.parse`."""

from __future__ import annotations

from ._batch import Batch
from ._errors import SerializeError
from ._model import Transmission

__all__ = ["serialize"]


def serialize(obj: Transmission | Batch) -> bytes:
    """The wire bytes of ``obj``; ``serialize(parse(x)) == x`` for every accepted input,
    and ``serialize(parse_batch(x)) == x`` for every accepted batch file."""
    if isinstance(obj, Batch):
        return bytes(obj)
    if not isinstance(obj, Transmission):
        raise SerializeError(
            f"serialize() takes a Transmission or a Batch, not {type(obj).__name__}"
        )
    try:
        return obj.to_text().encode("latin-1")
    except UnicodeEncodeError:  # unreachable through the validating constructors
        raise SerializeError("a value has a character outside the single-byte range") from None
