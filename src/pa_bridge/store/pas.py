"""The ``pas`` table: one row per PA, and the PA feed ordered by ``change_seq``.

``change_seq`` comes from :meth:`Store.next_seq` inside the same write job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict, cast

from ._db import Database
from ._rows import all_rows, first_row, marks, of_pharmacies
from .crypto import unseal

__all__ = [
    "CallbackState",
    "FeedHead",
    "PaRow",
    "PaWithRequest",
    "STATE_COLS",
    "SubmitLink",
    "Submitted",
    "all_for_claim",
    "awaiting_placeholders",
    "callback_state",
    "feed_head",
    "find",
    "for_claim",
    "for_claims",
    "for_reversal",
    "made_after",
    "get",
    "ids_for_claim_key",
    "insert_from_callback",
    "insert_submitted",
    "link_submitted",
    "live_for_claim_key",
    "rename",
    "set_drug",
    "since",
    "state_of",
    "submit_link",
    "touched_since",
    "unmatched_from_callbacks",
    "update_from_callback",
]


class PaRow(TypedDict):
    id: str  # the service's PA id, or local-/pending- until it is known
    claim_id: str | None
    transaction_index: int | None
    claim_key: str | None
    urls_json: str
    workflow_status: str | None
    plan_outcome: str | None
    status_time: str | None
    deleted: int
    matched: int
    created_at: str
    updated_at: str
    change_seq: int
    events_json: str
    fax_failed: int
    links_json: str
    details_json: str  # approval period, drug name, ePA or classic (from callbacks)
    rx_number: str | None  # of the claim it was submitted for (issue 16)
    product_id: str | None
    provider_id: str | None  # the pharmacy: 201-B1 of its claim (issue 18)
    expires_at: str | None  # the approval's end, YYYY-MM-DD (issue 28: store/expiry.py)
    expiring_at: str | None  # when it entered the "Expiring soon" window (announced)
    renewal_of: str | None  # the PA this one renews
    renewed_by: str | None  # a PA that renews this one
    gone_at: str | None  # when the service stopped returning it (store/reconcile.py)
    fax_failed_latest: int  # a fax failure is its latest news (issue 26)
    news_seq: int  # feed position of its latest news: status, outcome or event (issue 26)
    provisional_id: str | None  # the pending- id a submit answered, before its real one


class PaWithRequest(PaRow):
    request_raw: bytes | None  # its claim's request (None: unknown claim or purged)


class SubmitLink(TypedDict):
    claim_id: str | None
    urls_json: str | None
    links_json: str | None


class CallbackState(TypedDict):
    """What a callback merges with."""

    workflow_status: str | None
    plan_outcome: str | None
    status_time: str | None
    events_json: str | None
    deleted: int
    fax_failed: int
    links_json: str | None
    urls_json: str | None
    details_json: str | None
    fax_failed_latest: int
    news_seq: int


def get(db: Database, pa_id: str) -> PaRow | None:
    return cast(PaRow | None, first_row(db, "SELECT * FROM pas WHERE id = ?", [pa_id]))


def find(db: Database, pa_id: str) -> PaRow | None:
    """The PA by any id it has had: its id, else the provisional id it was renamed from."""
    return get(db, pa_id) or cast(
        PaRow | None, first_row(db, "SELECT * FROM pas WHERE provisional_id = ?", [pa_id])
    )


def for_claim(db: Database, claim_id: str, index: int) -> PaRow | None:
    """The first PA started for transaction ``index`` of the claim."""
    return cast(
        PaRow | None,
        first_row(
            db,
            "SELECT * FROM pas WHERE claim_id = ? AND transaction_index = ?"
            " ORDER BY created_at LIMIT 1",
            [claim_id, index],
        ),
    )


def live_for_claim_key(db: Database, key: str) -> PaRow | None:
    """The first PA not deleted that a submit tied to a claim with ``key``."""
    return cast(
        PaRow | None,
        first_row(
            db,
            "SELECT * FROM pas WHERE claim_key = ? AND deleted = 0 AND claim_id IS NOT NULL"
            " ORDER BY created_at LIMIT 1",
            [key],
        ),
    )


def all_for_claim(db: Database, claim_id: str) -> list[PaRow]:
    """Every PA submitted from the claim, by transaction, oldest first."""
    return cast(
        list[PaRow],
        all_rows(
            db,
            "SELECT * FROM pas WHERE claim_id = ? ORDER BY transaction_index, created_at",
            [claim_id],
        ),
    )


def for_reversal(db: Database, key: str) -> list[PaRow]:
    """The PAs a submit tied to a claim with ``key`` (deleted or not)."""
    return cast(
        list[PaRow],
        all_rows(
            db,
            "SELECT * FROM pas WHERE claim_key = ? AND claim_id IS NOT NULL ORDER BY created_at",
            [key],
        ),
    )


def made_after(db: Database, key: str, since: str) -> list[str]:
    """The ids of PAs a submit tied to a claim with ``key`` after ``since`` (a time as
    :func:`~pa_bridge.store.now_iso` writes it)."""
    return [
        str(r[0])
        for r in db.conn.execute(
            "SELECT id FROM pas WHERE claim_key = ? AND claim_id IS NOT NULL AND created_at > ?"
            " ORDER BY created_at",
            [key, since],
        )
    ]


class FeedHead(NamedTuple):
    """Where the feed ends, read in one statement."""

    #: the newest change's position (0: none)
    last_change: int
    #: the newest cursor the feed can have handed out: the last change, or the floor a
    #: restore set (decision 0009), whichever is later
    newest_cursor: int


def feed_head(db: Database) -> FeedHead:
    row = db.conn.execute(
        "SELECT coalesce(max(change_seq), 0), coalesce((SELECT CAST(value AS BIGINT)"
        " FROM meta WHERE key = 'feed.seq_floor'), 0) FROM pas"
    ).fetchone()
    return FeedHead(int(row[0]), max(int(row[0]), int(row[1])))


def set_drug(db: Database, pa_id: str, rx_number: str | None, product_id: str | None) -> None:
    """The PA's Rx number and product id, from the claim it was submitted for."""
    db.conn.execute(
        "UPDATE pas SET rx_number = coalesce(rx_number, ?), product_id = coalesce(product_id, ?)"
        " WHERE id = ?",
        [rx_number, product_id, pa_id],
    )


