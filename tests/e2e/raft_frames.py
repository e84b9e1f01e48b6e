"""KRaft request bodies built by hand, as a peer (or an attacker) on the network would.

Owns: the five KRaft request bodies (Vote v1, BeginQuorumEpoch v1,
EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1) as plain dicts keyed by the
snake_case field names of protocol/apis/<api>.py, sending one of them to a
controller and reading its answer, the cluster id as any client learns it
(DescribeCluster), and a node's Prometheus samples.

Rules kept here:
- The bodies do not come from server/raft/messages.py: a test that built its
  frames with the server's own builders would share their mistakes. Only the
  wire versions are taken from the server (they are what its peers send).
- Every body is complete and valid for its version; a test makes it hostile by
  overriding single fields, so each frame differs from a real peer's in the one
  way the test names.
- Every call is one request on a fresh connection, bounded by a socket timeout;
  `open_request` leaves the connection to the caller (who closes it).
"""

from __future__ import annotations

import socket
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cli.migration_story import metrics_port_from_log
from server.raft.messages import WIRE_VERSIONS, ApiKey

from .helpers import encode_request, read_response
from .quorum_helpers import SOCKET_TIMEOUT_S, call

METADATA_TOPIC = "__cluster_metadata"
# Fetch v13+ names the metadata topic by its fixed id (Kafka's Uuid.METADATA_TOPIC_ID).
METADATA_TOPIC_ID = uuid.UUID(int=1)
DESCRIBE_CLUSTER = 60
SCRAPE_TIMEOUT_S = 5.0

Body = dict[str, Any]


def send(address: str, api_key: ApiKey, body: Body):
    """One KRaft request at the version controllers use among themselves; the decoded answer."""
    return call(address, int(api_key), WIRE_VERSIONS[api_key], body)


def open_request(address: str, api_key: ApiKey, body: Body, correlation_id: int = 1) -> socket.socket:
    """Sends one KRaft request on a fresh connection and returns the connection unread,
    for requests that must be in flight together; `read_answer` reads the answer."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    sock.settimeout(SOCKET_TIMEOUT_S)
    sock.sendall(encode_request(int(api_key), WIRE_VERSIONS[api_key], correlation_id, body,
                                client_id="kraftwerk-hostile-e2e"))
    return sock


def read_answer(sock: socket.socket, api_key: ApiKey, correlation_id: int = 1):
    """The decoded answer on a connection from `open_request` (bounded by its socket timeout)."""
    got, body = read_response(sock, int(api_key), WIRE_VERSIONS[api_key])
    assert got == correlation_id, (got, correlation_id)
    return body


def cluster_id_of(address: str) -> str:
    """The cluster id as any client can learn it: DescribeCluster v0 (no credentials needed)."""
    body = call(address, DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
    assert body.error_code == 0, body
    return body.cluster_id


def vote(cluster_id: str | None, voter_id: int, candidate_id: int, candidate_epoch: int,
         last_offset_epoch: int, last_offset: int, *, topic: str = METADATA_TOPIC, partition: int = 0) -> Body:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter_id,
        "topics": [{"topic_name": topic, "partitions": [{
            "partition_index": partition,
            "candidate_epoch": candidate_epoch,
            "candidate_id": candidate_id,
            "last_offset_epoch": last_offset_epoch,
            "last_offset": last_offset,
        }]}],
    }


def begin_quorum_epoch(cluster_id: str | None, voter_id: int, leader_id: int, leader_epoch: int, *,
                       topic: str = METADATA_TOPIC, partition: int = 0) -> Body:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter_id,
        "topics": [{"topic_name": topic, "partitions": [{
            "partition_index": partition, "leader_id": leader_id, "leader_epoch": leader_epoch,
        }]}],
    }


def end_quorum_epoch(cluster_id: str | None, leader_id: int, leader_epoch: int, successors: tuple[int, ...] = (),
                     *, topic: str = METADATA_TOPIC, partition: int = 0) -> Body:
    return {
        "cluster_id": cluster_id,
        "topics": [{"topic_name": topic, "partitions": [{
            "partition_index": partition, "leader_id": leader_id, "leader_epoch": leader_epoch,
            "preferred_candidates": [{"candidate_id": node} for node in successors],
        }]}],
    }


def fetch(cluster_id: str | None, replica_id: int, current_leader_epoch: int, fetch_offset: int,
          last_fetched_epoch: int, *, topic_id: uuid.UUID = METADATA_TOPIC_ID, partition: int = 0,
          max_bytes: int = 64 * 1024, max_wait_ms: int = 0) -> Body:
    """Fetch v17: the replica id travels in ReplicaState. With max_wait_ms 0 the answer is
    immediate; more lets the leader park it (KRaft's long poll) when there is nothing new."""
    return {
        "cluster_id": cluster_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait_ms": max_wait_ms,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition": partition,
            "current_leader_epoch": current_leader_epoch,
            "fetch_offset": fetch_offset,
            "last_fetched_epoch": last_fetched_epoch,
            "log_start_offset": -1,
            "partition_max_bytes": max_bytes,
        }]}],
    }


def fetch_snapshot(cluster_id: str | None, replica_id: int, current_leader_epoch: int, snapshot_end_offset: int,
                   snapshot_epoch: int, position: int, *, topic: str = METADATA_TOPIC, partition: int = 0) -> Body:
    return {
        "cluster_id": cluster_id,
        "replica_id": replica_id,
        "max_bytes": 64 * 1024,
        "topics": [{"name": topic, "partitions": [{
            "partition": partition,
            "current_leader_epoch": current_leader_epoch,
            "snapshot_id": {"end_offset": snapshot_end_offset, "epoch": snapshot_epoch},
            "position": position,
        }]}],
    }


def only_partition(api_key: ApiKey, response):
    """The single `__cluster_metadata` partition of a KRaft response (asserted, not assumed)."""
    if api_key == ApiKey.FETCH:
        topics = response.responses
        assert len(topics) == 1 and topics[0].topic_id == METADATA_TOPIC_ID, response
    else:
        topics = response.topics
        name_key = "name" if api_key == ApiKey.FETCH_SNAPSHOT else "topic_name"
        assert len(topics) == 1 and getattr(topics[0], name_key) == METADATA_TOPIC, response
    assert len(topics[0].partitions) == 1, response
    return topics[0].partitions[0]


def scrape(log_path: Path) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from the Prometheus endpoint of the node whose
    log is `log_path` (started with `kraftwerk.metrics.port`; the port is in its log)."""
    port = metrics_port_from_log(log_path)
    assert port is not None, f"no metrics.serving event in {log_path}"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=SCRAPE_TIMEOUT_S) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}
