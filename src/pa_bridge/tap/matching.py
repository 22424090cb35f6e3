"""Which answer belongs to which request: the rule of decision 0040, as pure functions.

A response carries no copy of its request, but its header repeats the request's
version, transaction code, service provider (qualifier and id) and date of service,
and its Response Claim segment (AM22) the prescription number (402-D2) of each
transaction. An answer belongs to a request when every one of these that it carries
agrees: a swapped answer (another store's, another prescription's) is told apart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import ncpdp

__all__ = ["Message", "Waiting", "answers", "header_key", "read"]

T = TypeVar("T")

#: (version, transaction code, provider id qualifier, provider id, date of service)
HeaderKey = tuple[str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class Message:
    """A transmission read for matching: the request or the response, its header key,
    and per transaction its prescription number (None where it carries none)."""

    transmission: ncpdp.Transmission
    key: HeaderKey
    rx_numbers: tuple[str | None, ...]

    @property
    def is_request(self) -> bool:
        return self.transmission.is_request

    @property
    def transaction_code(self) -> str:
        return self.key[1]


def parse(payload: bytes) -> ncpdp.Transmission | None:
    """The transmission (strict, else lenient), or None when even lenient parsing
    refuses it."""
    try:
        return ncpdp.parse(payload)
    except ncpdp.ParseError:
        pass
    try:
        return ncpdp.parse(payload, strict=False)
    except ncpdp.NcpdpError:
        return None


def _rx(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip().lstrip("0")
    return v or None


def header_key(t: ncpdp.Transmission) -> HeaderKey:
    h = t.header
    return (
        h.version.strip(),
        h.transaction_code.strip(),
        h.service_provider_id_qualifier.strip(),
        h.service_provider_id.strip(),
        h.date_of_service.strip(),
    )


def read(payload: bytes) -> Message | None:
    """The payload read for matching, or None when it is not a transmission we can
    parse (it is then relayed by position alone: decision 0040)."""
    t = parse(payload)
    if t is None:
        return None
    segment = "07" if t.is_request else "22"
    try:
        rx = tuple(
            _rx(s.get("D2")) if (s := g.segment(segment)) is not None else None for g in t.groups
        )
        return Message(t, header_key(t), rx)
    except (ncpdp.NcpdpError, AttributeError, IndexError):
        return None


def answers(request: Message, response: Message) -> bool:
    """Whether ``response`` answers ``request``. A field the response leaves blank
    (some payers blank the provider on a header-level reject) is not held against it;
    one it fills must agree. A response with transaction groups has one per request
    transaction; a prescription number it carries must be that transaction's."""
    if not request.is_request or response.is_request:
        return False
    for mine, theirs in zip(request.key, response.key, strict=True):
        if theirs and mine != theirs:
            return False
    groups = len(response.rx_numbers)
    if groups and groups != len(request.rx_numbers):
        return False
    for i, rx in enumerate(response.rx_numbers):
        if rx is not None and request.rx_numbers[i] != rx:
            return False
    return True


class Waiting(Generic[T]):
    """Requests waiting for their response, oldest first, each with what the caller
    keeps beside it (``T``): :meth:`pair` gives a response the oldest request it
    answers, and takes it out."""

    def __init__(self) -> None:
        self._items: deque[tuple[float, Message, T]] = deque()

    def add(self, at: float, request: Message, item: T) -> None:
        self._items.append((at, request, item))

    def pair(self, response: Message) -> tuple[Message, T] | None:
        for entry in self._items:
            if answers(entry[1], response):
                self._items.remove(entry)
                return entry[1], entry[2]
        return None

    def expired(self, now: float, older_than: float) -> Iterator[tuple[Message, T]]:
        """Take out, and give, the requests waiting longer than ``older_than``."""
        while self._items and now - self._items[0][0] > older_than:
            _, request, item = self._items.popleft()
            yield request, item

    def __len__(self) -> int:
        return len(self._items)
