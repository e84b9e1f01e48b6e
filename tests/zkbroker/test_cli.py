"""`python -m cli.zk_broker` (cli/zk_broker.py:run) as a real process."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import trio

from cli.local_cluster import free_port_run
from server.zk.client import connect
from server.client import KafkaClient
from server.zk.paths import FeaturesZnode, FeatureZnodeStatus, FinalizedFeature, parse_kafka_uuid

from .harness import CLUSTER_ID, WAIT_S, seed

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, port: int, *, broker_id: int = 7, zookeeper: str | None = None) -> Path:
    lines = [
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "kafka.metadata.migration.enable=true",
    ]
    if zookeeper:
        lines.append(f"zookeeper.connect={zookeeper}")
    path.write_text("\n".join(lines) + "\n")
    return path


async def start(args: list[str], stderr_path: Path) -> trio.Process:
    with open(stderr_path, "wb") as stderr:
        return await trio.lowlevel.open_process(
            [sys.executable, "-m", "cli.zk_broker", *args], cwd=ROOT, stdout=stderr, stderr=stderr)


async def test_cli_process_registers_serves_and_leaves_on_sigterm(zk_hosts: str, tmp_path: Path) -> None:
    seed(zk_hosts)
    port = free_port_run(1)
    # zookeeper.connect from the file; --release from the command line.
    config = write_config(tmp_path / "broker.properties", port, zookeeper=zk_hosts)
    port_file = tmp_path / "port"
    async with await connect(zk_hosts) as zk:
        registration = await zk.watch_data("/brokers/ids/7")
        assert not (await registration.next(WAIT_S)).exists
        process = await start(["--config", str(config), "--release", "3.6", "--port-file", str(port_file)],
                              tmp_path / "broker.log")
        try:
            with trio.fail_after(WAIT_S):
                change = await registration.next(WAIT_S)
            assert change.exists, (tmp_path / "broker.log").read_text()
            raw = json.loads(change.data)
            assert raw["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port}"]
            assert raw["features"]["metadata.version"] == {"min_version": 1, "max_version": 14}

            with trio.fail_after(WAIT_S):
                async with await KafkaClient.connect("127.0.0.1", port) as client:
                    answer = await client.request(10000, 0, {})
            assert answer.config_enabled is True
            assert answer.cluster_id == parse_kafka_uuid(CLUSTER_ID)

            process.send_signal(signal.SIGTERM)
            with trio.fail_after(WAIT_S):
                assert await process.wait() == 0
                assert not (await registration.next(WAIT_S)).exists
            assert port_file.read_text().strip() == str(port)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        log = (tmp_path / "broker.log").read_text()
        events = [json.loads(line)["event"] for line in log.splitlines() if line.startswith("{")]
        assert "zkbroker.registered" in events and "zkbroker.stopped" in events


async def test_cli_refuses_to_start_on_unsupported_features(zk_hosts: str, tmp_path: Path) -> None:
    seed(zk_hosts)
    async with await connect(zk_hosts) as zk:
        await zk.set("/features", FeaturesZnode(FeatureZnodeStatus.ENABLED,
                                                {"metadata.version": FinalizedFeature(20)}).encode())
    config = write_config(tmp_path / "broker.properties", free_port_run(1))
    process = await start(["--zookeeper", zk_hosts, "--config", str(config), "--release", "3.6"],
                          tmp_path / "broker.log")
    with trio.fail_after(WAIT_S):
        code = await process.wait()
    log = (tmp_path / "broker.log").read_text()
    assert code == 1, log
    assert "refuses to start" in log and "metadata.version is finalized at 20" in log
    async with await connect(zk_hosts) as zk:
        assert await zk.exists("/brokers/ids/7") is None


async def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    process = await start(["--config", str(tmp_path / "missing.properties"), "--zookeeper", "127.0.0.1:1"],
                          tmp_path / "a.log")
    with trio.fail_after(WAIT_S):
        assert await process.wait() == 2
    config = write_config(tmp_path / "broker.properties", free_port_run(1))
    process = await start(["--config", str(config)], tmp_path / "b.log")  # no ZooKeeper anywhere
    with trio.fail_after(WAIT_S):
        assert await process.wait() == 2
    assert "zookeeper" in (tmp_path / "b.log").read_text().lower()
