"""The ``outbox`` table: the durable queue's items, and the queue's read model for
store IT (``pa-bridge queue list``)."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import Any, TypedDict, cast

from ._db import Database, is_postgres
from ._rows import all_rows, first_row
from .engine import now_iso

__all__ = [
    "QUEUE_STATUSES",
    "Hold",
    "Kind",
    "QueueItem",
    "QueueRow",
    "Status",
    "count_failed",
    "drop_item",
    "due",
    "enqueue",
    "for_claim",
    "get",
    "held_counts",
    "held_pharmacies",
    "hold_undelivered",
    "list_items",
    "record_attempt",
    "release_held",
    "retry_item",
    "reversed_since",
    "to_hold_after_restore",
    "state",
    "summary",
]


class Kind(StrEnum):
    """What an item delivers (stored as its value)."""

    OUTCOME_REPORT = "outcome_report"
    REVERSAL = "reversal"
    WEBHOOK = "webhook"


class Status(StrEnum):
    """An item's stored status."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    HELD = "held"
    DROPPED = "dropped"


class Hold(StrEnum):
    """Why a ``held`` item waits (its ``held_for``). A store's hold is spelled
    ``pharmacy:<provider id>`` (:meth:`pharmacy`)."""

    #: held when a backup was restored: store IT reviews it (``queue retry``/``drop``)
    RESTORE = "restore"
    #: refused for our own credentials or configuration: retried by itself at the next
    #: start or reload of a daemon
    CONFIGURATION = "configuration"
    #: its store is not in this daemon's ``[[pharmacies]]``: left for a daemon that
    #: lists it (or for this one once its configuration does)
    PHARMACY = "pharmacy"

    @staticmethod
    def pharmacy(provider_id: str) -> str:
        return f"{Hold.PHARMACY.value}:{provider_id}"

    @staticmethod
    def kind(held_for: str | None) -> str:
        """``restore``, ``configuration`` or ``pharmacy`` of a stored ``held_for``."""
        return (held_for or Hold.RESTORE.value).split(":", 1)[0]


class QueueRow(TypedDict):
    id: int
    kind: str
    claim_id: str | None
    payload_json: str
    status: str
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: str
    updated_at: str
    delivered_at: str | None
    held_for: str | None


class QueueItem(TypedDict):
    """An item as ``queue list`` shows it (see :func:`list_items`)."""

    id: int
    kind: str
    claim_id: str | None
    status: str
    attempts: int
    next_attempt_at: str | None
    last_error: str | None
    created_at: str
    updated_at: str
    delivered_at: str | None
    retrying: bool
    #: why a held item waits (:class:`Hold`); None unless held
    held_for: str | None
    #: the PA a webhook is about (None for the other kinds: their claim is ``claim_id``)
    pa_id: str | None


def enqueue(
    db: Database,
    kind: Kind | str,
    payload: dict[str, Any],
    *,
    claim_id: str | None = None,
    now: float | None = None,
) -> int:
    """Insert an item; call inside a write job so it commits with the work it belongs to."""
    t = time.time() if now is None else now
    cur = db.conn.execute(
        "INSERT INTO outbox (kind, claim_id, payload_json, status, attempts, next_attempt_at,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?, ?) RETURNING id",
        [str(kind), claim_id, json.dumps(payload, separators=(",", ":")), Status.PENDING, t,
         now_iso(t), now_iso(t)],
    )  # fmt: skip
    return int(cur.fetchone()[0])


def summary(db: Database) -> tuple[dict[str, int], str | None]:
    """Undelivered items by status, and when the oldest of them was created."""
    rows = all_rows(
        db,
        "SELECT status, count(*) AS n, min(created_at) AS oldest FROM outbox"
        " WHERE status NOT IN ('delivered', 'dropped') GROUP BY status",
    )
    oldest = min((r["oldest"] for r in rows if r["oldest"]), default=None)
    return {r["status"]: int(r["n"]) for r in rows}, oldest


def count_failed(db: Database) -> int:
    """Items the service refused for good (stored status ``failed``)."""
    return int(db.conn.execute("SELECT count(*) FROM outbox WHERE status = 'failed'").fetchone()[0])


#: what ``queue list --status`` takes. ``pending``: not tried yet; ``failed``: the last
#: attempt failed (retried automatically at ``next_attempt_at``, or, when the service
#: refused it for good, only by ``queue retry``); ``held``: waiting for what its
#: ``held_for`` says (:class:`Hold`: a restore's review, our configuration, a daemon
#: that lists its store); ``dropped``: dropped by store IT; ``delivered``.
QUEUE_STATUSES = ("pending", "failed", "held", "dropped", "delivered")