def ids_for_claim_key(db: Database, key: str) -> list[str]:
    return [r[0] for r in db.conn.execute("SELECT id FROM pas WHERE claim_key = ?", [key])]


def since(
    db: Database,
    after: int,
    limit: int,
    *,
    upto: int | None = None,
    provider_ids: list[str] | None = None,
) -> list[PaRow]:
    """The feed: PAs changed after cursor ``after`` (and at or before ``upto``, if
    given), oldest change first; only these pharmacies' with ``provider_ids``."""
    bounds = [after] if upto is None else [after, upto]
    sql = (
        "SELECT * FROM pas WHERE change_seq > ?"  # noqa: S608 - only placeholders
        f"{'' if upto is None else ' AND change_seq <= ?'}{of_pharmacies(provider_ids)}"
        " ORDER BY change_seq LIMIT ?"
    )
    return cast(list[PaRow], all_rows(db, sql, [*bounds, *(provider_ids or ()), limit]))


def for_claims(db: Database, claim_ids: list[str]) -> list[PaRow]:
    """The PAs of these claims, newest first."""
    if not claim_ids:
        return []
    return cast(
        list[PaRow],
        all_rows(
            db,
            f"SELECT * FROM pas WHERE claim_id IN ({marks(len(claim_ids))}) ORDER BY created_at DESC",  # noqa: S608 - only placeholders
            claim_ids,
        ),
    )


