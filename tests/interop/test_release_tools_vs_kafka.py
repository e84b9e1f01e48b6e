"""KIP-1022's tooling, Kafka 4.4.0's FeatureCommand against kraftwerk's, line by line.

`kafka-features.sh version-mapping` and `feature-dependencies` read Kafka's own
catalog and talk to no node (the bootstrap address they demand is never used), so the
comparison needs Java and Kafka's tools only: for every release and metadata.version
name Kafka 4.4.0 knows, and for every feature level, both tools must print the same
lines; for the inputs Kafka refuses, both must refuse with the same text (kraftwerk
prefixes "Error: " as all its commands do, and its list of accepted names starts at
the 3.x levels Kafka 4 dropped: docs/kip-differences.md). `upgrade|downgrade
--release-version` is compared against one kraftwerk controller: both tools send the
same UpdateFeatures, so both print the same results (kraftwerk names a metadata.version
where Kafka prints its level, and prints the failure count on stdout).

Skipped, naming what is missing, where Java or Kafka's tools are not set up (CI=true
turns that skip into a failure, tests/conftest.py)."""

from __future__ import annotations

import re

import pytest

from cli.main import main
from cli.upgrade_story import LocalCluster
from server.controller import features as ft
from server.controller import kafka_feature_catalog as kafka

from .kafka_tools import FEATURES, ToolRun, run_tool, tools_missing

pytestmark = pytest.mark.slow

# Kafka's tool demands a bootstrap address even for these lookups; nothing listens here.
UNUSED_BOOTSTRAP = ("--bootstrap-server", "127.0.0.1:1")
KAFKA_NAMES = tuple(mv.name for mv in kafka.KAFKA_METADATA_VERSIONS)
KAFKA_RELEASES = tuple(dict.fromkeys(mv.release for mv in kafka.KAFKA_METADATA_VERSIONS))
# The names kraftwerk lists before Kafka 4.4.0's first one in "Supported metadata.version are: ...".
KRAFTWERK_ONLY_NAMES = tuple(mv.name for mv in ft.METADATA_VERSIONS if mv.name not in KAFKA_NAMES)


@pytest.fixture(autouse=True)
def kafka_tools():
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)


def kafka_run(*args: str) -> ToolRun:
    run = run_tool(FEATURES, *UNUSED_BOOTSTRAP, *args)
    assert run.returncode is not None, run.describe()
    return run


def ours(capsys, *args: str) -> tuple[int, list[str], str]:
    status = main(["features", *args])
    out, err = capsys.readouterr()
    return status, [line.rstrip() for line in out.splitlines() if line.strip()], err


def kafka_error(run: ToolRun) -> str:
    """What Kafka's tool printed as its refusal: its last line on stderr."""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines, run.describe()
    return lines[-1]


def as_kraftwerk_lists_it(kafka_message: str) -> str:
    first = KAFKA_NAMES[0]
    return kafka_message.replace(f"are: {first}", f"are: {', '.join(KRAFTWERK_ONLY_NAMES + (first,))}")


@pytest.mark.parametrize("release", (None,) + KAFKA_RELEASES + KAFKA_NAMES)
def test_version_mapping_matches_kafka(capsys, release):
    args = ["version-mapping"] + (["--release-version", release] if release is not None else [])
    theirs = kafka_run(*args)
    status, lines, err = ours(capsys, *args)
    if theirs.returncode != 0:
        # A release with no production level yet (4.5): both refuse it.
        assert status == 1, lines
        assert err.strip() == f"Error: {as_kraftwerk_lists_it(kafka_error(theirs))}"
        return
    assert (status, err) == (0, "")
    assert lines == theirs.lines, theirs.describe()


@pytest.mark.parametrize("release", ["foo", "", "9.9-IV9", "3.9-IV9", "21"])
def test_version_mapping_refusals_match_kafka(capsys, release):
    theirs = kafka_run("version-mapping", "--release-version", release)
    assert theirs.returncode == 1, theirs.describe()
    status, lines, err = ours(capsys, "version-mapping", "--release-version", release)
    assert (status, lines) == (1, [])
    assert err.strip() == f"Error: {as_kraftwerk_lists_it(kafka_error(theirs))}"


