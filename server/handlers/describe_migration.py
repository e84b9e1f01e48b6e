"""DescribeMigration (key 10001, kraftwerk's own, v0): where a ZooKeeper -> KRaft
migration is (KIP-866's MigrationState and ZooKeeperWriteBehindLag, plus the reasons it
has not started). Only the active controller knows the live parts (lag, ZooKeeper
brokers, precondition failures): a standby answers NOT_CONTROLLER so the tool goes to
the leader, and a broker forwards the request there.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerServices
from server.migration.state import ZkMigrationState


def handle(ctx, request):
    services: ControllerServices = ctx.services
    if not services.is_active_controller():
        return {"error_code": ErrorCode.NOT_CONTROLLER, "controller_id": services.active_controller_id(),
                "error_message": "This node is not the active controller."}
    state = services.image
    recorded = ZkMigrationState(state.zk_migration_state)
    kraft_brokers = sorted(b.broker_id for b in state.brokers.values() if not b.is_migrating_zk_broker)
    status = services.migration_status()
    response = {
        "error_code": ErrorCode.NONE,
        "controller_id": services.node_id,
        "migration_state": services.migration_kip_state(),
        "zk_migration_state": int(recorded),
        "migration_enabled": status is not None,
        "kraft_brokers": kraft_brokers,
    }
    if status is not None:
        zk_brokers = sorted(set(status.zk_broker_ids) | {
            b.broker_id for b in state.brokers.values() if b.is_migrating_zk_broker and not b.fenced})
        response.update({
            "zk_write_behind_lag": services.migration_write_lag(),
            "zk_last_offset": status.zk_last_offset,
            "zk_controller_epoch": status.zk_controller_epoch,
            "writes_blocked": status.writes_blocked,
            "zk_brokers": zk_brokers,
            "precondition_failures": [
                {"broker_id": f.broker_id if f.broker_id is not None else -1, "reason": f.reason}
                for f in status.failures],
        })
    return response
