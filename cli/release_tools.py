"""KIP-1022 release versions on the command line: what a release implies, what a
feature level needs, and the feature levels a new cluster is formatted with.

Owns:
  kraftwerk features version-mapping [--release-version R]     like kafka-features.sh
  kraftwerk features feature-dependencies --feature NAME=LEVEL  like kafka-features.sh
and the pure rules other commands use: `release_version_updates` (what
`features upgrade|downgrade --release-version R` sends) and `format_feature_levels`
(Kafka's Formatter: the levels `storage format --release-version R --feature ...`
bootstraps, refused with Kafka's texts).

Rules kept here:
- Every fact (names, levels, releases, defaults, dependencies) is read from
  server/controller/features.py, which reads Kafka's generated catalog; nothing here
  restates one.
- Output lines and refusal texts are those of Kafka 4.4.0's FeatureCommand and
  Formatter; a refusal is a `ReleaseToolError` (a ValueError) carrying Kafka's text.
  kraftwerk knows the 3.x levels Kafka 4 dropped (3.0-IV1 … 3.3-IV2), so it accepts
  and lists them where Kafka 4.4 no longer does.
- No I/O besides printing in the two command functions; no network.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator

from server.controller import features as ft
from server.controller.commands import UPGRADE
from server.controller.features import KRAFT_VERSION, METADATA_VERSION, MetadataVersion

EXIT_OK = 0
EXIT_FAILED = 1

# Java's Short.parseShort: an optional sign and ASCII digits, within a short's range.
_SHORT = re.compile(r"[+-]?[0-9]+")
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1

_DYNAMIC_QUORUM_FLAGS = "--standalone, --initial-controllers, or --no-initial-controllers"


class ReleaseToolError(ValueError):
    """A refusal; the message is Kafka's text for the operator."""


def parse_feature_level(item: str) -> tuple[str, int]:
    """`name=level` as Kafka's tools read it (both sides trimmed, the level a short)."""
    name, sep, level_text = item.partition("=")
    if not sep:
        raise ReleaseToolError(f"Can't parse feature=level string {item}: equals sign not found.")
    level_text = level_text.strip()
    level = int(level_text) if _SHORT.fullmatch(level_text) else None
    if level is None or not SHORT_MIN <= level <= SHORT_MAX:
        raise ReleaseToolError(f"Can't parse feature=level string {item}: unable to parse {level_text} as a short.")
    return name.strip(), level


def unknown_release_message(text: str, unstable_enabled: bool,
                            minimum: MetadataVersion = ft.METADATA_VERSIONS[0]) -> str:
    """Kafka's MetadataVersion.fromVersionString refusal, listing what is accepted."""
    last = ft.LATEST_TESTING if unstable_enabled else ft.LATEST_PRODUCTION
    names = ", ".join(mv.name for mv in ft.metadata_versions_between(minimum, last))
    return f"Unknown metadata.version '{text}'. Supported metadata.version are: {names}"


def metadata_version_for_release(text: str, unstable_enabled: bool,
                                 minimum: MetadataVersion = ft.METADATA_VERSIONS[0]) -> MetadataVersion:
    """A release (`3.9`) or metadata.version name (`3.9-IV0`), at least `minimum`."""
    found = ft.metadata_version_for_release(text, unstable_enabled)
    if found is None or found.level < minimum.level:
        raise ReleaseToolError(unknown_release_message(text, unstable_enabled, minimum))
    return found


# --------------------------------------------------------------------------
# version-mapping, feature-dependencies
# --------------------------------------------------------------------------

def version_mapping_lines(release: str | None) -> list[str]:
    """kafka-features.sh version-mapping: metadata.version (as the operator named it)
    and every production feature's default level at that release, in Kafka's order."""
    text = release if release is not None else ft.LATEST_PRODUCTION.name
    mv = metadata_version_for_release(text, unstable_enabled=True)
    lines = [f"{METADATA_VERSION}={mv.level} ({text})"]
    lines += [f"{name}={ft.default_feature_level(name, mv.level)}" for name in ft.PRODUCTION_FEATURE_ORDER]
    return lines


