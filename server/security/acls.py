"""ACL bindings and filters: validation for CreateAcls, matching for Describe/DeleteAcls.

Owns: `AclBinding` (an ACL without its id, what clients create and see),
`AclFilter` (what DescribeAcls / DeleteAcls send), `validate_binding` (Kafka's rules
for a new ACL, as its controller's AclControlManager and KafkaApis check them),
`filter_matches`, and `acl_id_for` (the id a new ACL gets in the log).

Facts carried over from Kafka:
- A new binding needs a concrete resource type (not ANY/UNKNOWN), a LITERAL or
  PREFIXED pattern, a non-empty resource name ("kafka-cluster" for CLUSTER), a
  principal of the form Type:Name, a concrete operation, ALLOW or DENY, and a host.
  Every violation is INVALID_REQUEST.
- A filter field that is null (names, principal, host) or ANY (codes) matches
  anything. Pattern type MATCH matches the LITERAL binding with the same name, the
  LITERAL wildcard "*" and every PREFIXED binding whose name is a prefix of the
  filter's name; ANY matches every pattern type with an equal name (if one is given).

Rules kept here:
- Pure values and functions: no state, no clock. An ACL's id is derived from the
  offset its record gets, so a command that creates ACLs is deterministic given its
  inputs, and offsets (unique in a log) make the ids unique.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from server.authorization import AclOperation
from server.security.model import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclEntry,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)

# The namespace of ACL ids derived from (cluster id, record offset): an arbitrary fixed
# uuid, so the same log always yields the same ids.
ACL_ID_NAMESPACE = uuid.UUID("5d0c3a51-8f0e-4c1b-9c4e-6b1f0a2d7e93")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """An ACL as a client names it: resource pattern plus access control entry."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @staticmethod
    def of(entry: AclEntry) -> "AclBinding":
        return AclBinding(entry.resource_type, entry.resource_name, entry.pattern_type, entry.principal,
                          entry.host, entry.operation, entry.permission_type)

    def entry(self, acl_id: uuid.UUID) -> AclEntry:
        return AclEntry(acl_id, self.resource_type, self.resource_name, self.pattern_type, self.principal,
                        self.host, self.operation, self.permission_type)

    def record_data(self, acl_id: uuid.UUID) -> dict[str, Any]:
        """The fields of its AccessControlEntryRecord."""
        return {"id": acl_id, "resource_type": self.resource_type, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type, "principal": self.principal, "host": self.host,
                "operation": self.operation, "permission_type": self.permission_type}


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter. None means "any" for the text fields."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


def _get(data: Any, key: str, default: Any = None) -> Any:
    value = data.get(key, default) if hasattr(data, "get") else getattr(data, key, default)
    return default if value is None else value


def binding_from_request(creation: Any) -> AclBinding:
    """An AclCreation of CreateAcls (v1+ always carries the pattern type)."""
    return AclBinding(
        int(_get(creation, "resource_type", 0)), creation.get("resource_name") if hasattr(creation, "get") else None,
        int(_get(creation, "resource_pattern_type", PatternType.LITERAL)),
        creation.get("principal") if hasattr(creation, "get") else None,
        creation.get("host") if hasattr(creation, "get") else None,
        int(_get(creation, "operation", 0)), int(_get(creation, "permission_type", 0)),
    )


def filter_from_request(data: Any) -> AclFilter:
    """A DescribeAcls request or one DeleteAcls filter."""
    return AclFilter(
        int(_get(data, "resource_type_filter", 0)), data.get("resource_name_filter"),
        int(_get(data, "pattern_type_filter", PatternType.LITERAL)), data.get("principal_filter"),
        data.get("host_filter"), int(_get(data, "operation", 0)), int(_get(data, "permission_type", 0)),
    )


def _known(enum_type, value: int) -> bool:
    try:
        enum_type(value)
    except ValueError:
        return False
    return True


def validate_binding(binding: AclBinding) -> tuple[int, str] | None:
    """(error code, message) when `binding` cannot be created, else None (Kafka's checks,
    in Kafka's order)."""
    invalid = ErrorCode.INVALID_REQUEST
    if not _known(ResourceType, binding.resource_type) or binding.resource_type in (ResourceType.ANY,
                                                                                      ResourceType.UNKNOWN):
        return invalid, f"Invalid resourceType {binding.resource_type}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return invalid, f"Invalid patternType {binding.pattern_type}"
    if not _known(AclOperation, binding.operation) or binding.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return invalid, f"Invalid operation {binding.operation}"
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return invalid, f"Invalid permissionType {binding.permission_type}"
    if binding.host is None or binding.host == "":
        return invalid, "Missing host"
    if not binding.resource_name:
        return invalid, "Resource name should not be empty"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_RESOURCE_NAME:
        return invalid, f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
    try:
        KafkaPrincipal.parse(binding.principal or "")
    except ValueError:
        return invalid, f"Invalid principal {binding.principal!r}"
    return None


def validate_filter(acl_filter: AclFilter) -> tuple[int, str] | None:
    """Codes a filter may not carry (UNKNOWN anywhere: Kafka refuses "unknown" filters)."""
    invalid = ErrorCode.INVALID_REQUEST
    if not _known(ResourceType, acl_filter.resource_type) or acl_filter.resource_type == ResourceType.UNKNOWN:
        return invalid, f"Invalid resourceType filter {acl_filter.resource_type}"
    if not _known(PatternType, acl_filter.pattern_type) or acl_filter.pattern_type == PatternType.UNKNOWN:
        return invalid, f"Invalid patternType filter {acl_filter.pattern_type}"
    if not _known(AclOperation, acl_filter.operation) or acl_filter.operation == AclOperation.UNKNOWN:
        return invalid, f"Invalid operation filter {acl_filter.operation}"
    if (not _known(AclPermissionType, acl_filter.permission_type)
            or acl_filter.permission_type == AclPermissionType.UNKNOWN):
        return invalid, f"Invalid permissionType filter {acl_filter.permission_type}"
    return None


def _pattern_matches(acl_filter: AclFilter, binding: AclBinding | AclEntry) -> bool:
    if acl_filter.resource_type != ResourceType.ANY and acl_filter.resource_type != binding.resource_type:
        return False
    wanted = acl_filter.pattern_type
    name = acl_filter.resource_name
    if wanted == PatternType.MATCH:
        if name is None:
            return True
        if binding.pattern_type == PatternType.LITERAL:
            return binding.resource_name == name or binding.resource_name == WILDCARD
        if binding.pattern_type == PatternType.PREFIXED:
            return name.startswith(binding.resource_name)
        return False
    if wanted != PatternType.ANY and wanted != binding.pattern_type:
        return False
    return name is None or name == binding.resource_name


def filter_matches(acl_filter: AclFilter, binding: AclBinding | AclEntry) -> bool:
    """Whether `binding` is selected by `acl_filter` (DescribeAcls / DeleteAcls)."""
    if not _pattern_matches(acl_filter, binding):
        return False
    if acl_filter.principal is not None and acl_filter.principal != binding.principal:
        return False
    if acl_filter.host is not None and acl_filter.host != binding.host:
        return False
    if acl_filter.operation != AclOperation.ANY and acl_filter.operation != binding.operation:
        return False
    if acl_filter.permission_type != AclPermissionType.ANY and acl_filter.permission_type != binding.permission_type:
        return False
    return True


def acl_id_for(cluster_id: str, offset: int) -> uuid.UUID:
    """The id of the ACL whose AccessControlEntryRecord lands at `offset`."""
    return uuid.uuid5(ACL_ID_NAMESPACE, f"{cluster_id}/{offset}")
