"""Kafka's primitive wire types as construct classes with compiled forms.

Owns: every leaf encoding of the Kafka protocol (fixed-width integers, bool,
unsigned varint, zigzag varint/varlong, UUID, classic and compact strings,
bytes and arrays with nullability) and the flexible-struct container
`KafkaStruct`, which carries the tagged-field section.

Rules kept here:
- Every class works interpreted (`_parse`/`_build`) *and* compiled
  (`_emitparse`/`_emitbuild`), so `Struct.compile()` never falls back to the
  interpreter on the hot path (construct's own `VarInt`/`Prefixed` do).
- Malformed input raises `DecodeError` (via the helpers below) or a low-level
  error that `protocol.codec` converts to `DecodeError`; nothing else escapes.
- Decoding never acts on a length or count the input cannot hold: a claim above
  `CLAIM_UNCHECKED_MAX` (string and bytes lengths, unknown tagged-field sizes,
  array and tagged-field counts) is checked against the bytes remaining before
  anything is read or built for it; smaller ones are read directly (a BytesIO
  never hands out more than it holds). Array loops consume at least one byte
  per element or are capped (see `KafkaArray`). tests/fuzz/test_decoders.py
  audits every read a decoder makes against this rule.
"""

from __future__ import annotations

import functools
import struct
import uuid
from io import BytesIO
from typing import Any

from construct import Construct, Container, ListContainer

from protocol.errors import DecodeError, EncodeError

# Kafka caps unsigned varints at 5 bytes (32 bits) and varlongs at 10 bytes.
UVARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

ZERO_UUID = uuid.UUID(int=0)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Claims (lengths, counts) up to this are acted on without asking how many bytes
# remain: reading them costs at most what is there, a list of this many slots ~1 KB,
# and checking would tax every short name on the hot path. It is the largest length
# one varint byte holds, so the fast paths below never need the check.
CLAIM_UNCHECKED_MAX = 127


# --------------------------------------------------------------------------
# Plain helper functions. The compiled code calls these directly, so they are
# the hot path: keep them branch-light.
# --------------------------------------------------------------------------

def remaining_bytes(io: BytesIO) -> int:
    # seek/tell, not getbuffer(): a BytesIO built on a bytes object shares it until
    # a buffer is exported, and getbuffer() would copy the whole input.
    position = io.tell()
    end = io.seek(0, 2)
    io.seek(position)
    return end - position


def check_claim(io: BytesIO, nbytes: int, what: str) -> None:
    """Raises DecodeError unless `nbytes` remain: a claim is checked before it is acted on."""
    remaining = remaining_bytes(io)
    if nbytes > remaining:
        raise DecodeError(f"truncated: {what} claims {nbytes} bytes, {remaining} remain")


def read_exact(io: BytesIO, n: int) -> bytes:
    if n > CLAIM_UNCHECKED_MAX:
        check_claim(io, n, "a length")
    data = io.read(n)
    if len(data) != n:
        raise DecodeError(f"truncated: wanted {n} bytes, got {len(data)}")
    return data


def read_uvarint(io: BytesIO) -> int:
    data = io.read(1)
    if not data:
        raise DecodeError("truncated unsigned varint")
    b = data[0]
    if b < 0x80:
        return b
    result = b & 0x7F
    shift = 7
    while True:
        data = io.read(1)
        if not data:
            raise DecodeError("truncated unsigned varint")
        b = data[0]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > 0xFFFFFFFF:
                raise DecodeError("unsigned varint exceeds 32 bits")
            return result
        shift += 7
        if shift >= 7 * UVARINT_MAX_BYTES:
            raise DecodeError("unsigned varint longer than 5 bytes")


def read_uvarlong(io: BytesIO) -> int:
    result = 0
    shift = 0
    while True:
        data = io.read(1)
        if not data:
            raise DecodeError("truncated varlong")
        b = data[0]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
        if shift >= 7 * VARLONG_MAX_BYTES:
            raise DecodeError("varlong longer than 10 bytes")


