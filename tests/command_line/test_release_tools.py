"""KIP-1022 on kraftwerk's command line: `features version-mapping`,
`features feature-dependencies`, `features upgrade|downgrade --release-version` and
`storage format --release-version R --feature ...`, with Kafka 4.4.0's output lines
and refusal texts (tests/interop/test_release_tools_vs_kafka.py compares them with
Kafka's own tool line by line where Java is available).

Everything here runs in this process: none of these commands needs a node (the
upgrade tests stop at the refusals that come before any connection)."""

from __future__ import annotations

import pytest

from cli import release_tools as rt
from cli.main import main
from server.controller import features as ft
from server.storage.bootstrap import read_bootstrap
from server.storage.meta_properties import random_uuid_string, read_meta_properties
from .in_process import run_main

ELR = "eligible.leader.replicas.version"
KRAFTWERK_ONLY = ("3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2")


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def names_between(first: str, last: str) -> str:
    versions = ft.metadata_versions_between(ft.metadata_version_from_name(first), ft.metadata_version_from_name(last))
    return ", ".join(mv.name for mv in versions)


# --------------------------------------------------------------------------
# features version-mapping
# --------------------------------------------------------------------------

def test_version_mapping_defaults_to_the_latest_production_release(capsys):
    status, lines, err = run(capsys, "features", "version-mapping")
    assert (status, err) == (0, "")
    assert lines == ["metadata.version=33 (4.4-IV2)", "kraft.version=1", "transaction.version=2", "group.version=1",
                     f"{ELR}=1", "share.version=2", "streams.version=1"]


@pytest.mark.parametrize(("release", "first_line", "levels"), [
    # The metadata.version line shows the release as the operator wrote it.
    ("3.9", "metadata.version=21 (3.9)", [1, 0, 0, 0, 0, 0]),
    ("3.9-IV0", "metadata.version=21 (3.9-IV0)", [1, 0, 0, 0, 0, 0]),
    ("3.7", "metadata.version=19 (3.7)", [0, 0, 0, 0, 0, 0]),
    ("4.0", "metadata.version=25 (4.0)", [1, 2, 1, 0, 0, 0]),
    ("4.1-IV0", "metadata.version=26 (4.1-IV0)", [1, 2, 1, 1, 0, 0]),
    ("4.2", "metadata.version=29 (4.2)", [1, 2, 1, 1, 1, 1]),
    ("4.5-IV0", "metadata.version=34 (4.5-IV0)", [1, 2, 1, 1, 2, 1]),  # unstable levels are shown too
    ("3.0-IV1", "metadata.version=1 (3.0-IV1)", [0, 0, 0, 0, 0, 0]),  # kraftwerk still runs 3.0
])
def test_version_mapping_of_a_release(capsys, release, first_line, levels):
    status, lines, _ = run(capsys, "features", "version-mapping", "--release-version", release)
    assert status == 0
    assert lines == [first_line] + [f"{name}={level}" for name, level in zip(ft.PRODUCTION_FEATURE_ORDER, levels,
                                                                              strict=True)]


@pytest.mark.parametrize("release", ["4.5", "foo", "3.9-IV9"])
def test_version_mapping_of_an_unknown_release(capsys, release):
    status, lines, err = run(capsys, "features", "version-mapping", "--release-version", release)
    assert (status, lines) == (1, [])
    assert err == (f"Error: Unknown metadata.version '{release}'. Supported metadata.version are: "
                   f"{names_between('3.0-IV1', '4.5-IV0')}\n")


def test_version_mapping_ignores_a_bootstrap_address(capsys):
    # kafka-features.sh needs one even for lookups; scripts that pass it keep working.
    status, lines, _ = run(capsys, "features", "version-mapping", "--bootstrap-server", "127.0.0.1:1",
                           "--release-version", "3.8")
    assert status == 0
    assert lines[0] == "metadata.version=20 (3.8)"


# --------------------------------------------------------------------------
# features feature-dependencies
# --------------------------------------------------------------------------