_STATUS_WHERE = {
    "pending": "status = 'pending' AND last_error IS NULL",
    "failed": "(status = 'failed' OR (status = 'pending' AND last_error IS NOT NULL))",
    "held": "status = 'held'",
    "dropped": "status = 'dropped'",
    "delivered": "status = 'delivered'",
}


def _iso_or_none(t: Any) -> str | None:
    return None if t is None else now_iso(float(t))


def list_items(db: Database, status: str | None = None, limit: int = 200) -> list[QueueItem]:
    """Queue items, newest first, for store IT: one time format (UTC ISO 8601) for
    every time, ``status`` as ``queue list`` shows it (see :data:`QUEUE_STATUSES`),
    ``retrying`` whether the daemon will try it again by itself, ``next_attempt_at``
    when (None when it will not)."""
    sql = (
        "SELECT id, kind, claim_id, status, attempts, next_attempt_at, last_error,"
        " created_at, updated_at, delivered_at, held_for,"
        " CASE WHEN kind = 'webhook' THEN payload_json END AS webhook FROM outbox"
    )
    if status:
        if status not in _STATUS_WHERE:
            raise ValueError(f"unknown queue status {status!r}")
        sql += f" WHERE {_STATUS_WHERE[status]}"
    sql += " ORDER BY id DESC LIMIT ?"
    out = []
    for it in all_rows(db, sql, [limit]):
        stored = it["status"]
        retrying = stored == Status.PENDING
        if stored == Status.PENDING and it["last_error"] is not None:
            it["status"] = Status.FAILED.value
        it["retrying"] = retrying
        it["next_attempt_at"] = _iso_or_none(it["next_attempt_at"]) if retrying else None
        if stored != Status.HELD:
            it["held_for"] = None
        it["pa_id"] = _webhook_pa(it.pop("webhook"))
        out.append(cast(QueueItem, it))
    return out


def _webhook_pa(payload_json: str | None) -> str | None:
    if not payload_json:
        return None
    try:
        pa_id = json.loads(payload_json).get("pa_id")
    except (ValueError, AttributeError):
        return None
    return str(pa_id) if pa_id else None


def retry_item(db: Database, item_id: int, now: float) -> bool:
    """Make an undelivered item due now (held, failed or dropped ones too); call in a
    write transaction. False when there is no such undelivered item."""
    cur = db.conn.execute(
        "UPDATE outbox SET status = 'pending', held_for = NULL, next_attempt_at = ?,"
        " updated_at = ? WHERE id = ? AND status != 'delivered'",
        [now, now_iso(now), item_id],
    )
    return cur.rowcount > 0


def drop_item(db: Database, item_id: int, now: float, why: str) -> bool:
    """Never deliver an undelivered item (kept, with ``why`` as its last error)."""
    cur = db.conn.execute(
        "UPDATE outbox SET status = 'dropped', last_error = ?, updated_at = ?"
        " WHERE id = ? AND status != 'delivered'",
        [why, now_iso(now), item_id],
    )
    return cur.rowcount > 0


def hold_undelivered(db: Database, why: str, now: float) -> int:
    """Put every undelivered item on hold for review (after a restore); the count.
    Items held for the configuration are among them: they too may have been
    delivered after the backup was taken."""
    cur = db.conn.execute(
        "UPDATE outbox SET status = 'held', held_for = 'restore', last_error = ?,"
        " updated_at = ? WHERE status IN ('pending', 'failed')"
        " OR (status = 'held' AND coalesce(held_for, '') != 'restore')",
        [why, now_iso(now)],
    )
    return int(cur.rowcount)


def to_hold_after_restore(db: Database) -> int:
    """How many items :func:`hold_undelivered` would hold (for what a restore says)."""
    counts, _ = summary(db)
    held = held_counts(db)
    return sum(counts.get(k, 0) for k in ("pending", "failed")) + sum(
        n for k, n in held.items() if k != Hold.RESTORE
    )


def release_held(db: Database, held_for: str, now: float) -> int:
    """Make every item held for ``held_for`` (:class:`Hold`) due now; the count."""
    cur = db.conn.execute(
        "UPDATE outbox SET status = 'pending', held_for = NULL, next_attempt_at = ?,"
        " updated_at = ? WHERE status = 'held' AND held_for = ?",
        [now, now_iso(now), held_for],
    )
    return int(cur.rowcount)


