"""[tap], [inline] and [framing.<name>]: what a configuration may say, and every mistake
named at start; inline without a switch on the embedded sandbox uses the sandbox's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ncpdp
from ncpdp.framing import Framing
from pa_bridge.config import ConfigError, load_settings
from tests import builders as b
from tests.dispensing import DispensingClient
from tests.support import NO_SERVICE


def _problems(**sections: Any) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_settings(**sections)
    return ei.value.problems


def test_off_by_default_and_the_built_in_profiles() -> None:
    s = load_settings()
    assert s.tap.listen is None and s.inline.listen is None
    assert s.framing_profile("stx_etx") == Framing(kind="stx_etx")
    assert s.framing_profile("etx") == Framing(kind="etx")
    assert s.framing_profile("length_prefix") == Framing(kind="length_prefix")


def test_named_profiles_and_switch_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(
        inline={"listen": "127.0.0.1:7031", "switch": "a.example:1, b.example:2", "framing": "p"},
        framing={
            "p": {"kind": "length_prefix", "length_offset": 2, "length_width": 5},
            "length_prefix": {"length_counts_itself": True},  # changes the built-in one
        },
    )
    assert s.inline.switch == ["a.example:1", "b.example:2"]
    assert s.framing_profile("p") == Framing(kind="length_prefix", length_offset=2, length_width=5)
    assert s.framing_profile("length_prefix").length_counts_itself
    monkeypatch.setenv("PA_BRIDGE_INLINE__SWITCH", "c.example:3")
    monkeypatch.setenv("PA_BRIDGE_INLINE__LISTEN", "127.0.0.1:7031")
    assert load_settings().inline.switch == ["c.example:3"]
    monkeypatch.setenv("PA_BRIDGE_INLINE__SWITCH", '["d.example:4", "e.example:5"]')
    assert load_settings().inline.switch == ["d.example:4", "e.example:5"]


def test_every_mistake_is_named(tmp_path: Path) -> None:
    problems = _problems(
        service=NO_SERVICE,  # no sandbox: the switch is required
        tap={"listen": "0.0.0.0:7030", "framing": "mllp", "allow": ["10.0.0.0/8", "nope"]},
        inline={
            "listen": "0.0.0.0:7031",
            "framing": "partner",
            "tls_cert": str(tmp_path / "missing.crt"),
            "switch_cert_file": str(tmp_path / "client.crt"),
        },
        framing={
            "partner": {"length_width": 5},
            "odd": {"kind": "length_prefix", "length_header": 2},
        },
    )
    text = "\n".join(problems)
    assert "framing.partner.kind: required" in text
    assert "framing.odd: length_header must hold the length field" in text
    assert "tap.framing: unknown framing profile 'mllp'" in text
    assert "tap.allow: 'nope' is not an address or network" in text
    assert "inline.allow: required when inline.listen is not a loopback address" in text
    assert "inline.tls_cert / inline.tls_key: give both or neither" in text
    assert "inline.switch: required" in text
    assert "inline.switch_cert_file / inline.switch_key_file: give both or neither" in text
    assert "tap.allow: required" not in text  # it lists addresses
    assert _problems(inline={"listen": "127.0.0.1:1", "switch": "nowhere"}) == [
        "inline.switch: expected host:port, got 'nowhere'"
    ]
    assert _problems(tap={"listen": "127.0.0.1:1"}, inline={"listen": "127.0.0.1:1"}) == [
        "tap.listen / inline.listen: the same address for both"
    ]


def test_inline_without_a_switch_on_the_sandbox_uses_the_sandboxs(make_daemon: Any) -> None:
    d = make_daemon(
        inline={"listen": "127.0.0.1:0", "framing": "etx"},
        sandbox={"switch_listen": "127.0.0.1:0"},
    )
    assert d.switch is not None and d.switch.framing == Framing(kind="etx")
    with DispensingClient(d.wire.inline_address, Framing(kind="etx")) as c:
        answer = c.exchange(b.request_bytes())
    assert answer.raw == d.switch.sent[-1]
    assert ncpdp.parse(answer.payload).as_response().transactions[0].transaction_status == "P"
    health = d._health()
    assert health["wire"] is True
