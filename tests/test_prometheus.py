"""``/metrics`` as Prometheus reads it (issue 27): its Content-Type parsed the way Go's
``mime.ParseMediaType`` parses it (Prometheus 3 refuses a scrape whose type does not
parse: ``mime: duplicate parameter name``), and a scrape by a real Prometheus (Debian's
``prometheus`` package; ``make prometheus`` installs it as root)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import DaemonProcess, free_port, wait_until


class MediaTypeError(ValueError):
    pass


_TSPECIALS = set('()<>@,;:\\"/[]?=')


def _token(s: str) -> bool:
    return bool(s) and all(33 <= ord(c) < 127 and c not in _TSPECIALS for c in s)


def go_parse_media_type(value: str) -> tuple[str, dict[str, str]]:
    """What Go's ``mime.ParseMediaType`` (Prometheus's reader) makes of a Content-Type:
    the lowercased type, and its parameters by lowercased name; a parameter named twice
    is an error (``mime: duplicate parameter name``), as is a type or a parameter that
    is not a token. Quoted values are taken as they are (this endpoint sends none)."""
    media, _, rest = value.partition(";")
    media = media.strip().lower()
    kind, slash, sub = media.partition("/")
    if not (_token(kind) and (not slash or _token(sub))):
        raise MediaTypeError("mime: expected token after slash" if slash else "mime: no media type")
    params: dict[str, str] = {}
    for part in rest.split(";") if rest.strip() else []:
        name, eq, val = part.strip().partition("=")
        name = name.strip().lower()
        if not eq or not _token(name):
            raise MediaTypeError("mime: invalid media parameter")
        val = val.strip()
        if val.startswith('"') and val.endswith('"') and len(val) >= 2:
            val = val[1:-1]
        elif not _token(val):
            raise MediaTypeError("mime: invalid media parameter")
        if name in params:
            raise MediaTypeError("mime: duplicate parameter name")
        params[name] = val
    return media, params


def test_go_parse_media_type_is_as_strict_as_go() -> None:
    assert go_parse_media_type("Text/Plain; Version=0.0.4; charset=utf-8") == (
        "text/plain",
        {"version": "0.0.4", "charset": "utf-8"},
    )
    for bad in ("text/plain; charset=utf-8; charset=utf-8", "text/plain; charset", "/plain"):
        with pytest.raises(MediaTypeError):
            go_parse_media_type(bad)


def test_metrics_content_type_has_one_charset(make_app: Any) -> None:
    app = make_app()
    r = app.client.get("/metrics")
    assert r.status_code == 200
    media, params = go_parse_media_type(r.headers["Content-Type"])
    assert media == "text/plain" and params["charset"] == "utf-8"
    assert params["version"] in ("0.0.4", "1.0.0")  # the text exposition format


# ---- a real Prometheus --------------------------------------------------------------------
@pytest.fixture
def prometheus_bin() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip(
            "prometheus is not installed: `apt-get install prometheus` (Debian, 2.42), or"
            " `make prometheus` as root"
        )
    return exe


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path).start()
    try:
        yield d
    finally:
        d.terminate()


@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_daemon(
    prometheus_bin: str, daemon: DaemonProcess, tmp_path: Path
) -> None:
    """Prometheus 2.42 falls back to the text format when the type does not parse, and
    says so only at debug level ("Invalid content type on scrape"): the test reads
    that line too, so it sees what Prometheus 3 refuses."""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: pa-bridge\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{daemon.intake_port}']\n"
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                prometheus_bin,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=debug",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    api = f"http://127.0.0.1:{port}/api/v1"
    try:

        def scraped() -> Any:
            targets = httpx.get(f"{api}/targets", timeout=2).json()["data"]["activeTargets"]
            if not targets or targets[0]["health"] != "up":
                return None
            q = httpx.get(f"{api}/query", params={"query": "pa_bridge_queue_depth"}, timeout=2)
            return q.json()["data"]["result"]

        result = wait_until(scraped, timeout=60, interval=0.25, what="Prometheus's first scrape")
        assert {r["metric"]["status"] for r in result} == {"pending", "failed", "held"}
        up = httpx.get(f"{api}/query", params={"query": "up"}, timeout=2).json()
        assert up["data"]["result"][0]["value"][1] == "1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    text = log.read_text(errors="replace")
    assert "Invalid content type" not in text, text[-3000:]
    assert "duplicate parameter" not in text
