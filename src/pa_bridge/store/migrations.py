"""The schema, as sqlite-utils migrations recorded in ``_sqlite_migrations``.

A new column or table is a new ``@MIGRATIONS()`` step at the end; steps already
released never change. :func:`applied` and :func:`known` are what doctor compares.
"""

from __future__ import annotations

import json

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

__all__ = ["MIGRATIONS", "SET_NAME", "applied", "known", "pending"]

SET_NAME = "pa_bridge"
MIGRATIONS = Migrations(SET_NAME)


@MIGRATIONS()
def m001_initial(db: Database) -> None:
    db.execute(
        """CREATE TABLE exchanges (
            id TEXT PRIMARY KEY,
            received_at TEXT NOT NULL,
            actor TEXT,
            kind TEXT NOT NULL,              -- 'claim' or 'reversal'
            version TEXT, transaction_code TEXT,
            bin TEXT, pcn TEXT, group_id TEXT, provider_id TEXT, date_of_service TEXT,
            transaction_count INTEGER,
            request_raw BLOB,                -- exact bytes; purged after retention_days
            response_raw BLOB,
            metadata_json TEXT,              -- the dispensing system's metadata (PHI)
            answer_json TEXT,                -- what we answered (no PHI)
            transaction_status TEXT, reject_codes TEXT, pa_eligible INTEGER,
            message_source TEXT,
            raw_purged_at TEXT
        )"""
    )
    db.execute("CREATE INDEX exchanges_received ON exchanges(received_at)")
    db.execute(
        """CREATE TABLE pas (
            id TEXT PRIMARY KEY,             -- the service's PA id
            claim_id TEXT REFERENCES exchanges(id),
            transaction_index INTEGER,
            claim_key TEXT,                  -- bin|pcn|group|rx|fill|provider
            urls_json TEXT NOT NULL DEFAULT '[]',
            workflow_status TEXT,
            plan_outcome TEXT,
            status_time TEXT,
            deleted INTEGER NOT NULL DEFAULT 0,
            matched INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            change_seq INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE UNIQUE INDEX pas_change_seq ON pas(change_seq)")
    db.execute("CREATE INDEX pas_claim ON pas(claim_id, transaction_index)")
    db.execute("CREATE INDEX pas_claim_key ON pas(claim_key)")
    db.execute(
        """CREATE TABLE pa_history (
            id INTEGER PRIMARY KEY,
            pa_id TEXT NOT NULL,
            received_at TEXT NOT NULL,
            source TEXT NOT NULL,            -- submit, callback, reversal
            workflow_status TEXT,
            plan_outcome TEXT,
            event_time TEXT,
            events_json TEXT,
            note TEXT
        )"""
    )
    db.execute("CREATE INDEX pa_history_pa ON pa_history(pa_id, id)")
    db.execute(
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,              -- outcome_report, reversal, webhook
            claim_id TEXT,
            payload_json TEXT NOT NULL,
            status TEXT NOT NULL,            -- pending, delivered, failed
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            delivered_at TEXT
        )"""
    )
    db.execute("CREATE INDEX outbox_due ON outbox(status, next_attempt_at)")
    db.execute(
        """CREATE TABLE audit (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            actor TEXT,
            action TEXT NOT NULL,
            object_id TEXT,
            detail TEXT
        )"""
    )
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")


@MIGRATIONS()
def m002_callbacks(db: Database) -> None:
    db.execute(
        """CREATE TABLE callbacks (
            id INTEGER PRIMARY KEY,          -- arrival order
            dedupe_key TEXT NOT NULL UNIQUE, -- delivery id, or sha256 of the canonical body
            received_at TEXT NOT NULL,
            pa_id TEXT,
            body BLOB,                       -- purged after retention_days
            body_purged_at TEXT
        )"""
    )
    db.execute("CREATE INDEX callbacks_pa ON callbacks(pa_id)")
    db.execute(
        """CREATE TABLE dead_letters (
            id INTEGER PRIMARY KEY,
            received_at TEXT NOT NULL,
            reason TEXT NOT NULL,
            content_type TEXT,
            body BLOB
        )"""
    )
    db.execute("ALTER TABLE pas ADD COLUMN events_json TEXT NOT NULL DEFAULT '[]'")
    db.execute("ALTER TABLE pas ADD COLUMN fax_failed INTEGER NOT NULL DEFAULT 0")


@MIGRATIONS()
def m003_pa_links(db: Database) -> None:
    # The PA's links from its callbacks (html_url, tokens[].html_url, pdf_url), and
    # what a submit answered without a PA id waits to be matched on (issue 14).
    db.execute("ALTER TABLE pas ADD COLUMN links_json TEXT NOT NULL DEFAULT '{}'")


