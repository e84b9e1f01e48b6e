"""Where a formatted node keeps its metadata on disk, and the bootstrap checkpoint.

Owns: the name of the metadata log's directory inside a node's log dir
(`__cluster_metadata-0`, Kafka's topic-partition directory name) and writing
`bootstrap.checkpoint`, the records `kraftwerk storage format` chose (the
metadata.version, SCRAM credentials), which an empty log replays first.

Rules kept here:
- Pure file I/O with no server dependency, so the CLI, the pipeline's fake
  fleets and the node all share one definition of the on-disk layout.
- The checkpoint is one record batch of metadata records (base offset 0,
  epoch 0), written atomically: a crash leaves the old file or the new one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from protocol.record_batch import encode_batch
from protocol.records import MetadataRecord, encode_metadata_record
from server.storage.durable import write_file_atomically

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def write_bootstrap_checkpoint(directory: Path, records: Iterable[MetadataRecord]) -> Path:
    """Writes the format-time records as one record batch, atomically; returns the file's path."""
    data = encode_batch(0, 0, [encode_metadata_record(r) for r in records], 0)
    path = directory / BOOTSTRAP_CHECKPOINT
    write_file_atomically(path, data)
    return path