def encode_uvarint(value: int) -> bytes:
    if value < 0x80:
        if value < 0:
            raise EncodeError(f"unsigned varint cannot hold {value}")
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_uvarint(io: BytesIO, value: int) -> None:
    if 0 <= value < 0x80:
        io.write(bytes((value,)))
    else:
        io.write(encode_uvarint(value))


def read_varint(io: BytesIO) -> int:
    """Zigzag int32."""
    raw = read_uvarint(io)
    return (raw >> 1) ^ -(raw & 1)


def read_varlong(io: BytesIO) -> int:
    """Zigzag int64."""
    raw = read_uvarlong(io)
    return (raw >> 1) ^ -(raw & 1)


def encode_varint(value: int) -> bytes:
    if not -(1 << 31) <= value < (1 << 31):
        raise EncodeError(f"varint out of int32 range: {value}")
    return encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    if not -(1 << 63) <= value < (1 << 63):
        raise EncodeError(f"varlong out of int64 range: {value}")
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def write_varint(io: BytesIO, value: int) -> None:
    io.write(encode_varint(value))


def write_varlong(io: BytesIO, value: int) -> None:
    io.write(encode_varlong(value))


def read_bool(io: BytesIO) -> bool:
    data = io.read(1)
    if not data:
        raise DecodeError("truncated bool")
    return data != b"\x00"


def write_bool(io: BytesIO, value: bool) -> None:
    io.write(b"\x01" if value else b"\x00")


@functools.lru_cache(maxsize=4096)
def _uuid_from_bytes(raw: bytes) -> uuid.UUID:
    # Decoded UUIDs repeat (a topic's id in every Fetch): one shared, immutable UUID each.
    return uuid.UUID(bytes=raw)


def read_uuid(io: BytesIO) -> uuid.UUID:
    return _uuid_from_bytes(read_exact(io, 16))


def write_uuid(io: BytesIO, value: uuid.UUID) -> None:
    io.write(value.bytes)


# Strings and bytes. `compact` selects uvarint(N+1) lengths (flexible versions)
# over int16/int32 lengths; null is -1 (classic) or 0 (compact).

def read_string(io: BytesIO) -> str:
    data = io.read(2)
    if len(data) != 2:
        raise DecodeError("truncated string length")
    n = _INT16.unpack(data)[0]
    if n < 0:
        raise DecodeError("null string in a non-nullable field")
    return read_exact(io, n).decode("utf-8")


def read_nullable_string(io: BytesIO) -> str | None:
    data = io.read(2)
    if len(data) != 2:
        raise DecodeError("truncated string length")
    n = _INT16.unpack(data)[0]
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid string length {n}")
        return None
    return read_exact(io, n).decode("utf-8")


def read_compact_string(io: BytesIO) -> str:
    # Fast path: a length below 127 fits the first varint byte, which is the
    # common case for names and ids; read_uvarint handles the rest.
    head = io.read(1)
    if not head:
        raise DecodeError("truncated unsigned varint")
    n = head[0]
    if n >= 0x80:
        io.seek(-1, 1)
        n = read_uvarint(io)
        check_claim(io, n - 1, "a string length")
    if n == 0:
        raise DecodeError("null string in a non-nullable field")
    n -= 1
    data = io.read(n)
    if len(data) != n:
        raise DecodeError(f"truncated: wanted {n} bytes, got {len(data)}")
    return data.decode("utf-8")


def read_compact_nullable_string(io: BytesIO) -> str | None:
    head = io.read(1)
    if not head:
        raise DecodeError("truncated unsigned varint")
    n = head[0]
    if n >= 0x80:
        io.seek(-1, 1)
        n = read_uvarint(io)
        check_claim(io, n - 1, "a string length")
    if n == 0:
        return None
    n -= 1
    data = io.read(n)
    if len(data) != n:
        raise DecodeError(f"truncated: wanted {n} bytes, got {len(data)}")
    return data.decode("utf-8")


