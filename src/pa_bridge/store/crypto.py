"""PHI encrypted at rest: each value that can hold patient data is sealed on its own
(AES-256-GCM, a random 96-bit nonce, the column and the row's id as associated data)
with a key that is not in the database (decision 0033).

A sealed value names the key that sealed it, so a database may hold values of several
keys while a rotation runs, and values written before encryption (plain) are read as
they are until ``pa-bridge keys encrypt-existing`` seals them:

- a ``BLOB``/``BYTEA`` column: ``b"PAB\\x01"``, the key id (4 bytes), the nonce (12),
  the ciphertext with its 16-byte tag;
- a ``TEXT`` column: ``"pab1:"`` and the same bytes after the magic in base64.

The keys are a :class:`Keyring` read from a key file (``[encryption] key_file``, or a
systemd credential). Table functions reach it through the handle they are given
(``db.keys``, set by :class:`~pa_bridge.store.engine.Store` on every handle it makes);
a handle without keys writes plain values (tests and tools that never saw a key), and
cannot read sealed ones.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._db import Database

__all__ = [
    "PHI_COLUMNS",
    "SEALED_COLUMNS",
    "KeyProblem",
    "Keyring",
    "SealError",
    "check_keys",
    "checked_ids",
    "count_by_key",
    "forget_check",
    "key_line",
    "keys_of",
    "new_key",
    "reseal_batch",
    "seal",
    "seal_text",
    "unseal",
    "unseal_text",
    "write_keyring",
]

MAGIC = b"PAB\x01"
TEXT_PREFIX = "pab1:"
_KID = 4
_NONCE = 12
_HEAD = len(MAGIC) + _KID + _NONCE
#: the meta rows that prove a key opens this database: ``crypto.check.<key id>``
CHECK_PREFIX = "crypto.check."
_CHECK_PLAIN = b"pa-bridge key check"


class KeyProblem(Exception):
    """The key cannot be used: missing, unreadable, malformed, or not the one that
    sealed this database's values. The message names the key's source, never a key."""


class SealError(Exception):
    """A sealed value could not be opened (a key id the keyring lacks, or a value or
    key that is not what sealed it). Names the key id and the source, never data."""


@dataclass(frozen=True)
class _Ring:
    keys: dict[bytes, AESGCM]
    current: bytes
    staged: frozenset[bytes]
    stamp: tuple[int, int, int] | None  # (inode, size, mtime_ns) of the file read


def new_key() -> tuple[str, bytes]:
    """A fresh key id (8 hex digits) and 256-bit key."""
    return secrets.token_hex(_KID), AESGCM.generate_key(bit_length=256)


def key_line(kid: str, key: bytes, *, staged: bool = False) -> str:
    text = f"{kid} {base64.urlsafe_b64encode(key).decode()}"
    return text + " staged" if staged else text


_HEADER = (
    "# pa-bridge encryption keys: `<key id> <key, base64>` per line, the last line not\n"
    "# marked `staged` seals new values; the others open what they sealed. Keep it\n"
    "# secret, outside the database's directory, and keep a copy with the backups:\n"
    "# without it they cannot be read. `pa-bridge keys rotate` adds a key.\n"
)


def write_keyring(path: Path, lines: list[str]) -> None:
    """Write the key file atomically (a new file beside it, renamed): mode 0600, or
    the old file's owner and mode (never more than 0640)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(path)  # the new file keeps the old one's owner (root runs it)
            with contextlib.suppress(PermissionError):
                os.fchown(fd, st.st_uid, st.st_gid)
            os.fchmod(fd, st.st_mode & 0o640)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(_HEADER + "".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _parse(text: str, source: str) -> tuple[dict[bytes, AESGCM], bytes, frozenset[bytes]]:
    keys: dict[bytes, AESGCM] = {}
    current: bytes | None = None
    staged: set[bytes] = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "staged"):
            raise KeyProblem(f"{source}: line {n} is not `<key id> <key>` (is this the key file?)")
        try:
            kid = bytes.fromhex(parts[0])
            key = base64.urlsafe_b64decode(parts[1])
        except (ValueError, binascii.Error):
            raise KeyProblem(f"{source}: line {n} is not `<key id> <key>`") from None
        if len(kid) != _KID or len(key) != 32:
            raise KeyProblem(
                f"{source}: line {n}: a key id is 8 hex digits and a key 32 bytes in base64"
            )
        if kid in keys:
            raise KeyProblem(f"{source}: key id {parts[0]} is given twice")
        keys[kid] = AESGCM(key)
        if len(parts) == 3:
            staged.add(kid)
        else:
            current = kid
    if current is None:
        raise KeyProblem(f"{source}: holds no key (create one with `pa-bridge keys rotate`)")
    return keys, current, frozenset(staged)


