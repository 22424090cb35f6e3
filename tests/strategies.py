"""Hypothesis strategies for claims of the shapes a pharmacy's real traffic has (issue 25),
built with the synthetic builders of ``tests/builders.py``.

Every test claim used to come from the builders with our own BIN, one framing and one
version, and a claim of the largest PBMs failed end to end. These strategies draw from
the world's variety instead:

* BINs and IINs of the shapes payers use: leading zeros (``004336`` CVS Caremark,
  ``003858`` Express Scripts), ``6xxxxx``, ``99xxxx`` and the ``999999`` test BIN; the
  8-digit F6 IIN (``00880151``);
* PCNs as printed on member cards (empty, short letter codes, Part D codes, digits),
  group ids, NPI or NCPDP provider ids;
* framings: none, STX/ETX, line breaks before or after, both;
* versions D.0, 5.1 and F6; one to four transactions (one in F6), F6's Intermediary
  segment, a switch's private segment in the response;
* responses paid, duplicate or rejected, with reject codes of every family (the PA
  codes, two digits, digit and letter, letter and digit, two letters, three
  characters), occurrence indicators, help desk, preferred products, and messages
  short, several, long and continued by 131-UG (cut at 40 characters, mid-word).

Everything is synthetic: the names, dates of birth and cardholder ids are the builders'.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from tests import builders as b

STX, ETX = b"\x02", b"\x03"

#: What goes before and after a claim on the wire, by name.
FRAMINGS: dict[str, tuple[bytes, bytes]] = {
    "none": (b"", b""),
    "stx_etx": (STX, ETX),
    "lf_before": (b"\n", b""),
    "crlf_before": (b"\r\n", b""),
    "crlf_after": (b"", b"\r\n"),
    "stx_etx_crlf": (STX, ETX + b"\r\n"),
    "crlf_stx_etx_crlf": (b"\r\n" + STX, ETX + b"\r\n"),
}

#: BINs the issue names (CVS Caremark 004336, Express Scripts 003858, the NCPDP test BIN
#: 999999, 004740) and ours; the strategies also generate each shape.
KNOWN_BINS = ("004336", "003858", "004740", "999999", "610014", "015581")
#: The sandbox's outcomes drills (500, stall, trickle): not for a test that wants answers.
SANDBOX_DRILL_BINS = frozenset({"999996", "999997", "999998"})
KNOWN_PCNS = ("", "ADV", "MEDDADV", "A4", "9999", "PCS", "03200000", "CN")
#: Reject codes that offer a PA (the service interface): 70, 75 and 76 ask the
#: outcomes interface first.
PA_CODES = ("MR", "AG", "A6", "70", "75", "76")
UNKNOWN_NDC = "00000000000"  # the sandbox answers 422 to it

_UPPER = string.ascii_uppercase
_ALNUM = string.ascii_uppercase + string.digits


@cache
def digits(n: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(string.digits), min_size=n, max_size=n)


@cache
def bins(avoid: frozenset[str] = frozenset()) -> st.SearchStrategy[str]:
    """6-digit BINs: the known ones, and 00xxxx, 99xxxx, 6xxxxx, any."""
    return st.one_of(
        st.sampled_from(KNOWN_BINS),
        digits(4).map(lambda d: "00" + d),
        digits(4).map(lambda d: "99" + d),
        digits(5).map(lambda d: "6" + d),
        digits(6),
    ).filter(lambda x: x not in avoid)


@cache
def iins() -> st.SearchStrategy[str]:
    """8-digit F6 IINs: a BIN with two more digits, 00880151, 00xxxxxx, 99xxxxxx."""
    return st.one_of(
        st.tuples(st.sampled_from(KNOWN_BINS), digits(2)).map("".join),
        st.just("00880151"),
        digits(6).map(lambda d: "00" + d),
        digits(6).map(lambda d: "99" + d),
        digits(8),
    )


@cache
def pcns() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(KNOWN_PCNS), st.text(st.sampled_from(_ALNUM), max_size=10))


@cache
def reject_codes() -> st.SearchStrategy[str]:
    """A reject code of any family: the PA codes, two digits (79 refill too soon, 88 DUR
    reject), a digit and a letter (M/I codes: 1C, 7C), a letter and a digit (A5, E7),
    two letters (MR, NN), three characters (D.0's longer codes: 569, 8W0)."""
    return st.one_of(
        st.sampled_from(PA_CODES),
        digits(2),
        st.tuples(st.sampled_from(string.digits), st.sampled_from(_UPPER)).map("".join),
        st.tuples(st.sampled_from(_UPPER), st.sampled_from(string.digits)).map("".join),
        st.text(st.sampled_from(_UPPER), min_size=2, max_size=2),
        st.text(st.sampled_from(_ALNUM), min_size=3, max_size=3),
    )


#: Payer text: printable ASCII of the kind payers send, no separators.
_LONG_TEXT = st.text(
    st.sampled_from(_UPPER + string.digits + " .,:;/()-#$%&*+'"), min_size=41, max_size=200
)


@cache
def messages() -> st.SearchStrategy[str | tuple[str, ...]]:
    """One 526-FQ message: short (one occurrence), or long and cut every 40 characters
    into pieces continued by 131-UG (the payer's cut falls anywhere, mid-word too)."""
    short = st.text(st.sampled_from(_UPPER + " .-"), min_size=1, max_size=40)
    long = _LONG_TEXT.map(b.continued)
    return st.one_of(short, long)


def message_text(message: str | tuple[str, ...]) -> str:
    """What the view shows for one drawn message: its pieces joined, trimmed."""
    return ("".join(message) if isinstance(message, tuple) else message).strip()


@cache
def outcomes() -> st.SearchStrategy[b.Outcome]:
    """One transaction of a response: paid, duplicate or rejected (see the module)."""
    return _outcomes()


@st.composite
def _outcomes(draw: st.DrawFn) -> b.Outcome:
    status = draw(st.sampled_from(["P", "R", "R", "R", "D"]))
    msgs = tuple(draw(st.lists(messages(), max_size=3)))
    if status != "R":
        return b.Outcome(
            status=status,
            authorization=draw(st.sampled_from([None, "SYNAUTH001", "0000000123"])),
            messages=msgs,
        )
    codes = tuple(draw(st.lists(reject_codes(), min_size=1, max_size=5)))
    occurrences = tuple(draw(st.lists(digits(2), max_size=len(codes))))
    preferred = tuple(
        draw(
            st.lists(
                st.tuples(st.just("03"), digits(11), st.just("SYNTHETIC PREFERRED")), max_size=2
            )
        )
    )
    return b.Outcome(
        status="R",
        reject_codes=codes,
        occurrences=occurrences,
        messages=msgs,
        help_phone=draw(st.sampled_from([None, "8005550100", "0008005550"])),
        preferred=preferred,
    )


@cache
def rxs(ndc_ok: Callable[[str], bool] | None = None) -> st.SearchStrategy[b.Rx]:
    """One transaction of a request (``ndc_ok``: which NDCs it may carry)."""
    return _rxs(ndc_ok or (lambda _: True))


@st.composite
def _rxs(draw: st.DrawFn, ndc_ok: Callable[[str], bool]) -> b.Rx:
    return b.Rx(
        rx_number=draw(st.one_of(digits(12), digits(7).map(lambda d: "00000" + d))),
        product_id=draw(digits(11).filter(ndc_ok)),
        quantity=draw(st.sampled_from(["30000", "1500", "000000030000", "90000", "1"])),
        fill_number=draw(st.sampled_from(["00", "01", "11", "0"])),
        days_supply=draw(st.sampled_from(["030", "30", "090", "7", "001"])),
        prescriber_id=draw(digits(10)),
        prescriber_qualifier="01",
    )


@dataclass(frozen=True)
class Exchange:
    """A drawn claim exchange: what was built, and the bytes as they travel."""

    claim: b.Claim
    outcomes: tuple[b.Outcome, ...]
    framing: str
    response_framing: str
    switch_segment: bool

    @property
    def version(self) -> str:
        return self.claim.version

    def request_core(self, **kw: object) -> bytes:
        return b.request_bytes(self.claim, **kw)

    def response_core(self) -> bytes:
        t = b.response(self.outcomes, version=self.version, provider_id=self.claim.provider_id)
        if self.switch_segment:  # a switch adds its own segment to the first transaction
            t = b.with_segment(t, b.SWITCH_SEGMENT)
        return bytes(t)

    def framed(self, core: bytes, framing: str | None = None) -> bytes:
        before, after = FRAMINGS[framing or self.framing]
        return before + core + after

    @property
    def request(self) -> bytes:
        return self.framed(self.request_core())

    @property
    def response(self) -> bytes:
        return self.framed(self.response_core(), self.response_framing)

    def reversal(self) -> bytes:
        return self.framed(self.request_core(code="B2"))

    def payer_message(self, index: int) -> str:
        """The message the view joins for transaction ``index``."""
        return " ".join(t for t in (message_text(m) for m in self.outcomes[index].messages) if t)


@st.composite
def exchanges(
    draw: st.DrawFn,
    *,
    versions: tuple[str, ...] = ("D0", "51", "F6"),
    avoid_bins: frozenset[str] = frozenset(),
    ndc_ok: Callable[[str], bool] | None = None,
) -> Exchange:
    """A request and its response of any real shape (see the module's docstring)."""
    version = draw(st.sampled_from(versions))
    f6 = version == "F6"
    n = 1 if f6 else draw(st.integers(1, 4))
    npi = draw(st.booleans())
    claim = b.Claim(
        version=version,
        bin=draw(iins() if f6 else bins(avoid_bins)),
        pcn=draw(pcns()),
        group_id=draw(st.sampled_from(["SYNGRP01", "RX1234", "", "0000042"])),
        provider_id=draw(digits(10) if npi else digits(7)),
        provider_qualifier="01" if npi else "07",
        rxs=tuple(draw(rxs(ndc_ok=ndc_ok)) for _ in range(n)),
        extra_segments=(b.INTERMEDIARY,) if f6 and draw(st.booleans()) else (),
    )
    return Exchange(
        claim=claim,
        outcomes=tuple(draw(outcomes()) for _ in range(n)),
        framing=draw(st.sampled_from(sorted(FRAMINGS))),
        response_framing=draw(st.sampled_from(sorted(FRAMINGS))),
        switch_segment=draw(st.booleans()),
    )
