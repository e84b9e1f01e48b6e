"""Feature flags: the metadata.version catalog and the other finalizable features.

Owns: the `MetadataVersion` catalog (Kafka's names, levels, releases, production
flags and didMetadataChange flags), the metadata.version gates the controller needs
(which record versions it may write), the other features (kraft.version,
group.version, transaction.version, eligible.leader.replicas.version, share.version,
streams.version) with their bootstrap versions and dependencies, and this
controller's supported ranges.

The facts come from the pinned Kafka release's own classes, generated into
`server/controller/kafka_feature_catalog.py` (tools/gen_feature_catalog.py); this
module only adds what kraftwerk keeps beyond that release: the levels below 3.3-IV3
(Kafka 4.x dropped them, kraftwerk still runs and impersonates 3.x releases).

Rules kept here:
- Levels are plain ints on the wire and in records; `MetadataVersion` objects are
  looked up from them, never the other way round, so an unknown level is an
  explicit `None`/`ValueError` instead of a silent default.
- Everything is immutable: module-level tables are tuples and read-only mappings.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from server.controller import kafka_feature_catalog as kafka

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    """One metadata.version: `3.3-IV0` is level 4. `did_metadata_change` marks the
    versions whose records cannot be read by the version before them, which is what
    makes a downgrade across them lossy. `production` is False for a level Kafka
    still develops (only offered with unstable.feature.versions.enable)."""

    name: str
    level: int
    did_metadata_change: bool
    production: bool = True

    @property
    def release(self) -> str:
        """The Kafka release that brought this level: `3.7` for `3.7-IV4`."""
        return self.name.split("-", 1)[0]

    def __str__(self) -> str:
        return self.name


# Kafka 3.x's levels below the first one Kafka 4.x still ships (3.3-IV3): facts of
# Kafka 3.9's MetadataVersion, kept because kraftwerk runs clusters at these levels.
_BEFORE_KAFKA_4: tuple[MetadataVersion, ...] = tuple(
    MetadataVersion(name, level, changed)
    for name, level, changed in (
        ("3.0-IV1", 1, True),
        ("3.1-IV0", 2, False),
        ("3.2-IV0", 3, True),
        ("3.3-IV0", 4, False),
        ("3.3-IV1", 5, True),
        ("3.3-IV2", 6, True),
    )
)

METADATA_VERSIONS: tuple[MetadataVersion, ...] = _BEFORE_KAFKA_4 + tuple(
    MetadataVersion(mv.name, mv.level, mv.did_metadata_change, mv.production)
    for mv in kafka.KAFKA_METADATA_VERSIONS
)

_BY_LEVEL: Mapping[int, MetadataVersion] = MappingProxyType({mv.level: mv for mv in METADATA_VERSIONS})
_BY_NAME: Mapping[str, MetadataVersion] = MappingProxyType({mv.name: mv for mv in METADATA_VERSIONS})

MINIMUM_KRAFT_VERSION = _BY_LEVEL[1]
# The first version with FeatureLevelRecord: nothing older can be written to a log.
MINIMUM_BOOTSTRAP_VERSION = _BY_LEVEL[4]
# The pinned Kafka release's newest production level, and its newest level of all
# (offered only with unstable.feature.versions.enable).
LATEST_PRODUCTION = _BY_NAME[kafka.LATEST_PRODUCTION_METADATA_VERSION]
LATEST_TESTING = _BY_NAME[kafka.LATEST_TESTING_METADATA_VERSION]

# Named gates (Kafka's MetadataVersion.is...Supported methods).
IBP_3_3_IV1 = 5  # NoOpRecord
IBP_3_3_IV2 = 6  # BrokerRegistrationChangeRecord replaces Fence/UnfenceBrokerRecord
IBP_3_3_IV3 = 7  # in-controlled-shutdown state in broker registrations
IBP_3_4_IV0 = 8  # ZK migration fields (RegisterBrokerRecord v2)
IBP_3_6_IV1 = 13  # metadata transactions (KIP-868)
IBP_3_7_IV0 = 15  # controller registration
IBP_3_7_IV2 = 17  # directory assignment (log dirs in registrations)
IBP_3_9_IV0 = 21
IBP_4_0_IV0 = 22
IBP_4_0_IV1 = 23  # eligible leader replicas (PartitionRecord v2)
IBP_4_0_IV2 = 24
IBP_4_3_IV0 = 30  # cordoned log directories (KIP-1066)


def metadata_version_from_level(level: int) -> MetadataVersion:
    """Raises ValueError for a level that names no metadata.version."""
    try:
        return _BY_LEVEL[level]
    except KeyError:
        raise ValueError(f"unknown metadata.version level {level}") from None


def metadata_version_from_name(name: str) -> MetadataVersion:
    """`3.3-IV0` -> level 4. Raises ValueError for an unknown name."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown metadata.version {name!r}") from None


