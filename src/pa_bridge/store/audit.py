"""The ``audit`` table: who did what, when, from where, to which object, as a hash
chain (decision 0035). Never PHI: ``detail`` holds ids, codes and counts only.

Each entry has a ``seq`` (1, 2, 3, ... with no gap) and ``hash`` = sha256 of the
previous entry's hash and this entry's fields (:func:`entry_hash`). The one row of
``audit_head`` holds the newest entry's seq and hash, and the floor: the last entry
retention removed, which the oldest entry kept must follow. An entry is appended in
the transaction of what it records, after taking ``audit_head`` (SQLite's write lock
already serializes writers; PostgreSQL locks the row until commit, so entries of
several daemons chain in commit order).

A changed entry breaks its hash; a removed one breaks the next entry's, or the seq
run; entries removed from the end leave a shorter chain that no longer reaches the
head row, or an anchor kept outside the database (:func:`verify`'s ``anchors``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ._db import Database, is_postgres
from .engine import now_iso

__all__ = [
    "Entry",
    "Verified",
    "add",
    "entries_since",
    "entry_at",
    "entry_hash",
    "head",
    "purge_before",
    "split_actor",
    "verify",
]

GENESIS = "0" * 64
_COLS = "id, seq, at, actor, action, object_id, detail, remote, hash"


@dataclass(frozen=True)
class Entry:
    id: int
    seq: int | None
    at: str
    actor: str | None
    action: str
    object_id: str | None
    detail: str | None
    remote: str | None
    hash: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "object_id": self.object_id,
            "detail": self.detail,
            "remote": self.remote,
            "hash": self.hash,
        }


def entry_hash(
    prev: str,
    seq: int,
    at: str,
    actor: str | None,
    action: str,
    object_id: str | None,
    detail: str | None,
    remote: str | None,
) -> str:
    """sha256 (hex) of the previous hash and the entry's fields as a JSON array."""
    fields = json.dumps(
        [seq, at, actor, action, object_id, detail, remote],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(f"{prev}\n{fields}".encode()).hexdigest()


def split_actor(actor: str) -> tuple[str, str | None]:
    """``"token#1@10.0.0.5"`` -> (``token#1``, ``10.0.0.5``); a bare address (a request
    on loopback without a token) -> (``anonymous``, the address); anything else is
    the actor alone."""
    who, sep, where = actor.rpartition("@")
    if sep and who:
        return who, where or None
    try:
        ipaddress.ip_address(actor)
    except ValueError:
        return actor, None
    return "anonymous", actor


def add(
    db: Database,
    actor: str,
    action: str,
    object_id: str | None,
    detail: str | None = None,
    *,
    at: str | None = None,
    remote: str | None = None,
) -> int:
    """Append one entry (call inside a write transaction); its seq. ``actor`` may
    carry where it came from (``who@address``) unless ``remote`` is given."""
    who, where = split_actor(actor) if remote is None else (actor, remote)
    lock = " FOR UPDATE" if is_postgres(db) else ""
    row = db.conn.execute(f"SELECT seq, hash FROM audit_head WHERE one = 1{lock}").fetchone()  # noqa: S608 - fixed SQL
    seq = int(row[0]) + 1
    when = at or now_iso()
    h = entry_hash(str(row[1]), seq, when, who, action, object_id, detail, where)
    db.conn.execute(
        "INSERT INTO audit (at, actor, action, object_id, detail, seq, remote, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [when, who, action, object_id, detail, seq, where, h],
    )
    db.conn.execute("UPDATE audit_head SET seq = ?, hash = ? WHERE one = 1", [seq, h])
    return seq


@dataclass(frozen=True)
class Head:
    seq: int
    hash: str
    floor_seq: int
    floor_hash: str


def head(db: Database) -> Head:
    row = db.conn.execute(
        "SELECT seq, hash, floor_seq, floor_hash FROM audit_head WHERE one = 1"
    ).fetchone()
    return Head(int(row[0]), str(row[1]), int(row[2]), str(row[3]))


def _entry(r: Any) -> Entry:
    return Entry(int(r[0]), None if r[1] is None else int(r[1]), *r[2:])


def _chained(db: Database, after_seq: int, batch: int) -> Iterator[Entry]:
    while True:
        rows = db.conn.execute(
            f"SELECT {_COLS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?",  # noqa: S608
            [after_seq, batch],
        ).fetchall()
        if not rows:
            return
        for r in rows:
            yield _entry(r)
        after_seq = int(rows[-1][1])


@dataclass(frozen=True)
class Verified:
    """What :func:`verify` found: ``problem`` None when every entry fits."""

    entries: int
    first_seq: int | None
    last_seq: int
    head_hash: str
    unchained: int  # entries from before the chain started (never chained)
    problem: str | None = None
    bad_seq: int | None = None
    bad_id: int | None = None


def verify(db: Database, anchors: Iterable[tuple[int, str]] = (), batch: int = 5000) -> Verified:
    """Walk the chain from the floor to the head: the first entry that does not fit
    (changed, removed, inserted out of the chain), or a head or anchor the chain does
    not reach (entries removed from its end). ``anchors``: (seq, hash) pairs recorded
    outside the database."""
    h = head(db)
    want: dict[int, str] = {}
    for seq, digest in anchors:
        want[int(seq)] = str(digest)
    prev, expect, n, first = h.floor_hash, h.floor_seq + 1, 0, None
    chain_start_id: int | None = None

    def bad(e: Entry | None, why: str) -> Verified:
        return Verified(
            n,
            first,
            expect - 1,
            prev,
            unchained,
            why,
            None if e is None else e.seq,
            None if e is None else e.id,
        )

    unchained = 0
    for e in _chained(db, h.floor_seq, batch):
        if chain_start_id is None:
            chain_start_id = e.id
        if first is None:
            first = e.seq
        assert e.seq is not None
        if e.seq != expect:
            what = "removed" if e.seq > expect else "repeated"
            return bad(e, f"entry {e.seq} follows entry {expect - 1}: entries were {what}")
        digest = entry_hash(prev, e.seq, e.at, e.actor, e.action, e.object_id, e.detail, e.remote)
        if digest != e.hash:
            return bad(e, f"entry {e.seq} (id {e.id}) does not match its hash: it was changed")
        if e.seq in want and want[e.seq] != e.hash:
            return bad(e, f"entry {e.seq} is not the one an anchor recorded")
        prev, expect, n = digest, expect + 1, n + 1
    last = expect - 1
    if last != h.seq or prev != h.hash:
        return bad(
            None,
            f"the chain ends at entry {last} but the head names entry {h.seq}:"
            " entries were removed from its end, or the head was changed",
        )
    beyond = [s for s in want if s > last]
    if beyond:
        return bad(
            None,
            f"an anchor recorded entry {max(beyond)} but the chain ends at entry {last}:"
            " entries were removed from its end",
        )
    unchained_rows = db.conn.execute(
        "SELECT id FROM audit WHERE seq IS NULL ORDER BY id"
    ).fetchall()
    unchained = len(unchained_rows)
    if chain_start_id is not None:
        late = [int(r[0]) for r in unchained_rows if int(r[0]) > chain_start_id]
        if late:
            unchained -= len(late)
            return Verified(
                n,
                first,
                last,
                prev,
                unchained,
                f"entry id {late[0]} is not in the chain: it was inserted around it",
                None,
                late[0],
            )
    return Verified(n, first, last, prev, unchained)


def entry_at(db: Database, seq: int) -> Entry | None:
    """The chained entry ``seq`` (None: not there, e.g. removed by retention)."""
    row = db.conn.execute(f"SELECT {_COLS} FROM audit WHERE seq = ?", [seq]).fetchone()  # noqa: S608
    return None if row is None else _entry(row)


def entries_since(db: Database, since_iso: str, batch: int = 5000) -> Iterator[Entry]:
    """Entries at or after ``since_iso`` (chained ones in chain order, those from
    before the chain first)."""
    for r in db.conn.execute(
        f"SELECT {_COLS} FROM audit WHERE seq IS NULL AND at >= ? ORDER BY id",  # noqa: S608
        [since_iso],
    ).fetchall():
        yield _entry(r)
    after = 0
    while True:
        rows = db.conn.execute(
            f"SELECT {_COLS} FROM audit WHERE seq > ? AND at >= ? ORDER BY seq LIMIT ?",  # noqa: S608
            [after, since_iso, batch],
        ).fetchall()
        if not rows:
            return
        for r in rows:
            yield _entry(r)
        after = int(rows[-1][1])


def purge_before(db: Database, cut_iso: str, limit: int) -> int:
    """Retention (a write job): remove up to ``limit`` of the oldest entries older than
    ``cut_iso``, in chain order, and move the floor to the last one removed, so the
    chain still verifies from the oldest entry kept. Entries from before the chain
    go by age. How many were removed."""
    gone = db.conn.execute("DELETE FROM audit WHERE seq IS NULL AND at < ?", [cut_iso]).rowcount
    lock = " FOR UPDATE" if is_postgres(db) else ""
    h = db.conn.execute(f"SELECT seq, floor_seq FROM audit_head WHERE one = 1{lock}").fetchone()  # noqa: S608
    rows = db.conn.execute(
        "SELECT seq, at, hash FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", [int(h[1]), limit]
    ).fetchall()
    # stop at the first entry that is recent enough: the floor moves over a run
    n = 0
    for r in rows:
        if str(r[1]) >= cut_iso:
            break
        n += 1
    old = rows[:n]
    if not old:
        return gone
    last_seq, last_hash = int(old[-1][0]), str(old[-1][2])
    gone += db.conn.execute(
        "DELETE FROM audit WHERE seq > ? AND seq <= ?", [int(h[1]), last_seq]
    ).rowcount
    db.conn.execute(
        "UPDATE audit_head SET floor_seq = ?, floor_hash = ? WHERE one = 1", [last_seq, last_hash]
    )
    return gone
