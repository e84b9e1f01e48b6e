"""Fixtures for the data source tests: small fleets written with kraftwerk's own
storage code (the Spark session is tests/conftest.py's)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from protocol import metadata_records as mr
from protocol.raft_records import LEADER_CHANGE_MESSAGE
from protocol.record_batch import ControlRecordType, encode_batch
from protocol.records import encode_metadata_record, record
from server.controller.snapshot import write_controller_snapshot
from server.controller.state import ControllerState
from server.storage.log import MetadataLog
from server.storage.meta_properties import MetaProperties, write_meta_properties


TIMESTAMP_MS = 1_700_000_000_000
MV_LEVEL = 22  # a metadata.version where RegisterBrokerRecord is written at v3


def feature_level(name: str, level: int) -> bytes:
    return encode_metadata_record(record(mr.FEATURE_LEVEL_RECORD, {"name": name, "feature_level": level}, version=0))


def register_broker(broker_id: int, epoch: int, incarnation: uuid.UUID, *, rack: str | None = None,
                    mv_range: tuple[int, int] = (7, 22), log_dirs: tuple[uuid.UUID, ...] = (),
                    version: int = 3) -> bytes:
    data = {
        "broker_id": broker_id,
        "incarnation_id": incarnation,
        "broker_epoch": epoch,
        "end_points": [{"name": "PLAINTEXT", "host": "localhost", "port": 9092 + broker_id, "security_protocol": 0}],
        "features": [
            {"name": "group.version", "min_supported_version": 0, "max_supported_version": 1},
            {"name": "metadata.version", "min_supported_version": mv_range[0], "max_supported_version": mv_range[1]},
        ],
        "rack": rack,
        "fenced": True,
        "in_controlled_shutdown": False,
        "log_dirs": list(log_dirs),
    }
    return encode_metadata_record(record(mr.REGISTER_BROKER_RECORD, data, version=version))


def unfence_broker(broker_id: int, epoch: int) -> bytes:
    return encode_metadata_record(record(mr.UNFENCE_BROKER_RECORD, {"id": broker_id, "epoch": epoch}))


def registration_change(broker_id: int, epoch: int, *, fenced: int = 0, shutdown: int = 0) -> bytes:
    data = {"broker_id": broker_id, "broker_epoch": epoch, "fenced": fenced, "in_controlled_shutdown": shutdown}
    return encode_metadata_record(record(mr.BROKER_REGISTRATION_CHANGE_RECORD, data, version=2))


def leader_change_value(leader_id: int, voters: tuple[int, ...]) -> bytes:
    return LEADER_CHANGE_MESSAGE.encode(0, {
        "version": 0, "leader_id": leader_id,
        "voters": [{"voter_id": voter} for voter in voters],
        "granting_voters": [{"voter_id": voter} for voter in voters],
    })


@dataclass(frozen=True)
class Batch:
    """One batch to write: its values, epoch, and control type (None: metadata)."""

    values: tuple[bytes, ...]
    epoch: int = 1
    control_type: int | None = None


def write_node(node_dir: Path, cluster_id: str, node_id: int, *, roles: str | None = None,
               release: str | None = None) -> Path:
    node_dir.mkdir(parents=True, exist_ok=True)
    write_meta_properties(node_dir, MetaProperties(cluster_id=cluster_id, node_id=node_id))
    lines = []
    if roles is not None:
        lines.append(f"process.roles={roles}")
    if release is not None:
        lines.append(f"kraftwerk.release={release}")
    if lines:
        (node_dir / "node.properties").write_text("\n".join(lines) + "\n")
    return node_dir


def metadata_dir(node_dir: Path) -> Path:
    return node_dir / "__cluster_metadata-0"


def append_batches(node_dir: Path, batches: list[Batch], start_offset: int = 0) -> list[tuple[int, int]]:
    """Appends the batches with the real log; returns each batch's (byte position, size)."""
    log = MetadataLog.open(metadata_dir(node_dir))
    layout = []
    try:
        offset = start_offset
        position = sum(p.stat().st_size for p in metadata_dir(node_dir).glob("*.log"))
        for index, batch in enumerate(batches):
            data = encode_batch(offset, batch.epoch, list(batch.values), TIMESTAMP_MS + index, batch.control_type)
            log.append_raw(data)
            layout.append((position, len(data)))
            position += len(data)
            offset += len(batch.values)
    finally:
        log.close()
    return layout


def standard_log() -> list[Batch]:
    """A controller's first epoch: LeaderChange, bootstrap features, a broker's life."""
    incarnation = uuid.UUID(int=0xABC)
    return [
        Batch((leader_change_value(1, (1, 2, 3)),), 1, ControlRecordType.LEADER_CHANGE),
        Batch((feature_level("metadata.version", MV_LEVEL), feature_level("group.version", 1))),
        Batch((register_broker(4, 3, incarnation, rack="rack-a", log_dirs=(uuid.UUID(int=0x1D1),)),)),
        Batch((unfence_broker(4, 3),)),
        Batch((registration_change(4, 3, shutdown=1),)),
    ]


def write_snapshot(node_dir: Path, end_offset: int = 10, epoch: int = 1) -> ControllerState:
    """A controller snapshot with metadata.version and one registered broker."""
    state = ControllerState("unused")
    state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": MV_LEVEL}, 0), 1)
    state.replay(record(mr.REGISTER_BROKER_RECORD, {
        "broker_id": 7, "incarnation_id": uuid.UUID(int=7), "broker_epoch": 3,
        "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 22}],
        "fenced": False,
    }), 3)
    state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "group.version", "feature_level": 1}, 0), 5)
    metadata_dir(node_dir).mkdir(parents=True, exist_ok=True)
    write_controller_snapshot(state, metadata_dir(node_dir), end_offset, epoch, TIMESTAMP_MS)
    return state


def build_fleet(root: Path) -> Path:
    """Two clusters: 'east' (two controllers, one with a snapshot) and 'west' (one controller)."""
    east_a = write_node(root / "east" / "ctrl-1", "EastClusterIdAAAAAAAAA", 1, roles="controller", release="0.4.0")
    append_batches(east_a, standard_log())
    write_snapshot(east_a, end_offset=6, epoch=1)
    east_b = write_node(root / "east" / "ctrl-2", "EastClusterIdAAAAAAAAA", 2, roles="broker,controller")
    append_batches(east_b, standard_log()[:3])
    west = write_node(root / "west" / "ctrl-9", "WestClusterIdBBBBBBBBB", 9, roles="controller", release="0.3.1")
    append_batches(west, standard_log()[:2])
    return root


@pytest.fixture
def fleet(tmp_path) -> Path:
    return build_fleet(tmp_path / "fleet")


@pytest.fixture
def build():
    """The builders above, for test modules (a test module cannot import a conftest by
    name: several conftest.py files in tests/ share the module name `conftest`)."""
    return SimpleNamespace(
        TIMESTAMP_MS=TIMESTAMP_MS, MV_LEVEL=MV_LEVEL, Batch=Batch, feature_level=feature_level,
        register_broker=register_broker, unfence_broker=unfence_broker, registration_change=registration_change,
        leader_change_value=leader_change_value, write_node=write_node, metadata_dir=metadata_dir,
        append_batches=append_batches, standard_log=standard_log, write_snapshot=write_snapshot,
        build_fleet=build_fleet,
    )
