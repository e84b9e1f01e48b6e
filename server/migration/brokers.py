"""ZooKeeper-mode brokers in the KRaft image during a migration (pure).

Owns: `zk_broker_records`, the records that make the image's ZooKeeper-broker
registrations follow `/brokers/ids` (the ZooKeeper brokers' liveness: they never
heartbeat to a KRaft controller).

- A broker whose ephemeral znode appears (first seen, or back with a new session:
  another registration timestamp) is registered, unfenced, with IsMigratingZkBroker.
- A ZooKeeper broker whose znode is gone is fenced. When it comes back in KRaft mode it
  registers through BrokerRegistration like any KRaft broker, replacing the fenced
  ZooKeeper registration (its heartbeats then keep it alive).
- A broker registered in KRaft mode is never touched here, even if a stale znode with
  its id lingers (the znode of a broker that just restarted in KRaft mode lives until
  its ZooKeeper session expires).
"""

from __future__ import annotations

from typing import Mapping

from protocol.records import MetadataRecord
from server.controller.commands import fence_record
from server.migration.copy import incarnation_id, zk_broker_record
from server.zk import paths as zp


def zk_broker_records(state, live: Mapping[int, zp.BrokerRegistrationZnode], next_offset: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    mv = state.metadata_version
    for broker_id in sorted(live):
        znode = live[broker_id]
        registration = state.broker(broker_id)
        if registration is not None and not registration.is_migrating_zk_broker:
            continue  # a KRaft broker owns this id now
        if (registration is None or registration.fenced
                or registration.incarnation_id != incarnation_id(broker_id, znode)):
            offset = next_offset + len(records)
            records.append(zk_broker_record(broker_id, znode, offset, mv))
    for broker_id, registration in sorted(state.brokers.items()):
        if registration.is_migrating_zk_broker and not registration.fenced and broker_id not in live:
            records.append(fence_record(state, registration))
    return records