@pytest.mark.parametrize(("feature", "expected"), [
    ("metadata.version=21", ["metadata.version=21 (3.9-IV0) has no dependencies."]),
    ("metadata.version=34", ["metadata.version=34 (4.5-IV0) has no dependencies."]),
    ("metadata.version=5", ["metadata.version=5 (3.3-IV1) has no dependencies."]),
    (f"{ELR}=1", [f"{ELR}=1 requires:", "    metadata.version=23 (4.0-IV1)"]),
    (f"{ELR}=0", [f"{ELR}=0 has no dependencies."]),
    ("transaction.version=2", ["transaction.version=2 has no dependencies."]),
    (" group.version = 1 ", ["group.version=1 has no dependencies."]),
    ("kraft.version=1", ["kraft.version=1 has no dependencies."]),
])
def test_feature_dependencies(capsys, feature, expected):
    status, lines, err = run(capsys, "features", "feature-dependencies", "--feature", feature)
    assert (status, lines, err) == (0, expected, "")


@pytest.mark.parametrize("argv", [
    ("version-mapping",), ("version-mapping", "--release-version", "3.9"),
    ("version-mapping", "--release-version", "foo"),
    ("feature-dependencies", "--feature", f"{ELR}=1"), ("feature-dependencies", "--feature", "foo=1"),
])
def test_storage_has_the_same_lookups(capsys, argv):
    # kafka-storage.sh prints what kafka-features.sh prints for both (checked on 4.4.0's
    # StorageTool and FeatureCommand); the features form is compared with Kafka's tool in
    # tests/interop/test_release_tools_vs_kafka.py.
    assert run(capsys, "storage", *argv) == run(capsys, "features", *argv)


@pytest.mark.parametrize(("feature", "error"), [
    (f"{ELR}=2", f"No feature:{ELR} with feature level 2"),
    ("group.version=-1", "No feature:group.version with feature level -1"),
    ("foo=1", "Unknown feature: foo"),
    ("metadata.version=35", "Unknown metadata.version 35"),
    ("metadata.version=0", "Unknown metadata.version 0"),
    ("metadata.version", "Can't parse feature=level string metadata.version: equals sign not found."),
    ("group.version=x", "Can't parse feature=level string group.version=x: unable to parse x as a short."),
    ("kraft.version=70000", "Can't parse feature=level string kraft.version=70000: unable to parse 70000 as a "
                            "short."),
])
def test_feature_dependencies_refusals(capsys, feature, error):
    status, lines, err = run(capsys, "features", "feature-dependencies", "--feature", feature)
    assert (status, lines, err) == (1, [], f"Error: {error}\n")


def test_feature_dependencies_prints_the_features_before_a_bad_one(capsys):
    status, lines, err = run(capsys, "features", "feature-dependencies", "--feature", "metadata.version=21",
                             "--feature", f"{ELR}=1", "--feature", "foo=1", "--feature", "group.version=1")
    assert status == 1
    assert lines == ["metadata.version=21 (3.9-IV0) has no dependencies.", f"{ELR}=1 requires:",
                     "    metadata.version=23 (4.0-IV1)"]
    assert err == "Error: Unknown feature: foo\n"


def test_feature_dependencies_needs_a_feature(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["features", "feature-dependencies"])
    assert exited.value.code == 2
    assert "--feature" in capsys.readouterr().err


# --------------------------------------------------------------------------
# features upgrade|downgrade --release-version
# --------------------------------------------------------------------------

def test_release_version_updates_for_an_upgrade_leave_out_the_zeros():
    assert rt.release_version_updates("3.8", rt.UPGRADE) == {"metadata.version": 20}
    assert rt.release_version_updates("3.9", rt.UPGRADE) == {"kraft.version": 1, "metadata.version": 21}
    assert list(rt.release_version_updates("4.4", rt.UPGRADE).items()) == [
        (ELR, 1), ("group.version", 1), ("kraft.version", 1), ("metadata.version", 33), ("share.version", 2),
        ("streams.version", 1), ("transaction.version", 2)]


def test_release_version_updates_for_a_downgrade_send_every_feature():
    assert list(rt.release_version_updates("3.9-IV0", 2).items()) == [
        (ELR, 0), ("group.version", 0), ("kraft.version", 1), ("metadata.version", 21), ("share.version", 0),
        ("streams.version", 0), ("transaction.version", 0)]