def _encode_str(value: str) -> bytes:
    if not isinstance(value, str):
        raise EncodeError(f"expected str, got {type(value).__name__}")
    return value.encode("utf-8")


def write_string(io: BytesIO, value: str) -> None:
    data = _encode_str(value)
    if len(data) > 0x7FFF:
        raise EncodeError("string longer than 32767 bytes")
    io.write(_INT16.pack(len(data)))
    io.write(data)


def write_nullable_string(io: BytesIO, value: str | None) -> None:
    if value is None:
        io.write(b"\xff\xff")
    else:
        write_string(io, value)


def write_compact_string(io: BytesIO, value: str) -> None:
    if value.__class__ is not str:
        raise EncodeError(f"expected str, got {type(value).__name__}")
    data = value.encode("utf-8")
    n = len(data) + 1
    # One write for the common short string (length fits one varint byte).
    if n < 0x80:
        io.write(bytes((n,)) + data)
    else:
        io.write(encode_uvarint(n))
        io.write(data)


def write_compact_nullable_string(io: BytesIO, value: str | None) -> None:
    if value is None:
        io.write(b"\x00")
    else:
        write_compact_string(io, value)


def read_bytes(io: BytesIO) -> bytes:
    data = io.read(4)
    if len(data) != 4:
        raise DecodeError("truncated bytes length")
    n = _INT32.unpack(data)[0]
    if n < 0:
        raise DecodeError("null bytes in a non-nullable field")
    return read_exact(io, n)


def read_nullable_bytes(io: BytesIO) -> bytes | None:
    data = io.read(4)
    if len(data) != 4:
        raise DecodeError("truncated bytes length")
    n = _INT32.unpack(data)[0]
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid bytes length {n}")
        return None
    return read_exact(io, n)


def read_compact_bytes(io: BytesIO) -> bytes:
    n = read_uvarint(io)
    if n == 0:
        raise DecodeError("null bytes in a non-nullable field")
    return read_exact(io, n - 1)


def read_compact_nullable_bytes(io: BytesIO) -> bytes | None:
    n = read_uvarint(io)
    if n == 0:
        return None
    return read_exact(io, n - 1)


def write_bytes(io: BytesIO, value: bytes) -> None:
    io.write(_INT32.pack(len(value)))
    io.write(value)


def write_nullable_bytes(io: BytesIO, value: bytes | None) -> None:
    if value is None:
        io.write(b"\xff\xff\xff\xff")
    else:
        write_bytes(io, value)


def write_compact_bytes(io: BytesIO, value: bytes) -> None:
    write_uvarint(io, len(value) + 1)
    io.write(value)


def write_compact_nullable_bytes(io: BytesIO, value: bytes | None) -> None:
    if value is None:
        io.write(b"\x00")
    else:
        write_compact_bytes(io, value)


def read_array_count(io: BytesIO, compact: bool, nullable: bool) -> int:
    """Returns the element count, or -1 for a null array."""
    if compact:
        head = io.read(1)
        if not head:
            raise DecodeError("truncated array length")
        n = head[0]
        if n >= 0x80:
            io.seek(-1, 1)
            n = read_uvarint(io)
        n -= 1
    else:
        data = io.read(4)
        if len(data) != 4:
            raise DecodeError("truncated array length")
        n = _INT32.unpack(data)[0]
        if n < -1:
            raise DecodeError(f"invalid array length {n}")
    if n == -1 and not nullable:
        raise DecodeError("null array in a non-nullable field")
    return n


def write_array_count(io: BytesIO, value: list | None, compact: bool) -> None:
    if value is None:
        io.write(b"\x00" if compact else b"\xff\xff\xff\xff")
    elif compact:
        write_uvarint(io, len(value) + 1)
    else:
        io.write(_INT32.pack(len(value)))


