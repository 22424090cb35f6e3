"""What sealing PHI at rest costs (issue 29, decision 0033): CPU per claim and per
callback with the key against the same work without it, in the same run.

1. The seal and open alone: a claim's three values (request, response, metadata) and
   a callback body, AES-256-GCM with a fresh nonce each.
2. The storage write of a claim exchange (``exchanges.insert``) and of a callback
   (``callbacks.keep_and_read``), committed in batches as the daemon's writer does,
   on SQLite: sealed against plain.
3. A paid claim through the intake app (parse, decide, commit, queue the report; the
   app's test client, no sockets): sealed against plain.

Run: ``.venv/bin/python bench/crypto_bench.py`` (``make bench`` runs it).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import machine_facts  # noqa: E402

from pa_bridge.store import Store, callbacks, crypto, exchanges, now_iso  # noqa: E402
from tests import builders as b  # noqa: E402
from tests.real_shapes import callback_body  # noqa: E402

ROUNDS = 3
CLAIMS = 2000
BATCH = 50


def keyring() -> crypto.Keyring:
    kid, key = crypto.new_key()
    return crypto.Keyring.of_keys([crypto.key_line(kid, key)])


def cpu(fn: Any) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def best(fn: Any) -> float:
    return min(cpu(fn) for _ in range(ROUNDS))


def seal_alone(keys: crypto.Keyring) -> tuple[float, float]:
    req, resp = b.request_bytes(), b.response_bytes([b.REJECT_75])
    meta = json.dumps({"patient": b.PATIENT_LAST, "note": "x" * 200}).encode()
    body = callback_body("ABC123", "PA Request")
    n = 20_000

    def claims() -> None:
        for i in range(n):
            for v in (req, resp, meta):
                keys.open(keys.seal(v, b"exchanges|%d" % i), b"exchanges|%d" % i)

    def bodies() -> None:
        for i in range(n):
            keys.open(keys.seal(body, b"callbacks|%d" % i), b"callbacks|%d" % i)

    return best(claims) / n * 1e6, best(bodies) / n * 1e6


def _row(i: int) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "received_at": now_iso(),
        "actor": "bench",
        "kind": "claim",
        "version": "D0",
        "transaction_code": "B1",
        "bin": "999999",
        "pcn": "P",
        "group_id": "G",
        "provider_id": "1234567",
        "date_of_service": "20250101",
        "request_raw": b.request_bytes(),
        "response_raw": b.response_bytes([b.REJECT_75]),
        "metadata_json": json.dumps({"patient": b.PATIENT_LAST, "i": i}),
    }


def store_writes(tmp: Path, keys: crypto.Keyring) -> dict[str, float]:
    """µs CPU per claim insert and per callback keep, plain and sealed, batched
    commits; the two stores take turns, each figure the best of its rounds."""
    body = callback_body("ABC123", "PA Request")
    out: dict[str, float] = {}
    with Store(tmp / "plain.sqlite3") as plain, Store(tmp / "sealed.sqlite3", keys=keys) as sealed:
        for _ in range(ROUNDS + 1):
            for tag, s in (("plain", plain), ("sealed", sealed)):
                rows = [_row(i) for i in range(CLAIMS)]

                def claims(s: Store = s, rows: list[dict[str, Any]] = rows) -> None:
                    for k in range(0, CLAIMS, BATCH):
                        part = rows[k : k + BATCH]
                        s.write(lambda db, p=part: [exchanges.insert(db, r) for r in p])  # type: ignore[arg-type]

                def bodies(s: Store = s) -> None:
                    for _k in range(0, CLAIMS, BATCH):
                        s.write(
                            lambda db: [
                                callbacks.keep_and_read(
                                    db, uuid.uuid4().hex, now_iso(), "ABC123", body
                                )
                                for _ in range(BATCH)
                            ]
                        )

                for name, fn in ((f"{tag}_claim", claims), (f"{tag}_callback", bodies)):
                    us = cpu(fn) / CLAIMS * 1e6
                    out[name] = min(out.get(name, us), us)
    return out


def app_claims(tmp: Path, encrypted: bool) -> float:
    """µs CPU per paid claim through the intake app."""
    from pa_bridge.app import create_app, make_client
    from pa_bridge.config import load_settings
    from pa_bridge.encryption import open_store

    settings = load_settings(
        storage={"path": str(tmp / f"app-{encrypted}.sqlite3")},
        intake={"listen": "127.0.0.1:0"},
        callbacks={"listen": "127.0.0.1:0"},
    )
    store = open_store(settings) if encrypted else Store(settings.storage.path)
    client = make_client(settings, "http://127.0.0.1:9")  # paid claims call nothing
    app = create_app(settings, store=store, client=client)
    c = app.test_client()
    body = {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes().decode("latin-1"),
        "metadata": {"patient": b.PATIENT_LAST},
    }
    n = 600
    try:
        for _ in range(50):  # warm up
            c.post("/v1/claims", json=body)

        def run() -> None:
            for _ in range(n):
                assert c.post("/v1/claims", json=body).status_code == 200

        return best(run) / n * 1e6
    finally:
        app.extensions["pa_bridge"].close()
        client.close()
        store.close()


def main() -> None:
    print(f"crypto_bench: {machine_facts()}")
    keys = keyring()
    per_claim, per_body = seal_alone(keys)
    print(
        f"seal + open alone: {per_claim:.1f} µs CPU per claim (3 values), {per_body:.1f} µs per callback body"
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        w = store_writes(tmp, keys)
        for what in ("claim", "callback"):
            p, q = w[f"plain_{what}"], w[f"sealed_{what}"]
            print(
                f"storage write, {what}: {q:.1f} µs sealed vs {p:.1f} µs plain"
                f" ({q / p:.2f}x, {q - p:+.1f} µs)"
            )
        plain_a = min(app_claims(tmp, False), app_claims(tmp, False))
        sealed_a = min(app_claims(tmp, True), app_claims(tmp, True))
        print(
            f"paid claim through the intake app: {sealed_a:.0f} µs sealed vs {plain_a:.0f} µs plain"
            f" ({sealed_a / plain_a:.2f}x)"
        )


if __name__ == "__main__":
    main()
