"""Differential test: kraftwerk's codec against kafka-python 3.0.12's codec.

kafka-python carries its own copy of Kafka's JSON specs and its own codec, so
agreement on random values is independent evidence that both encode the
wire format Kafka defines. For every API and version BOTH implement:
- ours -> theirs: a Hypothesis value encoded by us decodes in kafka-python
  (`Cls.decode(bytes, version=v)`) to the same field values;
- theirs -> ours: the same value built as kafka-python objects and
  `.encode(version=v)`-ed decodes with ours to the same values, and the bytes
  equal ours (both writers are canonical: fields in order, tags sorted,
  defaults omitted).

Versions tested: the intersection of our range and the range kafka-python's
bundled JSON declares (kafka-python widens every class to min version 0; the
widened versions are not real Kafka versions, so they are skipped).

kafka-python quirks handled here (each is theirs, not the protocol's):
- DescribeClusterResponse.ClusterAuthorizedOperations and
  MetadataResponse.{ClusterAuthorizedOperations, Topics[].TopicAuthorizedOperations}
  are patched into a "bitfield" named `authorized_operations`: a set of bit
  positions, with INT32_MIN ({31}, "not requested") decoded as None.
- ApiVersionsResponse.decode switches to the v0 body whenever ErrorCode != 0
  (so a client can read an UNSUPPORTED_VERSION reply); the round trips
  therefore draw ErrorCode 0 for v1+, and the quirk gets its own test.
- The all-zero UUID (Kafka's "no id") is None in kafka-python.
- MetadataRequest.encode turns Topics=None into [] at v0 (v0 has no null).
- Unknown tagged fields are not compared (kafka-python stores them under
  its own naming); round_trip tests cover them for our codec.

APIs kafka-python does not implement (no declaration in kafka.protocol at
3.0.12) are listed in NOT_IN_KAFKA_PYTHON with that reason.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

kafka_protocol = pytest.importorskip("kafka.protocol")

from kafka.protocol.admin.configs import (  # noqa: E402
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.topics import (  # noqa: E402
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.admin.cluster import (  # noqa: E402
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kafka.protocol.admin.client_quotas import (  # noqa: E402
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.admin.acl import (  # noqa: E402
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from kafka.protocol.admin.users import (  # noqa: E402
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse  # noqa: E402
from kafka.protocol.sasl import (  # noqa: E402
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse  # noqa: E402

from protocol.registry import API_MESSAGES, api_name  # noqa: E402
from protocol.schema import Message, Versions  # noqa: E402
from strategies import message_values, plain, project  # noqa: E402

KAFKA_PYTHON = {
    18: (ApiVersionsRequest, ApiVersionsResponse),
    60: (DescribeClusterRequest, DescribeClusterResponse),
    55: (DescribeQuorumRequest, DescribeQuorumResponse),
    57: (UpdateFeaturesRequest, UpdateFeaturesResponse),
    3: (MetadataRequest, MetadataResponse),
    1: (FetchRequest, FetchResponse),
    19: (CreateTopicsRequest, CreateTopicsResponse),
    20: (DeleteTopicsRequest, DeleteTopicsResponse),
    32: (DescribeConfigsRequest, DescribeConfigsResponse),
    44: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    33: (AlterConfigsRequest, AlterConfigsResponse),
    37: (CreatePartitionsRequest, CreatePartitionsResponse),
    17: (SaslHandshakeRequest, SaslHandshakeResponse),
    36: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    29: (DescribeAclsRequest, DescribeAclsResponse),
    30: (CreateAclsRequest, CreateAclsResponse),
    31: (DeleteAclsRequest, DeleteAclsResponse),
    50: (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    51: (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    48: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    49: (AlterClientQuotasRequest, AlterClientQuotasResponse),
}

NO_DECLARATION = "kafka-python 3.0.12 has no declaration for this API (KRaft-internal RPC)"
NOT_IN_KAFKA_PYTHON = {
    52: NO_DECLARATION,  # Vote
    53: NO_DECLARATION,  # BeginQuorumEpoch
    54: NO_DECLARATION,  # EndQuorumEpoch
    59: NO_DECLARATION,  # FetchSnapshot
    62: NO_DECLARATION,  # BrokerRegistration
    63: NO_DECLARATION,  # BrokerHeartbeat
    64: NO_DECLARATION,  # UnregisterBroker
    67: NO_DECLARATION,  # AllocateProducerIds
    56: NO_DECLARATION,  # AlterPartition
    70: NO_DECLARATION,  # ControllerRegistration
    73: NO_DECLARATION,  # AssignReplicasToDirs
    80: NO_DECLARATION,  # AddRaftVoter
    81: NO_DECLARATION,  # RemoveRaftVoter
    82: NO_DECLARATION,  # UpdateRaftVoter
    6: "kafka-python 3.0.12 has no declaration for this API (controller-to-ZooKeeper-broker RPC)",  # UpdateMetadata
    58: "kafka-python 3.0.12 has no declaration for this API (broker-to-controller forwarding)",  # Envelope
    10000: "kraftwerk's own API (KIP-866 MigrationCheck); no Kafka client knows it",
    10001: "kraftwerk's own API (DescribeMigration, for `kraftwerk migration status`); no Kafka client knows it",
}

INT32_MIN = -(1 << 31)


def test_every_api_is_compared_or_skipped_with_a_reason():
    assert set(KAFKA_PYTHON) | set(NOT_IN_KAFKA_PYTHON) == set(API_MESSAGES)
    assert not set(KAFKA_PYTHON) & set(NOT_IN_KAFKA_PYTHON)


def shared_versions(ours: Message, theirs) -> list[int]:
    declared = Versions.parse(theirs.json["validVersions"])
    lo, hi = ours.version_range
    return [v for v in range(lo, hi + 1) if v in declared]


CASES = [
    pytest.param(ours, theirs, version, id=f"{ours.name}-v{version}")
    for api_key, pair in sorted(KAFKA_PYTHON.items())
    for ours, theirs in zip(API_MESSAGES[api_key], pair)
    for version in shared_versions(ours, theirs)
]


# APIs whose newest versions kafka-python 3.0.12 does not know: (the newest it shares, why).
NEWER_THAN_KAFKA_PYTHON = {
    18: (4, "ApiVersions v5 (KIP-1242: ClusterId and NodeId) came with Kafka 4.2, after kafka-python 3.0.12"),
}


def test_shared_versions_cover_what_kraftwerk_serves():
    # Guard against the intersection silently shrinking to nothing.
    names = {(p.values[0].name, p.values[2]) for p in CASES}
    for api_key, (request, response) in API_MESSAGES.items():
        if api_key in KAFKA_PYTHON:
            top = NEWER_THAN_KAFKA_PYTHON.get(api_key, (request.version_range[1],))[0]
            assert (request.name, top) in names, api_name(api_key)
            assert (response.name, top) in names, api_name(api_key)


# -- shape translation: our field values -> kafka-python's field values -------

def to_bitfield(value: int) -> set[int] | None:
    bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


# (message name, path of field names) -> converter; the path's last element is
# our field name, and kafka-python's name is given alongside.
BITFIELDS = {
    ("DescribeClusterResponse", ("cluster_authorized_operations",)),
    ("MetadataResponse", ("cluster_authorized_operations",)),
    ("MetadataResponse", ("topics", "topic_authorized_operations")),
}


def to_kafka_python_shape(message_name: str, value: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "_unknown_tagged_fields":
                continue
            if (message_name, path + (key,)) in BITFIELDS:
                out["authorized_operations"] = to_bitfield(item)
            else:
                out[key] = to_kafka_python_shape(message_name, item, path + (key,))
        return out
    if isinstance(value, list):
        return [to_kafka_python_shape(message_name, item, path) for item in value]
    if isinstance(value, uuid.UUID) and value.int == 0:
        return None  # kafka-python reads the all-zero UUID as None
    return value


def build_kafka_python(cls, value: dict, version: int | None):
    """A kafka-python object from a kafka-python-shaped dict, nested data
    classes included."""
    kwargs = {}
    for name, item in value.items():
        field = cls._struct.fields[name]
        if field.is_struct_array() and item is not None:
            item = [build_kafka_python(field.data_class, element, None) for element in item]
        elif field.is_struct() and item is not None:
            item = build_kafka_python(field.data_class, item, None)
        kwargs[name] = item
    return cls(version=version, **kwargs) if version is not None else cls(**kwargs)



def adjust_value(ours: Message, version: int, value: dict) -> dict:
    """Keeps drawn values inside what both codecs read back the same way."""
    if ours.name == "ApiVersionsResponse" and version > 0:
        value["error_code"] = 0  # see module docstring: v0 fallback on error
    if ours.name == "MetadataRequest" and version == 0 and value.get("topics") is None:
        value["topics"] = []
    return value


def values(ours: Message, version: int) -> st.SearchStrategy:
    return message_values(ours, version, with_unknown_tags=False).map(lambda v: adjust_value(ours, version, v))


@pytest.mark.parametrize(("ours", "theirs", "version"), CASES)
@settings(max_examples=15)
@given(data=st.data())
def test_ours_to_kafka_python(ours, theirs, version, data):
    value = data.draw(values(ours, version))
    encoded = ours.encode(version, value)
    decoded = theirs.decode(encoded, version=version)
    assert decoded.to_dict(json=False) == to_kafka_python_shape(ours.name, plain(value))


@pytest.mark.parametrize(("ours", "theirs", "version"), CASES)
@settings(max_examples=15)
@given(data=st.data())
def test_kafka_python_to_ours(ours, theirs, version, data):
    value = data.draw(values(ours, version))
    theirs_obj = build_kafka_python(theirs, to_kafka_python_shape(ours.name, plain(value)), version)
    encoded = theirs_obj.encode(version=version)
    decoded = ours.decode(version, encoded)
    assert project(ours, ours.fields, version, decoded) == plain(value)
    # Both writers are canonical, so the bytes agree too.
    assert encoded == ours.encode(version, value)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_api_versions_response_error_decodes_as_v0_in_kafka_python(version):
    # kafka-python's quirk, pinned so that a change in it shows up here: an
    # error reply is read with the v0 body whatever version was asked for,
    # which is how Kafka answers an unsupported ApiVersions version.
    _, ours = API_MESSAGES[18]
    reply = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    encoded = ours.encode(0, reply)
    decoded = ApiVersionsResponse.decode(encoded, version=version)
    assert decoded.to_dict(json=False) == reply
