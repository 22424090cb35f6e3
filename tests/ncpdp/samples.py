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
    #: For the defects real claims showed: what strict mode refuses, as (reason
    #: fragment, offset, segment_id, field_id); lenient mode then keeps the bytes and
    #: lists ``lenient_note`` (a fragment) in ``tolerated``.
    strict_error: tuple[str, int, str | None, str | None] | None = None
    lenient_note: str | None = None
    #: Transactions the view shows, when not ``groups`` (a status segment sent at
    #: transmission level still makes a transaction of the view).
    view_transactions: int | None = None

    @property
    def strict(self) -> bool:
        return self.strict_error is None

    @property
    def header_length(self) -> int:
        if self.kind == "response":
            return 31
        return 58 if self.version == "F6" else 56


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

#: F6 B1 request (hand-written from the public facts, decision 0011): 58-character
#: header (version and code first, then the 8-digit IIN), no group separator (the
#: transaction starts at AM07), Patient ID repeating with its count RR, the F6
#: middle name 0C, and the new Intermediary segment AM19 in the transaction.
LITERAL_F6_B1 = (
    b"F6B161001400SYNPCN    1"  # version, code, IIN (8), PCN (10), count
    b"011999999976     20261123SYNVEND001"  # B2, B1 (15), D1, AK (10)
    b"\x1e\x1cAM04\x1cC2ZQX90817263\x1cC1SYNGRP01\x1cC3001\x1cC61"
    b"\x1e\x1cAM01\x1cRR2\x1cCX01\x1cCYSYNPAT0001\x1cCX99\x1cCYSYNPAT0002\x1cC419610407"
    b"\x1cC52\x1cCAZEBULONTEST\x1c0CQ\x1cCBQUIXOTESYNTH"
    b"\x1e\x1cAM07\x1cEM1\x1cD2000001234567\x1cE103\x1cD700093505601\x1cE730000"
    b"\x1cD300\x1cD5030"
    b"\x1e\x1cAM03\x1cEZ01\x1cDB1999999984\x1cDRDRSYNTH"
    b"\x1e\x1cAM11\x1cD91234{\x1cDC050{\x1cDU1299E\x1cDN01"
    b"\x1e\x1cAM19\x1c8G1\x1c8H01\x1c8KQQ\x1c8MSYNINTERMED1"
)

#: F6 rejected response (75, PA required): 31-character header as in D.0, the Response
#: Insurance segment with the F6 Payer ID count KR and two J7/J8 pairs, then the one
#: transaction without a group separator, with the new AM40 Provider segment.
LITERAL_F6_REJECT = (
    b"F6B11R011999999976     20261123"
    b"\x1e\x1cAM25\x1cC1SYNGRP01\x1cKR2\x1cJ701\x1cJ8SYNPAYER1\x1cJ702\x1cJ8SYNPAYER2"
    b"\x1e\x1cAM21\x1cANR\x1cFA01\x1cFB75\x1c4F01\x1cFQPRIOR AUTH REQUIRED"
    b"\x1c7F03\x1c8F8005550100"
    b"\x1e\x1cAM22\x1cEM1\x1cD2000001234567\x1c9F1\x1cAP03\x1cAR00093505602"
    b"\x1e\x1cAM40\x1cZVSYNSRC\x1cZZXX"
)

#: D.0 E1 eligibility request: Insurance and Patient segments and no transaction group,
#: with 109-A9 = 1. Standard; strict mode refused it before issue 17.
LITERAL_D0_E1 = (
    b"610014D0E1SYNPCN    1011999999976     20261123SYNVEND001"
    b"\x1e\x1cAM04\x1cC2ZQX90817263\x1cC1SYNGRP01\x1cC61"
    b"\x1e\x1cAM01\x1cC419610407\x1cC52\x1cCAZEBULONTEST\x1cCBQUIXOTESYNTH"
)

#: F6 E1 eligibility request: no transaction at all, even with a Pharmacy Provider
#: segment (AM02, transaction-level in a claim) among its segments; AM37 Last Known 4Rx.
LITERAL_F6_E1 = (
    b"F6E161001400SYNPCN    1011999999976     20261123SYNVEND001"
    b"\x1e\x1cAM04\x1cC2ZQX90817263\x1cC61"
    b"\x1e\x1cAM01\x1cC419610407\x1cCBQUIXOTESYNTH"
    b"\x1e\x1cAM02\x1cEY01\x1cE91999999976"
    b"\x1e\x1cAM37\x1c3E61001400\x1c3J2026\x1c3K11"
)

#: A payer's 75 reject sent without a group separator in a D.0 response whose header
#: says accepted: the view used to drop the status (accepted, not PA-eligible).
LITERAL_D0_NO_GROUP_75 = (
    b"D0B11A011999999976     20261123"
    b"\x1e\x1cAM20\x1cF4SYNTHETIC PLAN MESSAGE"
    b"\x1e\x1cAM21\x1cANR\x1cFA01\x1cFB75\x1cFQPRIOR AUTH REQUIRED"
)

