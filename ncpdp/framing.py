"""How NCPDP transmissions are framed on a TCP stream: sans-IO, like the rest of
``ncpdp`` (bytes in, frames out; no sockets here).

The Telecommunication Standard defines the transmission, not how a dispensing system
and its switch delimit one on a connection: that is agreed per trading partner. Three
kinds are in use, each a :class:`Framing` (python-hl7 keeps MLLP apart from its parser
the same way):

``stx_etx``
    STX (0x02), the transmission, ETX (0x03). Bytes between frames (a CR/LF after the
    ETX, an ACK) are not part of any frame: they are counted in
    :attr:`Deframer.skipped` and dropped.
``etx``
    The transmission, then ETX: each frame ends at an ETX and starts right after the
    previous one.
``length_prefix``
    A transport header of ``length_header`` bytes (default ``length_offset +
    length_width``) whose bytes ``length_offset`` to ``length_offset + length_width``
    are the length in ASCII digits (zero- or space-padded), then that many bytes of
    transmission. With ``length_counts_itself`` the length counts the header too.

>>> from ncpdp.framing import Framing
>>> d = Framing(kind="stx_etx").deframer()
>>> [f.payload for f in d.feed(b"\\x02ABC\\x03\\x02DE")]
[b'ABC']
>>> [f.payload for f in d.feed(b"F\\x03")]
[b'DEF']
>>> Framing(kind="length_prefix").frame(b"ABC")
b'0003ABC'
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import ModelError, NcpdpError

__all__ = ["ETX", "KINDS", "STX", "Deframer", "Frame", "Framing", "FramingError"]

STX = 0x02
ETX = 0x03
KINDS = ("stx_etx", "etx", "length_prefix")


class FramingError(NcpdpError):
    """A stream that cannot be cut into frames by its framing (a length prefix that is
    not digits, a frame longer than the limit), or a payload that does not fit one."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame as it came: ``raw`` whole, the transmission at ``raw[start:end]``."""

    raw: bytes
    start: int
    end: int

    @property
    def payload(self) -> bytes:
        """The transmission inside the frame."""
        return self.raw[self.start : self.end]


