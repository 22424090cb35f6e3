"""The payer's rejection message replaced by the outcomes message (decision 0041): the
fields the outcomes interface replaces, 526-FQ Additional Message Information of a
transaction's Response Status segment (AM21), and nothing else; written by ``ncpdp``.

- D.0 and F6: 526-FQ is ``x(40)`` and repeats, each line with its 132-UH qualifier
  (``01`` ... ``09``, the line's number) and, on every line the text continues from,
  131-UG ``+``; 130-UF counts them. The message is cut into lines of at most 40
  characters at spaces, at most nine lines (what does not fit is cut off, at a space).
- 5.1: one 526-FQ of at most 200 characters (cut at a space when longer).
- The payer's 130-UF/132-UH/526-FQ/131-UG fields are removed; the new ones take the
  place of the first of them, or, when the payer sent none, go before the help desk
  phone (549-7F, 550-8F) and what follows it, else at the end of the segment.
- Every other byte (header, other segments and fields, their order, framing the
  parser kept) is the payer's own.
"""

from __future__ import annotations

from collections.abc import Mapping

import ncpdp

__all__ = ["RewriteError", "message_lines", "replace_messages"]

_MESSAGE_FIELDS = frozenset({"UF", "UH", "FQ", "UG"})
#: AM21 fields that follow the additional messages in the standard's order
_AFTER_MESSAGES = frozenset({"7F", "8F", "K5", "A7", "MA"})
_LINE = {"51": 200}
_D0_LINE = 40
_D0_LINES = 9


class RewriteError(ValueError):
    """The message cannot be written into this response (the caller sends the payer's
    bytes instead)."""


def _clean(text: str) -> str:
    text = " ".join(text.split())  # CR/LF and tabs become single spaces
    if not text:
        raise RewriteError("the outcomes message is empty")
    if not all(" " <= c <= "~" for c in text):
        raise RewriteError("the outcomes message has characters NCPDP cannot carry")
    return text


def message_lines(text: str, width: int, most: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, cut at spaces (a longer word
    is cut), at most ``most`` lines. Continued lines are joined as they are (131-UG
    ``+``: nothing added between them, issue 25), so the space at a cut stays: at the
    end of its line, or at the start of the next when the line is full. Joined, the
    lines are ``text`` again."""
    lines: list[str] = []
    line = ""
    for n, word in enumerate(text.split(" ")):
        if n:  # the space before this word goes with the line, or begins the next
            if len(line) < width:
                line += " "
            else:
                lines.append(line)
                line = " "
        while len(line) + len(word) > width:
            if line.strip():  # cut at the space: the word starts the next line
                lines.append(line)
                line = ""
                continue
            room = width - len(line)
            lines.append(line + word[:room])
            line, word = "", word[room:]
        line += word
    if line:
        lines.append(line)
    return lines[:most]


def _message_fields(version: str, text: str) -> list[tuple[str, str]]:
    if version in _LINE:
        return [("FQ", message_lines(text, _LINE[version], 1)[0])]
    lines = message_lines(text, _D0_LINE, _D0_LINES)
    fields: list[tuple[str, str]] = [("UF", str(len(lines)).zfill(2))]
    for i, line in enumerate(lines, start=1):
        fields.append(("UH", str(i).zfill(2)))
        fields.append(("FQ", line))
        if i < len(lines):
            fields.append(("UG", "+"))
    return fields


def _status_segment(seg: ncpdp.Segment, version: str, text: str) -> ncpdp.Segment:
    fields = list(seg)
    at = next((i for i, f in enumerate(fields) if f.id in _MESSAGE_FIELDS), None)
    if at is None:
        at = next((i for i, f in enumerate(fields) if f.id in _AFTER_MESSAGES), len(fields))
    kept = [f for f in fields if f.id not in _MESSAGE_FIELDS]
    before = sum(1 for f in fields[:at] if f.id not in _MESSAGE_FIELDS)
    new = kept[:before] + _message_fields(version, text) + kept[before:]
    return ncpdp.Segment(seg.id, new)


def replace_messages(
    response: ncpdp.Transmission, messages: Mapping[int, str]
) -> ncpdp.Transmission:
    """``response`` with transaction ``i``'s 526-FQ message replaced by ``messages[i]``
    (module docstring). Raises :class:`RewriteError` when it cannot be done: a message
    NCPDP cannot carry, a transaction with no Response Status segment, or a result
    that does not read back as the same response with the new message."""
    if not response.is_response:
        raise RewriteError("not a response")
    version = response.version.strip()
    groups = list(response.groups)
    cleaned: dict[int, str] = {}
    for index, text in messages.items():
        if not 0 <= index < len(groups):
            raise RewriteError(f"the response has no transaction {index + 1}")
        group = groups[index]
        segs = list(group.segments)
        pos = next((i for i, s in enumerate(segs) if s.id == "21"), None)
        if pos is None:
            raise RewriteError(f"transaction {index + 1} has no Response Status segment")
        cleaned[index] = _clean(text)
        segs[pos] = _status_segment(segs[pos], version, cleaned[index])
        groups[index] = ncpdp.TransactionGroup(segs)
    try:
        out = ncpdp.Transmission(
            response.header,
            response.segments,
            groups,
            leading=response.leading,
            trailing=response.trailing,
            group_separators=response.group_separators,
        )
        again = ncpdp.parse(ncpdp.serialize(out), strict=False)
        view = again.as_response()
    except ncpdp.NcpdpError as e:
        raise RewriteError(f"the new response does not read back: {e}") from None
    for index, text in cleaned.items():
        # lines cut at spaces read back joined by spaces; a word cut across lines
        # gains one, and a message cut short is a beginning of the text
        shown = (view.transactions[index].additional_message or "").replace(" ", "")
        if not shown or not text.replace(" ", "").startswith(shown):
            raise RewriteError("the new response does not read back with the new message")
    return out