@MIGRATIONS()
def m004_console(db: Database) -> None:
    # Issue 16 (the pharmacist console): what a callback says beyond the status that
    # the console shows (approval period, drug name, ePA or classic), and an index for
    # reading the audit trail by object (acknowledgements).
    db.execute("ALTER TABLE pas ADD COLUMN details_json TEXT NOT NULL DEFAULT '{}'")
    db.execute("CREATE INDEX audit_object ON audit(object_id, action)")


@MIGRATIONS()
def m005_integrator_api(db: Database) -> None:
    # Issue 16 (the integrator's API): each claim exchange's claim keys (one per
    # transaction, so a re-sent exchange finds the PA of its claim), the PA's Rx number
    # and product id, and the Idempotency-Key header's records.
    db.execute("ALTER TABLE exchanges ADD COLUMN claim_keys TEXT")
    db.execute("ALTER TABLE pas ADD COLUMN rx_number TEXT")
    db.execute("ALTER TABLE pas ADD COLUMN product_id TEXT")
    db.execute(
        """CREATE TABLE idempotency_keys (
            scope TEXT NOT NULL,             -- claims, submit, reversals
            key TEXT NOT NULL,               -- the client's Idempotency-Key
            fingerprint TEXT NOT NULL,       -- sha256 of what was sent with it
            object_id TEXT NOT NULL,         -- the claim, PA or reversal it made
            created_at TEXT NOT NULL,
            PRIMARY KEY (scope, key)
        )"""
    )


@MIGRATIONS()
def m006_pharmacies(db: Database) -> None:
    # Issue 18 (many pharmacies in one deployment): the pharmacy (201-B1 service
    # provider id) each PA belongs to, for token scopes and the pharmacy filter.
    # Backfilled from the PA's claim exchange, else from its claim key (whose last
    # part is the provider id); a PA first heard of in a callback has none until a
    # submit ties it to a claim.
    db.execute("ALTER TABLE pas ADD COLUMN provider_id TEXT")
    db.execute("CREATE INDEX pas_provider ON pas(provider_id, change_seq)")
    db.execute(
        "UPDATE pas SET provider_id = (SELECT e.provider_id FROM exchanges e"
        " WHERE e.id = pas.claim_id) WHERE claim_id IS NOT NULL"
    )
    rows = db.execute(
        "SELECT id, claim_key FROM pas WHERE provider_id IS NULL AND claim_key IS NOT NULL"
    ).fetchall()
    for pa_id, key in rows:
        provider = str(key).rsplit("|", 1)[-1].strip()
        if provider:
            db.execute("UPDATE pas SET provider_id = ? WHERE id = ?", [provider, pa_id])


@MIGRATIONS()
def m007_queue_holds(db: Database) -> None:
    # Issue 27: why a held queue item waits. ``restore``: held after a restore, for
    # store IT to review (``queue retry`` or ``drop``); ``configuration``: refused for
    # our own credentials or configuration, retried at the next start or reload;
    # ``pharmacy:<provider id>``: its store is not in this daemon's [[pharmacies]],
    # left for a daemon that lists it. Every item held before this step was held
    # after a restore.
    db.execute("ALTER TABLE outbox ADD COLUMN held_for TEXT")
    db.execute("UPDATE outbox SET held_for = 'restore' WHERE status = 'held'")


@MIGRATIONS()
def m008_reconcile_and_expiry(db: Database) -> None:
    # Issue 28: the approval's end date (for "Expiring soon" and pa.expiring, kept from
    # the callbacks' authorization_period as a YYYY-MM-DD date), when the PA entered
    # that window (announced once), the renewal links both ways, and when the service
    # stopped returning the PA (effectively deleted: no token left).
    for column in ("expires_at", "expiring_at", "renewal_of", "renewed_by", "gone_at"):
        db.execute(f"ALTER TABLE pas ADD COLUMN {column} TEXT")
    db.execute("CREATE INDEX pas_expires ON pas(expires_at)")
    db.execute("CREATE INDEX pas_renewal_of ON pas(renewal_of)")
    backfill_expires_at(db)


def backfill_expires_at(db: Database) -> None:
    """``expires_at`` of the PAs approved before m008, from the period their callbacks
    kept in ``details_json`` (pg_migrations' m008 reads it the same way)."""
    from .expiry import expiry_date  # the same reading as the callbacks' (store/expiry.py)

    rows = db.execute(
        "SELECT id, details_json FROM pas WHERE details_json LIKE '%expiration_date%'"
    ).fetchall()
    for pa_id, details in rows:
        try:
            value = json.loads(details).get("expiration_date")
        except (ValueError, AttributeError):
            continue
        day = expiry_date(value)
        if day is not None:
            db.execute("UPDATE pas SET expires_at = ? WHERE id = ?", [day, pa_id])