def test_release_version_updates_of_an_unknown_release():
    with pytest.raises(rt.ReleaseToolError, match=r"^Unknown metadata.version '4.5'\. Supported metadata.version "
                                                  r"are: 3\.0-IV1, .*, 4\.5-IV0$"):
        rt.release_version_updates("4.5", rt.UPGRADE)


@pytest.mark.parametrize("operation", ["upgrade", "downgrade"])
@pytest.mark.parametrize("other", [("--metadata", "3.9-IV0"), ("--feature", "group.version=1")])
def test_release_version_with_other_feature_flags_is_refused(capsys, operation, other):
    status, lines, err = run(capsys, "features", operation, "--bootstrap-server", "127.0.0.1:1",
                             "--release-version", "3.9", *other)
    assert (status, lines) == (1, [])
    assert err == "Error: Can not specify `release-version` with other feature flags.\n"


def test_upgrade_to_an_unknown_release_is_refused_before_any_connection(capsys):
    status, _, err = run(capsys, "features", "upgrade", "--bootstrap-server", "127.0.0.1:1", "--release-version",
                         "foo")
    assert status == 1
    assert err.startswith("Error: Unknown metadata.version 'foo'. Supported metadata.version are: 3.0-IV1, ")


# --------------------------------------------------------------------------
# storage format --release-version R --feature NAME=LEVEL
# --------------------------------------------------------------------------

@pytest.fixture
def fmt(tmp_path, capsys):
    """Runs `kraftwerk storage format` into a fresh directory in this process; gives
    (exit status, stdout lines, stderr, the bootstrap records' feature levels or None)."""
    counter = iter(range(1000))

    def format_with(*argv: str):
        directory = tmp_path / f"metadata-{next(counter)}"
        status, out, err = run_main(capsys, ["storage", "format", "--cluster-id", random_uuid_string(), "--log-dir",
                                             str(directory), "--override", "log.level=warning", *argv])
        levels = None
        bootstrap = read_bootstrap(directory)
        if bootstrap is not None:
            levels = {r.data["name"]: r.data["feature_level"] for r in bootstrap.records if "feature_level" in r.data}
        if status != 0:
            # A refusal formats nothing: no meta.properties, no bootstrap records.
            assert levels is None and (not directory.exists() or read_meta_properties(directory) is None)
        return status, out.splitlines(), err, levels

    return format_with


def test_format_at_a_release_bootstraps_the_features_it_implies(fmt):
    status, lines, err, levels = fmt("--release-version", "4.0")
    assert status == 0, err
    assert lines[-1].endswith("with metadata.version 4.0-IV3.")
    # kraft.version is the raft layer's (a static quorum stays at 0); zeros are not written.
    assert levels == {"metadata.version": 25, "group.version": 1, "transaction.version": 2}


def test_format_with_a_release_name_or_number(fmt):
    assert fmt("--release-version", "3.9")[3] == {"metadata.version": 21}
    assert fmt("-r", "3.9-IV0")[3] == {"metadata.version": 21}
    assert fmt("--metadata-version", "21")[3] == {"metadata.version": 21}
    assert fmt("--feature", "metadata.version=21")[3] == {"metadata.version": 21}


def test_format_without_a_release_takes_the_latest_production_level(fmt):
    _, _, _, levels = fmt()
    assert levels["metadata.version"] == ft.LATEST_PRODUCTION.level
    _, _, _, levels = fmt("--override", "unstable.feature.versions.enable=true")
    assert levels["metadata.version"] == ft.LATEST_TESTING.level


def test_format_with_a_feature_level_its_dependency_allows(fmt):
    status, _, err, levels = fmt("--release-version", "4.1", "--feature", f"{ELR}=1", "--feature", "group.version=0")
    assert status == 0, err
    assert levels == {"metadata.version": 27, ELR: 1, "transaction.version": 2}


def test_format_with_a_feature_level_set_back_to_zero(fmt):
    status, _, err, levels = fmt("--release-version", "4.0", "--feature", "transaction.version=0", "--feature",
                                 "group.version=0")
    assert status == 0, err
    assert levels == {"metadata.version": 25}


