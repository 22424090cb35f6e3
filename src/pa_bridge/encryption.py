"""Where the encryption key comes from, and the store opened with it (decision 0033).

``[encryption] key_file`` names the key file; a relative name is a systemd credential
(``LoadCredential=``, read from ``$CREDENTIALS_DIRECTORY``). Without it, a SQLite
database gets ``pa-bridge.key`` beside it, created at the first start (the embedded
default keeps working with no setup); PostgreSQL needs it named, for every daemon of
a fleet must read the same key. Every problem is a :class:`KeyProblem` whose message
names the key's source.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .config import Settings
from .store import PgStore, Store, crypto
from .store.crypto import KeyProblem, Keyring

__all__ = ["KeyProblem", "KeySource", "check_store", "key_source", "load_keys", "open_store"]

DEFAULT_NAME = "pa-bridge.key"


@dataclass(frozen=True)
class KeySource:
    path: Path
    #: in words, for messages: "key file /etc/pa-bridge/encryption.key (encryption.key_file)"
    words: str
    default: bool = False
    credential: bool = False


def key_source(settings: Settings) -> KeySource:
    """Where this configuration's key is (the file need not exist)."""
    kf = settings.encryption.key_file
    if kf is None:
        if settings.storage.database_url() is not None:
            raise KeyProblem(
                "encryption.key_file: required with storage.url (every daemon of the fleet"
                " reads the same key; create one with `pa-bridge keys rotate --key-file FILE`)"
            )
        p = settings.storage.path.parent / DEFAULT_NAME
        return KeySource(p, f"key file {p} (the default beside the database)", default=True)
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if not kf.is_absolute() and creds:
        p = Path(creds) / kf
        return KeySource(p, f"systemd credential {kf} ({p})", credential=True)
    return KeySource(kf, f"key file {kf} (encryption.key_file)")


def create_key_file(path: Path) -> None:
    kid, key = crypto.new_key()
    crypto.write_keyring(path, [crypto.key_line(kid, key)])


def load_keys(settings: Settings, *, create_default: bool = False) -> tuple[Keyring, bool]:
    """The keyring, and whether its default file was created now (``create_default``:
    the daemon's first start on a SQLite database)."""
    src = key_source(settings)
    created = False
    if src.default and create_default and not src.path.exists():
        create_key_file(src.path)
        created = True
    return Keyring(src.path, src.words), created


def check_store(store: Store, keys: Keyring) -> None:
    """Refuse a key that is not this database's (:func:`crypto.check_keys`); record
    the current key's check value."""
    problems = crypto.check_keys(store.reader(), keys)
    if problems:
        raise KeyProblem("; ".join(problems))
    store.write(lambda db: crypto.record_check(db, keys))


def open_store(settings: Settings, *, create_default: bool = True) -> Store:
    """The store of ``[storage]`` with its key loaded and checked (the daemon's)."""
    keys, created = load_keys(settings, create_default=create_default)
    url = settings.storage.database_url()
    st = settings.storage
    store: Store
    if url is not None:
        store = PgStore(
            url, max_connections=st.max_connections, lock_timeout_ms=st.busy_timeout_ms, keys=keys
        )
    else:
        store = Store(st.path, busy_timeout_ms=st.busy_timeout_ms, keys=keys)
    try:
        check_store(store, keys)
    except BaseException as e:
        store.close()
        if created:  # a new key for a database encrypted with another: take it back
            with contextlib.suppress(OSError):
                keys.path.unlink()
            if isinstance(e, KeyProblem):
                raise KeyProblem(
                    f"{keys.source}: no such file, and the database holds values sealed with"
                    f" a key; put the database's key file back there ({e})"
                ) from None
        raise
    return store
