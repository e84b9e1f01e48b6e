"""Pure ACL commands: CreateAcls and DeleteAcls (records), DescribeAcls (a read).

Owns: `create_acls`, `delete_acls` (same contract as commands.py: `(state, request,
next_offset) -> ControllerResult`, nothing mutated, the records say everything) and
`describe_acls` (a response from an image).

Facts carried over from Kafka's AclControlManager:
- Each creation is validated on its own (server/security/acls.py); a binding equal to
  an existing ACL (or to one created earlier in the same request) succeeds without a
  new record, so ACLs are never duplicated.
- DeleteAcls: each filter removes every ACL it matches that an earlier filter of the
  same request did not already remove; its result lists them. A filter with an
  UNKNOWN code fails with INVALID_REQUEST and removes nothing.
- Everything one request writes is one atomic batch.

Rules kept here:
- A new ACL's id is `acl_id_for(cluster id, offset of its record)`: deterministic
  given (state, request, next_offset), unique because offsets are (an id already in
  the image is re-derived, never reused: replay would refuse it).
- ACLs are visited in the image's order (replay order), so results are deterministic.
"""

from __future__ import annotations

import uuid
from typing import Any

from protocol import metadata_records as mr
from protocol.records import MetadataRecord, record
from server.controller.commands import ControllerResult
from server.controller.state import ControllerState
from server.security.acls import (
    AclBinding,
    acl_id_for,
    binding_from_request,
    filter_from_request,
    filter_matches,
    validate_binding,
    validate_filter,
)


_ID_RETRIES = 16


def _items(request: Any, key: str) -> list:
    value = request.get(key) if hasattr(request, "get") else getattr(request, key, None)
    return list(value or ())


def create_acls(state: ControllerState, request: Any, next_offset: int) -> ControllerResult:
    """CreateAcls v1-3: AccessControlEntryRecords for the new, valid bindings."""
    existing = {AclBinding.of(entry) for entry in state.acls().values()}
    taken = set(state.acls())
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    for creation in _items(request, "creations"):
        binding = binding_from_request(creation)
        error = validate_binding(binding)
        if error is not None:
            results.append({"error_code": int(error[0]), "error_message": error[1]})
            continue
        if binding not in existing:
            existing.add(binding)
            acl_id = acl_id_for(state.cluster_id, next_offset + len(records))
            for _ in range(_ID_RETRIES):
                # Offsets never repeat within a log, so a clash means the offset this command
                # was given is not the one its record gets (a bug elsewhere); stay
                # deterministic and unique rather than write a record replay would refuse.
                if acl_id not in taken:
                    break
                acl_id = uuid.uuid5(acl_id, "next")
            taken.add(acl_id)
            records.append(record(mr.ACCESS_CONTROL_ENTRY_RECORD, binding.record_data(acl_id), version=0))
        results.append({"error_code": 0, "error_message": None})
    return ControllerResult(records, {"throttle_time_ms": 0, "results": results}, atomic=True)


def _matching_acl(entry) -> dict[str, Any]:
    return {"error_code": 0, "error_message": None, "resource_type": entry.resource_type,
            "resource_name": entry.resource_name, "pattern_type": entry.pattern_type,
            "principal": entry.principal, "host": entry.host, "operation": entry.operation,
            "permission_type": entry.permission_type}


def delete_acls(state: ControllerState, request: Any, next_offset: int = 0) -> ControllerResult:
    """DeleteAcls v1-3: a RemoveAccessControlEntryRecord per matched ACL."""
    acls = state.acls()
    removed: set = set()
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    for item in _items(request, "filters"):
        acl_filter = filter_from_request(item)
        error = validate_filter(acl_filter)
        if error is not None:
            results.append({"error_code": int(error[0]), "error_message": error[1], "matching_acls": []})
            continue
        matched = []
        for acl_id, entry in acls.items():
            if acl_id in removed or not filter_matches(acl_filter, entry):
                continue
            removed.add(acl_id)
            records.append(record(mr.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, {"id": acl_id}, version=0))
            matched.append(_matching_acl(entry))
        results.append({"error_code": 0, "error_message": None, "matching_acls": matched})
    return ControllerResult(records, {"throttle_time_ms": 0, "filter_results": results}, atomic=True)


def describe_acls(state: ControllerState, request: Any) -> dict[str, Any]:
    """DescribeAcls v1-3: the matching ACLs grouped by resource pattern, in image order."""
    acl_filter = filter_from_request(request)
    error = validate_filter(acl_filter)
    if error is not None:
        return {"throttle_time_ms": 0, "error_code": int(error[0]), "error_message": error[1], "resources": []}
    groups: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for entry in state.acls().values():
        if filter_matches(acl_filter, entry):
            groups.setdefault((entry.resource_type, entry.resource_name, entry.pattern_type), []).append(
                {"principal": entry.principal, "host": entry.host, "operation": entry.operation,
                 "permission_type": entry.permission_type})
    resources = [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
                 for (rt, name, pt), acls in groups.items()]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}