class Keyring:
    """The keys that open this database's values, one of them current (it seals).

    Read from ``path``; re-read when the file changes (looked at no more than once a
    second) and at once when a value names a key id it does not know, so ``pa-bridge
    keys rotate`` takes effect in a serving daemon without a restart."""

    def __init__(self, path: Path, source: str, *, check_every_s: float = 1.0) -> None:
        self.path = path
        #: where the key comes from, in words for messages ("key file /etc/...")
        self.source = source
        self._every = check_every_s
        self._lock = threading.Lock()
        self._checked_at = time.monotonic()
        self._ring = self._read()

    @classmethod
    def of_keys(cls, lines: list[str], source: str = "keys given in memory") -> Keyring:
        """A keyring from key lines, without a file (tests, benchmarks)."""
        ring = cls.__new__(cls)
        ring.path = Path("/nonexistent")
        ring.source = source
        ring._every = float("inf")
        ring._lock = threading.Lock()
        ring._checked_at = time.monotonic()
        keys, current, staged = _parse("\n".join(lines), source)
        ring._ring = _Ring(keys, current, staged, None)
        return ring

    def _stamp(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> _Ring:
        try:
            stamp = self._stamp()
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            raise KeyProblem(f"{self.source}: no such file") from None
        except PermissionError:
            raise KeyProblem(f"{self.source}: cannot read it (permission denied)") from None
        except UnicodeDecodeError:
            raise KeyProblem(f"{self.source}: not a pa-bridge key file") from None
        except OSError as e:
            raise KeyProblem(f"{self.source}: cannot read it ({e.strerror})") from None
        keys, current, staged = _parse(text, self.source)
        return _Ring(keys, current, staged, stamp)

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the file if it changed (at most once per ``check_every_s`` unless
        ``force``); whether the keys changed. A file that became unreadable keeps the
        keys already read (the next look tries again)."""
        now = time.monotonic()
        if not force and now - self._checked_at < self._every:
            return False
        with self._lock:
            self._checked_at = now
            try:
                if self._ring.stamp is None or self._stamp() == self._ring.stamp:
                    return False
                self._ring = self._read()
            except (OSError, KeyProblem):
                return False
            return True

    @property
    def current_id(self) -> str:
        return self._ring.current.hex()

    @property
    def ids(self) -> list[str]:
        return [k.hex() for k in self._ring.keys]

    @property
    def staged_ids(self) -> list[str]:
        return [k.hex() for k in self._ring.staged]

    # ---- values --------------------------------------------------------------------
    def seal(self, data: bytes, aad: bytes) -> bytes:
        self.refresh()
        ring = self._ring
        nonce = os.urandom(_NONCE)
        return MAGIC + ring.current + nonce + ring.keys[ring.current].encrypt(nonce, data, aad)

    def open(self, blob: bytes, aad: bytes) -> bytes:
        kid = blob[len(MAGIC) : len(MAGIC) + _KID]
        key = self._ring.keys.get(kid)
        if key is None and self.refresh(force=True):
            key = self._ring.keys.get(kid)
        if key is None or len(blob) < _HEAD + 16:
            raise SealError(
                f"a value is sealed with key id {kid.hex()}, which {self.source} does not hold"
            )
        nonce = blob[len(MAGIC) + _KID : _HEAD]
        try:
            return key.decrypt(nonce, blob[_HEAD:], aad)
        except InvalidTag:
            raise SealError(
                f"a value sealed with key id {kid.hex()} does not open with that key of"
                f" {self.source}: the key or the value was changed"
            ) from None

    def check_value(self) -> str:
        """The current key's check value for ``meta`` (:func:`check_keys`)."""
        return base64.b64encode(self.seal(_CHECK_PLAIN, b"meta." + CHECK_PREFIX.encode())).decode()


def keys_of(db: Database) -> Keyring | None:
    """The keyring of a handle (None: values are written plain)."""
    found: Keyring | None = getattr(db, "keys", None)
    return found


def is_sealed(value: bytes | str | None) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return value.startswith(TEXT_PREFIX)
    return bytes(value[: len(MAGIC)]) == MAGIC


def key_id(value: bytes | str) -> str | None:
    """The key id a sealed value names (None: a plain value)."""
    if isinstance(value, str):
        if not value.startswith(TEXT_PREFIX):
            return None
        raw = base64.b64decode(value[len(TEXT_PREFIX) : len(TEXT_PREFIX) + 8])
        return raw[:_KID].hex()
    if bytes(value[: len(MAGIC)]) != MAGIC:
        return None
    return bytes(value[len(MAGIC) : len(MAGIC) + _KID]).hex()


def _aad(where: str, row: object) -> bytes:
    return f"{where}|{row}".encode()


def seal(db: Database, value: bytes | None, where: str, row: object) -> bytes | None:
    """``value`` sealed for column ``where`` (``table.column``) of row ``row``."""
    keys = keys_of(db)
    if value is None or keys is None:
        return value
    return keys.seal(bytes(value), _aad(where, row))


def unseal(db: Database, value: bytes | memoryview | None, where: str, row: object) -> bytes | None:
    """The plain bytes of a stored value (a value stored plain is returned as it is)."""
    if value is None:
        return None
    value = bytes(value)
    if value[: len(MAGIC)] != MAGIC:
        return value
    keys = keys_of(db)
    if keys is None:
        raise SealError("a value is sealed and no encryption key is loaded")
    return keys.open(value, _aad(where, row))


def seal_text(db: Database, value: str | None, where: str, row: object) -> str | None:
    keys = keys_of(db)
    if value is None or keys is None:
        return value
    blob = keys.seal(value.encode(), _aad(where, row))
    return TEXT_PREFIX + base64.b64encode(blob[len(MAGIC) :]).decode()


def unseal_text(db: Database, value: str | None, where: str, row: object) -> str | None:
    if value is None or not value.startswith(TEXT_PREFIX):
        return value
    keys = keys_of(db)
    if keys is None:
        raise SealError("a value is sealed and no encryption key is loaded")
    blob = MAGIC + base64.b64decode(value[len(TEXT_PREFIX) :])
    return keys.open(blob, _aad(where, row)).decode()


# ---- the database's PHI columns ------------------------------------------------------


@dataclass(frozen=True)
class PhiColumn:
    table: str
    column: str
    #: the column keyset pagination walks (integer or text primary key)
    key: str
    #: the column whose value is the associated data's row part
    row: str
    text: bool = False


#: every column that can hold PHI: the claims' bytes and metadata, callback bodies
PHI_COLUMNS: tuple[PhiColumn, ...] = (
    PhiColumn("exchanges", "request_raw", "id", "id"),
    PhiColumn("exchanges", "response_raw", "id", "id"),
    PhiColumn("exchanges", "metadata_json", "id", "id", text=True),
    PhiColumn("callbacks", "body", "id", "dedupe_key"),
    PhiColumn("dead_letters", "body", "id", "id"),
)


#: every sealed column: the PHI, and the people's TOTP keys (``store/users.py``). A
#: rotation re-seals them all, and a key may leave the file only once none holds a
#: value it sealed.
SEALED_COLUMNS: tuple[PhiColumn, ...] = (
    *PHI_COLUMNS,
    PhiColumn("users", "totp_secret", "name", "name", text=True),
)


def aad_row(col: PhiColumn, row_value: object) -> object:
    """What a dead letter is sealed with: its id is not known before its insert, so
    the table alone."""
    return "-" if col.table == "dead_letters" else row_value


def check_keys(db: Database, keys: Keyring) -> list[str]:
    """What is wrong between ``keys`` and the database (empty: nothing): each
    ``crypto.check.<id>`` row in ``meta`` (written when a key first sealed here) must
    name a key the keyring holds and open with it."""
    problems: list[str] = []
    rows = db.conn.execute(
        "SELECT key, value FROM meta WHERE key >= ? AND key < ?",
        [CHECK_PREFIX, CHECK_PREFIX + "\x7f"],
    ).fetchall()
    for name, value in rows:
        kid = str(name)[len(CHECK_PREFIX) :]
        if kid not in keys.ids:
            problems.append(
                f"the database holds values sealed with key id {kid}, which {keys.source}"
                " does not hold (is this the key file this database was encrypted with?)"
            )
            continue
        try:
            keys.open(base64.b64decode(str(value)), b"meta." + CHECK_PREFIX.encode())
        except (SealError, ValueError, binascii.Error):
            problems.append(
                f"key id {kid} of {keys.source} is not the key that sealed this database's"
                " values (the key file was changed or belongs to another installation)"
            )
    return problems


def record_check(db: Database, keys: Keyring) -> None:
    """Write the current key's check row unless there is one (a write job)."""
    db.conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
        [CHECK_PREFIX + keys.current_id, keys.check_value()],
    )