def touched_since(
    db: Database, start: str, limit: int, provider_ids: list[str] | None = None
) -> list[PaWithRequest]:
    """PAs created or changed at or after ``start``, latest change first, with their
    claim's request (only these pharmacies' with ``provider_ids``)."""
    sql = (
        "SELECT p.*, e.request_raw AS request_raw FROM pas p"  # noqa: S608 - only placeholders
        " LEFT JOIN exchanges e ON e.id = p.claim_id"
        f" WHERE (p.updated_at >= ? OR p.created_at >= ?){of_pharmacies(provider_ids, 'p.provider_id')}"
        " ORDER BY p.change_seq DESC LIMIT ?"
    )
    rows = all_rows(db, sql, [start, start, *(provider_ids or ()), limit])
    for r in rows:
        r["request_raw"] = unseal(db, r["request_raw"], "exchanges.request_raw", r["claim_id"])
    return cast(list[PaWithRequest], rows)


# ---- submit ------------------------------------------------------------------------
def unmatched_from_callbacks(db: Database, limit: int = 200) -> list[tuple[str, str | None]]:
    """(id, links_json) of PAs first heard of in a callback and not yet tied to a claim,
    newest first."""
    return [
        (r[0], r[1])
        for r in db.conn.execute(
            "SELECT id, links_json FROM pas WHERE claim_id IS NULL AND deleted = 0"
            " AND matched = 0 ORDER BY created_at DESC LIMIT ?",
            [limit],
        )
    ]


def submit_link(db: Database, pa_id: str) -> SubmitLink | None:
    return cast(
        SubmitLink | None,
        first_row(db, "SELECT claim_id, urls_json, links_json FROM pas WHERE id = ?", [pa_id]),
    )


class Submitted(TypedDict):
    """What a submit records on a PA."""

    pa_id: str
    claim_id: str
    transaction_index: int
    claim_key: str
    urls_json: str
    links_json: str
    provider_id: str | None  # the claim's 201-B1


def insert_submitted(db: Database, pa: Submitted, *, now: str, seq: int) -> None:
    """A PA first heard of in the service's answer to our submit (status ``New``)."""
    db.conn.execute(
        "INSERT INTO pas (id, claim_id, transaction_index, claim_key, urls_json, workflow_status,"
        " plan_outcome, created_at, updated_at, change_seq, matched, links_json, provider_id,"
        " news_seq) VALUES (?, ?, ?, ?, ?, 'New', NULL, ?, ?, ?, 1, ?, ?, ?)",
        [pa["pa_id"], pa["claim_id"], pa["transaction_index"], pa["claim_key"], pa["urls_json"],
         now, now, seq, pa["links_json"], pa["provider_id"], seq],
    )  # fmt: skip


def link_submitted(db: Database, pa: Submitted, *, now: str, seq: int) -> None:
    """Tie a PA known already (a callback came first, or a duplicate) to the claim.

    The store is the first claim's: a PA not tied to a claim yet takes this claim's
    201-B1 over the one its callback named (the claim's credentials are the truth);
    one tied already keeps its own."""
    db.conn.execute(
        "UPDATE pas SET claim_id = coalesce(claim_id, ?), transaction_index = coalesce(transaction_index, ?),"
        " claim_key = coalesce(claim_key, ?), urls_json = ?, links_json = ?,"
        " provider_id = CASE WHEN claim_id IS NULL THEN coalesce(?, provider_id)"
        " ELSE coalesce(provider_id, ?) END, matched = 1, updated_at = ?, change_seq = ?"
        " WHERE id = ?",
        [pa["claim_id"], pa["transaction_index"], pa["claim_key"], pa["urls_json"],
         pa["links_json"], pa["provider_id"], pa["provider_id"], now, seq, pa["pa_id"]],
    )  # fmt: skip


