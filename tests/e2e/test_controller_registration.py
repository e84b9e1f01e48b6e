"""KIP-919 on real processes: three kraftwerk controllers at the default
metadata.version each register with the active controller, every node's image holds
all three registrations, a restarted controller registers again under a new incarnation
id, and Kafka 4.4's own `kafka-cluster.sh list-endpoints --bootstrap-controller`
(ClusterTool, DescribeCluster with EndpointType CONTROLLER) lists them."""

from __future__ import annotations

import uuid

import pytest
import trio

from cli import metadata_tools as mt
from cli.upgrade_story import LocalCluster, log_events
from interop.kafka_tools import CLUSTER, run_tool, tools_missing  # tests/ is the import root
from protocol.errors import ErrorCode
from server.client import KafkaClient

pytestmark = pytest.mark.e2e

CONTROLLERS = (1, 2, 3)
TIMEOUT_S = 60
SELF_REGISTERED = "controller.self_registered"


def incarnations(cluster: LocalCluster, node_id: int) -> list[uuid.UUID]:
    """The incarnation ids node `node_id` registered itself with, oldest first (its log)."""
    return [uuid.UUID(e["incarnation_id"]) for e in log_events(cluster.spec(node_id).log_path, SELF_REGISTERED)]


def registered_in(cluster: LocalCluster, node_id: int) -> dict[int, uuid.UUID]:
    """{controller id: incarnation} in node `node_id`'s image, read from its directory
    (lock-free and read-only, as `kraftwerk metadata-shell` reads it)."""
    image = mt.load_directory_image(str(cluster.spec(node_id).metadata_dir))
    return {cid: r.incarnation_id for cid, r in image.state.controllers.items()}


def wait_every_image_holds(cluster: LocalCluster, expected: dict[int, uuid.UUID]) -> None:
    cluster.wait_until(f"every controller's image to hold the registrations {expected}",
                       lambda: all(registered_in(cluster, node_id) == expected for node_id in CONTROLLERS))


def latest_incarnations(cluster: LocalCluster) -> dict[int, uuid.UUID]:
    found = {node_id: incarnations(cluster, node_id) for node_id in CONTROLLERS}
    return {node_id: values[-1] for node_id, values in found.items() if values}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("controller_registration"), controllers=len(CONTROLLERS),
                         brokers=0)
    try:
        local.bring_up()
        local.wait_until("every controller to register itself",
                         lambda: len(latest_incarnations(local)) == len(CONTROLLERS))
        yield local
    finally:
        local.stop_all()


async def describe_controllers(cluster: LocalCluster, node_id: int):
    host, port = cluster.address(node_id).rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port), client_id="kraftwerk-e2e") as client:
        return await client.call(60, {"endpoint_type": 2, "include_cluster_authorized_operations": False},
                                 min_version=1)


def test_every_controller_is_registered_in_every_image(cluster):
    expected = latest_incarnations(cluster)
    assert len(set(expected.values())) == len(CONTROLLERS)  # one random incarnation per process
    wait_every_image_holds(cluster, expected)


async def test_describe_cluster_on_any_controller_lists_them_all(cluster):
    with trio.fail_after(TIMEOUT_S):
        for node_id in CONTROLLERS:
            described = await describe_controllers(cluster, node_id)
            assert described.error_code == ErrorCode.NONE, described.error_message
            assert described.endpoint_type == 2 and described.cluster_id == cluster.cluster_id
            assert [(b.broker_id, f"{b.host}:{b.port}", b.rack) for b in described.brokers] == [
                (c, cluster.address(c), None) for c in CONTROLLERS]
            assert described.controller_id in CONTROLLERS


def test_kafkas_cluster_tool_lists_the_registered_controllers(cluster):
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)
    run = run_tool(CLUSTER, "list-endpoints", "--bootstrap-controller", cluster.controller_addresses)
    assert run.returncode == 0, run.describe()
    header, *rows = [line.split() for line in run.lines]
    assert header[0] == "ID" and header[-1] == "ENDPOINT_TYPE", run.describe()
    assert sorted((int(row[0]), f"{row[1]}:{row[2]}", row[-1]) for row in rows) == [
        (c, cluster.address(c), "controller") for c in CONTROLLERS], run.describe()


def test_a_restarted_controller_registers_again_with_a_new_incarnation(cluster):
    before = latest_incarnations(cluster)
    wait_every_image_holds(cluster, before)
    cluster.stop(2)
    cluster.start(2)
    cluster.wait_until("controller 2 to register its new process",
                       lambda: incarnations(cluster, 2)[-1] != before[2])
    after = latest_incarnations(cluster)
    assert after[2] != before[2] and after[1] == before[1] and after[3] == before[3]
    wait_every_image_holds(cluster, after)
