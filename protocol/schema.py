"""Kafka messages declared as data, and their compilation to construct.

Owns: the declaration vocabulary (`Field`, `Message`, `Versions`) that every
module in `protocol/apis/` and `protocol/metadata_records.py` uses, and the
translation of one (message, version) into a compiled construct.

Rules kept here:
- A declaration carries Kafka's own names and version strings (the facts of
  the JSON specs); Python attribute names are derived (`snake_case`).
- Compilation is lazy and memoised per version, so importing the protocol is
  cheap and the hot path only ever sees compiled code.
- Versions of a field decide everything: presence, nullability, tagging and
  compact (flexible) encoding, exactly as Kafka's generator resolves them.
"""

from __future__ import annotations

import functools
import re
import struct
import uuid
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Callable

from construct import Container

from protocol import primitives as p
from protocol.errors import DecodeError, EncodeError


@functools.lru_cache(maxsize=None)
def snake_case(name: str) -> str:
    """`FinalizedFeaturesEpoch` -> `finalized_features_epoch` (kafka-python agrees)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `hi is None` means open-ended, `lo < 0` means none."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(text: str | None) -> "Versions":
        if text is None or text == "none" or text == "":
            return Versions(-1, -1)
        if text.endswith("+"):
            return Versions(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        if self.lo < 0:
            return False
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def __str__(self) -> str:
        if self.lo < 0:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"


_PRIMITIVES = {
    "int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
    "bool", "string", "bytes", "records", "uuid",
}

_FIXED = {
    "int8": p.Int8, "int16": p.Int16, "int32": p.Int32, "int64": p.Int64,
    "uint16": p.UInt16, "uint32": p.UInt32, "float64": p.Float64,
    "bool": p.Bool, "uuid": p.Uuid,
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or struct, as Kafka's JSON declares it."""

    name: str
    type: str
    versions: str
    nullable_versions: str | None = None
    tag: int | None = None
    tagged_versions: str | None = None
    default: str | None = None
    ignorable: bool = False
    map_key: bool = False
    # Field-level override of the message's flexible versions; Kafka uses it
    # for RequestHeader.ClientId, which stays int16-length even in v2.
    flexible_versions: str | None = None
    fields: tuple["Field", ...] = ()

    @property
    def attr(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in _PRIMITIVES


@dataclass(frozen=True, repr=False)
class Message:
    """A whole message (request, response, header, record or data) in all versions."""

    name: str
    type: str
    valid_versions: str
    flexible_versions: str
    fields: tuple[Field, ...]
    api_key: int | None = None
    common_structs: tuple[tuple[str, tuple[Field, ...]], ...] = ()
    # Memo of compiled constructs per version (not part of identity).
    _compiled: dict = field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        return f"<Message {self.name} {self.valid_versions}>"

    @property
    def versions(self) -> Versions:
        return Versions.parse(self.valid_versions)

    @property
    def version_range(self) -> tuple[int, int]:
        v = self.versions
        return v.lo, v.hi if v.hi is not None else v.lo

    def is_flexible(self, version: int) -> bool:
        return version in Versions.parse(self.flexible_versions)

    def struct_fields(self, type_name: str, f: Field) -> tuple[Field, ...]:
        if f.fields:
            return f.fields
        for name, fields in self.common_structs:
            if name == type_name:
                return fields
        raise KeyError(f"{self.name}: struct type {type_name} is not declared")

    # -- compilation --------------------------------------------------------
    def construct(self, version: int, compiled: bool = True):
        """The construct for one version (compiled by default, memoised)."""
        key = (version, compiled)
        con = self._compiled.get(key)
        if con is None:
            if version not in self.versions:
                raise KeyError(f"{self.name} has no version {version}")
            con = _build_struct(self, self.fields, version, self.is_flexible(version), self.name)
            if compiled:
                con = con.compile()
            self._compiled[key] = con
        return con

    def decode(self, version: int, data: bytes | BytesIO) -> Container:
        """Decodes one body; bad bytes raise `DecodeError` and nothing else."""
        stream = BytesIO(data) if not isinstance(data, BytesIO) else data
        con = self._compiled.get((version, True)) or self.construct(version)
        try:
            return con.parsefunc(stream, None)
        except DecodeError:
            raise
        except (struct.error, ValueError, IndexError, OverflowError, UnicodeDecodeError) as exc:
            # struct.error: a fixed-width read came up short.
            raise DecodeError(f"{self.name} v{version}: {exc}") from None

    def encode(self, version: int, obj: dict) -> bytes:
        # Same as encode_into, one call shallower: small messages are
        # dominated by per-call overhead.
        con = self._compiled.get((version, True)) or self.construct(version)
        stream = BytesIO()
        try:
            con.buildfunc(obj, stream, None)
        except EncodeError:
            raise
        except Exception as exc:
            raise EncodeError(f"{self.name} v{version}: {exc!r}") from None
        return stream.getvalue()

    def encode_into(self, version: int, obj: dict, stream: BytesIO) -> None:
        con = self.construct(version)
        try:
            con.buildfunc(obj, stream, None)
        except EncodeError:
            raise
        except Exception as exc:
            raise EncodeError(f"{self.name} v{version}: {exc!r}") from None

    def default(self, version: int | None = None) -> Container:
        """A Container with every field at its default (for building replies)."""
        result = Container()
        for f in self.fields:
            result[f.attr] = _default_factory(self, f, version)()
        return result


# -- field resolution -----------------------------------------------------

def _parse_default(f: Field, nullable_somewhere: bool) -> Any:
    """Kafka's default for a field, as a plain immutable Python value."""
    raw = f.default
    t = f.type
    if raw == "null":
        return None
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(raw, 0) if raw else 0
    if t == "float64":
        return float(raw) if raw else 0.0
    if t == "bool":
        return raw == "true"
    if t == "string":
        return raw if raw is not None else ""
    if t in ("bytes", "records"):
        return b""
    if t == "uuid":
        return uuid.UUID(int=0) if not raw else uuid.UUID(raw)
    raise ValueError(f"no scalar default for type {t}")


def scalar_default(f: Field) -> Any:
    """Kafka's default for a scalar field (its `default`, or the type's zero)."""
    return _parse_default(f, False)


def _default_factory(message: Message, f: Field, version: int | None) -> Callable[[], Any]:
    if f.is_array:
        if f.default == "null":
            return lambda: None
        return list
    if f.is_struct:
        # Resolved once: `make` runs for every absent or default struct value.
        parts = [(sub.attr, _default_factory(message, sub, version))
                 for sub in message.struct_fields(f.element_type, f)]

        def make() -> Container:
            result = Container()
            for attr, factory in parts:
                result[attr] = factory()
            return result

        return make
    value = _parse_default(f, False)
    return lambda: value


def _field_construct(message: Message, f: Field, version: int, flexible: bool):
    nullable = version in Versions.parse(f.nullable_versions)
    compact = flexible
    if f.flexible_versions is not None:
        compact = version in Versions.parse(f.flexible_versions)
    element = f.element_type
    if element in _FIXED:
        elem_con = _FIXED[element]
    elif element == "string":
        elem_con = p.string_type(compact, nullable and not f.is_array)
    elif element in ("bytes", "records"):
        elem_con = p.bytes_type(compact, nullable and not f.is_array)
    else:
        sub_fields = message.struct_fields(element, f)
        elem_con = _build_struct(message, sub_fields, version, flexible, element)
        if not f.is_array and nullable:
            raise NotImplementedError(f"{message.name}.{f.name}: nullable struct fields are not supported")
    if f.is_array:
        return p.KafkaArray(elem_con, compact, nullable)
    return elem_con


def _build_struct(message: Message, fields: tuple[Field, ...], version: int, flexible: bool, type_name: str):
    ordered: list[p.FieldSpec] = []
    tagged: list[p.FieldSpec] = []
    absent: list[p.FieldSpec] = []
    for f in fields:
        factory = _default_factory(message, f, version)
        # Immutable scalars are stored as plain values so compiled code can
        # inline them; lists and structs need a fresh object every time.
        if f.is_array or f.is_struct:
            default: Any = factory
        else:
            default = factory()
        if version not in Versions.parse(f.versions):
            absent.append(p.FieldSpec(f.attr, None, default))
            continue
        con = _field_construct(message, f, version, flexible)
        if f.tag is not None and version in Versions.parse(f.tagged_versions):
            tagged.append(p.FieldSpec(f.attr, con, default, f.tag))
        else:
            ordered.append(p.FieldSpec(f.attr, con, default))
    tagged.sort(key=lambda spec: spec.tag)
    safe_name = re.sub(r"\W", "_", type_name)
    return p.KafkaStruct(ordered, tagged if flexible else None, absent, safe_name)
