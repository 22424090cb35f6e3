"""The use cases, with no Flask in sight, each with its dependencies given explicitly:

- :class:`ClaimIntake` (claims.py): a claim exchange in, the answer out;
- :class:`PaService` (pas.py): submit PA, the PA feed and reads, where to open a PA;
- :class:`Reversals` (reversals.py): a B2 in, delivered now or queued;
- :class:`Deliveries` (deliveries.py): the queue's deliverers;
- pure decision logic in decisions.py (imports only ``ncpdp``).

:class:`UseCases` holds one of each for the web layer; the composition root
(:func:`pa_bridge.runtime.build_use_cases`) builds it and registers the deliverers with
the queue. Use cases raise the kinds of :mod:`.errors` (no HTTP in them); the web
layer says each in its status and the JSON error body.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..metrics import Metrics
from ..outbox import Outbox
from ..store import Store
from .claims import ClaimIntake
from .deliveries import Deliveries
from .errors import BridgeError
from .pas import PaService
from .pharmacies import Pharmacies
from .reversals import Reversals

__all__ = [
    "BridgeError",
    "ClaimIntake",
    "Deliveries",
    "PaService",
    "Pharmacies",
    "Reversals",
    "UseCases",
]


@dataclass
class UseCases:
    """One of each use case, and what they share, for the web layer and the daemon."""

    settings: Settings
    store: Store
    metrics: Metrics
    outbox: Outbox
    claims: ClaimIntake
    pas: PaService
    reversals: Reversals
    deliveries: Deliveries
    #: a chain's stores (``[[pharmacies]]``); empty for a single store
    pharmacies: Pharmacies = field(default_factory=Pharmacies)
    clock: Callable[[], float] = field(default=time.time)

    def health(self) -> dict[str, Any]:
        """The database and the queue, for ``/healthz``."""
        db_ok = True
        # unknown (null), not 0, while the queue cannot be read
        depth: int | None = None
        oldest: float | None = None
        try:
            depth, oldest = self.outbox.depth()
        except Exception:  # the daemon's own check names the problem
            db_ok = False
        return {
            "database": db_ok and self.store.writer_alive,
            "queue_depth": depth,
            "queue_oldest_age_s": None if oldest is None else round(oldest, 1),
        }

    def close(self) -> None:
        self.outbox.stop()
        self.deliveries.close()