def feature_dependency_lines(items: Iterable[str]) -> Iterator[str]:
    """kafka-features.sh feature-dependencies, feature by feature: the lines for the
    features before a bad one come out, then the bad one raises."""
    for item in items:
        name, level = parse_feature_level(item)
        if name == METADATA_VERSION:
            mv = ft.find_metadata_version(level)
            if mv is None:
                raise ReleaseToolError(f"Unknown metadata.version {level}")
            yield f"{name}={level} ({mv.name}) has no dependencies."
            continue
        if name not in ft.FEATURES:
            raise ReleaseToolError(f"Unknown feature: {name}")
        unknown_level = ft.feature_level_error(name, level, unstable_enabled=True)
        if unknown_level is not None:
            raise ReleaseToolError(unknown_level)
        dependencies = ft.feature_dependencies(name, level)
        if not dependencies:
            yield f"{name}={level} has no dependencies."
            continue
        yield f"{name}={level} requires:"
        for dependency, needed in dependencies.items():
            if dependency == METADATA_VERSION:
                yield f"    {dependency}={needed} ({ft.metadata_version_from_level(needed).name})"
            else:
                yield f"    {dependency}={needed}"


def cmd_version_mapping(args) -> int:
    try:
        lines = version_mapping_lines(args.release_version)
    except ReleaseToolError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for line in lines:
        print(line)
    return EXIT_OK


def cmd_feature_dependencies(args) -> int:
    try:
        for line in feature_dependency_lines(args.feature):
            print(line, flush=True)
    except ReleaseToolError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def add_feature_subcommands(features_sub) -> None:
    """Registers version-mapping and feature-dependencies under `features_sub` (`kraftwerk
    features`, and `kraftwerk storage` as kafka-storage.sh has them too). Both are lookups
    in the catalog: they talk to no node, and accept (and ignore) --bootstrap-server /
    --bootstrap-controller so kafka-features.sh lines carry over."""
    mapping = features_sub.add_parser(
        "version-mapping", help="the level of every feature a release implies (no node is asked)")
    mapping.add_argument("--release-version", metavar="R",
                         help=f"a release (3.9) or metadata.version (3.9-IV0); the minimum is "
                              f"{ft.METADATA_VERSIONS[0]}, the default {ft.LATEST_PRODUCTION}")
    dependencies = features_sub.add_parser(
        "feature-dependencies", help="what a feature level needs (no node is asked)")
    dependencies.add_argument("--feature", action="append", metavar="NAME=LEVEL", required=True,
                              help="repeatable, e.g. eligible.leader.replicas.version=1")
    for parser in (mapping, dependencies):
        parser.add_argument("--bootstrap-server", help=argparse.SUPPRESS)
        parser.add_argument("--bootstrap-controller", help=argparse.SUPPRESS)
    mapping.set_defaults(func=cmd_version_mapping)
    dependencies.set_defaults(func=cmd_feature_dependencies)


# --------------------------------------------------------------------------
# features upgrade|downgrade --release-version
# --------------------------------------------------------------------------

def release_version_updates(release: str, upgrade_type: int) -> dict[str, int]:
    """What Kafka's FeatureCommand sends for `--release-version R`: metadata.version and
    every production feature at its default level for R; an upgrade leaves out the
    features at 0 (nothing to raise them to), a downgrade sends them (it disables them).
    In feature-name order, the order Kafka's tool reports the results in."""
    mv = metadata_version_for_release(release, unstable_enabled=True)
    updates = {METADATA_VERSION: mv.level}
    for name in ft.PRODUCTION_FEATURE_ORDER:
        level = ft.default_feature_level(name, mv.level)
        if upgrade_type != UPGRADE or level > 0:
            updates[name] = level
    return dict(sorted(updates.items()))


# --------------------------------------------------------------------------
# storage format --release-version R --feature NAME=LEVEL
# --------------------------------------------------------------------------

def _not_stable(mv: MetadataVersion, unstable_enabled: bool) -> MetadataVersion:
    if not (mv.production or unstable_enabled):
        raise ReleaseToolError(f"{METADATA_VERSION} {mv} is not yet stable.")
    return mv


def _bootstrap_level(level: int) -> MetadataVersion:
    """A metadata.version given as a level: one a log can start at (FeatureLevelRecord
    exists from 3.3-IV0 on), in Kafka's MetadataVersion.fromFeatureLevel words."""
    found = ft.find_metadata_version(level)
    if found is None or level < ft.MINIMUM_BOOTSTRAP_VERSION.level:
        raise ReleaseToolError(f"No MetadataVersion with feature level {level}. Valid feature levels are from "
                               f"{ft.MINIMUM_BOOTSTRAP_VERSION.level} to {ft.LATEST_TESTING.level}.")
    return found