def find_metadata_version(level: int) -> MetadataVersion | None:
    return _BY_LEVEL.get(level)


def is_lossless_downgrade(from_level: int, to_level: int) -> bool:
    """True iff going from `from_level` down to `to_level` drops no metadata: no
    version in (to_level, from_level] changed the metadata format. Both levels must
    be known; `to_level >= from_level` is not a downgrade and counts as lossless."""
    metadata_version_from_level(from_level)
    metadata_version_from_level(to_level)
    return not any(_BY_LEVEL[level].did_metadata_change for level in range(to_level + 1, from_level + 1))


def broker_registration_change_record_supported(mv_level: int) -> bool:
    return mv_level >= IBP_3_3_IV2


def in_controlled_shutdown_state_supported(mv_level: int) -> bool:
    return mv_level >= IBP_3_3_IV3


def controller_registration_supported(mv_level: int) -> bool:
    return mv_level >= IBP_3_7_IV0


def directory_assignment_supported(mv_level: int) -> bool:
    return mv_level >= IBP_3_7_IV2


def cordoned_log_dirs_supported(mv_level: int) -> bool:
    return mv_level >= IBP_4_3_IV0


def register_broker_record_version(mv_level: int) -> int:
    """RegisterBrokerRecord version Kafka writes at this metadata.version."""
    if cordoned_log_dirs_supported(mv_level):
        return 4
    if directory_assignment_supported(mv_level):
        return 3
    if mv_level >= IBP_3_4_IV0:
        return 2
    if in_controlled_shutdown_state_supported(mv_level):
        return 1
    return 0


@dataclass(frozen=True, slots=True)
class SupportedRange:
    """An inclusive range of feature levels a node can run with."""

    min_level: int
    max_level: int

    def contains(self, level: int) -> bool:
        return self.min_level <= level <= self.max_level

    def __str__(self) -> str:
        # Kafka's VersionRange rendering, which ends up inside error messages.
        if self.min_level == self.max_level:
            return str(self.min_level)
        return f"{self.min_level}-{self.max_level}"


# What a node that does not mention a feature supports: only "off".
DISABLED = SupportedRange(0, 0)

NodeFeatures = Mapping[str, SupportedRange]


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """One level of a feature: the metadata.version from which new clusters get it by
    default, and the levels of other features it needs."""

    level: int
    bootstrap_mv_level: int
    dependencies: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    name: str
    levels: tuple[FeatureLevel, ...]  # ascending, level 0 ("off") implicit
    latest_production: int
    latest_testing: int

    def level(self, level: int) -> FeatureLevel | None:
        for candidate in self.levels:
            if candidate.level == level:
                return candidate
        return None


# kraftwerk's order: the features it had first keep their place (bootstrap records and
# DescribeFeatures follow it), the ones Kafka added since come after, in Kafka's order.
_FEATURE_ORDER = (KRAFT_VERSION, GROUP_VERSION, TRANSACTION_VERSION,
                  ELIGIBLE_LEADER_REPLICAS_VERSION, SHARE_VERSION, STREAMS_VERSION)


def _feature_spec(fact: kafka.KafkaFeature) -> FeatureSpec:
    # Level 0 ("off") stays implicit: it needs nothing and every node supports it.
    levels = tuple(
        FeatureLevel(level.level, _BY_NAME[level.bootstrap_metadata_version].level,
                     MappingProxyType(dict(level.dependencies)))
        for level in fact.levels if level.level > 0
    )
    return FeatureSpec(fact.name, levels, fact.latest_production, fact.latest_testing)


_KAFKA_FEATURES: Mapping[str, kafka.KafkaFeature] = MappingProxyType({f.name: f for f in kafka.KAFKA_FEATURES})

FEATURES: Mapping[str, FeatureSpec] = MappingProxyType(
    {name: _feature_spec(_KAFKA_FEATURES[name]) for name in _FEATURE_ORDER}
)


def default_feature_level(feature: str, mv_level: int) -> int:
    """The level a cluster formatted at `mv_level` gets: the highest level whose
    bootstrap metadata.version is <= `mv_level` (0 if none)."""
    if feature == METADATA_VERSION:
        return mv_level
    spec = FEATURES.get(feature)
    if spec is None:
        raise ValueError(f"unknown feature {feature!r}")
    chosen = 0
    for level in spec.levels:
        if level.bootstrap_mv_level <= mv_level:
            chosen = level.level
    return chosen


def default_feature_levels(mv_level: int) -> dict[str, int]:
    """Every non-metadata.version feature at its default for `mv_level`, in catalog order."""
    return {name: default_feature_level(name, mv_level) for name in FEATURES}


