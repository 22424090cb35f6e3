"""The one table of sample claims: it drives the parse, serialize and round-trip tests.

Every value is synthetic. Three samples are hand-written byte literals, so the
builders (``tests/builders.py``) are not the only source of truth; the rest are made
by the builders. ``expect`` lists ``(group, segment_id, field_id, raw value)`` facts,
``group`` being ``None`` for transmission-level segments.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests import builders as b


@dataclass(frozen=True, kw_only=True)
class Sample:
    name: str
    raw: bytes
    source: str
    kind: str  # "request" | "response"
    version: str
    code: str
    groups: int
    expect: tuple[tuple[int | None, str, str, str], ...] = ()


# --- hand-written literals (read them against the primer's layout) -----------------

#: D.0 B1 request: 56-character header, Insurance + Patient, one Claim/Prescriber/Pricing
#: group; 402-D2 and 442-E7 (30.000), a negative-free overpunch ingredient cost.
LITERAL_D0_B1 = (
    b"610014D0B1SYNPCN    101"  # BIN, version, code, PCN (10), count, B2 qualifier
    b"1999999976     20261123SYNVEND001"  # B1 provider id (15), D1, AK (10)
    b"\x1e\x1cAM04\x1cC2ZQX90817263\x1cC1SYNGRP01\x1cC3001\x1cC61"
    b"\x1e\x1cAM01\x1cC419610407\x1cC52\x1cCAZEBULONTEST\x1cCBQUIXOTESYNTH"
    b"\x1d"
    b"\x1e\x1cAM07\x1cEM1\x1cD2000001234567\x1cE103\x1cD700093505601\x1cE730000"
    b"\x1cD300\x1cD5030\x1cNX2\x1cDK08\x1cDK01"
    b"\x1e\x1cAM03\x1cEZ01\x1cDB1999999984\x1cDRDRSYNTH"
    b"\x1e\x1cAM11\x1cD91234{\x1cDC050{\x1cDU1299E\x1cDN01"
)

#: 5.1 rejected response: message segment, two reject codes with occurrence
#: indicators, a 510-FA that says 03 (it disagrees with the two codes present).
LITERAL_51_REJECT = (
    b"51B11R011999999976     20261123"
    b"\x1e\x1cAM20\x1cF4SYNTHETIC PLAN MESSAGE"
    b"\x1d"
    b"\x1e\x1cAM21\x1cANR\x1cFA03\x1cFB75\x1c4F01\x1cFB76\x1c4F02"
    b"\x1cFQPRIOR AUTH REQUIRED\x1c7F03\x1c8F8005550100"
)

#: D.0 paid response as a switch relays it: an AMXX segment with punctuation field
#: ids, a private AM99 segment, an all-space value, negative overpunch pricing, and
#: text glued after the last field.
LITERAL_SWITCH = (
    b"D0B11A01               20261123"  # all-space provider id (15 spaces)
    b"\x1e\x1cAMXX\x1c&BSW000123\x1c#A0001\x1c!F    "
    b"\x1d"
    b"\x1e\x1cAM21\x1cANP\x1cF3SYNAUTH9"
    b"\x1e\x1cAM99\x1c&BPRIVATE\x1c&B2"
    b"\x1e\x1cAM23\x1cF5123}\x1cF6000{\x1cF9250E*AD0SYNTHETIC GLUE"
)

# --- builder-made samples -----------------------------------------------------------

_FOUR = tuple(
    b.Rx(rx_number=f"00000123456{i}", product_id=f"0009350560{i}", quantity=f"{i}5000")
    for i in range(1, 5)
)

SAMPLES: tuple[Sample, ...] = (
    Sample(
        name="literal D.0 B1 request",
        raw=LITERAL_D0_B1,
        source="hand-written",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=(
            (None, "04", "C2", "ZQX90817263"),
            (0, "07", "D2", "000001234567"),
            (0, "07", "E7", "30000"),
            (0, "11", "D9", "1234{"),
        ),
    ),
    Sample(
        name="literal 5.1 rejected response",
        raw=LITERAL_51_REJECT,
        source="hand-written",
        kind="response",
        version="51",
        code="B1",
        groups=1,
        expect=((None, "20", "F4", "SYNTHETIC PLAN MESSAGE"), (0, "21", "FB", "75")),
    ),
    Sample(
        name="literal switch response (AMXX, AM99, spaces, glued text)",
        raw=LITERAL_SWITCH,
        source="hand-written",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=(
            (None, "XX", "&B", "SW000123"),
            (None, "XX", "!F", "    "),
            (0, "99", "&B", "PRIVATE"),
            (0, "23", "F9", "250E*AD0SYNTHETIC GLUE"),
        ),
    ),
    Sample(
        name="D.0 B1 request, 1 transaction",
        raw=b.request_bytes(),
        source="builders.request",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "07", "D7", "00093505601"), (0, "03", "DB", "1999999984")),
    ),
    Sample(
        name="5.1 B1 request, 4 transactions",
        raw=b.request_bytes(version="51", rxs=_FOUR),
        source="builders.request",
        kind="request",
        version="51",
        code="B1",
        groups=4,
        expect=((3, "07", "D2", "000001234564"), (3, "07", "E7", "45000")),
    ),
    Sample(
        name="D.0 B2 reversal request",
        raw=b.request_bytes(code="B2"),
        source="builders.request",
        kind="request",
        version="D0",
        code="B2",
        groups=1,
        expect=((0, "07", "D2", "000001234567"),),
    ),
    Sample(
        name="D.0 B1 request with negative overpunch pricing",
        raw=b.request_bytes(rxs=(b.Rx(ingredient_cost="1234}", gross_due="0050J"),)),
        source="builders.request",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "11", "D9", "1234}"), (0, "11", "DU", "0050J")),
    ),
    Sample(
        name="D.0 paid response",
        raw=b.response_bytes([b.PAID]),
        source="builders.response",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "21", "AN", "P"), (0, "23", "F9", "250E")),
    ),
    Sample(
        name="D.0 rejected response, 75 with preferred product",
        raw=b.response_bytes([b.REJECT_75]),
        source="builders.response",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "21", "FB", "75"), (0, "22", "AR", "00093505602")),
    ),
    Sample(
        name="5.1 rejected response, repeating reject codes",
        raw=b.response_bytes([b.REJECT_TWO], version="51"),
        source="builders.response",
        kind="response",
        version="51",
        code="B1",
        groups=1,
        expect=((0, "21", "FA", "02"),),
    ),
    Sample(
        name="D.0 duplicate response",
        raw=b.response_bytes([b.DUPLICATE]),
        source="builders.response",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "21", "AN", "D"),),
    ),
    Sample(
        name="D.0 response, 4 transactions",
        raw=b.response_bytes([b.PAID, b.REJECT_MR, b.REJECT_TWO, b.DUPLICATE], message="SYNTHETIC"),
        source="builders.response",
        kind="response",
        version="D0",
        code="B1",
        groups=4,
        expect=((1, "21", "FB", "MR"), (None, "20", "F4", "SYNTHETIC")),
    ),
    Sample(
        name="D.0 B2 reversal response",
        raw=b.response_bytes([b.Outcome(status="A", pricing=False)], code="B2"),
        source="builders.response",
        kind="response",
        version="D0",
        code="B2",
        groups=1,
        expect=((0, "21", "AN", "A"),),
    ),
)

SAMPLE_IDS = [s.name for s in SAMPLES]
