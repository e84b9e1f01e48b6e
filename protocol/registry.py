"""One table from API key to the request/response declarations.

Owns: `API_MESSAGES` (keyed by `ApiKey`), `lookup()` and `api_name()`. Which
versions kraftwerk *serves* is not decided here (that is server policy, the API
catalog in `server/api/catalog.py`); this table says what the protocol layer can
encode and decode. Every module listed must have its key in `ApiKey`
(protocol/api_keys.py, generated from the same modules): `ApiKey(key)` raises at
import otherwise.
"""

from __future__ import annotations

from types import MappingProxyType

from protocol.api_keys import ApiKey
from protocol.apis import (
    add_raft_voter,
    allocate_producer_ids,
    alter_client_quotas,
    alter_configs,
    alter_partition,
    alter_user_scram_credentials,
    api_versions,
    assign_replicas_to_dirs,
    begin_quorum_epoch,
    broker_heartbeat,
    broker_registration,
    controller_registration,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_migration,
    describe_quorum,
    describe_user_scram_credentials,
    end_quorum_epoch,
    envelope,
    fetch,
    fetch_snapshot,
    incremental_alter_configs,
    metadata,
    migration_check,
    remove_raft_voter,
    sasl_authenticate,
    sasl_handshake,
    unregister_broker,
    update_features,
    update_metadata,
    update_raft_voter,
    vote,
)
from protocol.schema import Message

_MODULES = (
    add_raft_voter, allocate_producer_ids, alter_client_quotas, alter_configs, alter_partition, alter_user_scram_credentials, api_versions, assign_replicas_to_dirs,
    begin_quorum_epoch, broker_heartbeat,
    broker_registration, controller_registration, create_acls, create_partitions, create_topics, delete_acls, delete_topics,
    describe_acls, describe_client_quotas, describe_cluster, describe_configs, describe_migration, describe_quorum,
    describe_user_scram_credentials, end_quorum_epoch, envelope, fetch, fetch_snapshot,
    incremental_alter_configs, metadata, migration_check, remove_raft_voter, sasl_authenticate,
    sasl_handshake, unregister_broker, update_features, update_metadata, update_raft_voter, vote,
)

# api_key -> (request, response)
API_MESSAGES: MappingProxyType[ApiKey, tuple[Message, Message]] = MappingProxyType(
    {ApiKey(m.REQUEST.api_key): (m.REQUEST, m.RESPONSE) for m in _MODULES}
)


def lookup(api_key: int) -> tuple[Message, Message] | None:
    return API_MESSAGES.get(api_key)


def api_name(api_key: int) -> str:
    pair = API_MESSAGES.get(api_key)
    return pair[0].name.removesuffix("Request") if pair else f"Unknown({api_key})"
