"""kraftwerk's own command line, run as subprocesses against a real controller.

Exit codes: 0 success, 1 the operation failed or was refused, 2 bad usage.
Output lines follow kafka-features.sh / kafka-metadata-quorum.sh.
"""

from __future__ import annotations

import signal
import socket

import pytest

from .helpers import format_directory, new_cluster_id, run_cli, start_controller

pytestmark = pytest.mark.e2e


def features(controller, *argv: str):
    return run_cli("features", *argv, "--bootstrap-server", controller.address)


def describe_lines(controller) -> dict[str, str]:
    result = features(controller, "describe")
    assert result.returncode == 0, result.stderr
    return {line.split("\t")[0]: line for line in result.stdout.splitlines()}


def test_features_describe(controller):
    # Epoch 2: offset 0 is the quorum leader's LeaderChange record, the bootstrap record is 1,
    # the controller's own registration (ControllerRegistration) is 2.
    lines = describe_lines(controller)
    assert lines["Feature: metadata.version"] == (
        "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 4.4-IV2\t"
        "FinalizedVersionLevel: 3.7-IV4\tEpoch: 2")
    assert lines["Feature: group.version"] == (
        "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
        "FinalizedVersionLevel: -\tEpoch: 2")
    assert lines["Feature: share.version"] == (
        "Feature: share.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
        "FinalizedVersionLevel: -\tEpoch: 2")
    assert set(lines) == {"Feature: group.version", "Feature: kraft.version", "Feature: metadata.version",
                          "Feature: transaction.version", "Feature: eligible.leader.replicas.version",
                          "Feature: share.version", "Feature: streams.version"}


def test_upgrade_dry_run_then_upgrade_then_lossless_downgrade(controller):
    dry = features(controller, "upgrade", "--metadata", "3.9-IV0", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "metadata.version can be upgraded to 3.9-IV0.\n")
    assert "FinalizedVersionLevel: 3.7-IV4\tEpoch: 2" in describe_lines(controller)["Feature: metadata.version"]

    done = features(controller, "upgrade", "--metadata", "3.9-IV0")
    assert (done.returncode, done.stdout) == (0, "metadata.version was upgraded to 3.9-IV0.\n")
    line = describe_lines(controller)["Feature: metadata.version"]
    assert "FinalizedVersionLevel: 3.9-IV0\t" in line
    assert not line.endswith("Epoch: 2")

    down = features(controller, "downgrade", "--metadata", "3.8-IV0")
    assert (down.returncode, down.stdout) == (0, "metadata.version was downgraded to 3.8-IV0.\n")
    assert "FinalizedVersionLevel: 3.8-IV0\t" in describe_lines(controller)["Feature: metadata.version"]


def test_lossy_downgrade_is_refused_safe_and_shown_then_done_unsafe(controller):
    safe = features(controller, "downgrade", "--metadata", "3.7-IV1")
    assert safe.returncode == 1
    assert safe.stdout.splitlines() == [
        "Could not downgrade metadata.version to 3.7-IV1. The update failed for all features since the "
        "following feature had an error: Unsupported metadata.version downgrade from 19 to 16. Refusing to "
        "perform the requested downgrade because it might delete metadata information.",
        "1 out of 1 operation(s) failed.",
    ]
    dry = features(controller, "downgrade", "--metadata", "3.7-IV1", "--unsafe", "--dry-run")
    assert dry.returncode == 0
    assert dry.stdout.splitlines() == [
        "metadata.version can be downgraded to 3.7-IV1.",
        "UNSAFE downgrade of metadata.version from 3.7-IV4 to 3.7-IV1 drops: no metadata this cluster holds.",
    ]
    assert "FinalizedVersionLevel: 3.7-IV4\tEpoch: 2" in describe_lines(controller)["Feature: metadata.version"]
    # Not a terminal (captured output): no confirmation is asked.
    done = features(controller, "downgrade", "--metadata", "3.7-IV1", "--unsafe")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "metadata.version was downgraded to 3.7-IV1."
    assert "FinalizedVersionLevel: 3.7-IV1\t" in describe_lines(controller)["Feature: metadata.version"]


def test_upgrade_past_the_supported_maximum_is_refused(controller):
    result = features(controller, "upgrade", "--metadata", "4.5-IV0")
    assert result.returncode == 1
    assert "Could not upgrade metadata.version to 4.5-IV0." in result.stdout
    assert "only supports versions 1-33" in result.stdout