@MIGRATIONS()
def m009_people_and_audit_chain(db: Database) -> None:
    # Issue 29: the people who sign in to the console, their sessions, and the audit
    # trail as a hash chain (decisions 0034, 0035). Entries from before this step keep
    # seq and hash NULL: the chain starts after them.
    db.execute(
        """CREATE TABLE users (
            name TEXT PRIMARY KEY,           -- the sign-in name
            display_name TEXT NOT NULL,      -- what the PA service's history shows
            source TEXT NOT NULL,            -- local (password) or oidc
            password_hash TEXT,              -- argon2id
            totp_secret TEXT,                -- sealed with the database's key
            totp_last_step INTEGER,          -- the last TOTP time step accepted
            disabled INTEGER NOT NULL DEFAULT 0,
            failed_count INTEGER NOT NULL DEFAULT 0,
            locked_until REAL,               -- epoch seconds
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            last_sign_in_at TEXT
        )"""
    )
    db.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,             -- sha256 of the cookie's secret, never the secret
            user_name TEXT,                  -- NULL until an OIDC sign-in comes back
            stage TEXT NOT NULL,             -- totp, oidc (under way) or active
            display_name TEXT,
            created_at REAL NOT NULL,
            last_seen REAL NOT NULL,
            remote TEXT,
            pending_json TEXT,               -- an OIDC sign-in's state, nonce, verifier
            ended_at REAL,
            ended_why TEXT
        )"""
    )
    db.execute("CREATE INDEX sessions_user ON sessions(user_name)")
    db.execute("ALTER TABLE audit ADD COLUMN seq INTEGER")
    db.execute("ALTER TABLE audit ADD COLUMN remote TEXT")
    db.execute("ALTER TABLE audit ADD COLUMN hash TEXT")
    db.execute("CREATE UNIQUE INDEX audit_seq ON audit(seq)")
    db.execute("CREATE INDEX audit_at ON audit(at)")
    db.execute(
        """CREATE TABLE audit_head (
            one INTEGER PRIMARY KEY CHECK (one = 1),
            seq INTEGER NOT NULL,            -- the newest entry's
            hash TEXT NOT NULL,
            floor_seq INTEGER NOT NULL,      -- the last entry retention removed (0: none)
            floor_hash TEXT NOT NULL
        )"""
    )
    zero = "0" * 64
    db.execute("INSERT INTO audit_head VALUES (1, 0, ?, 0, ?)", [zero, zero])


@MIGRATIONS()
def m010_pa_news_and_aliases(db: Database) -> None:
    # Issue 26 (the pharmacist sees the truth after any sequence of events): whether a
    # fax failure is the PA's latest news (a later status supersedes it), the feed
    # position of the PA's latest news (an acknowledgement older than it no longer
    # holds, decision 0014), and the provisional id a submit answered before the
    # first callback brought the service's (still found by it). A fax failure stays
    # the latest news where it was one; the news is the PA's last change.
    db.execute("ALTER TABLE pas ADD COLUMN fax_failed_latest INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE pas ADD COLUMN news_seq INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE pas ADD COLUMN provisional_id TEXT")
    db.execute("UPDATE pas SET fax_failed_latest = fax_failed, news_seq = change_seq")
    db.execute(
        "CREATE UNIQUE INDEX pas_provisional ON pas(provisional_id)"
        " WHERE provisional_id IS NOT NULL"
    )


@MIGRATIONS()
def m011_idempotency_created(db: Database) -> None:
    # Issue 31: a replayed Idempotency-Key answers what its first answer said (a PA
    # created then, or found), and a key is one request's, whatever the path: it is
    # looked up by itself.
    db.execute("ALTER TABLE idempotency_keys ADD COLUMN created INTEGER")
    db.execute("CREATE INDEX idempotency_keys_key ON idempotency_keys(key)")


def known() -> list[str]:
    """Every step this version knows, in order."""
    return [m.name for m in MIGRATIONS.pending(Database(memory=True))]


def applied(db: Database) -> list[str]:
    """The steps recorded as applied in ``db`` (empty on a database without the table)."""
    return [m.name for m in MIGRATIONS.applied(db)]


def pending(db: Database) -> bool:
    return bool(MIGRATIONS.pending(db))