@pytest.mark.parametrize(("argv", "error"), [
    (("--release-version", "3.9-IV0", "--feature", f"{ELR}=1"),
     f"{ELR} could not be set to 1 because it depends on metadata.version level 23"),
    (("--release-version", "3.9", "--feature", "metadata.version=21"),
     "Use --release-version instead of --feature metadata.version=X to avoid ambiguity."),
    (("--feature", "foo.version=1"),
     "Unsupported feature: foo.version. Supported features are: eligible.leader.replicas.version, group.version, "
     "kraft.version, share.version, streams.version, transaction.version"),
    (("--feature", "group.version=5"), "No feature:group.version with feature level 5"),
    (("--feature", "share.version=-1"), "No feature:share.version with feature level -1"),
    (("--feature", "group.version"), "Can't parse feature=level string group.version: equals sign not found."),
    (("--feature", "group.version=x"), "Can't parse feature=level string group.version=x: unable to parse x as a "
                                       "short."),
    (("--feature", "kraft.version=1"),
     "Cannot set kraft.version to 1 unless controller.quorum.voters is empty and one of the flags --standalone, "
     "--initial-controllers, or --no-initial-controllers is used. For dynamic controllers support, try using one "
     "of --standalone, --initial-controllers, or --no-initial-controllers and removing controller.quorum.voters."),
    (("--feature", "metadata.version=34"), "metadata.version 4.5-IV0 is not yet stable."),
    (("-r", "34"), "metadata.version 4.5-IV0 is not yet stable."),
    (("--feature", "metadata.version=3"), "No MetadataVersion with feature level 3. Valid feature levels are "
                                          "from 4 to 34."),
    (("--release-version", "4.5-IV0"),
     f"Unknown metadata.version '4.5-IV0'. Supported metadata.version are: {names_between('3.3-IV0', '4.4-IV2')}"),
    (("--release-version", "3.2"),
     f"Unknown metadata.version '3.2'. Supported metadata.version are: {names_between('3.3-IV0', '4.4-IV2')}"),
    (("--feature", "group.version=1", "--feature", "group.version=0"),
     "Feature group.version was specified more than once."),
])
def test_format_refusals_are_kafkas_and_write_nothing(fmt, argv, error):
    status, lines, err, levels = fmt(*argv)
    assert (status, lines, levels) == (1, [], None)
    assert err == f"Error: {error}\n"


def test_format_with_unstable_levels_enabled_accepts_them(fmt):
    status, _, err, levels = fmt("--override", "unstable.feature.versions.enable=true", "--release-version",
                                 "4.5-IV0")
    assert status == 0, err
    assert levels["metadata.version"] == 34


def test_format_checks_every_feature_in_kafkas_order():
    # Unknown names come first (sorted), then kraft.version, then levels and
    # dependencies in name order: the first refusal is the one Kafka's Formatter gives.
    with pytest.raises(rt.ReleaseToolError, match="^Unsupported feature: a.feature"):
        rt.format_feature_levels("3.9", ["kraft.version=1", "z.feature=1", "a.feature=1"], unstable_enabled=False)
    with pytest.raises(rt.ReleaseToolError, match="^Cannot set kraft.version to 1 "):
        rt.format_feature_levels("3.9", [f"{ELR}=1", "kraft.version=1"], unstable_enabled=False)
    with pytest.raises(rt.ReleaseToolError, match=f"^{ELR} could not be set to 1 "):
        rt.format_feature_levels("3.9", [f"{ELR}=1", "share.version=9"], unstable_enabled=False)


def test_format_levels_with_a_dynamic_quorum():
    # What a dynamic quorum (KIP-853's --standalone and friends) will get: kraft.version 1.
    assert rt.format_feature_levels("3.9", None, unstable_enabled=False, dynamic_quorum=True)[1]["kraft.version"] == 1
    with pytest.raises(rt.ReleaseToolError, match="^Cannot set kraft.version to 0 if controller.quorum.voters is "
                                                  "empty"):
        rt.format_feature_levels("3.9", ["kraft.version=0"], unstable_enabled=False, dynamic_quorum=True)
