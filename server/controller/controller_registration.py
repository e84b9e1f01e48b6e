"""ControllerRegistration (KIP-919): a controller tells the active controller its
incarnation, listeners and supported feature ranges.

Owns the command (Kafka's ClusterControlManager.registerController). The state keeps
the latest RegisterControllerRecord per controller id (ControllerState.controllers).

Rules kept here (Kafka 4.4's):
- The only check is metadata.version: below 3.7-IV0 the request is refused with
  UNSUPPORTED_VERSION and Kafka's text. There is no voter-set or incarnation check: any
  controller id may register, and a registration replaces the previous one for its id.
- One RegisterControllerRecord v0, written atomically, with ZkMigrationReady always
  false (Kafka 4 has no ZooKeeper migration to be ready for), the listeners in request
  order and the features as given. The answer (error NONE, empty message) goes out once
  the record is committed, as for every command.
"""

from __future__ import annotations

from typing import Any

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller.commands import ControllerResult
from server.controller.features import controller_registration_supported
from server.controller.state import ControllerState

TOO_OLD_MESSAGE = "The current MetadataVersion is too old to support controller registrations."


def register_controller(state: ControllerState, request: Any) -> ControllerResult:
    """ControllerRegistration v0: the record that registers the sender, or the refusal."""
    mv_level = state.metadata_version
    if mv_level is None:
        raise RuntimeError("metadata.version is not finalized yet")
    if not controller_registration_supported(mv_level):
        return ControllerResult([], {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION,
                                     "error_message": TOO_OLD_MESSAGE}, error_message=TOO_OLD_MESSAGE)
    data = {
        "controller_id": request.controller_id,
        "incarnation_id": request.incarnation_id,
        "zk_migration_ready": False,
        "end_points": [{"name": item.name, "host": item.host, "port": item.port,
                        "security_protocol": item.security_protocol} for item in request.listeners],
        "features": [{"name": item.name, "min_supported_version": item.min_supported_version,
                      "max_supported_version": item.max_supported_version} for item in request.features],
    }
    return ControllerResult([record(mr.REGISTER_CONTROLLER_RECORD, data, version=0)],
                            {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": ""},
                            atomic=True)
