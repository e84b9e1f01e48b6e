"""Where a formatted node keeps its metadata on disk, and the bootstrap snapshot.

Owns: the name of the metadata log's directory inside a node's log dir
(`__cluster_metadata-0`, Kafka's topic-partition directory name), writing the
bootstrap snapshot `kraftwerk storage format` makes for a controller, and reading
it back (`read_bootstrap`): the records the cluster starts with (metadata.version,
the other features, SCRAM credentials), the kraft.version and, for a dynamic
quorum (KIP-853), the initial voters.

The file is Kafka 4.4's: `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`,
snapshot id (end offset 0, epoch 0), three batches:

    control batch  SnapshotHeader v0 [+ KRaftVersion{kraft.version} when it is >= 1
                   [+ VotersRecord when --standalone / --initial-controllers named voters]]
    data batch     the bootstrap metadata records (file offsets follow the control records)
    control batch  SnapshotFooter v0

Rules kept here:
- Pure file I/O with no server dependency, so the CLI, the pipeline's fake fleets
  and the node all share one definition of the on-disk layout.
- Written atomically: a crash leaves no file or the whole file.
- A snapshot ending at offset 0 holds no state: its metadata records are what the
  first leader writes into the log, not an image to load.
- kraft.version 0 with a voter set is refused, as Kafka's snapshot writer does: at
  level 0 the voters are the static `controller.quorum.voters`.
- Directories formatted by older kraftwerk have `bootstrap.checkpoint` (one batch
  of metadata records) beside meta.properties instead; it is still read, never
  written.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import DecodeError
from protocol.raft_records import (
    KRAFT_VERSION_RECORD,
    SNAPSHOT_FOOTER_RECORD,
    SNAPSHOT_HEADER_RECORD,
)
from protocol.record_batch import (
    DEFAULT_MAX_BATCH_BYTES,
    ControlRecordType,
    Record,
    RecordBatch,
    control_record_key,
    decode_batches,
    encode_batch,
    encode_record_batch,
)
from protocol.records import MetadataRecord, decode_metadata_record, encode_metadata_record
from server.voters import VoterSet, decode_voters_record, encode_voters_record
from server.storage.durable import write_file_atomically
from server.storage.snapshot import CorruptSnapshotError, parse_snapshot, parse_snapshot_file_name

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
# Kafka's Snapshots.BOOTSTRAP_SNAPSHOT_ID (0, 0) as a file name.
BOOTSTRAP_SNAPSHOT_NAME = "00000000000000000000-0000000000.checkpoint"
# What kraftwerk wrote before KIP-853 (read only).
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_CONTROL_RECORD_VERSION = 0


class BootstrapError(ValueError):
    """A bootstrap file that does not read back; the message names the file."""


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """What a formatted controller starts from.

    `voters` is None when the file names no voter set (a static quorum at
    kraft.version 0, or `--no-initial-controllers`, where the voters come from the
    leader later); otherwise the initial voters, by node id."""

    records: tuple[MetadataRecord, ...]
    kraft_version: int = 0
    voters: VoterSet | None = None
    path: Path | None = None


def bootstrap_snapshot_path(directory: Path) -> Path:
    """The bootstrap snapshot of the node whose log dir is `directory`."""
    return Path(directory) / METADATA_LOG_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def encode_bootstrap_snapshot(records: Iterable[MetadataRecord], kraft_version: int = 0,
                              voters: VoterSet | None = None,
                              timestamp_ms: int | None = None) -> bytes:
    """The bytes of the bootstrap snapshot (module docstring). Every batch and the
    header's last contained timestamp carry `timestamp_ms` (now, by default)."""
    if kraft_version < 0:
        raise ValueError(f"kraft.version {kraft_version} is negative")
    if voters is not None and kraft_version == 0:
        raise ValueError("a voter set needs kraft.version 1 or later (at 0 the voters are controller.quorum.voters)")
    values = [encode_metadata_record(item) for item in records]
    if not values:
        raise ValueError("a bootstrap snapshot needs at least one metadata record (metadata.version)")
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    control: list[tuple[int, bytes]] = [(ControlRecordType.SNAPSHOT_HEADER, SNAPSHOT_HEADER_RECORD.encode(
        _CONTROL_RECORD_VERSION,
        {"version": _CONTROL_RECORD_VERSION, "last_contained_log_timestamp": timestamp_ms}))]
    if kraft_version >= 1:
        control.append((ControlRecordType.KRAFT_VERSION, KRAFT_VERSION_RECORD.encode(
            _CONTROL_RECORD_VERSION, {"version": _CONTROL_RECORD_VERSION, "kraft_version": kraft_version})))
        if voters is not None:
            control.append((ControlRecordType.VOTERS, encode_voters_record(voters)))
    # One control batch of mixed types (each record keyed with its own type), as
    # Kafka's snapshot writer lays out the header.
    header = encode_record_batch(RecordBatch(
        base_offset=0, leader_epoch=0, base_timestamp_ms=timestamp_ms, last_offset_delta=len(control) - 1,
        is_control=True, max_timestamp_ms=timestamp_ms,
        records=tuple(Record(index, value, control_record_key(kind), (), timestamp_ms)
                      for index, (kind, value) in enumerate(control))))
    parts = [header]
    offset = len(control)
    # Bounded: every round takes at least one record.
    while values:
        size, count = 0, 0
        while count < len(values) and (count == 0 or size + len(values[count]) + 64 < DEFAULT_MAX_BATCH_BYTES - 256):
            size += len(values[count]) + 64
            count += 1
        parts.append(encode_batch(offset, 0, values[:count], timestamp_ms))
        offset += count
        values = values[count:]
    footer = SNAPSHOT_FOOTER_RECORD.encode(_CONTROL_RECORD_VERSION, {"version": _CONTROL_RECORD_VERSION})
    parts.append(encode_batch(offset, 0, [footer], timestamp_ms, ControlRecordType.SNAPSHOT_FOOTER))
    return b"".join(parts)