def test_disable_with_dry_run_then_for_real(controller):
    assert features(controller, "upgrade", "--feature", "group.version=1").stdout == \
        "group.version was upgraded to 1.\n"
    assert "FinalizedVersionLevel: 1\t" in describe_lines(controller)["Feature: group.version"]

    dry = features(controller, "disable", "--feature", "group.version", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "group.version can be disabled.\n")
    assert "FinalizedVersionLevel: 1\t" in describe_lines(controller)["Feature: group.version"]

    done = features(controller, "disable", "--feature", "group.version")
    assert (done.returncode, done.stdout) == (0, "group.version was disabled.\n")
    assert "FinalizedVersionLevel: -\t" in describe_lines(controller)["Feature: group.version"]


def test_bad_usage_exits_2(controller):
    result = run_cli("features", "upgrade", "--bootstrap-server", controller.address, "--no-such-flag")
    assert result.returncode == 2


def test_unknown_metadata_version_name_exits_1(controller):
    result = features(controller, "upgrade", "--metadata", "9.9-IV9")
    assert result.returncode == 1
    assert "unknown metadata.version '9.9-IV9'" in result.stderr


def test_metadata_quorum_describe(controller):
    result = run_cli("metadata-quorum", "describe", "--status", "--bootstrap-server", controller.address)
    assert result.returncode == 0, result.stderr
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    fields = {key: value.strip() for key, value in fields.items()}
    assert fields["ClusterId"] == controller.cluster_id
    assert fields["LeaderId"] == "1"
    assert fields["LeaderEpoch"] == "1"
    assert int(fields["HighWatermark"]) >= 1
    # Kafka's layout: a static voter has no directory id; its endpoint is the controller listener.
    assert fields["CurrentVoters"] == f'[{{"id": 1, "endpoints": ["CONTROLLER://{controller.address}"]}}]'
    assert fields["CurrentObservers"] == "[]"
    assert fields["MaxFollowerLag"] == "0" and fields["MaxFollowerLagTimeMs"] == "0"

    replication = run_cli("metadata-quorum", "describe", "--replication", "--bootstrap-server", controller.address)
    assert replication.returncode == 0, replication.stderr
    header, *rows = replication.stdout.splitlines()
    assert [cell.strip() for cell in header.split("\t") if cell.strip()] == [
        "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    node_id, directory_id, log_end_offset, lag, _, _, status = (cell.strip() for cell in rows[0].split("\t")[:7])
    assert (node_id, directory_id, lag, status) == ("1", "AAAAAAAAAAAAAAAAAAAAAA", "0", "Leader")
    assert int(log_end_offset) >= int(fields["HighWatermark"])


def test_unreachable_controller_exits_1_with_advice():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_cli("features", "describe", "--bootstrap-server", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"could not reach 127.0.0.1:{port}" in result.stderr
    assert "kraftwerk controller" in result.stderr


def test_storage_format_refuses_an_already_formatted_directory(tmp_path):
    log_dir = tmp_path / "metadata"
    cluster_id = new_cluster_id()
    first = run_cli("storage", "format", "--cluster-id", cluster_id, "--metadata-version", "3.7-IV4",
                    "--log-dir", str(log_dir))
    assert first.returncode == 0, first.stderr
    # Kafka's two lines: the bootstrap records, then the directory.
    assert first.stdout.startswith("Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion("
                                   "FeatureLevelRecord(name='metadata.version', featureLevel=19) at version 0)")
    assert first.stdout.splitlines()[1:] == [f"Formatting metadata directory {log_dir} with metadata.version 3.7-IV4."]
    before = sorted((p.name, p.read_bytes()) for p in log_dir.iterdir() if p.is_file())

    again = run_cli("storage", "format", "--cluster-id", new_cluster_id(), "--log-dir", str(log_dir))
    assert again.returncode == 1
    assert f"{log_dir} is already formatted (cluster {cluster_id}" in again.stderr
    assert "--ignore-formatted" in again.stderr
    assert sorted((p.name, p.read_bytes()) for p in log_dir.iterdir() if p.is_file()) == before

    ignored = run_cli("storage", "format", "--cluster-id", new_cluster_id(), "--log-dir", str(log_dir),
                      "--ignore-formatted")
    assert ignored.returncode == 0
    assert "already formatted" in ignored.stdout


def test_storage_format_rejects_a_bad_cluster_id(tmp_path):
    result = run_cli("storage", "format", "--cluster-id", "not-a-uuid", "--log-dir", str(tmp_path / "m"))
    assert result.returncode == 1
    assert "is not a Kafka uuid" in result.stderr
    assert not (tmp_path / "m").exists()


def test_controller_refuses_an_unformatted_directory(tmp_path):
    result = run_cli("controller", "--log-dir", str(tmp_path / "empty"), "--listener", "127.0.0.1:0",
                     "--port-file", str(tmp_path / "port"), timeout_s=30)
    assert result.returncode == 1
    assert "is not formatted; run `kraftwerk storage format" in result.stderr
    assert "kraftwerk storage random-uuid" in result.stderr
    assert not (tmp_path / "port").exists()


def test_controller_refuses_a_directory_of_another_node(tmp_path):
    log_dir = tmp_path / "metadata"
    format_directory(log_dir)
    result = run_cli("controller", "--log-dir", str(log_dir), "--listener", "127.0.0.1:0",
                     "--override", "node.id=2", timeout_s=30)
    assert result.returncode == 1
    assert "belongs to node 1, but node.id is 2" in result.stderr


def test_controller_refuses_a_first_start_without_bootstrap_records(tmp_path):
    log_dir = tmp_path / "metadata"
    format_directory(log_dir)
    (log_dir / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").unlink()
    result = run_cli("controller", "--log-dir", str(log_dir), "--listener", "127.0.0.1:0",
                     "--port-file", str(tmp_path / "port"), timeout_s=30)
    assert result.returncode == 1
    assert "has no bootstrap.checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "port").exists()


def test_controller_refuses_a_corrupt_bootstrap_checkpoint(tmp_path):
    log_dir = tmp_path / "metadata"
    format_directory(log_dir)
    checkpoint = log_dir / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    data = bytearray(checkpoint.read_bytes())
    data[-1] ^= 0xFF  # breaks the batch CRC
    checkpoint.write_bytes(bytes(data))
    result = run_cli("controller", "--log-dir", str(log_dir), "--listener", "127.0.0.1:0", timeout_s=30)
    assert result.returncode == 1
    assert "00000000000000000000-0000000000.checkpoint is corrupt" in result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_stops_the_controller_cleanly(tmp_path):
    log_dir = tmp_path / "metadata"
    cluster_id = format_directory(log_dir)
    controller = start_controller(log_dir, cluster_id)
    try:
        controller.wait_for_event("server.started", port=controller.port)
    finally:
        status = controller.stop(signal.SIGTERM)
    assert status == 0, controller.log_text()


def test_second_controller_on_a_directory_in_use_exits_1_without_a_traceback(controller):
    result = run_cli("controller", "--log-dir", str(controller.log_dir), "--listener", "127.0.0.1:0", timeout_s=30)
    assert result.returncode == 1
    assert "is locked by another process" in result.stderr
    # An operator error, not a crash: one "Error: ..." line, like every other refusal.
    assert "Traceback" not in result.stderr, result.stderr
    controller.assert_alive()
    assert describe_lines(controller)["Feature: metadata.version"].endswith("Epoch: 2")


def test_a_controller_that_cannot_run_the_finalized_metadata_version_refuses_to_start(tmp_path):
    # Formatted at an unstable level (4.5-IV0 = 34) by a node that allows unstable levels,
    # then started as software that does not: KIP-778 says it must stop, clearly.
    log_dir = tmp_path / "metadata"
    cluster_id = new_cluster_id()
    result = run_cli("storage", "format", "--cluster-id", cluster_id, "--metadata-version", "4.5-IV0",
                     "--log-dir", str(log_dir), "--override", "unstable.feature.versions.enable=true", timeout_s=30)
    assert result.returncode == 0, result.stderr
    result = run_cli("controller", "--log-dir", str(log_dir), "--listener", "127.0.0.1:0",
                     "--port-file", str(tmp_path / "port"), timeout_s=30)
    assert result.returncode == 1
    assert "metadata.version is finalized at 34 (4.5-IV0), but this node supports 1-33" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "port").exists()
    # The same directory starts on software that supports the level.
    controller = start_controller(log_dir, cluster_id, overrides=("unstable.feature.versions.enable=true",))
    try:
        assert controller.process.poll() is None
    finally:
        controller.stop()
