"""Lossy metadata.version downgrades (KIP-778 "unsafe"): what each level added, what a
downgrade below it drops, and the image projected to a lower level.

Owns: `METADATA_ADDITIONS`, the catalog of record types and record fields each
metadata.version introduced (facts from Kafka's MetadataVersion gates), the
projection of a broker registration to a level (`project_registration`), and
the operator-facing list of what an image would lose (`losses`).

KIP-778: a lossy downgrade "will exclude new record types and will write
metadata records at the downgraded version (thereby excluding new fields)".
kraftwerk's image holds broker registrations (features, endpoints, rack, and
the fields below) and finalized features; of the catalogued additions, the
registration fields are what an image can actually hold today, so those are
what a projection drops. Record types the image does not keep (topics, ZK
migration state) are listed for the operator and written nowhere; controller
registrations are kept, and dropped below 3.7-IV0, where they do not exist.

Rules kept here:
- Pure functions of (image, level): every node projects at the same log offset
  (the replay of the FeatureLevelRecord), so every copy stays identical.
- A lossless change (every level in between has didMetadataChange=false)
  projects to exactly the same image.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from server.controller import features as ft


@dataclass(frozen=True, slots=True)
class MetadataAddition:
    """Something a metadata.version introduced: a record type, or a field of one."""

    level: int
    record: str
    field: str | None  # None: the whole record type
    registration_attribute: str | None = None  # the BrokerRegistration attribute holding the field

    def describe(self) -> str:
        what = f"{self.record}.{self.field}" if self.field else f"{self.record} records"
        return f"{what} (since {ft.metadata_version_from_level(self.level)})"


METADATA_ADDITIONS: tuple[MetadataAddition, ...] = (
    MetadataAddition(ft.IBP_3_3_IV1, "NoOpRecord", None),
    MetadataAddition(ft.IBP_3_3_IV2, "BrokerRegistrationChangeRecord", None),
    MetadataAddition(ft.IBP_3_3_IV3, "RegisterBrokerRecord", "InControlledShutdown", "in_controlled_shutdown"),
    MetadataAddition(ft.IBP_3_4_IV0, "RegisterBrokerRecord", "IsMigratingZkBroker", "is_migrating_zk_broker"),
    MetadataAddition(ft.IBP_3_4_IV0, "ZkMigrationStateRecord", None),
    # 3.5-IV2 (level 11): SCRAM credentials in the metadata log (KIP-554 in KRaft).
    MetadataAddition(11, "UserScramCredentialRecord", None),
    MetadataAddition(ft.IBP_3_6_IV1, "BeginTransactionRecord", None),
    MetadataAddition(ft.IBP_3_7_IV0, "RegisterControllerRecord", None),
    MetadataAddition(ft.IBP_3_7_IV2, "RegisterBrokerRecord", "LogDirs", "log_dirs"),
)

_EMPTY: dict[str, Any] = {"in_controlled_shutdown": False, "is_migrating_zk_broker": False, "log_dirs": ()}


def _registration_additions(from_level: int, to_level: int) -> list[MetadataAddition]:
    return [a for a in METADATA_ADDITIONS
            if to_level < a.level <= from_level and a.registration_attribute is not None]


def project_registration(registration, from_level: int, to_level: int):
    """The registration as records written at `to_level` can hold it (same object if nothing changes)."""
    changes = {}
    for addition in _registration_additions(from_level, to_level):
        attribute = addition.registration_attribute
        if getattr(registration, attribute) != _EMPTY[attribute]:
            changes[attribute] = _EMPTY[attribute]
    return replace(registration, **changes) if changes else registration


def losses(registrations: Iterable, from_level: int, to_level: int) -> list[str]:
    """What an image with these broker registrations loses going from `from_level` to
    `to_level`, one line per dropped value, for the operator (empty: nothing)."""
    if to_level >= from_level or ft.is_lossless_downgrade(from_level, to_level):
        return []
    lines = []
    for registration in sorted(registrations, key=lambda r: r.broker_id):
        for addition in _registration_additions(from_level, to_level):
            value = getattr(registration, addition.registration_attribute)
            if value != _EMPTY[addition.registration_attribute]:
                shown = ", ".join(str(v) for v in value) if isinstance(value, tuple) else str(value).lower()
                lines.append(f"broker {registration.broker_id}: {addition.describe()} = {shown}")
    return lines


def dropped_record_types(from_level: int, to_level: int) -> list[str]:
    """Record types a log written at `from_level` may hold and `to_level` cannot read."""
    if to_level >= from_level:
        return []
    return [a.describe() for a in METADATA_ADDITIONS if to_level < a.level <= from_level and a.field is None]
