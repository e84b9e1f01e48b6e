"""Kafka's `meta.properties` file and its uuid string form.

Owns: reading and atomically writing `meta.properties` (Java properties
syntax) for a KRaft node (`version=1`, `cluster.id`, `node.id`, optional
`directory.id`), and Kafka's uuid text form: the 16 bytes (most significant
half first) in URL-safe base64 without padding, 22 characters, as printed by
`kafka-storage.sh random-uuid`.

Rules kept here:
- A write is atomic and durable: temp file, fsync, rename over the target,
  fsync the directory. A crash leaves the old file or the new one, never half.
- Random uuids avoid what Kafka avoids: the 100 reserved values
  (most significant half 0, least significant < 100: unassigned, lost,
  migrating directory ids, the metadata topic id, ...) and strings starting
  with '-', which a command line would take for an option.
- Reading is strict about the keys it needs and keeps unknown keys, so a file
  written by Kafka round-trips.
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from server.storage.durable import write_file_atomically

META_PROPERTIES_FILE_NAME = "meta.properties"
KRAFT_META_VERSION = 1
RESERVED_UUID_COUNT = 100
UUID_STRING_LENGTH = 22

# A meta.properties file is a handful of short lines; anything bigger is not one.
MAX_META_PROPERTIES_BYTES = 64 * 1024


class MetaPropertiesError(ValueError):
    """meta.properties is missing a key, has a bad value, or is not a properties file."""


# --------------------------------------------------------------------------
# Uuids
# --------------------------------------------------------------------------

def uuid_to_string(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def parse_uuid_string(text: str) -> uuid.UUID:
    """Parses Kafka's 22-character base64url uuid form (padding '==' tolerated)."""
    stripped = text[:-2] if len(text) == UUID_STRING_LENGTH + 2 and text.endswith("==") else text
    if len(stripped) != UUID_STRING_LENGTH:
        raise ValueError(f"not a Kafka uuid string (want {UUID_STRING_LENGTH} base64url characters): {text!r}")
    try:
        raw = base64.b64decode(stripped + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"not a Kafka uuid string (bad base64url): {text!r}") from None
    result = uuid.UUID(bytes=raw)
    # 22 characters carry 132 bits; the last 4 must be zero, so the canonical
    # form is unique. Rejecting other spellings keeps ids comparable as text.
    if uuid_to_string(result) != stripped:
        raise ValueError(f"not a canonical Kafka uuid string: {text!r}")
    return result


def is_reserved_uuid(value: uuid.UUID) -> bool:
    return value.int >> 64 == 0 and (value.int & 0xFFFFFFFFFFFFFFFF) < RESERVED_UUID_COUNT


def random_uuid_string() -> str:
    """A fresh id like `kafka-storage.sh random-uuid` prints."""
    # Each try fails with probability about 1/64 ('-' first) plus 2**-121, so
    # 1000 tries never all fail in practice; the bound is there to be a bound.
    for _ in range(1000):
        candidate = uuid.uuid4()
        text = uuid_to_string(candidate)
        if not text.startswith("-") and not is_reserved_uuid(candidate):
            return text
    raise RuntimeError("could not generate a usable uuid")