def write_bootstrap_snapshot(directory: Path, records: Iterable[MetadataRecord], *, kraft_version: int = 0,
                             voters: VoterSet | None = None,
                             timestamp_ms: int | None = None) -> Path:
    """Writes the bootstrap snapshot into `directory`'s metadata log directory
    (created if missing), atomically; returns the file's path."""
    data = encode_bootstrap_snapshot(records, kraft_version, voters, timestamp_ms)
    path = bootstrap_snapshot_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(path, data)
    return path


def write_bootstrap_checkpoint(directory: Path, records: Iterable[MetadataRecord]) -> Path:
    """The bootstrap of a static quorum (kraft.version 0, no voters): the name older
    callers use; it writes the bootstrap snapshot, not `bootstrap.checkpoint`."""
    return write_bootstrap_snapshot(directory, records)


def write_legacy_bootstrap_checkpoint(directory: Path, records: Iterable[MetadataRecord]) -> Path:
    """`bootstrap.checkpoint` as kraftwerk wrote it before KIP-853: one batch of
    metadata records beside meta.properties. For tests of directories formatted then."""
    data = encode_batch(0, 0, [encode_metadata_record(r) for r in records], 0)
    path = Path(directory) / BOOTSTRAP_CHECKPOINT
    write_file_atomically(path, data)
    return path


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------


def parse_bootstrap_snapshot(data: bytes, source: str = "bootstrap snapshot") -> Bootstrap:
    """The contents of a bootstrap snapshot's bytes (Kafka's or kraftwerk's). Raises
    BootstrapError naming `source` when they do not verify or decode."""
    snapshot_id = parse_snapshot_file_name(BOOTSTRAP_SNAPSHOT_NAME)
    assert snapshot_id is not None
    try:
        contents = parse_snapshot(data, snapshot_id, source)
    except CorruptSnapshotError as exc:
        raise BootstrapError(str(exc)) from None
    kraft_version = 0
    voters = None
    try:
        # KRaftVersion/Voters belong in the header's batch, but a reader takes them
        # wherever the snapshot holds them (the last one wins, as in a log).
        for entry in contents.header_records + tuple(e for e in contents.records if e.control_type is not None):
            if entry.control_type == ControlRecordType.KRAFT_VERSION:
                kraft_version = KRAFT_VERSION_RECORD.decode(_CONTROL_RECORD_VERSION, entry.value).kraft_version
            elif entry.control_type == ControlRecordType.VOTERS:
                voters = decode_voters_record(entry.value)
        records = tuple(decode_metadata_record(value) for value in contents.values)
    except DecodeError as exc:
        raise BootstrapError(f"{source}: {exc}") from None
    if voters is not None and kraft_version == 0:
        raise BootstrapError(f"{source}: a VotersRecord at kraft.version 0")
    return Bootstrap(records, kraft_version, voters)


def read_legacy_bootstrap_checkpoint(path: Path) -> Bootstrap:
    """`bootstrap.checkpoint` of an older kraftwerk: its metadata records, kraft.version 0."""
    try:
        batches = decode_batches(path.read_bytes())
        records = tuple(decode_metadata_record(r.value) for batch in batches for r in batch.records)
    except DecodeError as exc:
        raise BootstrapError(f"{path} is corrupt ({exc})") from None
    return Bootstrap(records, 0, None, path)


def read_bootstrap(directory: Path) -> Bootstrap | None:
    """What the node whose log dir is `directory` was formatted with: the bootstrap
    snapshot, else an older kraftwerk's `bootstrap.checkpoint`, else None (neither
    exists: a broker's directory, or a log already past its start). Raises
    BootstrapError, naming the file, when the file is damaged."""
    path = bootstrap_snapshot_path(directory)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        legacy = Path(directory) / BOOTSTRAP_CHECKPOINT
        return read_legacy_bootstrap_checkpoint(legacy) if legacy.exists() else None
    try:
        found = parse_bootstrap_snapshot(data, str(path))
    except BootstrapError as exc:
        reason = str(exc)
        if reason.startswith(f"{path}: "):
            reason = reason[len(str(path)) + 2:]
        raise BootstrapError(f"{path} is corrupt ({reason})") from None
    return Bootstrap(found.records, found.kraft_version, found.voters, path)
