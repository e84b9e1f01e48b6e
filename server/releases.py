"""The release catalog: which feature ranges each Apache Kafka release supports.

Owns: `RELEASES` (one row per Kafka release kraftwerk can impersonate), `release()`
(name or patch version -> `Release`) and `supported_features()` (the ranges a node
advertises, for a named release or for kraftwerk's own software).

A node started with `--release 3.6` advertises what a Kafka 3.6 node supports, so a
mixed-version cluster can be run with real kraftwerk processes and the KIP-778
upgrade/downgrade rules exercised end to end.

Rules kept here:
- The ranges are facts about Kafka releases, not kraftwerk policy: metadata.version
  levels come from the `MetadataVersion` catalog in `server/controller/features.py`
  (each release tops out at the last IV it shipped; 4.0 dropped every level below
  3.3-IV3), kraft.version 1 arrived in 3.9, group.version and transaction.version
  in 4.0. For the other features a release supports the levels whose bootstrap
  metadata.version (Kafka's own catalog, `kafka_feature_catalog.py`) is at or below
  the release's top level: eligible.leader.replicas.version 1 from 4.1,
  share.version 1 and streams.version 1 from 4.2, share.version 2 from 4.4.
- The catalog is data: one row per release, read by one function. A feature a release
  does not know is simply absent from its map, which means "only level 0".
- A named release ignores `unstable_enabled`: a Kafka release's ranges do not move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from server.controller.features import (
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    GROUP_VERSION,
    KRAFT_VERSION,
    METADATA_VERSION,
    SHARE_VERSION,
    STREAMS_VERSION,
    TRANSACTION_VERSION,
    NodeFeatures,
    SupportedRange,
    local_supported_features,
    metadata_version_from_name,
)


@dataclass(frozen=True, slots=True)
class Release:
    """One Kafka release (`3.6`) and the feature ranges its nodes support."""

    name: str
    features: NodeFeatures

    def __str__(self) -> str:
        return self.name


_Range = tuple[int, int]

# (release, metadata.version min, metadata.version max, {feature: (min, max)}). A feature
# a release does not know at all is left out of its map.
_CATALOG: tuple[tuple[str, str, str, Mapping[str, _Range]], ...] = (
    # release  mv min     mv max     other features
    ("3.3", "3.0-IV1", "3.3-IV3", {KRAFT_VERSION: (0, 0)}),
    ("3.4", "3.0-IV1", "3.4-IV0", {KRAFT_VERSION: (0, 0)}),
    ("3.5", "3.0-IV1", "3.5-IV2", {KRAFT_VERSION: (0, 0)}),
    ("3.6", "3.0-IV1", "3.6-IV2", {KRAFT_VERSION: (0, 0)}),
    ("3.7", "3.0-IV1", "3.7-IV4", {KRAFT_VERSION: (0, 0)}),
    ("3.8", "3.0-IV1", "3.8-IV0", {KRAFT_VERSION: (0, 0)}),
    ("3.9", "3.0-IV1", "3.9-IV0", {KRAFT_VERSION: (0, 1)}),
    ("4.0", "3.3-IV3", "4.0-IV3", {KRAFT_VERSION: (0, 1), GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2)}),
    ("4.1", "3.3-IV3", "4.1-IV1", {KRAFT_VERSION: (0, 1), GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2),
                                   ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1)}),
    ("4.2", "3.3-IV3", "4.2-IV1", {KRAFT_VERSION: (0, 1), GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2),
                                   ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1), SHARE_VERSION: (0, 1),
                                   STREAMS_VERSION: (0, 1)}),
    ("4.3", "3.3-IV3", "4.3-IV0", {KRAFT_VERSION: (0, 1), GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2),
                                   ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1), SHARE_VERSION: (0, 1),
                                   STREAMS_VERSION: (0, 1)}),
    ("4.4", "3.3-IV3", "4.4-IV2", {KRAFT_VERSION: (0, 1), GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2),
                                   ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1), SHARE_VERSION: (0, 2),
                                   STREAMS_VERSION: (0, 1)}),
)


def _build(row: tuple[str, str, str, Mapping[str, _Range]]) -> Release:
    name, mv_min, mv_max, others = row
    ranges: dict[str, SupportedRange] = {
        METADATA_VERSION: SupportedRange(
            metadata_version_from_name(mv_min).level, metadata_version_from_name(mv_max).level
        )
    }
    for feature, levels in others.items():
        ranges[feature] = SupportedRange(*levels)
    return Release(name, MappingProxyType(ranges))


RELEASES: Mapping[str, Release] = MappingProxyType({row[0]: _build(row) for row in _CATALOG})
RELEASE_NAMES: tuple[str, ...] = tuple(RELEASES)

# "3.6" or a patch release of it ("3.6.1"); patch releases never change feature ranges.
_RELEASE_NAME = re.compile(r"(\d+\.\d+)(?:\.\d+)?")


def release(name: str) -> Release:
    """`3.6` or `3.6.1` -> the 3.6 release. Raises ValueError naming the known releases."""
    match = _RELEASE_NAME.fullmatch(name)
    found = RELEASES.get(match.group(1)) if match is not None else None
    if found is None:
        raise ValueError(f"unknown Kafka release {name!r}; known releases: {', '.join(RELEASE_NAMES)}")
    return found


def supported_features(release_name: str | None, unstable_enabled: bool) -> NodeFeatures:
    """The ranges a node advertises: those of `release_name`, or kraftwerk's own
    (`local_supported_features`) when it is None."""
    if release_name is None:
        return local_supported_features(unstable_enabled)
    return release(release_name).features
