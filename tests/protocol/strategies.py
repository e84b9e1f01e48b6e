"""Hypothesis strategies derived from kraftwerk's protocol declarations.

Owns: `message_values(message, version)`, which draws a value for any
(Message, version) straight from its `Field` declarations, and the helpers the
protocol tests share to decide what a version carries (`present_fields`,
`project`, `plain`).

Rules kept here:
- Only fields present in the version are drawn; nullability, tagging and
  compactness follow the same `Versions` rules the schema compiler uses, so a
  drawn value is always encodable.
- Values stay small (short strings, arrays of at most a few elements) so every
  (message, version) pair can be exercised inside the suite's time budget;
  the integer ranges are the full widths, because the edges are where codecs
  break.
- Unknown tagged fields are drawn (optionally) for every flexible struct, with
  tags that the struct does not know, in ascending order as Kafka writes them.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from protocol.schema import Field, Message, Versions

MAX_ARRAY_ITEMS = 3
MAX_TEXT_CHARS = 12
MAX_BYTES = 24

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}

# Text that always encodes to UTF-8 (no lone surrogates).
_TEXT = st.text(st.characters(codec="utf-8"), max_size=MAX_TEXT_CHARS)


def in_version(versions: str | None, version: int) -> bool:
    return version in Versions.parse(versions)


def present_fields(fields: tuple[Field, ...], version: int) -> list[Field]:
    return [f for f in fields if in_version(f.versions, version)]


def is_tagged(f: Field, version: int) -> bool:
    return f.tag is not None and in_version(f.tagged_versions, version)


def is_flexible(message: Message, version: int) -> bool:
    return message.is_flexible(version)


def scalar_values(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_RANGES:
        lo, hi = _INT_RANGES[type_name]
        return st.integers(lo, hi)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return _TEXT
    if type_name in ("bytes", "records"):
        return st.binary(max_size=MAX_BYTES)
    if type_name == "uuid":
        return st.uuids(allow_nil=True)
    raise ValueError(f"unknown scalar type {type_name}")


def unknown_tagged_fields(known_tags: set[int]) -> st.SearchStrategy:
    """(tag, payload) pairs with tags the struct does not know, ascending."""
    tags = st.sets(st.integers(0, 300).filter(lambda t: t not in known_tags), max_size=3)
    return tags.flatmap(
        lambda chosen: st.tuples(*[st.binary(max_size=8) for _ in chosen]).map(
            lambda payloads: [(tag, payload) for tag, payload in zip(sorted(chosen), payloads)]
        )
    )


def struct_values(
    message: Message, fields: tuple[Field, ...], version: int, flexible: bool, with_unknown_tags: bool
) -> st.SearchStrategy:
    members = {
        f.attr: field_values(message, f, version, flexible, with_unknown_tags)
        for f in present_fields(fields, version)
    }
    base = st.fixed_dictionaries(members)
    if not (flexible and with_unknown_tags):
        return base
    known = {int(f.tag) for f in present_fields(fields, version) if is_tagged(f, version)}

    def add_unknown(pair):
        value, unknown = pair
        if unknown:
            value["_unknown_tagged_fields"] = unknown
        return value

    return st.tuples(base, unknown_tagged_fields(known)).map(add_unknown)


def field_values(
    message: Message, f: Field, version: int, flexible: bool, with_unknown_tags: bool
) -> st.SearchStrategy:
    nullable = in_version(f.nullable_versions, version)
    element = f.element_type
    if f.is_struct:
        sub_fields = message.struct_fields(element, f)
        elem = struct_values(message, sub_fields, version, flexible, with_unknown_tags)
    else:
        elem = scalar_values(element)
    if f.is_array:
        values = st.lists(elem, max_size=MAX_ARRAY_ITEMS)
    else:
        values = elem
    if nullable:
        values = st.none() | values
    return values


def message_values(message: Message, version: int, with_unknown_tags: bool = True) -> st.SearchStrategy:
    """A dict holding exactly the fields `message` has in `version`."""
    return struct_values(message, message.fields, version, is_flexible(message, version), with_unknown_tags)


def all_versions(message: Message) -> range:
    lo, hi = message.version_range
    return range(lo, hi + 1)


def plain(value: Any) -> Any:
    """Containers and lists as plain dicts and lists.

    construct's `Container.__eq__` skips keys starting with "_", which would
    hide `_unknown_tagged_fields`; comparing plain dicts does not.
    """
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def project(message: Message, fields: tuple[Field, ...], version: int, value: Any) -> Any:
    """`value` restricted to the fields present in `version` (plus unknown tags)."""
    if value is None:
        return None
    result = {}
    for f in present_fields(fields, version):
        v = value[f.attr]
        if f.is_struct:
            sub = message.struct_fields(f.element_type, f)
            if f.is_array:
                v = None if v is None else [project(message, sub, version, item) for item in v]
            else:
                v = project(message, sub, version, v)
        result[f.attr] = plain(v)
    unknown = value.get("_unknown_tagged_fields") if hasattr(value, "get") else None
    if unknown:
        result["_unknown_tagged_fields"] = plain(unknown)
    return result


_RICH_SCALARS = {
    "int8": -2, "int16": 300, "int32": 70000, "int64": 1 << 40, "uint16": 65000, "uint32": 1 << 31,
    "bool": True, "float64": 1.5, "string": "ab", "bytes": b"xyz", "records": b"rec",
    "uuid": uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF),
}


def rich_value(message: Message, version: int) -> dict:
    """A deterministic value with every present field non-default and non-null
    and every array holding one element, so its encoding exercises every
    length prefix, count and tagged field of the version (used by the fuzz
    tests as mutation seeds)."""

    def struct(fields: tuple[Field, ...]) -> dict:
        out = {}
        for f in present_fields(fields, version):
            if f.is_struct:
                elem: Any = struct(message.struct_fields(f.element_type, f))
            else:
                elem = _RICH_SCALARS[f.element_type]
            out[f.attr] = [elem] if f.is_array else elem
        return out

    return struct(message.fields)