@dataclass(frozen=True, slots=True, kw_only=True)
class Framing:
    """A framing profile (module docstring). Invalid values are refused on
    construction with :class:`ncpdp.ModelError`."""

    kind: str = "stx_etx"
    length_offset: int = 0
    length_width: int = 4
    #: bytes of the length-prefix transport header; None: ``length_offset + length_width``
    length_header: int | None = None
    length_counts_itself: bool = False
    #: the longest frame accepted; a longer one is a :class:`FramingError`
    max_frame_bytes: int = 65_536

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ModelError(f"framing kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.length_offset < 0 or not 1 <= self.length_width <= 9:
            raise ModelError("length_offset must be >= 0 and length_width 1 to 9")
        if self.length_header is not None and self.length_header < self.length_offset + (
            self.length_width
        ):
            raise ModelError("length_header must hold the length field (offset + width)")
        if self.max_frame_bytes < 64:
            raise ModelError("max_frame_bytes must be at least 64")

    @property
    def header_bytes(self) -> int:
        """Bytes before the transmission: 1 (STX), 0 (etx) or the transport header."""
        if self.kind == "stx_etx":
            return 1
        if self.kind == "etx":
            return 0
        if self.length_header is not None:
            return self.length_header
        return self.length_offset + self.length_width

    def deframer(self) -> Deframer:
        return Deframer(self)

    def frame(self, payload: bytes) -> bytes:
        """A new frame around ``payload`` (a length-prefix header of zeros but for its
        length field)."""
        if self.kind == "stx_etx":
            return b"\x02" + payload + b"\x03"
        if self.kind == "etx":
            return payload + b"\x03"
        header = bytearray(b"0" * self.header_bytes)
        header[self.length_offset : self.length_offset + self.length_width] = self._length(
            len(payload), b"0"
        )
        return bytes(header) + payload

    def reframe(self, frame: Frame, payload: bytes) -> bytes:
        """``frame`` with ``payload`` in place of its transmission: every byte of the
        envelope kept, a length prefix rewritten with the same width and padding."""
        head, tail = frame.raw[: frame.start], frame.raw[frame.end :]
        if self.kind == "length_prefix":
            a, b = self.length_offset, self.length_offset + self.length_width
            pad = b" " if head[a : a + 1] == b" " else b"0"
            head = head[:a] + self._length(len(payload), pad) + head[b:]
        return head + payload + tail

    def _length(self, payload_len: int, pad: bytes) -> bytes:
        n = payload_len + (self.header_bytes if self.length_counts_itself else 0)
        digits = str(n).encode("ascii")
        if len(digits) > self.length_width:
            raise FramingError(
                f"a {payload_len}-byte transmission does not fit a {self.length_width}-digit"
                " length prefix"
            )
        return digits.rjust(self.length_width, pad)


class Deframer:
    """Cuts a byte stream into frames. :meth:`feed` takes whatever the socket gave and
    returns the frames it completed; a partial frame waits for the next call."""

    __slots__ = ("_buf", "_framing", "skipped")

    def __init__(self, framing: Framing) -> None:
        self._framing = framing
        self._buf = bytearray()
        #: bytes outside any frame, dropped so far (stx_etx only)
        self.skipped = 0

    @property
    def pending(self) -> int:
        """Bytes held for a frame not complete yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes, in order; :class:`FramingError` when the
        stream cannot be framed (the connection should then be closed)."""
        self._buf += data
        kind = self._framing.kind
        if kind == "stx_etx":
            return self._stx_etx()
        if kind == "etx":
            return self._etx()
        return self._length_prefix()

    def _too_long(self, n: int) -> None:
        limit = self._framing.max_frame_bytes
        if n > limit:
            raise FramingError(f"a frame longer than {limit} bytes (max_frame_bytes)")

    def _stx_etx(self) -> list[Frame]:
        out: list[Frame] = []
        buf = self._buf
        pos = 0
        while True:
            stx = buf.find(b"\x02", pos)
            if stx < 0:
                self.skipped += len(buf) - pos
                pos = len(buf)
                break
            self.skipped += stx - pos
            etx = buf.find(b"\x03", stx + 1)
            if etx < 0:
                pos = stx
                self._too_long(len(buf) - stx)
                break
            restart = buf.rfind(b"\x02", stx + 1, etx)
            if restart >= 0:  # an STX with no ETX before the next STX: resync on that one
                self.skipped += restart - stx
                stx = restart
            self._too_long(etx + 1 - stx)
            raw = bytes(buf[stx : etx + 1])
            out.append(Frame(raw, 1, len(raw) - 1))
            pos = etx + 1
        del buf[:pos]
        return out

    def _etx(self) -> list[Frame]:
        out: list[Frame] = []
        buf = self._buf
        pos = 0
        while True:
            etx = buf.find(b"\x03", pos)
            if etx < 0:
                self._too_long(len(buf) - pos)
                break
            self._too_long(etx + 1 - pos)
            raw = bytes(buf[pos : etx + 1])
            out.append(Frame(raw, 0, len(raw) - 1))
            pos = etx + 1
        del buf[:pos]
        return out

    def _length_prefix(self) -> list[Frame]:
        f = self._framing
        out: list[Frame] = []
        buf = self._buf
        header = f.header_bytes
        a, b = f.length_offset, f.length_offset + f.length_width
        pos = 0
        while len(buf) - pos >= header:
            field = bytes(buf[pos + a : pos + b])
            digits = field.strip(b" ")
            if not digits.isdigit():
                # the bytes themselves are not quoted: they may be a claim's
                raise FramingError(
                    f"the length prefix at bytes {a}-{b - 1} of a frame is not digits"
                )
            n = int(digits)
            body = n - header if f.length_counts_itself else n
            if body < 0:
                raise FramingError(f"length prefix {n} is shorter than its own header")
            self._too_long(header + body)
            if len(buf) - pos < header + body:
                break
            raw = bytes(buf[pos : pos + header + body])
            out.append(Frame(raw, header, header + body))
            pos += header + body
        del buf[:pos]
        return out