def dependency_error(feature: str, level: int, proposed: Mapping[str, int]) -> str | None:
    """Why `feature` cannot be at `level` given the `proposed` levels of every feature
    (Kafka's `Features.validateVersion` text), or None. Level 0 needs nothing."""
    if level < 1:
        return None
    mv = proposed.get(METADATA_VERSION)
    if mv is None or mv < MINIMUM_BOOTSTRAP_VERSION.level:
        return (
            f"{feature} could not be set to {level} because it depends on "
            f"metadata.version={MINIMUM_BOOTSTRAP_VERSION.level} ({MINIMUM_BOOTSTRAP_VERSION})"
        )
    spec = FEATURES.get(feature)
    feature_level = spec.level(level) if spec is not None else None
    if feature_level is None:
        return None
    for dependency, needed in feature_level.dependencies.items():
        have = proposed.get(dependency)
        if have is None or have < needed:
            return f"{feature} could not be set to {level} because it depends on {dependency} level {needed}"
    return None


def feature_level_error(feature: str, level: int, unstable_enabled: bool) -> str | None:
    """Why `level` names no version of the known `feature` (Kafka's
    `Feature.fromFeatureLevel` text), or None. Level 0 ("off") always exists; a level
    above the latest production one exists only with unstable levels enabled."""
    spec = FEATURES[feature]
    highest = spec.latest_testing if unstable_enabled else spec.latest_production
    if level == 0 or (spec.level(level) is not None and level <= highest):
        return None
    return f"No feature:{feature} with feature level {level}"


def feature_dependencies(feature: str, level: int) -> Mapping[str, int]:
    """The levels of other features that `feature` at `level` needs (empty for level 0
    and for a level the catalog does not know)."""
    spec = FEATURES.get(feature)
    found = spec.level(level) if spec is not None else None
    return found.dependencies if found is not None else MappingProxyType({})


def blocked_dependent(feature: str, proposed: Mapping[str, int]) -> tuple[str, int, int] | None:
    """The first other feature that, at its level in `proposed`, needs `feature` higher
    than `proposed` has it: (that feature, its level, the level of `feature` it needs),
    or None. Kafka checks only the dependencies of the features a request names; what
    lowering a feature does to the features that depend on it is checked with this."""
    have = proposed.get(feature, 0)
    for dependent, level in proposed.items():
        needed = feature_dependencies(dependent, level).get(feature)
        if needed is not None and have < needed:
            return dependent, level, needed
    return None


# Kafka's Feature.PRODUCTION_FEATURES order, which its tools print in (version-mapping).
PRODUCTION_FEATURE_ORDER: tuple[str, ...] = tuple(fact.name for fact in kafka.KAFKA_FEATURES)


def metadata_version_for_release(text: str, unstable_enabled: bool) -> MetadataVersion | None:
    """Kafka's `MetadataVersion.fromVersionString`: a metadata.version name (`3.9-IV0`)
    or a release (`3.9`, `3.9.1`: the release's last production level); only the
    first two dot-separated parts count. None for a name it does not know, or for a
    level that is not production-ready while unstable levels are not enabled."""
    parts = text.split(".")
    key = ".".join(parts[:2]) if len(parts) > 2 else text
    found = _BY_NAME.get(key)
    if found is None:
        releases = [mv for mv in METADATA_VERSIONS if mv.production and mv.release == key]
        found = releases[-1] if releases else None
    if found is None or not (found.production or unstable_enabled):
        return None
    return found


def metadata_versions_between(first: MetadataVersion, last: MetadataVersion) -> tuple[MetadataVersion, ...]:
    """Every metadata.version from `first` to `last`, both included, ascending."""
    return tuple(mv for mv in METADATA_VERSIONS if first.level <= mv.level <= last.level)


def local_supported_features(unstable_enabled: bool) -> NodeFeatures:
    """The ranges this controller's software supports (Kafka's
    `QuorumFeatures.defaultSupportedFeatureMap`): metadata.version from 3.0-IV1,
    other features from 0, up to the latest production level, or the latest
    testing level with unstable.feature.versions.enable."""
    mv_max = LATEST_TESTING if unstable_enabled else LATEST_PRODUCTION
    ranges = {METADATA_VERSION: SupportedRange(MINIMUM_KRAFT_VERSION.level, mv_max.level)}
    for name, spec in FEATURES.items():
        ranges[name] = SupportedRange(0, spec.latest_testing if unstable_enabled else spec.latest_production)
    return MappingProxyType(ranges)


def unsupported_finalized_levels(finalized: Mapping[str, int], supported: NodeFeatures) -> list[str]:
    """Why this node cannot run the finalized levels, one reason per feature (empty: it can).

    KIP-778: a controller whose software does not support a finalized level must not
    go on (it could not read the records written under it)."""
    reasons = []
    for name, level in sorted(finalized.items()):
        if level == 0:
            continue
        supported_range = supported.get(name, DISABLED)
        if not supported_range.contains(level):
            shown = f"{level}"
            if name == METADATA_VERSION:
                found = find_metadata_version(level)
                shown = f"{level} ({found})" if found is not None else shown
            reasons.append(f"{name} is finalized at {shown}, but this node supports {supported_range}")
    return reasons
