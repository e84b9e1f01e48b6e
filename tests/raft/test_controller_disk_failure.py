"""A lone controller whose disk fills: clients get KAFKA_STORAGE_ERROR, reads go on,
writes commit again once space returns, and nothing it refused was ever committed.

A real `ControllerNode` on 127.0.0.1 with kraftwerk's raw-frame client; its metadata
log writes through a `FaultyDisk` (faulty_disk.py).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import trio

from faulty_disk import FaultyDisk
from protocol.errors import ErrorCode
from server.client import KafkaClient
from server.config import Listener, ServerConfig
from server.controller.commands import bootstrap_records
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import BOOTSTRAP_SNAPSHOT_NAME, write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

TIMEOUT_S = 30
MV_3_7_IV4 = 19
METADATA, API_VERSIONS, CREATE_TOPICS, DESCRIBE_QUORUM, UPDATE_FEATURES, DESCRIBE_CLUSTER = 3, 18, 19, 55, 57, 60
BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63


def formatted(directory: Path) -> ServerConfig:
    directory.mkdir(parents=True)
    write_bootstrap_checkpoint(directory, bootstrap_records(MV_3_7_IV4))
    write_meta_properties(directory, MetaProperties(cluster_id=random_uuid_string(), node_id=1,
                                                    directory_id=random_uuid_string()))
    return ServerConfig(listener=Listener("CONTROLLER", "127.0.0.1", 0), metadata_log_dir=directory)


async def register_unfenced(client: KafkaClient, cluster_id: str) -> None:
    reply = await client.call(BROKER_REGISTRATION, {
        "broker_id": 7, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 29099, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
        "rack": None, "log_dirs": [uuid.uuid4()],
    })
    assert reply.error_code == ErrorCode.NONE
    beat = await client.call(BROKER_HEARTBEAT, {
        "broker_id": 7, "broker_epoch": reply.broker_epoch, "current_metadata_offset": 2**40,
        "want_fence": False, "want_shut_down": False})
    assert beat.error_code == ErrorCode.NONE and not beat.is_fenced


def create(*names: str) -> dict:
    return {"timeout_ms": 5000, "validate_only": False, "topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for name in names]}


async def topic_names(client: KafkaClient) -> list[str]:
    reply = await client.call(METADATA, {"topics": None})
    return sorted(topic.name for topic in reply.topics)


def gauge(node: ControllerNode, name: str) -> float:
    return node.metrics.registry.get_sample_value(name)


async def test_a_lone_controller_on_a_full_disk_refuses_writes_with_kafka_storage_error_and_recovers(tmp_path):
    config = formatted(tmp_path / "metadata")
    disk = FaultyDisk()
    node = ControllerNode(config, file_ops=disk)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                await register_unfenced(client, node.cluster_id)
                reply = await client.call(CREATE_TOPICS, create("kept"))
                assert reply.topics[0].error_code == ErrorCode.NONE

                disk.fail(errno.ENOSPC)
                # The write whose append hits the full disk: an error answer, not a disconnect.
                reply = await client.call(CREATE_TOPICS, create("lost"))
                assert [topic.error_code for topic in reply.topics] == [ErrorCode.KAFKA_STORAGE_ERROR]
                assert "ENOSPC" in reply.topics[0].error_message
                assert node.raft_driver.storage_offline
                # Every write meanwhile gets the same retriable error, in its API's own shape.
                features = await client.call(UPDATE_FEATURES, {
                    "timeout_ms": 5000, "validate_only": False,
                    "feature_updates": [{"feature": "metadata.version", "max_version_level": MV_3_7_IV4,
                                         "upgrade_type": 1}]})
                assert features.error_code == ErrorCode.KAFKA_STORAGE_ERROR
                # Reads answer from the committed state.
                assert await topic_names(client) == ["kept"]
                cluster = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False})
                assert cluster.error_code == ErrorCode.NONE and cluster.cluster_id == node.cluster_id
                versions = await client.call(API_VERSIONS, {"client_software_name": "t",
                                                            "client_software_version": "1"})
                assert versions.error_code == ErrorCode.NONE
                quorum = await client.call(DESCRIBE_QUORUM, {"topics": [
                    {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
                assert quorum.error_code == ErrorCode.NONE
                assert quorum.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert gauge(node, "kraftwerk_storage_offline") == 1
                assert gauge(node, "kraftwerk_storage_failures_total") == 1
                # The disk is still full: a retry fails, and the node stays offline.
                while node.raft_driver.storage_recovery_failures < 1:
                    await node.raft_driver.wait_changed()
                assert node.raft_driver.storage_offline and not node.controller.active

                disk.heal()
                # It retries the disk, rebuilds its Raft state, elects itself and takes writes again.
                await node.controller.wait_active()
                assert gauge(node, "kraftwerk_storage_offline") == 0
                reply = await client.call(CREATE_TOPICS, create("after"))
                assert reply.topics[0].error_code == ErrorCode.NONE
                # Nothing refused was committed: the torn append was cut, never replayed.
                assert await topic_names(client) == ["after", "kept"]
            nursery.cancel_scope.cancel()

        # A clean restart on the same directory (no faults) finds exactly what was acknowledged.
        restarted = ControllerNode(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(restarted.run)
            async with await KafkaClient.connect("127.0.0.1", restarted.port) as client:
                assert await topic_names(client) == ["after", "kept"]
                # The broker registered before is still unfenced (liveness resets at activation).
                reply = await client.call(CREATE_TOPICS, create("lost"))
                assert reply.topics[0].error_code == ErrorCode.NONE
            nursery.cancel_scope.cancel()


# -- a real full disk -----------------------------------------------------------------

TMPFS_BYTES = 4 * 1024 * 1024


class SmallDisk:
    """A small tmpfs of its own when this process may mount one (root on Linux), where
    a filler file makes the kernel itself answer ENOSPC; otherwise the fault layer,
    and the test says so (a warning), so a CI run never passes without the check."""

    def __init__(self, mount_point: Path) -> None:
        self.mount_point = mount_point
        self.filler = mount_point / "filler"
        mount_point.mkdir()
        self.reason = self._mount()
        self.real = self.reason is None
        self.file_ops = None if self.real else FaultyDisk()

    def _mount(self) -> str | None:
        if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("mount") is None:
            return "not root on Linux, or no mount(8)"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(self.mount_point)],
                              capture_output=True, text=True, check=False)
        return None if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"

    def fill(self) -> None:
        if not self.real:
            self.file_ops.fail(errno.ENOSPC, operations=("pwrite",))
            return
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            # Bounded: each round takes at least one page of a disk of TMPFS_BYTES, or stops.
            for _ in range(TMPFS_BYTES // 4096 + 16):
                try:
                    os.write(fd, bytes(64 * 1024))
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    return
            raise AssertionError("the tmpfs never filled up")
        finally:
            os.close(fd)

    def free(self) -> None:
        if self.real:
            self.filler.unlink()
        else:
            self.file_ops.heal()

    def close(self) -> None:
        if self.real:
            subprocess.run(["umount", str(self.mount_point)], capture_output=True, check=False)


async def test_a_lone_controller_on_a_really_full_tmpfs_refuses_only_what_it_could_not_write(tmp_path):
    disk = SmallDisk(tmp_path / "disk")
    if not disk.real:
        warnings.warn(f"no tmpfs ({disk.reason}): ENOSPC comes from the fault layer instead", stacklevel=1)
    try:
        config = formatted(disk.mount_point / "metadata")
        node = ControllerNode(config, file_ops=disk.file_ops)
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                await nursery.start(node.run)
                async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                    await register_unfenced(client, node.cluster_id)
                    disk.fill()
                    # Appends still fit in the last page of the segment until one needs a new
                    # page: each write is either committed or refused, never both.
                    acknowledged: list[str] = []
                    refused = None
                    for index in range(200):  # bounded: a page holds far fewer topic records
                        name = f"t{index:03d}"
                        reply = await client.call(CREATE_TOPICS, create(name))
                        code = reply.topics[0].error_code
                        if code == ErrorCode.KAFKA_STORAGE_ERROR:
                            refused = name
                            break
                        assert code == ErrorCode.NONE, code
                        acknowledged.append(name)
                    assert refused is not None, "the full disk never refused a write"
                    assert "ENOSPC" in reply.topics[0].error_message
                    again = await client.call(CREATE_TOPICS, create("while-full"))
                    assert again.topics[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
                    assert await topic_names(client) == acknowledged
                    while node.raft_driver.storage_recovery_failures < 1:
                        await node.raft_driver.wait_changed()
                    assert node.raft_driver.storage_offline

                    disk.free()
                    await node.controller.wait_active()
                    reply = await client.call(CREATE_TOPICS, create("after"))
                    assert reply.topics[0].error_code == ErrorCode.NONE
                    assert await topic_names(client) == sorted([*acknowledged, "after"])
                nursery.cancel_scope.cancel()

            restarted = ControllerNode(config)
            async with trio.open_nursery() as nursery:
                await nursery.start(restarted.run)
                async with await KafkaClient.connect("127.0.0.1", restarted.port) as client:
                    assert await topic_names(client) == sorted([*acknowledged, "after"])
                nursery.cancel_scope.cancel()
    finally:
        disk.close()


async def test_a_snapshot_the_disk_cannot_take_is_skipped_and_the_controller_goes_on(tmp_path, monkeypatch):
    """A metadata.version change snapshots first (KIP-778's rollback point); with the disk
    refusing the snapshot file the change still commits, the node keeps serving, and a
    structured line says which snapshot was skipped."""
    import server.controller.replayer

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(server.controller.replayer, "write_controller_snapshot", no_space)
    config = formatted(tmp_path / "metadata")
    node = ControllerNode(config)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                await register_unfenced(client, node.cluster_id)
                reply = await client.call(UPDATE_FEATURES, {
                    "timeout_ms": 5000, "validate_only": False,
                    "feature_updates": [{"feature": "metadata.version", "max_version_level": MV_3_7_IV4 + 1,
                                         "upgrade_type": 1}]})
                assert reply.error_code == ErrorCode.NONE
                while node.state.metadata_version != MV_3_7_IV4 + 1:
                    await node.raft_driver.wait_changed()
                created = await client.call(CREATE_TOPICS, create("after"))
                assert created.topics[0].error_code == ErrorCode.NONE
                assert await topic_names(client) == ["after"]
            nursery.cancel_scope.cancel()
    # No snapshot but the bootstrap one `storage format` wrote.
    assert [path.name for path in (tmp_path / "metadata" / "__cluster_metadata-0").glob("*.checkpoint*")] == [
        BOOTSTRAP_SNAPSHOT_NAME]
