"""The Prometheus endpoint (server/metrics_http.py): the sans-I/O responder and head
reader, a served registry scraped over a real socket, and the endpoints of a running
controller, KRaft broker agent and ZooKeeper-mode broker agent (in-process, real
sockets; the last against a real ZooKeeper)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from server.broker.lifecycle import BrokerState
from server.nodes.broker import BrokerNode
from server.config import Listener, ServerConfig, VoterAddress
from server.controller.commands import bootstrap_records
from cli.local_cluster import free_port_run
from server.metrics_http import MAX_REQUEST_HEAD_BYTES, answer, complete_head, serve_metrics
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

from node_harness import MV_3_7_IV4, running_node

WAIT_S = 20


def split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


def samples(body: bytes) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of an exposition-format body."""
    found = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def registry_with_gauge() -> tuple[CollectorRegistry, Gauge]:
    registry = CollectorRegistry()
    gauge = Gauge("kraftwerk_test_value", "a test gauge", registry=registry)
    return registry, gauge


# -- answer(): the sans-I/O responder --------------------------------------------------

def test_get_metrics_answers_200_in_the_exposition_format_after_refresh():
    registry, gauge = registry_with_gauge()
    calls = []

    def refresh():
        calls.append(1)
        gauge.set(42)

    status, headers, body = split(answer(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", registry, refresh))
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"].startswith("text/plain; version=")
    assert headers["content-type"].endswith("charset=utf-8")
    assert int(headers["content-length"]) == len(body)
    assert headers["connection"] == "close"
    assert calls == [1]  # refreshed before rendering, so the value is current
    assert samples(body)[("kraftwerk_test_value", ())] == 42
    assert b"# HELP kraftwerk_test_value a test gauge" in body


def test_root_and_query_strings_serve_the_metrics_too():
    registry, gauge = registry_with_gauge()
    gauge.set(7)
    for target in (b"/", b"/metrics?name[]=kraftwerk_test_value"):
        status, _, body = split(answer(b"GET " + target + b" HTTP/1.0\r\n\r\n", registry, None))
        assert status == "HTTP/1.1 200 OK"
        assert samples(body)[("kraftwerk_test_value", ())] == 7


def test_unknown_path_is_404_and_does_not_refresh():
    registry, _ = registry_with_gauge()
    calls = []
    status, headers, body = split(answer(b"GET /other HTTP/1.1\r\n\r\n", registry, lambda: calls.append(1)))
    assert status == "HTTP/1.1 404 Not Found"
    assert int(headers["content-length"]) == len(body)
    assert calls == []


@pytest.mark.parametrize("method", [b"POST", b"PUT", b"DELETE", b"HEAD"])
def test_other_methods_are_405(method):
    registry, _ = registry_with_gauge()
    status, _, _ = split(answer(method + b" /metrics HTTP/1.1\r\n\r\n", registry, None))
    assert status == "HTTP/1.1 405 Method Not Allowed"


@pytest.mark.parametrize("head", [b"\r\n\r\n", b"GET /metrics\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
                                  b"GET /metrics SPDY/3\r\n\r\n", b"\x00\xff\xfe garbage\r\n\r\n"])
def test_malformed_request_lines_are_400(head):
    registry, _ = registry_with_gauge()
    status, _, _ = split(answer(head, registry, None))
    assert status == "HTTP/1.1 400 Bad Request"


def test_a_failing_refresh_is_a_500_not_an_exception():
    registry, _ = registry_with_gauge()

    def refresh():
        raise RuntimeError("state not ready")

    status, _, body = split(answer(b"GET /metrics HTTP/1.1\r\n\r\n", registry, refresh))
    assert status == "HTTP/1.1 500 Internal Server Error"
    assert b"kraftwerk_test_value" not in body


# -- complete_head(): the bounded head reader -----------------------------------------

def test_head_is_complete_only_with_the_blank_line():
    assert complete_head(b"") is None
    assert complete_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n") is None
    assert complete_head(b"GET / HTTP/1.1\r\n\r\nextra") == b"GET / HTTP/1.1\r\n\r\n"


def test_oversized_heads_are_refused():
    with pytest.raises(ValueError):
        complete_head(b"x" * (MAX_REQUEST_HEAD_BYTES + 1))
    # Complete, but longer than the bound: refused as well, not parsed.
    with pytest.raises(ValueError):
        complete_head(b"GET /metrics HTTP/1.1\r\nX: " + b"y" * MAX_REQUEST_HEAD_BYTES + b"\r\n\r\n")
    exactly = b"GET / HTTP/1.1\r\nX: " + b"y" * (MAX_REQUEST_HEAD_BYTES - 23) + b"\r\n\r\n"
    assert len(exactly) == MAX_REQUEST_HEAD_BYTES
    assert complete_head(exactly) == exactly


# -- serve_metrics over a real socket ----------------------------------------------------

async def receive_all(stream: trio.SocketStream) -> bytes:
    received = b""
    while True:  # bounded by the caller's fail_after and the server's Connection: close
        chunk = await stream.receive_some(65536)
        if not chunk:
            return received
        received += chunk


async def scrape(port: int, request: bytes = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") -> bytes:
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            return await receive_all(stream)


async def test_a_served_registry_is_scraped_over_tcp():
    registry, gauge = registry_with_gauge()
    refreshes = []

    def refresh():
        refreshes.append(1)
        gauge.set(len(refreshes))

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_metrics, registry, "127.0.0.1", 0, refresh)
        assert port > 0
        # A scraper that connects and says nothing does not hold up the others.
        with trio.fail_after(WAIT_S):
            silent = await trio.open_tcp_stream("127.0.0.1", port)
        first = split(await scrape(port))
        second = split(await scrape(port))
        assert first[0] == second[0] == "HTTP/1.1 200 OK"
        assert samples(first[2])[("kraftwerk_test_value", ())] == 1
        assert samples(second[2])[("kraftwerk_test_value", ())] == 2
        assert split(await scrape(port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 404 Not Found"
        assert split(await scrape(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 405 Method Not Allowed"
        assert split(await scrape(port, b"nonsense\r\n\r\n"))[0] == "HTTP/1.1 400 Bad Request"
        # An oversized head gets no answer: the server closes the connection.
        assert await scrape(port, b"GET /metrics HTTP/1.1\r\nX: " + b"y" * (MAX_REQUEST_HEAD_BYTES + 10)) == b""
        # The head may arrive in pieces.
        with trio.fail_after(WAIT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                for piece in (b"GET /met", b"rics HTTP/1.1\r\n", b"Host: a\r\n", b"\r\n"):
                    await stream.send_all(piece)
                assert split(await receive_all(stream))[0] == "HTTP/1.1 200 OK"
        await silent.aclose()
        nursery.cancel_scope.cancel()
    assert len(refreshes) == 3


# -- the nodes' endpoints ----------------------------------------------------------------

async def test_a_controller_serves_its_metrics_when_a_port_is_configured(tmp_path):
    async with running_node(tmp_path, metrics_port=0) as node:
        assert node.metrics_port is not None and node.metrics_port > 0
        status, _, body = split(await scrape(node.metrics_port))
    assert status == "HTTP/1.1 200 OK"
    found = samples(body)
    assert found[("kafka_controller_features", (("feature", "metadata.version"), ("level", str(MV_3_7_IV4))))] == 1
    assert found[("kafka_server_metadata_type", ())] == 3
    assert found[("kafka_controller_active_controller_count", ())] == 1
    assert found[("kafka_controller_migration_state", ())] == 6  # no migration: KRaft
    # The process's own: its CPU so far, and the cyclic collector's collections per generation.
    assert found[("process_cpu_seconds_total", ())] > 0
    assert {labels for name, labels in found if name == "python_gc_collections_total"} == {
        (("generation", str(generation)),) for generation in range(3)}


async def test_no_metrics_port_serves_no_metrics(tmp_path):
    async with running_node(tmp_path) as node:
        assert node.metrics_port is None


def _format(directory, cluster_id: str, node_id: int, level: int | None) -> None:
    directory.mkdir(parents=True)
    if level is not None:
        write_bootstrap_checkpoint(directory, bootstrap_records(level))
    write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                                    directory_id=random_uuid_string()))


async def test_a_kraft_broker_reports_metadata_type_3_features_and_its_state(tmp_path):
    cluster_id = random_uuid_string()
    voters = (VoterAddress(1, "127.0.0.1", free_port_run(1)),)
    _format(tmp_path / "controller", cluster_id, 1, MV_3_7_IV4)
    _format(tmp_path / "broker", cluster_id, 101, None)
    controller = ControllerNode(ServerConfig(
        node_id=1, listener=Listener("CONTROLLER", "127.0.0.1", voters[0].port),
        metadata_log_dir=tmp_path / "controller", quorum_voters=voters))
    broker_config = ServerConfig(node_id=101, listener=Listener("PLAINTEXT", "127.0.0.1", 0),
                                 metadata_log_dir=tmp_path / "broker", quorum_voters=voters,
                                 process_roles=("broker",), broker_heartbeat_interval_ms=100)
    broker = BrokerNode(replace(broker_config, metrics_port=0))
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            await nursery.start(controller.run)
            await nursery.start(broker.run)
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            # The broker's image catches up with what the controller committed (the unfencing).
            await broker.replayer.wait_replayed(controller.state.last_applied_offset + 1)
        status, _, body = split(await scrape(broker.metrics_port))
        nursery.cancel_scope.cancel()
    assert status == "HTTP/1.1 200 OK"
    found = samples(body)
    assert found[("kafka_server_metadata_type", ())] == 3
    assert found[("kafka_controller_features", (("feature", "metadata.version"), ("level", str(MV_3_7_IV4))))] == 1
    assert found[("kafka_server_broker_state", ())] == 3  # RUNNING
    assert found[("kraftwerk_broker_registered", ())] == 1
    assert found[("kraftwerk_broker_fenced", ())] == 0
    assert found[("kraftwerk_broker_epoch", ())] == broker.lifecycle.broker_epoch >= 0
    assert found[("kraftwerk_registered_brokers", (("fenced", "false"),))] == 1
    assert found[("kraftwerk_raft_leader_id", ())] == 1
    # What only an active controller reports is not on a broker's endpoint at all.
    names = {name for name, _ in found}
    assert not names & {"kafka_controller_migration_state", "kafka_controller_zookeeper_write_behind_lag",
                        "kafka_controller_active_controller_count"}


def _update_metadata(controller_id: int, controller_epoch: int, kraft: bool, live: dict[int, int]) -> dict:
    return {
        "controller_id": controller_id, "is_kraft_controller": kraft, "type": 1,
        "controller_epoch": controller_epoch, "broker_epoch": -1, "topic_states": [],
        "live_brokers": [{"id": b, "endpoints": [{"port": port, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}
                         for b, port in live.items()],
    }


async def test_a_zookeeper_broker_reports_zookeeper_then_dual_then_zookeeper_again(zk_hosts):
    """KIP-866's MetadataType on a ZooKeeper-mode broker: 1 before any controller spoke,
    2 once a KRaft controller sends UpdateMetadata (a migration), 1 again when a
    ZooKeeper controller takes over (a rollback)."""
    from server.client import KafkaClient
    from server.zk.seed import SeedSpec, seed_zookeeper
    from server.nodes.zkbroker import MetadataType, ZkBrokerNode

    seed_zookeeper(zk_hosts, SeedSpec(cluster_id=random_uuid_string(), broker_ids=(1, 2), topics=1,
                                      partitions_per_topic=1, replication_factor=1,
                                      features={"metadata.version": MV_3_7_IV4}))
    node = ZkBrokerNode(ServerConfig(node_id=1, listener=Listener("PLAINTEXT", "127.0.0.1", 0),
                                     process_roles=("broker",), zookeeper_connect=zk_hosts, migration_enabled=True,
                                     metrics_port=0))
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            await nursery.start(node.run)
        assert node.metrics_port is not None and node.metrics_port > 0
        first = samples(split(await scrape(node.metrics_port))[2])
        with trio.fail_after(WAIT_S):
            client = await KafkaClient.connect("127.0.0.1", node.port)
        async with client:
            kraft = _update_metadata(3000, 5, True, {1: node.port, 2: 19092})
            assert (await client.request(6, 8, kraft)).error_code == 0
            dual = samples(split(await scrape(node.metrics_port))[2])
            rolled_back = _update_metadata(2, 6, False, {1: node.port, 2: 19092})
            assert (await client.request(6, 8, rolled_back)).error_code == 0
            after = samples(split(await scrape(node.metrics_port))[2])
        node.request_stop()

    assert first[("kafka_server_metadata_type", ())] == MetadataType.ZOOKEEPER == 1
    assert first[("kraftwerk_zkbroker_registered", ())] == 1
    assert first[("kraftwerk_broker_epoch", ())] == node.broker_epoch > 0
    assert first[("kraftwerk_zkbroker_controller_id", ())] == -1
    assert first[("kafka_controller_features", (("feature", "metadata.version"), ("level", str(MV_3_7_IV4))))] == 1
    assert first[("kraftwerk_finalized_metadata_version", ())] == MV_3_7_IV4

    assert dual[("kafka_server_metadata_type", ())] == MetadataType.DUAL == 2
    assert dual[("kraftwerk_zkbroker_kraft_controller", ())] == 1
    assert dual[("kraftwerk_zkbroker_controller_id", ())] == 3000
    assert dual[("kraftwerk_zkbroker_live_brokers", ())] == 2

    assert after[("kafka_server_metadata_type", ())] == 1
    assert after[("kraftwerk_zkbroker_kraft_controller", ())] == 0
    assert after[("kraftwerk_zkbroker_controller_id", ())] == 2
    # A ZooKeeper-mode broker has no Raft log and is not a controller: none of that is exposed.
    names = {name for name, _ in after}
    assert not names & {"kafka_controller_migration_state", "kafka_controller_zookeeper_write_behind_lag",
                        "kraftwerk_raft_epoch", "kraftwerk_raft_high_watermark"}
