"""kraftwerk's declarations agree with Kafka's JSON message specs.

The specs are vendored as test data (tests/data/kafka-messages, with their
source in SOURCE.md there), so this module always runs. For each spec, the declaration
with the same name must carry the same validVersions, flexibleVersions,
common structs and, recursively, the same fields: name, type, versions,
nullableVersions, tag, taggedVersions, default, flexibleVersions, ignorable
and mapKey.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol import header, metadata_records, raft_records
from protocol.registry import API_MESSAGES
from protocol.schema import Field, Message

SPEC_DIR = Path(__file__).resolve().parents[1] / "data" / "kafka-messages"


def load_spec(path: Path) -> dict:
    # The specs allow // line comments, which JSON does not.
    lines = [line for line in path.read_text().splitlines() if not line.strip().startswith("//")]
    return json.loads("\n".join(lines))


def declarations() -> dict[str, Message]:
    found: dict[str, Message] = {}
    for request, response in API_MESSAGES.values():
        found[request.name] = request
        found[response.name] = response
    for module in (metadata_records, raft_records, header):
        for value in vars(module).values():
            if isinstance(value, Message):
                found[value.name] = value
    return found


SPECS = {path.name: load_spec(path) for path in sorted(SPEC_DIR.glob("*.json"))}
DECLARED = declarations()


def _default_text(raw) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)


def spec_field(f: dict) -> dict:
    return {
        "name": f["name"],
        "type": f["type"],
        "versions": f["versions"],
        "nullable_versions": f.get("nullableVersions"),
        "tag": None if "tag" not in f else int(f["tag"]),
        "tagged_versions": f.get("taggedVersions"),
        "default": _default_text(f.get("default")),
        "flexible_versions": f.get("flexibleVersions"),
        "ignorable": bool(f.get("ignorable", False)),
        "map_key": bool(f.get("mapKey", False)),
        "fields": [spec_field(sub) for sub in f.get("fields", [])],
    }


def declared_field(f: Field) -> dict:
    return {
        "name": f.name,
        "type": f.type,
        "versions": f.versions,
        "nullable_versions": f.nullable_versions,
        # A tag must be a number in the declaration (a string would sort and
        # compare wrongly), so no int() here.
        "tag": f.tag,
        "tagged_versions": f.tagged_versions,
        "default": f.default,
        "flexible_versions": f.flexible_versions,
        "ignorable": f.ignorable,
        "map_key": f.map_key,
        "fields": [declared_field(sub) for sub in f.fields],
    }


def test_spec_directory_has_specs():
    assert len(SPECS) >= 50


@pytest.mark.parametrize("filename", sorted(SPECS))
def test_declaration_matches_spec(filename):
    spec = SPECS[filename]
    message = DECLARED.get(spec["name"])
    assert message is not None, f"{spec['name']} ({filename}) has no declaration"
    assert message.type == spec["type"]
    assert message.api_key == spec.get("apiKey")
    assert message.valid_versions == spec["validVersions"]
    assert message.flexible_versions == spec.get("flexibleVersions", "none")
    assert [declared_field(f) for f in message.fields] == [spec_field(f) for f in spec.get("fields", [])]
    declared_common = {name: [declared_field(f) for f in fields] for name, fields in message.common_structs}
    spec_common = {s["name"]: [spec_field(f) for f in s["fields"]] for s in spec.get("commonStructs", [])}
    assert declared_common == spec_common


# kraftwerk's own APIs, never in Kafka: MigrationCheck (KIP-866's check, as a request)
# and DescribeMigration.
HAND_DECLARED = {"MigrationCheckRequest", "MigrationCheckResponse",
                 "DescribeMigrationRequest", "DescribeMigrationResponse"}


def test_every_declaration_has_a_spec():
    names = {spec["name"] for spec in SPECS.values()}
    assert sorted(set(DECLARED) - names - HAND_DECLARED) == []
    assert not HAND_DECLARED & names, "a spec appeared: generate the module from it instead"

