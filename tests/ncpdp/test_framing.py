"""ncpdp.framing: each framing profile cuts a stream into the frames that were sent,
however the stream is split, and writes a new payload into a frame's envelope."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncpdp
from ncpdp.framing import Framing, FramingError
from tests import builders as b

PROFILES = {
    "stx_etx": Framing(kind="stx_etx"),
    "etx": Framing(kind="etx"),
    "length_prefix": Framing(kind="length_prefix"),
    # a transport header of 10 bytes with a 5-digit length at offset 2, counting itself
    "length_prefix_header": Framing(
        kind="length_prefix",
        length_offset=2,
        length_width=5,
        length_header=10,
        length_counts_itself=True,
    ),
}

# NCPDP payloads: printable ASCII and the three separators, never STX or ETX
payloads = st.binary(min_size=1, max_size=400).map(
    lambda bs: bytes(0x20 + (x % 0x5F) if x % 7 else 0x1C + (x % 3) for x in bs)
)


def _cuts(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({p % (len(data) + 1) for p in points})
    out, start = [], 0
    for c in [*cuts, len(data)]:
        out.append(data[start:c])
        start = c
    return out


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_claim_framed_and_read_back_by_each_profile(name: str) -> None:
    f = PROFILES[name]
    req, resp = b.request_bytes(), b.response_bytes([b.REJECT_75])
    stream = f.frame(req) + f.frame(resp)
    frames = f.deframer().feed(stream)
    assert [fr.payload for fr in frames] == [req, resp]
    assert b"".join(fr.raw for fr in frames) == stream
    assert ncpdp.serialize(ncpdp.parse(frames[0].payload)) == req


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(sorted(PROFILES)),
    messages=st.lists(payloads, min_size=1, max_size=5),
    points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_split_of_the_stream_gives_the_same_frames(
    name: str, messages: list[bytes], points: list[int]
) -> None:
    f = PROFILES[name]
    stream = b"".join(f.frame(m) for m in messages)
    d = f.deframer()
    got = []
    for chunk in _cuts(stream, points):
        got.extend(d.feed(chunk))
    assert [fr.payload for fr in got] == messages
    assert d.pending == 0 and d.skipped == 0


def test_length_prefix_counts_itself_or_not() -> None:
    plain = Framing(kind="length_prefix")
    assert plain.frame(b"ABC") == b"0003ABC"
    counting = Framing(kind="length_prefix", length_counts_itself=True)
    assert counting.frame(b"ABC") == b"0007ABC"
    assert [f.payload for f in counting.deframer().feed(b"0007ABC0005Z")] == [b"ABC", b"Z"]
    # the header's other bytes are the partner's: kept as they came
    offset = Framing(kind="length_prefix", length_offset=2, length_width=4, length_header=8)
    frames = offset.deframer().feed(b"XY0003ZZABC")
    assert frames[0].payload == b"ABC" and frames[0].raw == b"XY0003ZZABC"
    assert offset.reframe(frames[0], b"HELLO") == b"XY0005ZZHELLO"


def test_a_space_padded_length_stays_space_padded() -> None:
    f = Framing(kind="length_prefix", length_width=5)
    frames = f.deframer().feed(b"    3ABC")
    assert frames[0].payload == b"ABC"
    assert f.reframe(frames[0], b"ABCDEFGHIJKL") == b"   12ABCDEFGHIJKL"


def test_reframe_keeps_the_envelope_of_each_kind() -> None:
    for f in (Framing(kind="stx_etx"), Framing(kind="etx")):
        frame = f.deframer().feed(f.frame(b"OLD"))[0]
        assert f.reframe(frame, b"NEW PAYLOAD") == f.frame(b"NEW PAYLOAD")


def test_bytes_between_stx_etx_frames_are_skipped_and_counted() -> None:
    f = Framing(kind="stx_etx")
    d = f.deframer()
    frames = d.feed(b"\r\n\x06\x02ONE\x03\r\n\x02TW")
    frames += d.feed(b"O\x03")
    assert [fr.payload for fr in frames] == [b"ONE", b"TWO"]
    assert d.skipped == 5
    # an STX that never got its ETX: the next STX starts the frame again
    d2 = f.deframer()
    assert [fr.payload for fr in d2.feed(b"\x02LOST\x02FOUND\x03")] == [b"FOUND"]
    assert d2.skipped == 5


def test_streams_that_cannot_be_framed_say_so() -> None:
    with pytest.raises(FramingError, match="not digits"):
        Framing(kind="length_prefix").deframer().feed(b"00X3ABC")
    with pytest.raises(FramingError, match="max_frame_bytes"):
        Framing(kind="stx_etx", max_frame_bytes=64).deframer().feed(b"\x02" + b"A" * 100)
    with pytest.raises(FramingError, match="max_frame_bytes"):
        Framing(kind="length_prefix", max_frame_bytes=64).deframer().feed(b"9999")
    with pytest.raises(FramingError, match="shorter than its own header"):
        Framing(kind="length_prefix", length_counts_itself=True).deframer().feed(b"0002")
    with pytest.raises(FramingError, match="does not fit"):
        Framing(kind="length_prefix", length_width=2).frame(b"A" * 100)
    with pytest.raises(ncpdp.ModelError):
        Framing(kind="mllp")
    with pytest.raises(ncpdp.ModelError):
        Framing(kind="length_prefix", length_offset=4, length_width=4, length_header=6)
