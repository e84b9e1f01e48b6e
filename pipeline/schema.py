"""The rows the `kraftwerk` Spark data source yields: one per metadata record (or per
corrupt batch), from a controller's log segments and snapshots.

Owns: `RECORD_SCHEMA` (Spark DDL) and `RECORD_FIELDS` (the column order), the contract
between the reader (pipeline/reader.py, pipeline/datasource.py) and the transforms
(pipeline/transforms.py). Pure data: importing it needs no Spark.

Columns:
- cluster: the fleet directory's cluster name (`<fleet>/<cluster>/<node>/...`)
- cluster_id: from the node's meta.properties (null if missing)
- node_id: the node directory's node id (meta.properties), or -1
- source: "log" (a segment file) or "snapshot" (a .checkpoint file)
- file: the file's path relative to the fleet root
- offset: the record's offset (for snapshots: the replay offset the record carries, see
  server/controller/snapshot.py REPLAY_OFFSET_HEADER, else the snapshot end offset - 1)
- leader_epoch: the batch's partition leader epoch (the Raft epoch)
- batch_timestamp_ms: the batch's max timestamp
- record_type: the metadata record's name ("FeatureLevelRecord", ...), a control record's
  ("LeaderChange", "SnapshotHeader", ...), or null for a corrupt batch
- record_version: the record's version (null for control records and errors)
- feature: FeatureLevelRecord's fields (name, level); null otherwise
- broker: the broker fields of RegisterBrokerRecord, BrokerRegistrationChangeRecord,
  FenceBrokerRecord, UnfenceBrokerRecord, UnregisterBrokerRecord; null otherwise.
  `fenced` / `in_controlled_shutdown` are null when the record does not say.
  `mv_min` / `mv_max`: the registration's supported metadata.version range.
- fields_json: every decoded field of the record as JSON (uuids as strings)
- error: null, or why the batch could not be read (the row then stands for that batch;
  offset is the batch's base offset when known, else -1)
"""

from __future__ import annotations

RECORD_SCHEMA = (
    "cluster string, cluster_id string, node_id int, source string, file string, offset long, "
    "leader_epoch int, batch_timestamp_ms long, record_type string, record_version int, "
    "feature struct<name: string, level: int>, "
    "broker struct<broker_id: int, broker_epoch: long, incarnation_id: string, fenced: boolean, "
    "in_controlled_shutdown: boolean, rack: string, mv_min: int, mv_max: int, log_dirs: array<string>>, "
    "fields_json string, error string"
)

RECORD_FIELDS = (
    "cluster", "cluster_id", "node_id", "source", "file", "offset", "leader_epoch", "batch_timestamp_ms",
    "record_type", "record_version", "feature", "broker", "fields_json", "error",
)