# --------------------------------------------------------------------------
# meta.properties
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = KRAFT_META_VERSION
    # Keys this module does not interpret, kept so rewriting does not drop them.
    extra: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def to_properties(self) -> dict[str, str]:
        properties = {"version": str(self.version), "cluster.id": self.cluster_id, "node.id": str(self.node_id)}
        if self.directory_id is not None:
            properties["directory.id"] = self.directory_id
        for key, value in self.extra.items():
            properties.setdefault(key, value)
        return properties

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> MetaProperties:
        version_text = properties.get("version")
        if version_text is None:
            raise MetaPropertiesError("meta.properties has no version")
        if version_text.strip() != str(KRAFT_META_VERSION):
            raise MetaPropertiesError(
                f"meta.properties version {version_text!r} is not supported (KRaft nodes use version 1)"
            )
        cluster_id = properties.get("cluster.id")
        if not cluster_id:
            raise MetaPropertiesError("meta.properties has no cluster.id")
        node_text = properties.get("node.id")
        if node_text is None:
            raise MetaPropertiesError("meta.properties has no node.id")
        try:
            node_id = int(node_text.strip())
        except ValueError:
            raise MetaPropertiesError(f"meta.properties node.id is not an integer: {node_text!r}") from None
        if node_id < 0:
            raise MetaPropertiesError(f"meta.properties node.id is negative: {node_id}")
        directory_id = properties.get("directory.id")
        if directory_id is not None:
            try:
                parse_uuid_string(directory_id)
            except ValueError as exc:
                raise MetaPropertiesError(f"meta.properties directory.id: {exc}") from None
        known = {"version", "cluster.id", "node.id", "directory.id"}
        extra = MappingProxyType({key: value for key, value in properties.items() if key not in known})
        return cls(cluster_id=cluster_id, node_id=node_id, directory_id=directory_id, extra=extra)


def parse_properties(text: str) -> dict[str, str]:
    """Java `Properties.load` syntax: comments (# !), separators (= : whitespace),
    backslash escapes (incl. \\uXXXX) and line continuations."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    index = 0
    # Bounded: every round consumes at least one line.
    while index < len(lines):
        line = lines[index].lstrip(" \t\f")
        index += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next.
        while _ends_with_continuation(line) and index <= len(lines):
            line = line[:-1] + (lines[index].lstrip(" \t\f") if index < len(lines) else "")
            index += 1
        key, value = _split_key_value(line)
        result[_unescape(key)] = _unescape(value)
    return result


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=: \t\f":
            break
        position += 1
    key = line[:position]
    # The separator is optional whitespace with at most one '=' or ':' in it.
    rest = line[position:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char != "\\" or position + 1 >= len(text):
            out.append(char)
            position += 1
            continue
        escaped = text[position + 1]
        if escaped == "u":
            digits = text[position + 2 : position + 6]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise MetaPropertiesError(f"malformed \\uXXXX escape in {text!r}") from None
            position += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        position += 2
    joined = "".join(out)
    # Rejoin surrogate pairs written for characters beyond U+FFFF; a lone
    # surrogate stays as it is rather than failing the whole file.
    return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for position, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "=:#!":
            out.append("\\" + char)
        elif char == " " and (is_key or position == 0):
            out.append("\\ ")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif ord(char) > 0xFFFF:
            # A \uXXXX escape holds 16 bits, so Java writes a surrogate pair.
            code = ord(char) - 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def format_properties(properties: Mapping[str, str]) -> str:
    lines = ["#", "# kraftwerk meta.properties (Java properties syntax)"]
    lines += [f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}" for key, value in properties.items()]
    return "\n".join(lines) + "\n"


def read_meta_properties(directory: str | os.PathLike[str]) -> MetaProperties | None:
    """The node's meta.properties in `directory`, or None if there is none."""
    path = os.path.join(os.fspath(directory), META_PROPERTIES_FILE_NAME)
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_META_PROPERTIES_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_META_PROPERTIES_BYTES:
        raise MetaPropertiesError(f"{path} is larger than {MAX_META_PROPERTIES_BYTES} bytes")
    # Java's Properties.store writes ISO-8859-1 with \\u escapes for the rest.
    return MetaProperties.from_properties(parse_properties(raw.decode("latin-1")))


def write_meta_properties(directory: str | os.PathLike[str], meta: MetaProperties) -> None:
    """Atomically replaces `directory`/meta.properties (temp file, fsync, rename, fsync dir)."""
    directory = os.fspath(directory)
    path = os.path.join(directory, META_PROPERTIES_FILE_NAME)
    write_file_atomically(path, format_properties(meta.to_properties()).encode("latin-1"))
