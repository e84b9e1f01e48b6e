"""Golden frames captured from real clients decode exactly.

The fixtures (tests/protocol/golden/, see its README) are request frames that
kafka-python, confluent-kafka (librdkafka) and kcat sent: their opening
ApiVersions request (to a one-shot listener), and the requests of a scripted
admin session against a real kraftwerk controller behind a recording proxy,
together with the controller's reply to each.

Requests: decoded with our request header and body declarations, every field
of the version is compared with the value written down here from the capture,
and re-encoding gives the same bytes.

Responses: decoded with our response header and body declarations and
re-encoded byte-exactly; the fields that do not change between captures are
asserted (the cluster id and advertised port come from the fixture's .meta,
timestamps are only checked for plausibility); and kafka-python's own codec
reads the same bytes to the same values.
"""

from __future__ import annotations

import json
import struct
import uuid
from io import BytesIO
from pathlib import Path

import pytest

from protocol import header
from protocol.registry import API_MESSAGES
from strategies import plain, project

GOLDEN = Path(__file__).parent / "golden"

# fixture -> (api key, api version, correlation id, client id, body): the body
# lists every field present in that version, as the client sent it.
REQUESTS = {
    # Opening frames (first-frame mode).
    "kafka-python": (18, 4, 1, "kraftwerk-golden", {
        "client_software_name": "kafka-python", "client_software_version": "3.0.12"}),
    "confluent-kafka": (18, 3, 1, "kraftwerk-golden", {
        "client_software_name": "confluent-kafka-python", "client_software_version": "2.16.1-rdkafka-2.16.0"}),
    "kcat": (18, 3, 1, "rdkafka", {
        "client_software_name": "librdkafka", "client_software_version": "2.0.2"}),
    # kafka-python admin session (proxy mode). Its bootstrap Metadata asks
    # for no topics ([], not null) and, unlike librdkafka, allows auto-creation.
    "kafka-python.metadata-v12": (3, 12, 2, "kraftwerk-golden", {
        "topics": [], "allow_auto_topic_creation": True, "include_topic_authorized_operations": False}),
    "kafka-python.describecluster-v1": (60, 1, 2, "kraftwerk-golden", {
        "include_cluster_authorized_operations": True, "endpoint_type": 1}),
    "kafka-python.updatefeatures-v2": (57, 2, 5, "kraftwerk-golden", {
        "timeout_ms": 60000,
        "feature_updates": [{"feature": "metadata.version", "max_version_level": 20, "upgrade_type": 1}],
        "validate_only": True}),
    "kafka-python.describequorum-v2": (55, 2, 6, "kraftwerk-golden", {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}),
    # confluent-kafka (librdkafka 2.16.0): brokers-only Metadata first, then
    # all topics (null); describe_cluster goes through Metadata too. The
    # all-topics frame carries 3 bytes after the body, see TRAILING.
    "confluent-kafka.metadata-v12": (3, 12, 2, "kraftwerk-golden", {
        "topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
    "confluent-kafka.metadata-v12.2": (3, 12, 3, "kraftwerk-golden", {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
    # kcat (librdkafka 2.0.2) caps Metadata at v4 (not flexible: header v1).
    "kcat.metadata-v4": (3, 4, 2, "rdkafka", {"topics": [], "allow_auto_topic_creation": False}),
    "kcat.metadata-v4.2": (3, 4, 3, "rdkafka", {"topics": None, "allow_auto_topic_creation": True}),
}


# fixture -> bytes the client sent after a complete body. Kafka's request
# parser does not check for leftovers, so such a frame works against Kafka
# (and kraftwerk, which answered it) and is read as the fields above. Where
# they come from is librdkafka's business; the bytes are consistent with a
# 4-byte placeholder for the null topics count of which only the 1-byte
# compact form was kept, which would make `01` the intended
# AllowAutoTopicCreation (true, as kcat's all-topics request has it).
TRAILING = {"confluent-kafka.metadata-v12.2": bytes.fromhex("010000")}


def load(name: str) -> bytes:
    return bytes.fromhex((GOLDEN / f"{name}.hex").read_text().strip())


def meta(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.meta").read_text())


def split_request(frame: bytes, trailing: bytes = b""):
    api_key, api_version = header.peek_api(frame)
    request, _ = API_MESSAGES[api_key]
    header_version = header.request_header_version(request, api_version)
    stream = BytesIO(frame)
    hdr = header.decode_request_header(stream, header_version)
    header_end = stream.tell()
    body = request.decode(api_version, stream)
    assert stream.read() == trailing, "bytes after the request body"
    return request, header_version, hdr, header_end, body


def test_every_fixture_has_expectations():
    # A re-capture that adds a frame must also add its expected values here.
    on_disk = {p.name.removesuffix(".hex") for p in GOLDEN.glob("*.hex") if not p.name.endswith(".response.hex")}
    assert on_disk == set(REQUESTS)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_golden_request_decodes_to_known_values(name):
    frame = load(name)
    api_key, api_version, correlation_id, client_id, expected_body = REQUESTS[name]
    assert header.peek_api(frame) == (api_key, api_version)
    trailing = TRAILING.get(name, b"")
    request, header_version, hdr, header_end, body = split_request(frame, trailing)
    assert header_version == (2 if request.is_flexible(api_version) else 1)
    assert plain(hdr) == {"request_api_key": api_key, "request_api_version": api_version,
                          "correlation_id": correlation_id, "client_id": client_id}
    assert project(request, request.fields, api_version, body) == expected_body
    # Byte-exact re-encoding of both parts.
    assert header.REQUEST_HEADER.encode(header_version, hdr) == frame[:header_end]
    assert request.encode(api_version, body) + trailing == frame[header_end:]


def test_kcat_metadata_v4_uses_request_header_v1():
    # The only non-flexible frame in the set: a regression in the header rule
    # would otherwise only show up as a misparse of the client id.
    _, header_version, *_ = split_request(load("kcat.metadata-v4"))
    assert header_version == 1


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_golden_metadata_matches_fixture(name):
    # Each fixture documents the client that produced it, and proxy-mode
    # fixtures name the API and version their bytes carry.
    info = meta(name)
    assert info["client"].startswith(name.split(".")[0].split("-")[0])
    if "api_key" in info:
        assert (info["api_key"], info["api_version"]) == REQUESTS[name][:2]


# -- responses -------------------------------------------------------------

RESPONSES = sorted(p.name.removesuffix(".response.hex") for p in GOLDEN.glob("*.response.hex"))


def load_response(name: str):
    """(request declaration, api version, response declaration, header version, frame)."""
    api_key, api_version = header.peek_api(load(name))
    request, response = API_MESSAGES[api_key]
    frame = bytes.fromhex((GOLDEN / f"{name}.response.hex").read_text().strip())
    return request, api_version, response, header.response_header_version(request, api_version), frame


def decode_response(name: str):
    request, api_version, response, header_version, frame = load_response(name)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    header_bytes = 4 if header_version == 0 else 5
    if header_version == 1:
        assert frame[4] == 0, "response header carries no tagged fields"
    stream = BytesIO(frame[header_bytes:])
    body = response.decode(api_version, stream)
    assert stream.read() == b"", "trailing bytes after the response body"
    return correlation_id, project(response, response.fields, api_version, body), body


def test_responses_exist_for_the_proxy_captures():
    assert set(RESPONSES) == {name for name in REQUESTS if "." in name}


@pytest.mark.parametrize("name", RESPONSES)
def test_golden_response_reencodes_and_answers_its_request(name):
    request, api_version, response, header_version, frame = load_response(name)
    correlation_id, _, body = decode_response(name)
    assert correlation_id == REQUESTS[name][2]
    assert header.encode_response_header(correlation_id, header_version) + response.encode(api_version, body) == frame


def kafka_python_shape(value):
    """Our decoded value as kafka-python presents it: the authorized-operations
    int32 becomes its bitfield (INT32_MIN, "not included", as None) and the
    all-zero UUID None (see test_kafka_python_differential.py)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("cluster_authorized_operations", "topic_authorized_operations"):
                bits = {i for i in range(32) if (item & 0xFFFFFFFF) >> i & 1}
                out["authorized_operations"] = None if bits == {31} else bits
            else:
                out[key] = kafka_python_shape(item)
        return out
    if isinstance(value, list):
        return [kafka_python_shape(item) for item in value]
    if isinstance(value, uuid.UUID) and value.int == 0:
        return None
    return value


@pytest.mark.parametrize("name", RESPONSES)
def test_kafka_python_decodes_golden_response_to_the_same_values(name):
    pytest.importorskip("kafka.protocol")
    from kafka.protocol.admin.cluster import (
        DescribeClusterResponse,
        DescribeQuorumResponse,
        UpdateFeaturesResponse,
    )
    from kafka.protocol.metadata.metadata import MetadataResponse

    theirs = {3: MetadataResponse, 55: DescribeQuorumResponse, 57: UpdateFeaturesResponse,
              60: DescribeClusterResponse}
    request, api_version, _, header_version, frame = load_response(name)
    _, ours, _ = decode_response(name)
    decoded = theirs[request.api_key].decode(frame[4 if header_version == 0 else 5:], version=api_version)
    assert decoded.to_dict(json=False) == kafka_python_shape(ours)


def broker(node_key: str, name: str) -> dict:
    return {node_key: 1, "host": "127.0.0.1", "port": meta(name)["advertised_port"], "rack": None}


@pytest.mark.parametrize("name", [n for n in RESPONSES if ".metadata-" in n])
def test_metadata_responses_advertise_the_proxy(name):
    _, body, _ = decode_response(name)
    # The controller advertises advertised.listeners (the proxy), not its own port.
    assert body["brokers"] == [broker("node_id", name)]
    assert body["cluster_id"] == meta(name)["cluster_id"]
    assert body["controller_id"] == 1
    assert body["throttle_time_ms"] == 0
    assert body["topics"] == []  # a bare controller hosts no topics
    # Metadata v8-10 carry ClusterAuthorizedOperations; v4 and v12 do not.
    assert "cluster_authorized_operations" not in body


def test_describe_cluster_response():
    name = "kafka-python.describecluster-v1"
    _, body, _ = decode_response(name)
    assert body["error_code"] == 0
    assert body["error_message"] is None
    assert body["throttle_time_ms"] == 0
    assert body["endpoint_type"] == 1  # brokers: the endpoint type the golden request names
    assert body["cluster_id"] == meta(name)["cluster_id"]
    assert body["controller_id"] == 1
    assert body["brokers"] == [broker("broker_id", name)]
    # cluster_authorized_operations deliberately not pinned: the request asked
    # for it and the capture holds INT32_MIN ("not included"); see README.


def test_update_features_validate_only_response():
    # v2 has no per-feature Results: success is the top-level error code alone.
    _, body, _ = decode_response("kafka-python.updatefeatures-v2")
    assert body == {"throttle_time_ms": 0, "error_code": 0, "error_message": None}


def test_describe_quorum_response():
    name = "kafka-python.describequorum-v2"
    _, body, _ = decode_response(name)
    assert body["error_code"] == 0
    assert body["error_message"] is None
    (topic,) = body["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (partition,) = topic["partitions"]
    voters = partition.pop("current_voters")
    assert partition == {"partition_index": 0, "error_code": 0, "error_message": None, "leader_id": 1,
                         "leader_epoch": 1, "high_watermark": 1, "observers": []}
    (voter,) = voters
    fetched_ms, caught_up_ms = voter.pop("last_fetch_timestamp"), voter.pop("last_caught_up_timestamp")
    assert voter == {"replica_id": 1, "replica_directory_id": uuid.UUID(int=0), "log_end_offset": 1}
    # Wall-clock milliseconds of the capture: after 2020, and caught up no later than fetched.
    assert 1_577_836_800_000 < caught_up_ms <= fetched_ms
    assert body["nodes"] == [{"node_id": 1, "listeners": [
        {"name": "CONTROLLER", "host": "127.0.0.1", "port": meta(name)["advertised_port"]}]}]