def checked_ids(db: Database) -> list[str]:
    """The key ids with a check row (each sealed values here at some time)."""
    rows = db.conn.execute(
        "SELECT key FROM meta WHERE key >= ? AND key < ? ORDER BY key",
        [CHECK_PREFIX, CHECK_PREFIX + "\x7f"],
    ).fetchall()
    return [str(r[0])[len(CHECK_PREFIX) :] for r in rows]


def forget_check(db: Database, kid: str) -> None:
    """Remove key ``kid``'s check row (a write job): it seals no stored value any more,
    so the key file may lose it without the start refusing the file."""
    db.conn.execute("DELETE FROM meta WHERE key = ?", [CHECK_PREFIX + kid])


def has_sealed(db: Database) -> bool:
    """Whether any key ever sealed a value here (a check row exists)."""
    row = db.conn.execute(
        "SELECT 1 FROM meta WHERE key >= ? AND key < ? LIMIT 1",
        [CHECK_PREFIX, CHECK_PREFIX + "\x7f"],
    ).fetchone()
    return row is not None


def _page(db: Database, col: PhiColumn, after: Any, limit: int) -> list[Any]:
    """Up to ``limit`` (key, row, value) of ``col``'s stored values past ``after``."""
    where = f"{col.column} IS NOT NULL" + ("" if after is None else f" AND {col.key} > ?")
    return list(
        db.conn.execute(
            f"SELECT {col.key}, {col.row}, {col.column} FROM {col.table}"  # noqa: S608 - our names
            f" WHERE {where} ORDER BY {col.key} LIMIT ?",
            [*([] if after is None else [after]), limit],
        ).fetchall()
    )