# --------------------------------------------------------------------------
# construct classes
# --------------------------------------------------------------------------

_HELPER_IMPORT = "from protocol.primitives import *\nfrom protocol.primitives import _INT16, _INT32\n"


class KafkaLeaf(Construct):
    """A leaf type whose parse/build are single helper-function calls."""

    def __init__(self, name: str, reader: str, writer: str, min_size: int) -> None:
        super().__init__()
        self.type_name = name
        self.reader = reader
        self.writer = writer
        # The fewest bytes one value can occupy; used to bound array loops.
        self.min_size = min_size

    def __repr__(self) -> str:
        return f"<{self.type_name}>"

    def _parse(self, stream, context, path):
        return globals()[self.reader](stream)

    def _build(self, obj, stream, context, path):
        globals()[self.writer](stream, obj)
        return obj

    def _emitparse(self, code):
        code.append(_HELPER_IMPORT)
        return f"{self.reader}(io)"

    def _emitbuild(self, code):
        code.append(_HELPER_IMPORT)
        return f"{self.writer}(io, obj)"


class KafkaFixed(Construct):
    """Fixed-width big-endian numbers via `struct`; truncation is checked."""

    def __init__(self, name: str, fmt: str) -> None:
        super().__init__()
        self.type_name = name
        self.packer = struct.Struct(fmt)
        self.fmt = fmt
        self.min_size = self.packer.size

    def __repr__(self) -> str:
        return f"<{self.type_name}>"

    def _parse(self, stream, context, path):
        data = stream.read(self.packer.size)
        if len(data) != self.packer.size:
            raise DecodeError(f"truncated {self.type_name}")
        return self.packer.unpack(data)[0]

    def _build(self, obj, stream, context, path):
        try:
            stream.write(self.packer.pack(obj))
        except struct.error as exc:
            raise EncodeError(f"{self.type_name}: {exc}") from None
        return obj

    def _emitparse(self, code):
        code.append(_HELPER_IMPORT)
        name = f"fixed_{self.type_name}"
        code.append(f"{name} = struct.Struct({self.fmt!r})")
        # unpack raises struct.error on a short read; codec maps it to DecodeError.
        return f"{name}.unpack(io.read({self.packer.size}))[0]"

    def _emitbuild(self, code):
        name = f"fixed_{self.type_name}"
        code.append(f"{name} = struct.Struct({self.fmt!r})")
        return f"io.write({name}.pack(obj))"


Int8 = KafkaFixed("int8", ">b")
Int16 = KafkaFixed("int16", ">h")
Int32 = KafkaFixed("int32", ">i")
Int64 = KafkaFixed("int64", ">q")
UInt16 = KafkaFixed("uint16", ">H")
UInt32 = KafkaFixed("uint32", ">I")
Float64 = KafkaFixed("float64", ">d")
Bool = KafkaLeaf("bool", "read_bool", "write_bool", 1)
UVarInt = KafkaLeaf("uvarint", "read_uvarint", "write_uvarint", 1)
VarInt = KafkaLeaf("varint", "read_varint", "write_varint", 1)
VarLong = KafkaLeaf("varlong", "read_varlong", "write_varlong", 1)
Uuid = KafkaLeaf("uuid", "read_uuid", "write_uuid", 16)

String = KafkaLeaf("string", "read_string", "write_string", 2)
NullableString = KafkaLeaf("nullable_string", "read_nullable_string", "write_nullable_string", 2)
CompactString = KafkaLeaf("compact_string", "read_compact_string", "write_compact_string", 1)
CompactNullableString = KafkaLeaf(
    "compact_nullable_string", "read_compact_nullable_string", "write_compact_nullable_string", 1
)
Bytes = KafkaLeaf("bytes", "read_bytes", "write_bytes", 4)
NullableBytes = KafkaLeaf("nullable_bytes", "read_nullable_bytes", "write_nullable_bytes", 4)
CompactBytes = KafkaLeaf("compact_bytes", "read_compact_bytes", "write_compact_bytes", 1)
CompactNullableBytes = KafkaLeaf(
    "compact_nullable_bytes", "read_compact_nullable_bytes", "write_compact_nullable_bytes", 1
)