#: A response rejected at header level, with a message and no group: standard.
LITERAL_D0_HEADER_REJECT = b"D0B11R011999999976     20261123\x1e\x1cAM20\x1cF4SYNTHETIC HOST DOWN"

_REQ = b.request_bytes()
_AM01_AT = _REQ.index(b"\x1e\x1cAM01")
_D2_AT = _REQ.index(b"\x1cD2")
_CA_AT = _REQ.index(b"\x1cCA")
_DN_END = len(_REQ)

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

SAMPLES += (
    Sample(
        name="literal F6 B1 request (58-character header, no group separator, AM19)",
        raw=LITERAL_F6_B1,
        source="hand-written",
        kind="request",
        version="F6",
        code="B1",
        groups=1,
        expect=(
            (None, "01", "RR", "2"),
            (None, "01", "0C", "Q"),
            (0, "07", "D2", "000001234567"),
            (0, "19", "8M", "SYNINTERMED1"),
        ),
    ),
    Sample(
        name="literal F6 rejected response (KR payer ids, AM40)",
        raw=LITERAL_F6_REJECT,
        source="hand-written",
        kind="response",
        version="F6",
        code="B1",
        groups=1,
        expect=((None, "25", "KR", "2"), (0, "21", "FB", "75"), (0, "40", "ZV", "SYNSRC")),
    ),
    Sample(
        name="F6 B2 reversal request",
        raw=b.request_bytes(version="F6", code="B2", bin="61001400"),
        source="builders.request",
        kind="request",
        version="F6",
        code="B2",
        groups=1,
        expect=((None, "04", "C2", "ZQX90817263"), (0, "07", "D2", "000001234567")),
    ),
    Sample(
        name="F6 paid response",
        raw=b.response_bytes([b.PAID], version="F6"),
        source="builders.response",
        kind="response",
        version="F6",
        code="B1",
        groups=1,
        expect=((0, "21", "AN", "P"),),
    ),
    Sample(
        name="literal F6 E1 eligibility request (no transaction, AM37)",
        raw=LITERAL_F6_E1,
        source="hand-written",
        kind="request",
        version="F6",
        code="E1",
        groups=0,
        expect=((None, "02", "E9", "1999999976"), (None, "37", "3K", "11")),
    ),
    # --- what real claims showed (issue 17) -------------------------------------
    Sample(
        name="D.0 E1 eligibility request, no transaction group",
        raw=LITERAL_D0_E1,
        source="hand-written",
        kind="request",
        version="D0",
        code="E1",
        groups=0,
        expect=((None, "04", "C2", "ZQX90817263"), (None, "01", "CB", "QUIXOTESYNTH")),
    ),
    Sample(
        name="D.0 response rejected at header level, no group",
        raw=LITERAL_D0_HEADER_REJECT,
        source="hand-written",
        kind="response",
        version="D0",
        code="B1",
        groups=0,
        expect=((None, "20", "F4", "SYNTHETIC HOST DOWN"),),
    ),
    Sample(
        name="D.0 response, no group, not rejected at header level (75 at transmission level)",
        raw=LITERAL_D0_NO_GROUP_75,
        source="hand-written",
        kind="response",
        version="D0",
        code="B1",
        groups=0,
        expect=((None, "21", "FB", "75"),),
        strict_error=("must be rejected at header level (501-F1 = 'R')", 5, None, "F1"),
        lenient_note="must be rejected at header level",
        view_transactions=1,
    ),
    Sample(
        name="missing segment separator (a field AM after the first field)",
        raw=_REQ[:_AM01_AT] + _REQ[_AM01_AT + 1 :],
        source="builders.request, 0x1E removed",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((None, "04", "AM", "01"),),
        strict_error=("a segment separator (0x1E) is missing", _AM01_AT, "04", "AM"),
        lenient_note="field id AM inside segment AM04",
    ),
    Sample(
        name="byte 0xFF inside a field",
        raw=_REQ[: _D2_AT + 5] + b"\xff" + _REQ[_D2_AT + 6 :],
        source="builders.request, one byte replaced",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "07", "D2", "00\xff001234567"),),
        strict_error=("byte 0xFF outside printable ASCII in field D2", _D2_AT + 5, "07", "D2"),
        lenient_note="byte 0xFF outside printable ASCII in segment AM07, field D2",
    ),
    Sample(
        name="NUL inside a field",
        raw=_REQ[: _CA_AT + 3] + b"\x00" + _REQ[_CA_AT + 3 :],
        source="builders.request, one byte inserted",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((None, "01", "CA", "\x00ZEBULONTEST"),),
        strict_error=("byte 0x00 outside printable ASCII in field CA", _CA_AT + 3, "01", "CA"),
        lenient_note="byte 0x00 outside printable ASCII in segment AM01, field CA",
    ),
    Sample(
        name="line feed with a second message glued on",
        raw=_REQ + b"\n" + _REQ,
        source="builders.request, twice, joined by LF",
        kind="request",
        version="D0",
        code="B1",
        groups=2,
        expect=((0, "11", "DN", "01\n" + _REQ[:56].decode()),),
        strict_error=("byte 0x0A outside printable ASCII in field DN", _DN_END, "11", "DN"),
        lenient_note="byte 0x0A outside printable ASCII in segment AM11, field DN",
    ),
    Sample(
        name="letters in the BIN",
        raw=b"61OO14" + _REQ[6:],
        source="builders.request, header slot changed",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        strict_error=("header field A1 (BIN Number) must be 6 digits", 0, None, "A1"),
        lenient_note="header field A1 (BIN Number) must be 6 digits, got '61OO14'",
    ),
    Sample(
        name="impossible date of service",
        raw=_REQ[:38] + b"20261131" + _REQ[46:],
        source="builders.request, header slot changed",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        strict_error=("must be a CCYYMMDD calendar date", 38, None, "D1"),
        lenient_note="header field D1 (Date of Service) must be a CCYYMMDD calendar date",
    ),
)