def every_known_feature_level() -> list[str]:
    items = [f"metadata.version={mv.level}" for mv in kafka.KAFKA_METADATA_VERSIONS]
    for fact in kafka.KAFKA_FEATURES:
        items += [f"{fact.name}={level.level}" for level in fact.levels]
    return items


def test_feature_dependencies_of_every_level_match_kafka(capsys):
    # One run for all of them: the tool goes through its --feature arguments in order.
    args = ["feature-dependencies"]
    for item in every_known_feature_level():
        args += ["--feature", item]
    theirs = kafka_run(*args)
    assert theirs.returncode == 0, theirs.describe()
    status, lines, err = ours(capsys, *args)
    assert (status, err) == (0, "")
    assert lines == theirs.lines
    assert any(line.endswith(" requires:") for line in lines)  # at least one dependency was shown


@pytest.mark.parametrize("item", [
    "eligible.leader.replicas.version=2", "share.version=3", "group.version=-1", "kraft.version=2",
    "no.such.feature=1", "metadata.version=35", "metadata.version=0", "metadata.version",
    "group.version=x", "group.version=70000", " group.version = 1 ",
])
def test_feature_dependencies_refusals_match_kafka(capsys, item):
    # The line for a good feature first: both print it, then stop at the bad one.
    args = ["feature-dependencies", "--feature", "metadata.version=21", "--feature", item]
    theirs = kafka_run(*args)
    status, lines, err = ours(capsys, *args)
    assert status == theirs.returncode, theirs.describe()
    assert lines == theirs.lines, theirs.describe()
    if theirs.returncode != 0:
        assert err.strip() == f"Error: {kafka_error(theirs)}"


# --------------------------------------------------------------------------
# upgrade|downgrade --release-version against a kraftwerk controller
# --------------------------------------------------------------------------

START_MV = "3.7-IV4"
_MV_LEVEL_SHOWN = re.compile(r"(metadata\.version (?:was |can be )?(?:upgraded |downgraded )?to )(\d+)\.")


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)
    local = LocalCluster(tmp_path_factory.mktemp("release-version"), controllers=1, brokers=0,
                         metadata_version=START_MV)
    try:
        local.bring_up()
        yield local.controller_addresses
    finally:
        local.stop_all()


def kafka_result_lines(run: ToolRun) -> list[str]:
    """Kafka's result lines as kraftwerk prints them: a metadata.version by name, and
    the "N out of M operation(s) failed." that Kafka prints on stderr appended."""
    lines = [_MV_LEVEL_SHOWN.sub(lambda m: m.group(1) + ft.metadata_version_from_level(int(m.group(2))).name + ".",
                                 line) for line in run.lines]
    if run.returncode != 0:
        lines.append(kafka_error(run))
    return lines


@pytest.mark.parametrize("args", [
    ("upgrade", "--release-version", "3.8", "--dry-run"),
    # 3.9 implies kraft.version 1: both tools send it, and the controller's Raft layer
    # checks it (KIP-853: the lone static voter's directory id and range are known).
    ("upgrade", "--release-version", "3.9-IV0", "--dry-run"),
    ("downgrade", "--release-version", START_MV, "--dry-run"),
    ("downgrade", "--release-version", "3.6", "--dry-run"),
])
def test_release_version_updates_match_kafka(capsys, controller, args):
    theirs = run_tool(FEATURES, "--bootstrap-controller", controller, *args)
    status = main(["features", *args, "--bootstrap-controller", controller])
    out, _ = capsys.readouterr()
    assert status == (0 if theirs.returncode == 0 else 1), theirs.describe()
    assert out.splitlines() == kafka_result_lines(theirs), theirs.describe()


def test_release_version_upgrade_by_one_tool_and_downgrade_by_the_other(capsys, controller):
    assert main(["features", "upgrade", "--release-version", "3.8", "--bootstrap-controller", controller]) == 0
    assert capsys.readouterr().out.splitlines() == ["metadata.version was upgraded to 3.8-IV0."]
    theirs = run_tool(FEATURES, "--bootstrap-controller", controller, "downgrade", "--release-version", "3.7")
    assert theirs.returncode == 0, theirs.describe()
    assert "metadata.version was downgraded to 19." in theirs.lines
    assert main(["features", "describe", "--bootstrap-controller", controller]) == 0
    described = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Feature: metadata.version")]
    assert described and f"FinalizedVersionLevel: {START_MV}" in described[0]