def string_type(compact: bool, nullable: bool) -> KafkaLeaf:
    if compact:
        return CompactNullableString if nullable else CompactString
    return NullableString if nullable else String


def bytes_type(compact: bool, nullable: bool) -> KafkaLeaf:
    if compact:
        return CompactNullableBytes if nullable else CompactBytes
    return NullableBytes if nullable else Bytes


# An array whose elements can be zero bytes long (a struct with no fields in
# this version) cannot be bounded by the bytes consumed; cap it instead.
ZERO_SIZE_ELEMENTS_MAX = 1024


def check_array_claim(io: BytesIO, n: int, element_min_size: int) -> None:
    if element_min_size == 0:
        if n > ZERO_SIZE_ELEMENTS_MAX:
            raise DecodeError(f"array of {n} zero-size elements")
    elif n > CLAIM_UNCHECKED_MAX:
        check_claim(io, n * element_min_size, "an array count")


class KafkaArray(Construct):
    """Classic (int32 count) or compact (uvarint count+1) array, optionally null."""

    def __init__(self, element: Construct, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.element = element
        self.compact = compact
        self.nullable = nullable
        self.min_size = 1 if compact else 4

    def __repr__(self) -> str:
        return f"<array {self.element!r} compact={self.compact} nullable={self.nullable}>"

    def _element_min_size(self) -> int:
        return getattr(self.element, "min_size", 0)

    def _parse(self, stream, context, path):
        n = read_array_count(stream, self.compact, self.nullable)
        if n < 0:
            return None
        check_array_claim(io=stream, n=n, element_min_size=self._element_min_size())
        return ListContainer(self.element._parse(stream, context, path) for _ in range(n))

    def _build(self, obj, stream, context, path):
        write_array_count(stream, obj, self.compact)
        if obj is not None:
            for item in obj:
                self.element._build(item, stream, context, path)
        return obj

    def _emitparse(self, code):
        code.append(_HELPER_IMPORT)
        fname = f"parse_array_{code.allocateId()}"
        min_size = self._element_min_size()
        if min_size == 0:
            guard = f"if n > {ZERO_SIZE_ELEMENTS_MAX}: raise DecodeError('array of zero-size elements')"
        else:
            guard = f"if n > {CLAIM_UNCHECKED_MAX}: check_claim(io, n * {min_size}, 'an array count')"
        code.append(f"""
            def {fname}(io, this):
                n = read_array_count(io, {self.compact}, {self.nullable})
                if n < 0:
                    return None
                {guard}
                return [{self.element._compileparse(code)} for _ in range(n)]
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code):
        code.append(_HELPER_IMPORT)
        fname = f"build_array_{code.allocateId()}"
        code.append(f"""
            def {fname}(items, io, this):
                write_array_count(io, items, {self.compact})
                if items is not None:
                    for obj in items:
                        {self.element._compilebuild(code)}
        """)
        return f"{fname}(obj, io, this)"


class FieldSpec:
    """One member of a KafkaStruct in one version (already resolved)."""

    __slots__ = ("name", "con", "default", "tag")

    def __init__(self, name: str, con: Construct, default: Any, tag: int | None = None) -> None:
        self.name = name
        self.con = con
        # `default` is either a plain immutable value or a zero-arg factory
        # (callable) for mutable defaults such as lists and nested structs.
        self.default = default
        self.tag = tag

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default


def _default_expr(spec: FieldSpec, code) -> str:
    """Python source that evaluates to a fresh default value."""
    value = spec.default
    if callable(value):
        key = f"default_factory_{code.allocateId()}"
        code.linkedinstances[key] = value
        code.append(f"# default factory {key}")
        return f"linkedinstances[{key!r}]()"
    if isinstance(value, uuid.UUID):
        return f"UUID_CONST({value.int})"
    return repr(value)


# UUID defaults in compiled code: one shared (immutable) UUID per value, not a new
# object for every field of every message encoded or decoded.
_UUID_CONST_SOURCE = (
    "from construct import Container\nfrom uuid import UUID as _UUID\n"
    "_MISSING = object()\n"
    "_UUID_CONSTANTS = {}\n"
    "def UUID_CONST(i):\n"
    "    value = _UUID_CONSTANTS.get(i)\n"
    "    if value is None:\n"
    "        value = _UUID_CONSTANTS[i] = _UUID(int=i)\n"
    "    return value\n"
)


class KafkaStruct(Construct):
    """A Kafka struct in one version: fields in order, then (if flexible) the
    tagged-field section.

    Parses into a construct `Container` holding every field the message knows
    in this version, plus the fields it does not have here at their defaults
    (`absent`), so handlers can read any field regardless of version. Unknown
    tagged fields are kept under `_unknown_tagged_fields` as (tag, bytes) and
    written back on build.
    """

    def __init__(
        self,
        fields: list[FieldSpec],
        tagged: list[FieldSpec] | None,
        absent: list[FieldSpec] | None = None,
        type_name: str = "struct",
    ) -> None:
        super().__init__()
        self.fields = fields
        self.tagged = tagged  # None: not flexible; []: flexible with no known tags
        self.absent = absent or []
        self.type_name = type_name
        self.min_size = sum(getattr(f.con, "min_size", 0) for f in fields) + (1 if tagged is not None else 0)
        self.tagged_by_tag = {f.tag: f for f in (tagged or [])}

    def __repr__(self) -> str:
        return f"<struct {self.type_name}>"

    # -- interpreted ------------------------------------------------------
    def _parse(self, stream, context, path):
        result = Container()
        for spec in self.absent:
            result[spec.name] = spec.default_value()
        for spec in self.fields:
            result[spec.name] = spec.con._parse(stream, context, path)
        if self.tagged is not None:
            for spec in self.tagged:
                result[spec.name] = spec.default_value()
            unknown = parse_tagged_section(stream, result, self.tagged_by_tag, context, path)
            if unknown:
                result["_unknown_tagged_fields"] = unknown
        return result

    def _build(self, obj, stream, context, path):
        for spec in self.fields:
            spec.con._build(_get(obj, spec), stream, context, path)
        if self.tagged is not None:
            build_tagged_section(stream, obj, self.tagged, context, path)
        return obj

    # -- compiled ---------------------------------------------------------
    def _emitparse(self, code):
        code.append(_HELPER_IMPORT)
        code.append(_UUID_CONST_SOURCE)
        fname = f"parse_{self.type_name}_{code.allocateId()}"
        lines = [f"def {fname}(io, this):", "    r = Container()"]
        for spec in self.absent:
            lines.append(f"    r[{spec.name!r}] = {_default_expr(spec, code)}")
        # Runs of fixed-width fields are read with one read and one unpack
        # (e.g. ApiKey/MinVersion/MaxVersion as ">hhh"): the calls, not the
        # bytes, are what a Python decoder spends its time on.
        index = 0
        while index < len(self.fields):
            run = []
            while index + len(run) < len(self.fields) and isinstance(self.fields[index + len(run)].con, KafkaFixed):
                run.append(self.fields[index + len(run)])
            if len(run) >= 2:
                fmt = ">" + "".join(spec.con.fmt[1:] for spec in run)
                size = struct.calcsize(fmt)
                packer = f"fixed_run_{code.allocateId()}"
                code.append(f"{packer} = struct.Struct({fmt!r})")
                targets = ", ".join(f"r[{spec.name!r}]" for spec in run)
                lines.append(f"    {targets} = {packer}.unpack(io.read({size}))")
                index += len(run)
                continue
            spec = self.fields[index]
            lines.append(f"    r[{spec.name!r}] = {spec.con._compileparse(code)}")
            index += 1
        if self.tagged is not None:
            for spec in self.tagged:
                lines.append(f"    r[{spec.name!r}] = {_default_expr(spec, code)}")
            # The tagged section is almost always empty: one zero byte, no call.
            lines.append("    n = io.read(1)")
            lines.append("    if n != b'\\x00':")
            lines.append("        if not n: raise DecodeError('truncated tagged-field count')")
            lines.append("        io.seek(-1, 1)")
            lines.append("        n = read_uvarint(io)")
            # Each tagged field takes at least two bytes (its tag and its size).
            lines.append(f"        if n > {CLAIM_UNCHECKED_MAX}: check_claim(io, 2 * n, 'a tagged-field count')")
            lines.append("        unknown = None")
            lines.append("        last_tag = -1")
            lines.append("        for _ in range(n):")
            lines.append("            tag = read_uvarint(io)")
            lines.append("            if tag <= last_tag: raise DecodeError('tagged fields out of order or repeated')")
            lines.append("            last_tag = tag")
            lines.append("            size = read_uvarint(io)")
            first = True
            for spec in self.tagged:
                kw = "if" if first else "elif"
                first = False
                lines.append(f"            {kw} tag == {spec.tag}:")
                lines.append("                start = io.tell()")
                lines.append(f"                r[{spec.name!r}] = {spec.con._compileparse(code)}")
                lines.append("                if io.tell() - start != size: raise DecodeError('tagged field size mismatch')")
            indent = "            else:" if self.tagged else "            if True:"
            lines.append(indent)
            lines.append("                if unknown is None: unknown = []")
            lines.append("                unknown.append((tag, read_exact(io, size)))")
            lines.append("        if unknown: r['_unknown_tagged_fields'] = unknown")
        lines.append("    return r")
        code.append("\n".join(lines))
        return f"{fname}(io, this)"

    def _emitbuild(self, code):
        code.append(_HELPER_IMPORT)
        code.append(_UUID_CONST_SOURCE)
        fname = f"build_{self.type_name}_{code.allocateId()}"
        lines = [f"def {fname}(objdict, io, this):"]
        # As in parsing, a run of fixed-width fields becomes one pack and one write.
        index = 0
        while index < len(self.fields):
            run = []
            while index + len(run) < len(self.fields) and isinstance(self.fields[index + len(run)].con, KafkaFixed):
                run.append(self.fields[index + len(run)])
            if len(run) >= 2:
                fmt = ">" + "".join(spec.con.fmt[1:] for spec in run)
                packer = f"fixed_run_{code.allocateId()}"
                code.append(f"{packer} = struct.Struct({fmt!r})")
                values = ", ".join(f"objdict.get({spec.name!r}, {_default_expr(spec, code)})" for spec in run)
                lines.append(f"    io.write({packer}.pack({values}))")
                index += len(run)
                continue
            spec = self.fields[index]
            default = _default_expr(spec, code)
            if callable(spec.default):
                # A fresh list or struct only when the field is missing (`.get` would
                # build one for every message, present or not).
                lines.append(f"    obj = objdict.get({spec.name!r}, _MISSING)")
                lines.append("    if obj is _MISSING:")
                lines.append(f"        obj = {default}")
            else:
                lines.append(f"    obj = objdict.get({spec.name!r}, {default})")
            lines.append(f"    {spec.con._compilebuild(code)}")
            index += 1
        if self.tagged is not None:
            if not self.tagged:
                lines.append("    unknown = objdict.get('_unknown_tagged_fields')")
                lines.append("    if not unknown:")
                lines.append("        io.write(b'\\x00')")
                lines.append("    else:")
                lines.append("        write_tagged_section(io, [], unknown)")
            else:
                lines.append("    present = []")
                for spec in self.tagged:
                    if callable(spec.default):
                        # Lists and structs: compare strictly, see `tagged_value_differs`,
                        # against one default built now (the comparison only reads it). A
                        # missing field is at its default: not written.
                        key = f"tagged_default_{code.allocateId()}"
                        code.linkedinstances[key] = spec.default()
                        lines.append(f"    obj = objdict.get({spec.name!r}, _MISSING)")
                        lines.append(f"    if obj is not _MISSING and tagged_value_differs(obj, "
                                     f"linkedinstances[{key!r}]):")
                    else:
                        default = _default_expr(spec, code)
                        lines.append(f"    obj = objdict.get({spec.name!r}, {default})")
                        lines.append(f"    if obj != {default}:")
                    lines.append("        outer = io")
                    lines.append("        io = BytesIO()")
                    lines.append(f"        {spec.con._compilebuild(code)}")
                    lines.append(f"        present.append(({spec.tag}, io.getvalue()))")
                    lines.append("        io = outer")
                lines.append("    write_tagged_section(io, present, objdict.get('_unknown_tagged_fields'))")
        lines.append("    return objdict")
        code.append("\n".join(lines))
        return f"{fname}(obj, io, this)"


def _get(obj, spec: FieldSpec):
    try:
        return obj[spec.name]
    except KeyError:
        return spec.default_value()


def parse_tagged_section(stream, result, known: dict, context, path) -> list | None:
    n = read_uvarint(stream)
    if n > CLAIM_UNCHECKED_MAX:
        check_claim(stream, 2 * n, "a tagged-field count")  # a tag and a size byte each
    unknown = None
    last_tag = -1
    for _ in range(n):
        tag = read_uvarint(stream)
        if tag <= last_tag:
            raise DecodeError("tagged fields out of order or repeated")
        last_tag = tag
        size = read_uvarint(stream)
        spec = known.get(tag)
        if spec is None:
            if unknown is None:
                unknown = []
            unknown.append((tag, read_exact(stream, size)))
            continue
        start = stream.tell()
        result[spec.name] = spec.con._parse(stream, context, path)
        if stream.tell() - start != size:
            raise DecodeError("tagged field size mismatch")
    return unknown


def build_tagged_section(stream, obj, tagged: list[FieldSpec], context, path) -> None:
    present = []
    for spec in tagged:
        value = _get(obj, spec)
        if tagged_value_differs(value, spec.default_value()):
            buf = BytesIO()
            spec.con._build(value, buf, context, path)
            present.append((spec.tag, buf.getvalue()))
    unknown = obj.get("_unknown_tagged_fields") if hasattr(obj, "get") else None
    write_tagged_section(stream, present, unknown)


def tagged_value_differs(value, default) -> bool:
    """Whether a tagged field must be written (it differs from its default).

    construct's `Container.__eq__` ignores keys starting with "_", so a struct
    equal to its default except for `_unknown_tagged_fields` would compare
    equal and be dropped, losing the unknown tags; this comparison sees them.
    """
    if isinstance(value, dict):
        if not isinstance(default, dict):
            return True
        for key, item in value.items():
            if key in default:
                if tagged_value_differs(item, default[key]):
                    return True
            elif key == "_unknown_tagged_fields" and item:
                return True
        return False
    if isinstance(value, list) and isinstance(default, list):
        return len(value) != len(default) or any(map(tagged_value_differs, value, default))
    return value != default


def write_tagged_section(io: BytesIO, present: list, unknown: list | None) -> None:
    """Writes (tag, payload) pairs sorted by tag, as Kafka's writers do."""
    entries = present + list(unknown) if unknown else present
    if len(entries) > 1:
        entries = sorted(entries, key=lambda entry: entry[0])
    write_uvarint(io, len(entries))
    for tag, payload in entries:
        write_uvarint(io, tag)
        write_uvarint(io, len(payload))
        io.write(payload)