def _walk(db: Database, col: PhiColumn, batch: int) -> Iterator[list[tuple[Any, Any, Any]]]:
    after: Any = None
    while rows := _page(db, col, after, batch):
        yield [tuple(r) for r in rows]
        after = rows[-1][0]


def count_by_key(db: Database, batch: int = 2000) -> dict[str, int]:
    """How many stored values (PHI and TOTP keys) each key id sealed, and how many
    are ``plain``."""
    counts: dict[str, int] = {}
    for col in SEALED_COLUMNS:
        for rows in _walk(db, col, batch):
            for _k, _r, value in rows:
                kid = key_id(value if col.text else bytes(value)) or "plain"
                counts[kid] = counts.get(kid, 0) + 1
    return counts


def reseal_batch(
    db: Database, keys: Keyring, col: PhiColumn, after: Any, limit: int
) -> tuple[Any, int, int]:
    """Seal with the current key up to ``limit`` values of ``col`` past ``after`` that
    are plain or sealed with another key (a write job: each is updated only if it is
    still the value read). (the last key seen, or None at the end; values read;
    values sealed now)."""
    rows = _page(db, col, after, limit)
    if not rows:
        return None, 0, 0
    sealed = 0
    for pk, row_value, value in rows:
        aad = _aad(f"{col.table}.{col.column}", aad_row(col, row_value))
        new: str | bytes
        if col.text:
            text = str(value)
            if key_id(text) == keys.current_id:
                continue
            if text.startswith(TEXT_PREFIX):
                blob = MAGIC + base64.b64decode(text[len(TEXT_PREFIX) :])
                text = keys.open(blob, aad).decode()
            sealed_b = keys.seal(text.encode(), aad)
            new = TEXT_PREFIX + base64.b64encode(sealed_b[len(MAGIC) :]).decode()
        else:
            stored = bytes(value)
            if key_id(stored) == keys.current_id:
                continue
            plain_b = keys.open(stored, aad) if stored[: len(MAGIC)] == MAGIC else stored
            new = keys.seal(plain_b, aad)
        cur = db.conn.execute(
            f"UPDATE {col.table} SET {col.column} = ? WHERE {col.key} = ? AND {col.column} = ?",  # noqa: S608
            [new, pk, value],
        )
        sealed += cur.rowcount
    return rows[-1][0], len(rows), sealed