def held_pharmacies(db: Database) -> list[str]:
    """The provider ids of the stores whose items are held for a daemon that lists them."""
    rows = db.conn.execute(
        "SELECT DISTINCT held_for FROM outbox WHERE status = 'held' AND held_for LIKE ?",
        [Hold.pharmacy("%")],
    )
    return [str(r[0]).split(":", 1)[1] for r in rows]


def held_counts(db: Database) -> dict[str, int]:
    """Held items by why they wait: ``restore``, ``configuration``, ``pharmacy`` (empty
    on a database from before ``held_for``: doctor reads those too)."""
    if is_postgres(db):
        column = db.conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = 'outbox' AND column_name = 'held_for'"
        ).fetchone()
    else:
        column = db.conn.execute(
            "SELECT 1 FROM pragma_table_info('outbox') WHERE name = 'held_for'"
        ).fetchone()
    if column is None:
        return {}
    out: dict[str, int] = {}
    for held_for, n in db.conn.execute(
        "SELECT held_for, count(*) FROM outbox WHERE status = 'held' GROUP BY held_for"
    ):
        kind = Hold.kind(held_for)
        out[kind] = out.get(kind, 0) + int(n)
    return out


def due(db: Database, now: float, horizon: float, limit: int, kind: str | None = None) -> list[int]:
    """Pending items (of ``kind``, or of every kind) whose time has come, or lies beyond
    ``horizon`` (the clock was set back), in the order they fall due."""
    of_kind = "" if kind is None else " AND kind = ?"
    return [
        int(r[0])
        for r in db.conn.execute(
            "SELECT id FROM outbox WHERE status = 'pending'"  # noqa: S608 - no values in it
            f" AND (next_attempt_at <= ? OR next_attempt_at > ?){of_kind}"
            " ORDER BY next_attempt_at, id LIMIT ?",
            [now, horizon, *([] if kind is None else [kind]), limit],
        )
    ]


def get(db: Database, item_id: int) -> QueueRow | None:
    return cast(QueueRow | None, first_row(db, "SELECT * FROM outbox WHERE id = ?", [item_id]))


def for_claim(db: Database, claim_id: str, kind: str) -> tuple[int, str, str | None] | None:
    """(id, stored status, last error) of the first item of ``kind`` for the claim."""
    row = db.conn.execute(
        "SELECT id, status, last_error FROM outbox WHERE kind = ? AND claim_id = ?"
        " ORDER BY id LIMIT 1",
        [kind, claim_id],
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), row[2])


def state(db: Database, item_id: int) -> tuple[str, str | None] | None:
    """(stored status, last error) of an item."""
    row = db.conn.execute(
        "SELECT status, last_error FROM outbox WHERE id = ?", [item_id]
    ).fetchone()
    return None if row is None else (str(row[0]), row[1])


def record_attempt(
    db: Database,
    item_id: int,
    *,
    status: Status,
    attempts: int,
    next_attempt_at: float,
    last_error: str | None,
    now: str,
    payload_json: str,
    held_for: str | None = None,
) -> None:
    """The outcome of a delivery attempt (``held_for``: why a held item waits)."""
    db.conn.execute(
        "UPDATE outbox SET status = ?, attempts = ?, next_attempt_at = ?, last_error = ?,"
        " updated_at = ?, delivered_at = ?, payload_json = ?, held_for = ? WHERE id = ?",
        [str(status), attempts, next_attempt_at, last_error, now,
         now if status == Status.DELIVERED else None, payload_json, held_for, item_id],
    )  # fmt: skip


def reversed_since(db: Database, claim_key: str, since: str) -> bool:
    """Whether a reversal of the claim with ``claim_key`` came in at or after ``since``
    (queued or delivered; one store IT dropped does not count)."""
    if is_postgres(db):
        row = db.conn.execute(
            "SELECT 1 FROM outbox, jsonb_array_elements_text(outbox.payload_json::jsonb"
            " -> 'claim_keys') AS k(value) WHERE outbox.kind = 'reversal'"
            " AND outbox.status != 'dropped' AND outbox.created_at >= ? AND k.value = ? LIMIT 1",
            [since, claim_key],
        ).fetchone()
        return row is not None
    row = db.conn.execute(
        "SELECT 1 FROM outbox, json_each(outbox.payload_json, '$.claim_keys') AS k"
        " WHERE outbox.kind = 'reversal' AND outbox.status != 'dropped'"
        " AND outbox.created_at >= ? AND k.value = ? LIMIT 1",
        [since, claim_key],
    ).fetchone()
    return row is not None
