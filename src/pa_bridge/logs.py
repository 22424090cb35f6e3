"""Structured logs: one JSON object per line, one line per event, PHI redacted.

Code logs events with ids and codes only (``log_event("claim.accepted",
claim_id=...)``). As a second line of defence, any field whose key names patient or
cardholder data, or a secret, is replaced by ``"[redacted]"`` before it is written,
and free text (exception messages) is never logged from places that may hold claim
content.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from typing import Any

__all__ = [
    "configure_logging",
    "log_event",
    "redact",
    "write_event",
    "PHI_KEYS",
    "SECRET_KEYS",
]

LOGGER = logging.getLogger("pa_bridge")

PHI_KEYS = frozenset(
    {
        "first_name", "last_name", "patient_first_name", "patient_last_name", "name",
        "date_of_birth", "dob", "birth_date", "cardholder_id", "member_id",
        "cardholder_first_name", "cardholder_last_name", "street", "address", "city",
        "zip", "phone", "patient", "request_raw", "response_raw", "raw", "body",
        "ncpdp_claim", "metadata",
    }
)  # fmt: skip
SECRET_KEYS = frozenset(
    {"password", "api_key", "token", "authorization", "secret", "plaintext_password"}
)


@functools.lru_cache(maxsize=1024)
def _sensitive(key: str) -> bool:
    """Whether a field named ``key`` may hold PHI or a secret (keys are few and fixed,
    so the answer is kept)."""
    lk = key.lower()
    return lk in PHI_KEYS or lk in SECRET_KEYS or any(s in lk for s in SECRET_KEYS)


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in fields.items():
        if _sensitive(k):
            out[k] = "[redacted]"
        elif isinstance(v, dict):
            out[k] = redact(v)
        else:
            out[k] = v
    return out


_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"))


@functools.lru_cache(maxsize=4)
def _second(t: int) -> str:
    """``CCYY-MM-DDTHH:MM:SS`` (UTC) of a whole second; the last few are kept."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t = record.created
        event = getattr(record, "event", None)
        doc: dict[str, Any] = {
            "ts": _second(int(t)) + f".{int(t % 1 * 1000):03d}Z",
            "level": record.levelname.lower(),
            # a stable identifier to filter on (journalctl ... | jq 'select(.event == ..)');
            # a library's or module's free text goes in "message", never in "event"
            "event": event if event is not None else f"log.{record.name}",
        }
        if event is None:
            doc["message"] = record.getMessage()
        fields = getattr(record, "fields", None)
        if fields:
            if any(map(_sensitive, fields)) or any(isinstance(v, dict) for v in fields.values()):
                fields = redact(fields)
            doc.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            # the type only: messages of arbitrary exceptions may quote claim content
            doc["exception"] = record.exc_info[0].__name__
        return _ENCODER.encode(doc)


def configure_logging(level: str = "INFO", stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # the JSON lines carry no thread or process names: do not look them up for each
    # record (every claim logs; the documented switches of the logging module)
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # libraries that might echo URLs with credentials or bodies stay quiet
    for noisy in ("httpx", "httpcore", "apscheduler", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # the listeners' server warns once per malformed request: anyone could flood the
    # journal with those (issue 19); its errors still reach it
    logging.getLogger("uvicorn").setLevel(logging.ERROR)


def log_event(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` with its fields. The record is made directly (no search of the
    caller's frame: the JSON lines do not carry a source line), as cheaply as logging
    allows, since every claim logs."""
    if LOGGER.isEnabledFor(level):
        LOGGER.handle(
            LOGGER.makeRecord(
                LOGGER.name, level, "", 0, event, (), None, extra={"event": event, "fields": fields}
            )
        )


def write_event(
    event: str, *, level: int = logging.ERROR, stream: Any = None, **fields: Any
) -> None:
    """One JSON line like :func:`log_event`'s, written to ``stream`` (stderr) at once,
    with no logging configured: a start-up failure that comes before the daemon's
    logging is set up (the config cannot be read) is a log line too."""
    record = LOGGER.makeRecord(
        LOGGER.name, level, "", 0, event, (), None, extra={"event": event, "fields": fields}
    )
    out = stream or sys.stderr
    out.write(_JsonFormatter().format(record) + "\n")
    out.flush()
