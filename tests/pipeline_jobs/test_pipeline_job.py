"""The fleet job end to end: a fake fleet with a corrupt segment, and a fleet written by
real controller and broker processes, checked against what the controllers report."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from pipeline.fake_fleet import FleetSpec, write_fleet
from pipeline.jobs import run
from server.controller.features import metadata_version_from_level
from cli.local_cluster import run_cli
from cli.upgrade_story import LocalCluster

pytestmark = pytest.mark.e2e


def table(result, name: str) -> list[dict]:
    return pq.read_table(str(result.tables[name])).to_pylist()


def quiet(_line: str) -> None:
    pass


def test_a_corrupt_segment_is_reported_and_every_cluster_is_still_complete(spark, tmp_path):
    fleet = tmp_path / "fleet"
    summary = write_fleet(fleet, FleetSpec(clusters=3, records_per_cluster=1500, segment_bytes=32 * 1024))
    # Damage one controller's copy of cluster 1's first segment: a byte of its last
    # batch's records (covered by the batch CRC).
    node_dir = sorted(p for p in (fleet / summary.clusters[1].name).iterdir() if p.is_dir())[0]
    segment = sorted((node_dir / "__cluster_metadata-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) - 10] ^= 0xFF
    segment.write_bytes(bytes(data))

    result = run(fleet, tmp_path / "out", progress=quiet, spark=spark)
    errors = table(result, "errors")
    assert len(errors) == 1 and errors[0]["cluster"] == summary.clusters[1].name
    assert str(segment.relative_to(fleet)) in str(errors[0])
    readiness = {row["cluster"]: row for row in table(result, "upgrade_readiness")}
    for expected in summary.clusters:
        row = readiness[expected.name]
        # The other copies fill in what the damaged one lost: every cluster is complete.
        assert row["metadata_version_level"] == expected.finalized_levels["metadata.version"]
        assert row["supported_mv_level"] == expected.readiness.max_level
        assert sorted(b["node_id"] for b in row["blockers"] if b["role"] == "broker") == \
            sorted(expected.readiness.blockers)
        audit = [a for a in table(result, "features_audit") if a["cluster"] == expected.name]
        assert [(a["offset"], a["feature"], a["new_level"]) for a in audit
                if a["direction"] != "bootstrap"] == [(c.offset, c.feature, c.to_level)
                                                      for c in expected.feature_changes]
    assert (tmp_path / "out" / "report.html").read_text().count("cluster-000") >= 3


def finalized_metadata_version(address: str) -> str:
    described = run_cli("features", "describe", "--bootstrap-server", address)
    assert described.returncode == 0, described.stderr
    line = next(line for line in described.stdout.splitlines() if line.startswith("Feature: metadata.version"))
    return line.split("FinalizedVersionLevel: ")[1].split("\t")[0]


def test_the_job_reads_what_real_controllers_wrote(spark, tmp_path):
    fleet = tmp_path / "fleet"
    reported = {}
    # Cluster "alpha": upgraded online, then downgraded UNSAFE (lossy) by the operator.
    alpha = LocalCluster(fleet / "alpha", controllers=1, brokers=1, release="3.7", metadata_version="3.6-IV2")
    # Cluster "beta": a 3.6 broker holds back a cluster whose other nodes run 3.7.
    beta = LocalCluster(fleet / "beta", controllers=1, brokers=2, release="3.7", metadata_version="3.6-IV2")
    beta.releases[101] = "3.6"
    try:
        for cluster in (alpha, beta):
            cluster.bring_up()
        controller = alpha.address(1)
        for argv in (["upgrade", "--metadata", "3.7-IV2"], ["downgrade", "--metadata", "3.6-IV2", "--unsafe"]):
            done = run_cli("features", *argv, "--bootstrap-server", controller)
            assert done.returncode == 0, done.stdout + done.stderr
        reported["alpha"] = finalized_metadata_version(controller)
        refused = run_cli("features", "upgrade", "--metadata", "3.7-IV0", "--bootstrap-server", beta.address(1))
        assert refused.returncode == 1 and "Broker 101" in refused.stdout
        reported["beta"] = finalized_metadata_version(beta.address(1))
    finally:
        alpha.stop_all()
        beta.stop_all()

    result = run(fleet, tmp_path / "out", progress=quiet, spark=spark)
    assert table(result, "errors") == []
    readiness = {row["cluster"]: row for row in table(result, "upgrade_readiness")}
    for name, version in reported.items():
        assert readiness[name]["metadata_version"] == version == "3.6-IV2"
    assert [(b["node_id"], b["release"]) for b in readiness["beta"]["blockers"]] == [(101, "3.6")]
    assert "blocked by broker 101 (release 3.6)" in readiness["beta"]["verdict"]
    assert readiness["alpha"]["blockers"] == []
    audit = sorted((a for a in table(result, "features_audit") if a["cluster"] == "alpha"),
                   key=lambda a: a["offset"])
    assert [(a["new_version"], a["direction"], a["lossy"]) for a in audit] == [
        ("3.6-IV2", "bootstrap", False), ("3.7-IV2", "upgrade", False), ("3.6-IV2", "downgrade", True)]
    assert str(metadata_version_from_level(readiness["alpha"]["supported_mv_level"])) == "3.7-IV4"