# --- the shapes of public sample claims, rebuilt by our builders (issue 25) ----------

#: A switch's reject whose payer message is cut into 40-character 526-FQ pieces
#: continued by 131-UG "+", with the switch's private AM99 after the status.
SWITCH_REJECT = b.switch_reject()
#: An F6 claim with the Intermediary segment (AM19), IIN 00880151.
F6_INTERMEDIARY = b.f6_claim_with_intermediary()
#: A D.0 claim of CVS Caremark's BIN 004336 (framed STX/ETX, as pa-bridge frames
#: claims for the service, it was read as a batch file before issue 25: the framed and
#: line-break shapes are in test_real_traffic.py and tests/strategies.py).
CLAIM_004336 = b.request_bytes(bin="004336")
#: A D.0 response with the Response Insurance Additional Information segment (AM27).
WITH_AM27 = (
    b"D0B11A011999999976     20261123\x1e\x1cAM25\x1cC1SYNGRP01"
    b"\x1e\x1cAM27\x1cURX\x1cUQ1\x1cU1S9999\x1cFFSYNFORM1\x1cU6SYNBENEFIT\x1cUS20270101"
    b"\x1d\x1e\x1cAM21\x1cANP\x1cF3SYNAUTH001"
)
#: A D.0 claim carrying an F6-only field (KW Total Prescribed Quantity Remaining).
D0_WITH_F6_FIELD = b.request_bytes(rxs=(b.Rx(extra_claim_fields=(("KW", "90000"),)),))
#: An F6 transmission with two Claim segments: F6 carries one transaction.
_F6_ONE = b.request_bytes(version="F6", bin="61001400")
F6_TWO_CLAIMS = _F6_ONE + _F6_ONE[_F6_ONE.index(b"\x1e\x1cAM07") :].replace(
    b"000001234567", b"000007654321"
)
#: A batch file with a line break between records (files in the wild), of the shapes above.
BATCH_WITH_LINE_BREAKS = b.batch_bytes(
    [CLAIM_004336, SWITCH_REJECT, F6_INTERMEDIARY, WITH_AM27], between=b"\r\n"
)

SAMPLES += (
    Sample(
        name="public shape: a switch's reject with a continued message",
        raw=SWITCH_REJECT,
        source="builders.switch_reject",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=(
            (0, "21", "FB", "1S"),
            (0, "21", "FQ", b.SWITCH_REJECT_TEXT[:40]),
            (0, "21", "UG", "+"),
            (0, "99", "&B", "SW000123"),
        ),
    ),
    Sample(
        name="public shape: an F6 claim with an intermediary segment",
        raw=F6_INTERMEDIARY,
        source="builders.f6_claim_with_intermediary",
        kind="request",
        version="F6",
        code="B1",
        groups=1,
        expect=((0, "19", "8M", "SYNINTERMED1"), (0, "07", "D2", "000001234567")),
    ),
    Sample(
        name="D.0 response with the AM27 segment",
        raw=WITH_AM27,
        source="hand-written",
        kind="response",
        version="D0",
        code="B1",
        groups=1,
        expect=((None, "27", "UR", "X"), (None, "27", "FF", "SYNFORM1")),
    ),
    Sample(
        name="D.0 claim with an F6-only field",
        raw=D0_WITH_F6_FIELD,
        source="builders.request, KW added",
        kind="request",
        version="D0",
        code="B1",
        groups=1,
        expect=((0, "07", "KW", "90000"),),
        strict_error=(
            "field KW (Total Prescribed Quantity Remaining) is an F6 field",
            D0_WITH_F6_FIELD.index(b"\x1cKW"),
            "07",
            "KW",
        ),
        lenient_note="is an F6 field, not a field of D.0, in segment AM07",
    ),
    Sample(
        name="F6 transmission with two claims",
        raw=F6_TWO_CLAIMS,
        source="builders.request, its claim twice",
        kind="request",
        version="F6",
        code="B1",
        groups=2,
        expect=((1, "07", "D2", "000007654321"),),
        strict_error=("carries one transaction", len(_F6_ONE), "07", None),
        lenient_note="read as transaction 2",
    ),
)

SAMPLE_IDS = [s.name for s in SAMPLES]
