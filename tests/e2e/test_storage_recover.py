"""A real single controller with damaged durable state refuses to start, cleanly.

One flipped byte inside the last batch the controller fsynced (and so
acknowledged) is corruption, not a torn write: the process exits 1 with the
file, byte and base offset on stderr and one `storage.corruption_detected`
line, instead of starting without the record. `kraftwerk storage recover`
then truncates to the last good batch and the controller starts. A
quorum-state file that cannot be valid is refused the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.record_batch import decode_batch
from server.client import KafkaClient
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.raft.validate import MAX_EPOCH

from .helpers import REPO, cli_env

pytestmark = pytest.mark.e2e

OVERRIDES = ("broker.session.timeout.ms=600000",)
CALL_TIMEOUT_S = 20
START_TIMEOUT_S = 60


def registration(broker_id: int, cluster_id: str) -> dict:
    return {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19090 + broker_id, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
        "rack": None,
        "log_dirs": [uuid.uuid4()],
    }


async def registered_brokers(controller) -> list[int]:
    """The registered brokers, fenced or not (DescribeQuorum's observers)."""
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(controller.host, controller.port) as client:
            quorum = await client.call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                        "partitions": [{"partition_index": 0}]}]})
    return sorted(r.replica_id for r in quorum.topics[0].partitions[0].observers)


def start_expecting_refusal(log_dir) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "cli.main", "controller", "--log-dir", str(log_dir), "--listener",
            "127.0.0.1:0", "--port-file", str(log_dir.parent / "refused.port")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S, cwd=REPO, env=cli_env())


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    """`kraftwerk ARGV` with no terminal on stdin (so nothing can prompt)."""
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True,
                          timeout=START_TIMEOUT_S, cwd=REPO, env=cli_env(), stdin=subprocess.DEVNULL)


def json_events(stderr: str, name: str) -> list[dict]:
    found = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == name:
                found.append(entry)
    return found


def last_data_batch(segment) -> tuple[int, int, int]:
    """(byte position, size, base offset) of the segment's last non-control batch."""
    data = segment.read_bytes()
    position, found = 0, None
    while position < len(data):
        batch, end = decode_batch(data, position, max_batch_bytes=len(data))
        if not batch.is_control:
            found = (position, end - position, batch.base_offset)
        position = end
    assert found is not None
    return found


async def test_flipped_byte_in_the_last_fsynced_batch_refuses_start_then_recover(controllers):
    controller = controllers.new(overrides=OVERRIDES)
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(controller.host, controller.port) as client:
            for broker_id in (2, 3, 4):
                response = await client.call(62, registration(broker_id, controller.cluster_id))
                assert response.error_code == ErrorCode.NONE
    assert await registered_brokers(controller) == [2, 3, 4]
    assert controller.kill() == -9

    metadata_dir = controller.log_dir / METADATA_LOG_DIR_NAME
    segments = sorted(metadata_dir.glob("*.log"))
    segment = segments[-1]
    position, size, base_offset = last_data_batch(segment)
    data = bytearray(segment.read_bytes())
    assert position + size == len(data), "the acknowledged registration is the last batch"
    data[position + size - 3] ^= 0x10  # inside broker 4's RegisterBrokerRecord
    segment.write_bytes(bytes(data))

    refused = await trio.to_thread.run_sync(start_expecting_refusal, controller.log_dir)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    human = [line for line in refused.stderr.splitlines() if line.startswith("Error: ")]
    assert len(human) == 1, refused.stderr
    assert str(segment) in human[0]
    assert f"byte {position}" in human[0]
    assert f"base offset {base_offset}" in human[0]
    assert "kraftwerk storage recover --config FILE" in human[0]
    [event] = json_events(refused.stderr, "storage.corruption_detected")
    assert (event["path"], event["position"], event["base_offset"]) == (str(segment), position, base_offset)
    # Nothing was cut on the way: the damaged bytes are still there for the operator.
    assert segment.read_bytes() == bytes(data)

    where = ("--log-dir", str(controller.log_dir), "--listener", "127.0.0.1:0")
    asked = await trio.to_thread.run_sync(lambda: run_cli("storage", "recover", *where))
    assert asked.returncode == 1, asked.stdout + asked.stderr
    assert "--yes" in asked.stderr
    assert segment.read_bytes() == bytes(data)  # refused: nothing changed

    recovered = await trio.to_thread.run_sync(lambda: run_cli("storage", "recover", *where, "--yes"))
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert f"removes offset {base_offset} and everything after it" in recovered.stdout
    assert f"{size} bytes" in recovered.stdout
    assert "single controller: the removed records are lost" in recovered.stdout
    assert f"now ends at offset {base_offset}" in recovered.stdout
    assert len(segment.read_bytes()) == position

    restarted = await trio.to_thread.run_sync(controllers.restart_on, controller.log_dir, controller.cluster_id,
                                              OVERRIDES)
    assert restarted.wait_for_event("controller.recovered")["log_end_offset"] == base_offset
    # The registration in the removed batch is gone; the ones before it are not.
    assert await registered_brokers(restarted) == [2, 3]

    again = await trio.to_thread.run_sync(lambda: run_cli("storage", "recover", *where, "--yes"))
    assert again.returncode == 1 and "stop the node first" in again.stderr  # the running node holds the log


async def test_a_quorum_state_file_that_cannot_be_valid_refuses_start(controllers):
    controller = controllers.new()
    assert controller.stop() == 0
    path = controller.log_dir / METADATA_LOG_DIR_NAME / "quorum-state"
    document = json.loads(path.read_text())
    document["leaderEpoch"] = MAX_EPOCH + 1
    path.write_text(json.dumps(document))

    refused = await trio.to_thread.run_sync(start_expecting_refusal, controller.log_dir)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    human = [line for line in refused.stderr.splitlines() if line.startswith("Error: ")]
    assert len(human) == 1, refused.stderr
    assert str(path) in human[0] and f"leaderEpoch {MAX_EPOCH + 1} is outside" in human[0]
    assert len(json_events(refused.stderr, "raft.quorum_state_invalid")) == 1
