"""The rows the `kraftwerk` Spark data source yields: one per metadata record (or per
corrupt batch), from a controller's log segments and snapshots.

Owns: `ARROW_SCHEMA` (the one declaration of the columns and their types, in the Arrow
form Spark's own conversion gives `RECORD_SCHEMA`), `RECORD_SCHEMA` (the same as Spark
DDL, derived from it) and `RECORD_FIELDS` (the column order), the contract between the
reader (pipeline/reader.py, pipeline/columnar.py, pipeline/datasource.py) and the
transforms (pipeline/transforms.py), plus the names of the record types the tables
read. Pure data: importing it needs pyarrow, never Spark (a reader's worker has no
SparkContext).

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

import pyarrow as pa

FEATURE_LEVEL_RECORD = "FeatureLevelRecord"
REGISTER_BROKER_RECORD = "RegisterBrokerRecord"
UNREGISTER_BROKER_RECORD = "UnregisterBrokerRecord"
FENCE_BROKER_RECORD = "FenceBrokerRecord"
UNFENCE_BROKER_RECORD = "UnfenceBrokerRecord"
BROKER_REGISTRATION_CHANGE_RECORD = "BrokerRegistrationChangeRecord"
# The record types that carry the `broker` column: the broker timeline's input.
BROKER_RECORDS = (
    REGISTER_BROKER_RECORD,
    UNREGISTER_BROKER_RECORD,
    FENCE_BROKER_RECORD,
    UNFENCE_BROKER_RECORD,
    BROKER_REGISTRATION_CHANGE_RECORD,
)

_FEATURE_TYPE = pa.struct([pa.field("name", pa.string()), pa.field("level", pa.int32())])
_BROKER_TYPE = pa.struct([
    pa.field("broker_id", pa.int32()),
    pa.field("broker_epoch", pa.int64()),
    pa.field("incarnation_id", pa.string()),
    pa.field("fenced", pa.bool_()),
    pa.field("in_controlled_shutdown", pa.bool_()),
    pa.field("rack", pa.string()),
    pa.field("mv_min", pa.int32()),
    pa.field("mv_max", pa.int32()),
    pa.field("log_dirs", pa.list_(pa.field("element", pa.string()))),
])

# Typed as pyspark's to_arrow_schema types the Spark schema (tests/pipeline_source checks
# the round trip through RECORD_SCHEMA), so that batches built from it need no cast.
ARROW_SCHEMA = pa.schema([
    pa.field("cluster", pa.string()),
    pa.field("cluster_id", pa.string()),
    pa.field("node_id", pa.int32()),
    pa.field("source", pa.string()),
    pa.field("file", pa.string()),
    pa.field("offset", pa.int64()),
    pa.field("leader_epoch", pa.int32()),
    pa.field("batch_timestamp_ms", pa.int64()),
    pa.field("record_type", pa.string()),
    pa.field("record_version", pa.int32()),
    pa.field("feature", _FEATURE_TYPE),
    pa.field("broker", _BROKER_TYPE),
    pa.field("fields_json", pa.string()),
    pa.field("error", pa.string()),
])

RECORD_FIELDS = tuple(ARROW_SCHEMA.names)

# The Spark SQL name of each Arrow type the schema uses.
_SPARK_NAMES = {
    pa.string(): "string",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.bool_(): "boolean",
}


def _spark_type(kind: pa.DataType) -> str:
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {_spark_type(f.type)}" for f in kind) + ">"
    if pa.types.is_list(kind):
        return f"array<{_spark_type(kind.value_type)}>"
    return _SPARK_NAMES[kind]


RECORD_SCHEMA = ", ".join(f"{f.name} {_spark_type(f.type)}" for f in ARROW_SCHEMA)
