"""What each API needs from the authorizer: the one table, and refusal bodies.

Owns: `RULES` (api key -> `ApiRule`), `refusal` (the full response body that refuses a
request with CLUSTER_AUTHORIZATION_FAILED in that API's own error shape) and
`cluster_refused_message`.

Facts carried over from Kafka's KafkaApis / ControllerApis:
- ApiVersions, SaslHandshake, SaslAuthenticate need nothing.
- Cluster-wide APIs need one operation on the CLUSTER resource: UpdateFeatures,
  CreateAcls, DeleteAcls, AlterUserScramCredentials ALTER; DescribeCluster,
  DescribeQuorum, DescribeAcls, DescribeUserScramCredentials DESCRIBE (DescribeCluster
  on controllers only: a broker answers it with no authorized operations); the
  inter-node APIs (BrokerRegistration, BrokerHeartbeat, the KRaft RPCs Vote,
  BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, Envelope) CLUSTER_ACTION;
  UnregisterBroker ALTER (an operator's action in Kafka, not a broker's).
- APIs that name topics or config resources are authorized per item, in their
  handlers (`per_item`): CreateTopics (CREATE on CLUSTER, else CREATE on each topic),
  DeleteTopics (DELETE on each topic), DescribeConfigs (DESCRIBE_CONFIGS) and
  IncrementalAlterConfigs (ALTER_CONFIGS) on each topic, or on CLUSTER for broker
  resources, and Metadata (DESCRIBE on each topic).
- kraftwerk's own APIs: DescribeMigration (10001) DESCRIBE on CLUSTER; MigrationCheck
  (10000) and UpdateMetadata (6), sent by the migrating controller, CLUSTER_ACTION.

Rules kept here:
- An API missing from `RULES` is let through: the table is the place to add one, and
  tests check that every served API is listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from protocol.registry import API_MESSAGES
from server.authorization import AclOperation


@dataclass(frozen=True, slots=True)
class ApiRule:
    api_name: str
    # The operation on CLUSTER the whole request needs; None: nothing up front.
    operation: AclOperation | None
    # The handler checks each topic / resource itself.
    per_item: bool = False
    # False: checked on controllers only (a broker answers it, as Kafka's brokers do).
    on_brokers: bool = True


_NOTHING, _ALTER, _DESCRIBE, _ACTION = None, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION

RULES: dict[int, ApiRule] = {
    18: ApiRule("ApiVersions", _NOTHING),
    17: ApiRule("SaslHandshake", _NOTHING),
    36: ApiRule("SaslAuthenticate", _NOTHING),
    57: ApiRule("UpdateFeatures", _ALTER),
    # Kafka's controllers refuse DescribeCluster without DESCRIBE on CLUSTER; its brokers
    # answer it and report no authorized operations instead.
    60: ApiRule("DescribeCluster", _DESCRIBE, on_brokers=False),
    55: ApiRule("DescribeQuorum", _DESCRIBE),
    62: ApiRule("BrokerRegistration", _ACTION),
    63: ApiRule("BrokerHeartbeat", _ACTION),
    64: ApiRule("UnregisterBroker", _ALTER),
    52: ApiRule("Vote", _ACTION),
    53: ApiRule("BeginQuorumEpoch", _ACTION),
    54: ApiRule("EndQuorumEpoch", _ACTION),
    1: ApiRule("Fetch", _ACTION),
    59: ApiRule("FetchSnapshot", _ACTION),
    58: ApiRule("Envelope", _ACTION),
    30: ApiRule("CreateAcls", _ALTER),
    31: ApiRule("DeleteAcls", _ALTER),
    29: ApiRule("DescribeAcls", _DESCRIBE),
    51: ApiRule("AlterUserScramCredentials", _ALTER),
    50: ApiRule("DescribeUserScramCredentials", _DESCRIBE),
    19: ApiRule("CreateTopics", _NOTHING, per_item=True),
    20: ApiRule("DeleteTopics", _NOTHING, per_item=True),
    32: ApiRule("DescribeConfigs", _NOTHING, per_item=True),
    44: ApiRule("IncrementalAlterConfigs", _NOTHING, per_item=True),
    3: ApiRule("Metadata", _NOTHING, per_item=True),
    10001: ApiRule("DescribeMigration", _DESCRIBE),
    10000: ApiRule("MigrationCheck", _ACTION),
    6: ApiRule("UpdateMetadata", _ACTION),
}

CLUSTER_REFUSED_MESSAGE = "Cluster authorization failed."


def refusal(api_key: int, version: int, request: Any) -> dict:
    """The whole request refused with CLUSTER_AUTHORIZATION_FAILED, in the API's shape:
    a top-level error code where the response has one, otherwise the code in every
    per-item result."""
    code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    message = CLUSTER_REFUSED_MESSAGE
    if api_key in (30, 31, 51):
        # APIs without a top-level error: the code in every per-item result, in the
        # shape their own handlers (and the forwarding broker) answer errors with.
        from server.handlers import forwarded

        return forwarded.error_response(api_key, version, request, code, message)
    body = dict(API_MESSAGES[api_key][1].default(version))
    body.pop("_unknown_tagged_fields", None)
    body["error_code"] = code
    if "error_message" in body:
        body["error_message"] = message
    return body
