"""Per-item authorization for the APIs that name topics or config resources.

Owns: the splits the handlers of CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs and IncrementalAlterConfigs make before running their
command (the authorized part of the request, plus the refusal entries for the rest),
the Metadata topic filter and the "authorized operations" bitfields with an authorizer.

Facts carried over from Kafka's KafkaApis / ControllerApis:
- CreateTopics: CREATE on CLUSTER allows every topic; otherwise each topic needs
  CREATE on itself (TOPIC_AUTHORIZATION_FAILED). The cluster check is not logged as
  a refusal (only the per-topic ones are), as Kafka does not log it.
- DeleteTopics: DELETE on each topic; a topic named by id is checked under the name
  the image has for it, and one the principal may not DESCRIBE is refused without its
  name (an unknown id is left to the command: UNKNOWN_TOPIC_ID).
- "Authorized operations" of the cluster (Metadata, DescribeCluster) are 0 for a
  principal that may not DESCRIBE the cluster.
- CreatePartitions: ALTER on each topic (TOPIC_AUTHORIZATION_FAILED).
- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the
  topic (TOPIC_AUTHORIZATION_FAILED), or on CLUSTER for broker and broker-logger
  resources (CLUSTER_AUTHORIZATION_FAILED).
- Metadata: the "all topics" answer leaves out topics the principal may not DESCRIBE
  (silently); a topic named and not describable gets TOPIC_AUTHORIZATION_FAILED
  whether it exists or not, one asked for by id UNKNOWN_TOPIC_ID (no leak either way).

Rules kept here:
- With no authorizer (`ctx.services.authorizer` None) every function is the identity.
- Requests are never mutated: the authorized part is a new dict with the same keys.
"""

from __future__ import annotations

import uuid
from typing import Any

from protocol.errors import ErrorCode
from server.authorization import CLUSTER_OPERATIONS, AclOperation, cluster_authorized_operations, operations_bitfield
from server.security.authorizer import TOPIC_OPERATIONS
from server.security.model import CLUSTER_RESOURCE_NAME, ResourceType

TOPIC_REFUSED_MESSAGE = "Topic authorization failed."
CLUSTER_REFUSED_MESSAGE = "Cluster authorization failed."
# ConfigResource.Type values of DescribeConfigs / IncrementalAlterConfigs.
_CONFIG_TOPIC = 2


def _authorizer(ctx):
    return getattr(ctx.services, "authorizer", None)


def _with(request: Any, key: str, items: list) -> dict:
    copy = {k: v for k, v in request.items() if not k.startswith("_")}
    copy[key] = items
    return copy


def create_topics(ctx, request) -> tuple[Any, list[dict]]:
    """(the request with only the topics the principal may create, refusals)."""
    authorizer = _authorizer(ctx)
    if authorizer is None or authorizer.allowed(ctx.principal, ctx.client_host, AclOperation.CREATE,
                                                ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME):
        return request, []
    allowed, refused, seen = [], [], set()
    for topic in request.topics:
        if authorizer.authorize(ctx.principal, ctx.client_host, AclOperation.CREATE, ResourceType.TOPIC,
                                topic.name, "CreateTopics"):
            allowed.append(topic)
        elif topic.name not in seen:
            seen.add(topic.name)
            refused.append({"name": topic.name, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                            "error_message": TOPIC_REFUSED_MESSAGE, "num_partitions": -1,
                            "replication_factor": -1, "configs": None})
    return (request if not refused else _with(request, "topics", allowed)), refused


def delete_topics(ctx, request, version: int) -> tuple[Any, list[dict]]:
    """(the request with only the topics the principal may delete, refusals)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return request, []
    state = ctx.services.image

    def may_delete(name: str | None, topic_id) -> tuple[bool, str | None]:
        """(allowed, the name to report). By id, a topic the principal may not describe
        keeps its name hidden, as Kafka's controller does."""
        if name is None:
            topic = state.topic_by_id(topic_id) if state is not None else None
            if topic is None:
                return True, None  # the command answers UNKNOWN_TOPIC_ID
            if not authorizer.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                        topic.name, "DeleteTopics"):
                return False, None
            name = topic.name
        return authorizer.authorize(ctx.principal, ctx.client_host, AclOperation.DELETE, ResourceType.TOPIC,
                                    name, "DeleteTopics"), name

    code, message = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), TOPIC_REFUSED_MESSAGE
    allowed, refused = [], []
    if version >= 6:
        for topic in request.topics:
            ok, shown = may_delete(topic.name, topic.topic_id)
            if ok:
                allowed.append(topic)
            else:
                refused.append({"name": shown, "topic_id": topic.topic_id, "error_code": code,
                                "error_message": message})
        key = "topics"
    else:
        for name in request.topic_names:
            if may_delete(name, None)[0]:
                allowed.append(name)
            else:
                refused.append({"name": name, "topic_id": uuid.UUID(int=0), "error_code": code,
                                "error_message": message})
        key = "topic_names"
    return (request if not refused else _with(request, key, allowed)), refused