# ---- callbacks ---------------------------------------------------------------------
#: the columns of a :class:`CallbackState`, in its order
STATE_COLS = (
    "workflow_status", "plan_outcome", "status_time", "events_json", "deleted",
    "fax_failed", "links_json", "urls_json", "details_json", "fax_failed_latest", "news_seq",
)  # fmt: skip
_CALLBACK_STATE = f"SELECT {', '.join(STATE_COLS)} FROM pas WHERE id = ?"  # noqa: S608 - our column names


def state_of(values: Sequence[Any]) -> CallbackState:
    """A :class:`CallbackState` from the values of :data:`STATE_COLS`, in that order."""
    return cast(CallbackState, dict(zip(STATE_COLS, values, strict=True)))


def callback_state(db: Database, pa_id: str) -> CallbackState | None:
    row = db.conn.execute(_CALLBACK_STATE, (pa_id,)).fetchone()
    return None if row is None else state_of(row)


def awaiting_placeholders(db: Database, prefix: str) -> list[tuple[str, str | None]]:
    """(id, links_json) of PAs not deleted whose id starts with ``prefix``."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return [
        (r[0], r[1])
        for r in db.conn.execute(
            "SELECT id, links_json FROM pas WHERE id >= ? AND id < ? AND deleted = 0",
            (prefix, end),
        )
    ]


def rename(db: Database, old: str, new: str) -> None:
    """Give a PA (and its history) the id the service uses; the old id stays its
    ``provisional_id``, by which :func:`find` still finds it."""
    db.conn.execute(
        "UPDATE pas SET id = ?, provisional_id = coalesce(provisional_id, ?) WHERE id = ?",
        (new, old, old),
    )
    db.conn.execute("UPDATE pa_history SET pa_id = ? WHERE pa_id = ?", (new, old))


def insert_from_callback(
    db: Database,
    pa_id: str,
    state: CallbackState,
    *,
    now: str,
    seq: int,
    provider_id: str | None = None,
    product_id: str | None = None,
) -> None:
    """A PA we did not start (or whose submit we have not stored yet), with the store
    and the NDC its callback names, if any."""
    db.conn.execute(
        "INSERT INTO pas (id, urls_json, workflow_status, plan_outcome, status_time, deleted, matched,"
        " created_at, updated_at, change_seq, events_json, fax_failed, links_json, details_json,"
        " provider_id, product_id, fax_failed_latest, news_seq)"
        " VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (pa_id, state["urls_json"], state["workflow_status"], state["plan_outcome"],
         state["status_time"], state["deleted"], now, now, seq, state["events_json"],
         state["fax_failed"], state["links_json"], state["details_json"] or "{}",
         provider_id, product_id, state["fax_failed_latest"], state["news_seq"]),
    )  # fmt: skip


def update_from_callback(
    db: Database,
    pa_id: str,
    state: CallbackState,
    *,
    now: str,
    seq: int,
    provider_id: str | None = None,
    product_id: str | None = None,
) -> None:
    """``state["details_json"]`` None: keep what the PA has. ``provider_id`` and
    ``product_id`` fill the PA's only where it has none (a submit's are never
    overwritten)."""
    db.conn.execute(
        "UPDATE pas SET workflow_status = ?, plan_outcome = ?, status_time = ?, events_json = ?,"
        " deleted = ?, fax_failed = ?, updated_at = ?, change_seq = ?, links_json = ?,"
        " urls_json = ?, details_json = coalesce(?, details_json),"
        " provider_id = coalesce(provider_id, ?), product_id = coalesce(product_id, ?),"
        " fax_failed_latest = ?, news_seq = ? WHERE id = ?",
        (state["workflow_status"], state["plan_outcome"], state["status_time"],
         state["events_json"], state["deleted"], state["fax_failed"], now, seq,
         state["links_json"], state["urls_json"], state["details_json"], provider_id,
         product_id, state["fax_failed_latest"], state["news_seq"], pa_id),
    )  # fmt: skip
