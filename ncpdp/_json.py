"""A JSON-ready description of a transmission, and back.

``to_jsonable`` names every field and decodes values beside their raw form;
``from_jsonable`` reads only the raw parts (header slots, segment ids, raw values,
framing), so that edited names or decoded values can never change the bytes.
"""

from __future__ import annotations

from typing import Any

from ._codecs import decode_date, decode_implied, decode_overpunch
from ._errors import CodecError, ModelError
from ._fields import FIELDS
from ._model import (
    Field,
    RequestHeader,
    ResponseHeader,
    Segment,
    TransactionGroup,
    Transmission,
    segment_name,
)
from ._versions import VERSIONS

__all__ = ["to_jsonable", "from_jsonable", "decode_value"]


def decode_value(field_id: str, value: str) -> str | int | None:
    """The decoded form of a raw value by the field dictionary, as JSON text/number;
    ``None`` when the field is unknown, is text (identifiers and codes typed ``9(n)``
    too: ``004740`` is its own value, not ``4740``), or does not decode."""
    fd = FIELDS.get(field_id)
    if fd is None:
        return None
    try:
        codec = fd.codec
        if codec == "date":
            return decode_date(value).isoformat()
        if codec == "implied":
            return str(decode_implied(value, fd.places))
        if codec == "overpunch":
            return str(decode_overpunch(value, fd.places))
        if codec == "number":
            v = value.strip()
            return int(v) if v.isdigit() and v.isascii() else None
    except CodecError:
        return None
    return None


def _segment_json(seg: Segment, version: str) -> dict[str, Any]:
    fields = []
    for f in seg:
        fd = FIELDS.get(f.id)
        entry: dict[str, Any] = {
            "id": f.id,
            "number": fd.number if fd else None,
            "name": fd.name if fd else None,
            "value": f.value,
        }
        decoded = decode_value(f.id, f.value)
        if decoded is not None:
            entry["decoded"] = decoded
        fields.append(entry)
    return {"id": seg.id, "name": segment_name(seg.id, version), "fields": fields}


def to_jsonable(t: Transmission) -> dict[str, Any]:
    version = t.version
    header = [
        {
            "id": slot.field_id,
            "number": slot.number,
            "name": slot.name,
            "value": value,
            **({"decoded": d} if (d := decode_value(slot.field_id, value)) is not None else {}),
        }
        for slot, value in t.header.items()
    ]
    out: dict[str, Any] = {
        "kind": t.kind,
        "version": version,
        "transaction_code": t.transaction_code,
        "header": header,
        "segments": [_segment_json(s, version) for s in t.segments],
        "transactions": [{"segments": [_segment_json(s, version) for s in g]} for g in t.groups],
    }
    spec = VERSIONS.get(version)
    if t.group_separators != (spec.group_separator if spec is not None else True):
        out["group_separators"] = t.group_separators
    if t.leading or t.trailing or t.tolerated:
        out["framing"] = {"leading": t.leading, "trailing": t.trailing}
        out["tolerated"] = list(t.tolerated)
    return out


def _list(obj: Any, what: str) -> list[Any]:
    if not isinstance(obj, list):
        raise ModelError(f"{what} must be a list")
    return obj


def _segment_from(obj: Any) -> Segment:
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ModelError("each segment needs a string 'id'")
    fields = _list(obj.get("fields", []), f"segment {obj['id']}: 'fields'")
    out = []
    for f in fields:
        if (
            not isinstance(f, dict)
            or not isinstance(f.get("id"), str)
            or not isinstance(f.get("value"), str)
        ):
            raise ModelError(f"segment {obj['id']}: each field needs string 'id' and 'value'")
        out.append(Field(f["id"], f["value"]))
    return Segment(obj["id"], out)


def from_jsonable(obj: Any) -> Transmission:
    """Rebuild the transmission from :func:`to_jsonable`'s shape.

    Reads only raw values; raises :class:`ModelError` (an :class:`NcpdpError`) for
    anything else, never another exception.
    """
    if not isinstance(obj, dict):
        raise ModelError("expected a JSON object")
    kind = obj.get("kind")
    header_cls: type[RequestHeader] | type[ResponseHeader]
    if kind == "request":
        header_cls = RequestHeader
    elif kind == "response":
        header_cls = ResponseHeader
    else:
        raise ModelError("'kind' must be 'request' or 'response'")
    values: dict[str, Any] = {}
    for h in _list(obj.get("header"), "'header'"):
        if isinstance(h, dict) and isinstance(h.get("id"), str):
            values[h["id"]] = h.get("value")
    raw_parts = []
    version = values.get("A2")
    for slot in header_cls.layout_for(version if isinstance(version, str) else ""):
        v = values.get(slot.field_id)
        if not isinstance(v, str) or len(v) != slot.width:
            raise ModelError(
                f"header field {slot.field_id} must be a string of exactly {slot.width} characters"
            )
        raw_parts.append(v)
    header = header_cls("".join(raw_parts))
    segs = [_segment_from(s) for s in _list(obj.get("segments", []), "'segments'")]
    groups = []
    for tx in _list(obj.get("transactions", []), "'transactions'"):
        if not isinstance(tx, dict):
            raise ModelError("each transaction must be an object with 'segments'")
        groups.append(
            TransactionGroup(
                [_segment_from(s) for s in _list(tx.get("segments", []), "'segments'")]
            )
        )
    framing = obj.get("framing") or {}
    if not isinstance(framing, dict):
        raise ModelError("'framing' must be an object")
    leading = framing.get("leading", "")
    trailing = framing.get("trailing", "")
    if not isinstance(leading, str) or not isinstance(trailing, str):
        raise ModelError("'framing' values must be strings")
    tolerated = _list(obj.get("tolerated", []), "'tolerated'")
    grouped = obj.get("group_separators")
    if grouped is not None and not isinstance(grouped, bool):
        raise ModelError("'group_separators' must be true or false")
    return Transmission(
        header,
        segs,
        groups,
        leading=leading,
        trailing=trailing,
        tolerated=[str(x) for x in tolerated],
        group_separators=grouped,
    )