def _config_refusal(ctx, resource, operation: int, api: str) -> tuple[int, str] | None:
    authorizer = _authorizer(ctx)
    if resource.resource_type == _CONFIG_TOPIC:
        if authorizer.authorize(ctx.principal, ctx.client_host, operation, ResourceType.TOPIC,
                                resource.resource_name, api):
            return None
        return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), TOPIC_REFUSED_MESSAGE
    if authorizer.authorize(ctx.principal, ctx.client_host, operation, ResourceType.CLUSTER,
                            CLUSTER_RESOURCE_NAME, api):
        return None
    return int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), CLUSTER_REFUSED_MESSAGE


def config_resources(ctx, request, alter: bool, api: str | None = None) -> tuple[Any, list[dict]]:
    """(the request with only the resources the principal may describe / alter, refusals).
    Refusals carry `configs` for DescribeConfigs; the alter APIs ignore it. `api` names
    the API in the authorizer's log (IncrementalAlterConfigs / DescribeConfigs by default)."""
    if _authorizer(ctx) is None:
        return request, []
    operation = AclOperation.ALTER_CONFIGS if alter else AclOperation.DESCRIBE_CONFIGS
    api = api or ("IncrementalAlterConfigs" if alter else "DescribeConfigs")
    allowed, refused = [], []
    for resource in request.resources:
        error = _config_refusal(ctx, resource, operation, api)
        if error is None:
            allowed.append(resource)
            continue
        entry = {"error_code": error[0], "error_message": error[1], "resource_type": resource.resource_type,
                 "resource_name": resource.resource_name}
        if not alter:
            entry["configs"] = []
        refused.append(entry)
    return (request if not refused else _with(request, "resources", allowed)), refused


def create_partitions(ctx, request) -> tuple[Any, list[dict]]:
    """(the request with only the topics the principal may ALTER, refusals): Kafka's
    CreatePartitions needs ALTER on each topic (TOPIC_AUTHORIZATION_FAILED)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return request, []
    allowed, refused = [], []
    for topic in request.topics:
        if authorizer.authorize(ctx.principal, ctx.client_host, AclOperation.ALTER, ResourceType.TOPIC,
                                topic.name, "CreatePartitions"):
            allowed.append(topic)
        else:
            refused.append({"name": topic.name, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                            "error_message": TOPIC_REFUSED_MESSAGE})
    return (request if not refused else _with(request, "topics", allowed)), refused


def may_describe_topic(ctx, name: str, log_refusal: bool) -> bool:
    """Metadata: may the principal see `name`? (True without an authorizer)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    if log_refusal:
        return authorizer.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                    name, "Metadata")
    return authorizer.allowed(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def describable_topics(ctx, names) -> list[str]:
    """Metadata's "all topics": the names the principal may DESCRIBE (all without an
    authorizer), silently."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return list(names)
    return authorizer.allowed_names(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, names)


def topic_operations(ctx, name: str) -> int:
    """A topic's "authorized operations" (Metadata v8+ when asked): every topic operation
    without an authorizer (as Kafka), those the ACLs allow with one."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return operations_bitfield(TOPIC_OPERATIONS)
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, ResourceType.TOPIC, name,
                                            TOPIC_OPERATIONS)


def cluster_operations(ctx, requested: bool) -> int:
    """The cluster's "authorized operations" for this principal: every cluster operation
    without an authorizer (as Kafka), those the ACLs allow with one."""
    authorizer = _authorizer(ctx)
    if authorizer is None or not requested:
        return cluster_authorized_operations(requested)
    if not authorizer.allowed(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                              CLUSTER_RESOURCE_NAME):
        return 0  # Kafka: nothing is reported to whom may not describe the cluster
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, ResourceType.CLUSTER,
                                            CLUSTER_RESOURCE_NAME, CLUSTER_OPERATIONS)
