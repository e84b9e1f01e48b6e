"""A small hand-built fleet as `kraftwerk` record rows (pipeline/schema.py), shared by
the transform, job and report tests.

- alpha: three controllers hold copies of a log that starts at offset 10 (compacted);
  node 1 and node 2 hold copies of a snapshot ending at 12 that bridges to it, node 2
  an older one (ending at 5) that still registers broker 102, unregistered since.
  Node 3's copy of offset 18 is a stale uncommitted entry from an older leader epoch.
  metadata.version goes 8 (from the snapshot) -> 10 -> 9 (lossless) -> 11 -> 7 (lossy).
  Broker 101 runs 3.5 and holds the cluster back from 3.6-IV2; broker 103 (also 3.5)
  registers and unregisters. Three unreadable batches.
- beta: one controller, no snapshot; everything on 3.6: up to date.
- gamma: only a snapshot (no log); broker 300 on 4.0, brokers 301 and 302 on 3.9.
"""

from __future__ import annotations

from pipeline.schema import RECORD_FIELDS

# Supported metadata.version ranges of some releases (server/releases.py).
R35 = (1, 11)
R36 = (1, 14)
R39 = (1, 21)
R40 = (7, 25)


def row(cluster, node_id, source, file, offset, record_type, *, feature=None, broker=None, error=None,
        leader_epoch=2, timestamp_ms=None):
    values = {
        "cluster": cluster,
        "cluster_id": cluster.upper() + "-ID",
        "node_id": node_id,
        "source": source,
        "file": file,
        "offset": offset,
        "leader_epoch": leader_epoch,
        "batch_timestamp_ms": timestamp_ms if timestamp_ms is not None else 1_700_000_000_000 + offset * 1000,
        "record_type": record_type,
        "record_version": None if record_type is None else 0,
        "feature": feature,
        "broker": broker,
        "fields_json": "{}",
        "error": error,
    }
    return tuple(values[name] for name in RECORD_FIELDS)


def level(name, value):
    return (name, value)


def broker(broker_id, epoch, *, fenced=None, shutdown=None, mv=(None, None)):
    return (broker_id, epoch, f"inc-{broker_id}", fenced, shutdown, None, mv[0], mv[1], None)


def alpha_rows():
    rows = []
    log = [
        (10, "UnfenceBrokerRecord", None, broker(100, 2, fenced=False)),
        (11, "NoOpRecord", None, None),
        (12, "FeatureLevelRecord", level("metadata.version", 10), None),
        (13, "FeatureLevelRecord", level("metadata.version", 9), None),
        (14, "FeatureLevelRecord", level("metadata.version", 11), None),
        (15, "FeatureLevelRecord", level("metadata.version", 7), None),
        (16, "BrokerRegistrationChangeRecord", None, broker(100, 2, fenced=True, shutdown=True)),
        (17, "RegisterBrokerRecord", None, broker(103, 17, mv=R35)),
        (18, "UnregisterBrokerRecord", None, broker(103, 17)),
    ]
    for node_id in (1, 2, 3):
        file = f"alpha/{node_id}/__cluster_metadata-0/00000000000000000010.log"
        for offset, record_type, feature, broker_fields in log:
            if node_id == 3 and offset == 18:
                # A stale entry of an older leader that the new leader overwrote elsewhere.
                rows.append(row("alpha", node_id, "log", file, offset, "NoOpRecord", leader_epoch=1))
                continue
            rows.append(row("alpha", node_id, "log", file, offset, record_type, feature=feature, broker=broker_fields))
    for node_id in (1, 2):
        file = f"alpha/{node_id}/__cluster_metadata-0/00000000000000000012-0000000002.checkpoint"
        rows += [
            row("alpha", node_id, "snapshot", file, 11, "SnapshotHeader"),
            row("alpha", node_id, "snapshot", file, 2, "RegisterBrokerRecord", broker=broker(100, 2, mv=R36)),
            row("alpha", node_id, "snapshot", file, 3, "RegisterBrokerRecord",
                broker=broker(101, 3, fenced=False, mv=R35)),
            row("alpha", node_id, "snapshot", file, 11, "FeatureLevelRecord", feature=level("metadata.version", 8)),
            row("alpha", node_id, "snapshot", file, 11, "SnapshotFooter"),
        ]
    old = "alpha/2/__cluster_metadata-0/00000000000000000005-0000000001.checkpoint"
    rows += [
        row("alpha", 2, "snapshot", old, 2, "RegisterBrokerRecord", broker=broker(100, 2, mv=R36)),
        row("alpha", 2, "snapshot", old, 3, "RegisterBrokerRecord", broker=broker(101, 3, mv=R35)),
        row("alpha", 2, "snapshot", old, 4, "RegisterBrokerRecord", broker=broker(102, 4, mv=R35)),
        row("alpha", 2, "snapshot", old, 4, "FeatureLevelRecord", feature=level("metadata.version", 7)),
    ]
    bad_log = "alpha/2/__cluster_metadata-0/00000000000000000010.log"
    bad_snapshot = "alpha/3/__cluster_metadata-0/00000000000000000012-0000000002.checkpoint"
    rows += [
        row("alpha", 2, "log", bad_log, 19, None, error="crc mismatch"),
        row("alpha", 2, "log", bad_log, -1, None, error="truncated batch"),
        row("alpha", 3, "snapshot", bad_snapshot, -1, None, error="bad magic"),
    ]
    return rows


def beta_rows():
    file = "beta/1/__cluster_metadata-0/00000000000000000000.log"
    records = [
        (0, "FeatureLevelRecord", level("metadata.version", 14), None),
        (1, "FeatureLevelRecord", level("group.version", 1), None),
        (2, "FeatureLevelRecord", level("transaction.version", 2), None),
        (3, "RegisterBrokerRecord", None, broker(200, 3, mv=R36)),
        (4, "BrokerRegistrationChangeRecord", None, broker(200, 3, fenced=False)),
        (5, "RegisterBrokerRecord", None, broker(201, 5, mv=R36)),
        (6, "FeatureLevelRecord", level("group.version", 0), None),
        (7, "FeatureLevelRecord", level("metadata.version", 14), None),  # repeats the level: no change
    ]
    return [
        row("beta", 1, "log", file, offset, record_type, feature=feature, broker=broker_fields, leader_epoch=1)
        for offset, record_type, feature, broker_fields in records
    ]


def gamma_rows():
    file = "gamma/1/__cluster_metadata-0/00000000000000000009-0000000001.checkpoint"
    return [
        row("gamma", 1, "snapshot", file, 3, "RegisterBrokerRecord", broker=broker(300, 3, mv=R40)),
        row("gamma", 1, "snapshot", file, 4, "RegisterBrokerRecord", broker=broker(301, 4, mv=R39)),
        row("gamma", 1, "snapshot", file, 5, "RegisterBrokerRecord", broker=broker(302, 5, mv=R39)),
        row("gamma", 1, "snapshot", file, 8, "FeatureLevelRecord", feature=level("metadata.version", 21)),
    ]


def fleet_rows():
    return alpha_rows() + beta_rows() + gamma_rows()


# Controllers as pipeline.reader.fleet_nodes would describe them; alpha's node 3 still
# runs 3.5, and one node's release is unknown (kraftwerk's own software).
NODES = [
    ("alpha", 1, "controller", "3.6"),
    ("alpha", 2, "controller", "3.6.1"),
    ("alpha", 3, "controller", "3.5"),
    ("beta", 1, "controller", "3.6"),
    ("gamma", 1, "controller", None),
]
NODES_SCHEMA = "cluster string, node_id int, role string, release string"