def _release_to_format(text: str, unstable_enabled: bool) -> MetadataVersion:
    if _SHORT.fullmatch(text.strip()):
        # kraftwerk also takes the level itself (`-r 21`), as `features upgrade --metadata` does.
        return _not_stable(_bootstrap_level(int(text)), unstable_enabled)
    return metadata_version_for_release(text, unstable_enabled, minimum=ft.MINIMUM_BOOTSTRAP_VERSION)


def _kraft_version_to_format(requested: int | None, dynamic_quorum: bool) -> int:
    """Kafka's Formatter: kraft.version 1 exactly when the quorum's voters live in the
    log (a dynamic quorum), whatever the release implies."""
    if requested is None:
        return 1 if dynamic_quorum else 0
    if requested == 0 and dynamic_quorum:
        raise ReleaseToolError(
            f"Cannot set {KRAFT_VERSION} to 0 if controller.quorum.voters is empty and one of the flags "
            f"{_DYNAMIC_QUORUM_FLAGS} is used. For dynamic controllers support, try removing the --feature flag "
            f"for {KRAFT_VERSION}.")
    if requested != 0 and not dynamic_quorum:
        raise ReleaseToolError(
            f"Cannot set {KRAFT_VERSION} to {requested} unless controller.quorum.voters is empty and one of the "
            f"flags {_DYNAMIC_QUORUM_FLAGS} is used. For dynamic controllers support, try using one of "
            f"{_DYNAMIC_QUORUM_FLAGS} and removing controller.quorum.voters.")
    return requested


def format_feature_levels(release: str | None, feature_items: Iterable[str] | None, *,
                          unstable_enabled: bool, dynamic_quorum: bool = False) -> tuple[int, dict[str, int]]:
    """Kafka's Formatter: the metadata.version level and the level of every other
    feature a new cluster starts with. The release is `release`, or
    `--feature metadata.version=L`, or the latest production level (the latest of all
    with unstable levels enabled); every feature not named gets the release's default;
    each level must exist and have what it depends on. Checks run in Kafka's order, so
    the first refusal is the one Kafka gives."""
    requested: dict[str, int] = {}
    for item in feature_items or ():
        name, level = parse_feature_level(item)
        if name in requested:
            # Kafka's Formatter keeps the last; two levels for one feature at format
            # time are a typo more often than an intent, so we refuse as its
            # FeatureCommand does.
            raise ReleaseToolError(f"Feature {name} was specified more than once.")
        requested[name] = level

    if METADATA_VERSION in requested:
        if release is not None:
            raise ReleaseToolError(
                f"Use --release-version instead of --feature {METADATA_VERSION}=X to avoid ambiguity.")
        mv = _not_stable(_bootstrap_level(requested[METADATA_VERSION]), unstable_enabled)
    elif release is not None:
        mv = _release_to_format(release, unstable_enabled)
    else:
        mv = ft.LATEST_TESTING if unstable_enabled else ft.LATEST_PRODUCTION

    for name in sorted(requested):
        if name != METADATA_VERSION and name not in ft.FEATURES:
            raise ReleaseToolError(f"Unsupported feature: {name}. Supported features are: "
                                   f"{', '.join(sorted(ft.FEATURES))}")
    levels = {name: level for name, level in requested.items() if name != METADATA_VERSION}
    for name in ft.PRODUCTION_FEATURE_ORDER:
        if name == KRAFT_VERSION:
            levels[name] = _kraft_version_to_format(requested.get(name), dynamic_quorum)
        elif name not in levels:
            levels[name] = ft.default_feature_level(name, mv.level)
    proposed = {METADATA_VERSION: mv.level, **levels}
    for name in sorted(levels):
        reason = (ft.feature_level_error(name, levels[name], unstable_enabled)
                  or ft.dependency_error(name, levels[name], proposed))
        if reason is not None:
            raise ReleaseToolError(reason)
    return mv.level, {name: levels[name] for name in ft.PRODUCTION_FEATURE_ORDER}
