"""Group commit: committed-record throughput and fsyncs with many concurrent proposers.

For every cell (group commit on/off x C concurrent proposers) a freshly
formatted `kraftwerk controller` (metadata.version 3.7-IV1 unless told) is started on
127.0.0.1 with `--override controller.group.commit.enable=true|false`. One
load-generator process (this one: a single `selectors` loop, non-blocking
sockets) opens C connections; each is a closed-loop proposer with one
request in flight, sending BrokerRegistration v4 with a broker id (and
incarnation id and log directory) never used before, so every request is
accepted and appends exactly one RegisterBrokerRecord. Every reply is
checked: error_code 0, and broker_epoch is the offset of that broker's
record (a new incarnation's epoch is its record's offset).

Each cell runs a warm-up, then a measured window (both bounded in time and
in requests), then stops sending and drains the replies still in flight.
After the controller has stopped, its log is read back (MetadataLog, read
only) and checked: every acknowledged registration is a RegisterBrokerRecord
of that broker at the offset the reply named, and the log holds no other
RegisterBrokerRecord. Reported per cell:
  records/s      registrations acknowledged inside the measured window;
  batches/s      record batches holding those acknowledged records (each
                 append is one batch and one fsync; records of one batch are
                 acknowledged together, so only the window's two edges can
                 split a batch): the fsync rate;
  records/fsync  the two divided;
  p50/p99 µs     send-to-reply latency of requests answered in the window,
                 as the load generator sees it (its own loop time included).
Plus the disk's fsync floor in the same directory (os.write + os.fsync of a
batch-sized buffer, one thread), for scale.

Why 3.7-IV1 by default: from 3.7-IV2 on (directory assignment) a registration
checks its log directories against every registered broker's, so the
command's cost grows with the number of brokers, and a cell that registers
thousands of them ends up measuring that scan instead of the commit path.
`--metadata-version 3.8-IV0` shows it.

Expected shape: with group commit, records/s grows with C while batches/s
stays near the fsync floor's rate; without it, records/s == batches/s, flat.

`--controllers N` (N > 1) runs each cell against an N-voter Raft quorum of
real processes on 127.0.0.1: the proposers all talk to the leader (the
active controller), a record is acknowledged once the quorum committed it,
and the log read back is the leader's. server CPU is the leader's.

Run: .venv/bin/python bench/bench_group_commit.py [--concurrency 1,4,16,64] [--duration-s 3]
       [--warmup-s 0.5] [--modes on,off] [--metadata-version 3.7-IV1] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import selectors
import shutil
import socket
import struct
import sys
import time
import uuid
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from protocol.header import REQUEST_HEADER, RESPONSE_HEADER  # noqa: E402
from protocol.metadata_records import REGISTER_BROKER_RECORD  # noqa: E402
from protocol.records import decode_metadata_record  # noqa: E402
from protocol.registry import API_MESSAGES  # noqa: E402
from server.controller.features import metadata_version_from_name  # noqa: E402
from server.gating import max_allowed_version  # noqa: E402
from server.observability import configure_logging  # noqa: E402
from server.storage.log import MetadataLog  # noqa: E402

BROKER_REGISTRATION_KEY = 62
BROKER_REGISTRATION_MAX_VERSION = 4
# BrokerRegistration is flexible in every version: request header v2, response header v1.
REQUEST_HEADER_VERSION, RESPONSE_HEADER_VERSION = 2, 1
DEFAULT_METADATA_VERSION = "3.7-IV1"  # the last level before directory assignment (see above)
# The broker's supported metadata.version range: 3.0-IV1 (1) .. 4.0-IV0 (22).
MV_MIN_LEVEL, MV_MAX_LEVEL = 1, 22
SECURITY_PROTOCOL_PLAINTEXT = 0
FIRST_BROKER_ID = 1000
DEFAULT_CONCURRENCY = "1,4,16,64"
MAX_CONCURRENCY = 1024
MAX_CONTROLLERS = 9
MAX_REQUESTS_PER_CELL = 2_000_000
DRAIN_TIMEOUT_S = 30.0
SELECT_TIMEOUT_S = 1.0
RECEIVE_CHUNK_BYTES = 65536
FSYNC_FLOOR_S = 0.5
FSYNC_FLOOR_MAX = 100_000
# A read of the log returns whole batches up to this many bytes; bounded by the log's size.
READ_CHUNK_BYTES = 4 * 1024 * 1024
_SIZE = struct.Struct(">i")

REQUEST, RESPONSE = API_MESSAGES[BROKER_REGISTRATION_KEY]


# --------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------

def registration_version(metadata_version: str) -> int:
    """The highest BrokerRegistration version the controller accepts at `metadata_version`
    (KIP-778 gating, server/gating.py: v2+ carry log directories, from 3.7-IV2)."""
    level = metadata_version_from_name(metadata_version).level
    return max_allowed_version(BROKER_REGISTRATION_KEY, 0, BROKER_REGISTRATION_MAX_VERSION, level)


def registration_frame(cluster_id: str, broker_id: int, correlation_id: int, version: int) -> bytes:
    """A BrokerRegistration frame for a broker never seen before (fresh incarnation and log dir)."""
    body = {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092,
                       "security_protocol": SECURITY_PROTOCOL_PLAINTEXT}],
        "features": [{"name": "metadata.version", "min_supported_version": MV_MIN_LEVEL,
                      "max_supported_version": MV_MAX_LEVEL}],
        "rack": None,
        "is_migrating_zk_broker": False,
        # metadata.version >= 3.7-IV2 needs at least one directory, unique across brokers.
        "log_dirs": [uuid.uuid4()],
        "previous_broker_epoch": -1,
    }
    payload = REQUEST_HEADER.encode(REQUEST_HEADER_VERSION, {
        "request_api_key": BROKER_REGISTRATION_KEY, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": "bench-group-commit",
    }) + REQUEST.encode(version, body)
    return _SIZE.pack(len(payload)) + payload


def parse_reply(frame: bytes | memoryview, correlation_id: int, broker_id: int, version: int) -> int:
    """Checks one BrokerRegistration reply; returns its broker epoch (the record's offset)."""
    stream = BytesIO(frame)
    header = RESPONSE_HEADER.decode(RESPONSE_HEADER_VERSION, stream)
    if header.correlation_id != correlation_id:
        raise RuntimeError(f"correlation id {header.correlation_id}, expected {correlation_id}")
    reply = RESPONSE.decode(version, stream)
    if reply.error_code != 0:
        raise RuntimeError(f"BrokerRegistration of broker {broker_id} failed with error code {reply.error_code}")
    return reply.broker_epoch


# --------------------------------------------------------------------------
# load generator: C closed-loop proposers on one selectors loop
# --------------------------------------------------------------------------

class _Proposer:
    __slots__ = ("sock", "buffer", "correlation", "broker_id", "sent_at")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.correlation = 0
        self.broker_id = -1
        self.sent_at = 0.0


@dataclass
class CellRun:
    """What the load generator saw in one cell."""

    window_s: float = 0.0
    window_latencies_s: list[float] = field(default_factory=list)
    window_offsets: list[int] = field(default_factory=list)
    # Every acknowledged registration of the cell (warm-up and drain too): offset -> broker id.
    acked: dict[int, int] = field(default_factory=dict)


def drive(port: int, cluster_id: str, connections: int, warmup_s: float, duration_s: float,
          max_requests: int, version: int) -> CellRun:
    """Closed loop: each proposer sends its next registration as soon as the previous one is answered."""
    run = CellRun()
    next_broker_id = FIRST_BROKER_ID
    selector = selectors.DefaultSelector()
    proposers: list[_Proposer] = []
    clock = time.perf_counter

    def send(proposer: _Proposer, now: float) -> None:
        nonlocal next_broker_id
        proposer.correlation += 1
        proposer.broker_id = next_broker_id
        next_broker_id += 1
        frame = registration_frame(cluster_id, proposer.broker_id, proposer.correlation, version)
        proposer.sent_at = now
        written = proposer.sock.send(frame)  # ~150 B: fits an empty socket buffer at once
        if written < len(frame):
            proposer.sock.setblocking(True)
            proposer.sock.sendall(frame[written:])
            proposer.sock.setblocking(False)

    try:
        for _ in range(connections):
            sock = common.connect(port)
            sock.setblocking(False)
            proposer = _Proposer(sock)
            proposers.append(proposer)
            selector.register(sock, selectors.EVENT_READ, proposer)
        now = clock()
        measure_from = now + warmup_s
        measure_until = measure_from + duration_s
        for proposer in proposers:
            send(proposer, now)
        in_flight = connections
        stopping = False
        drain_deadline = None
        sent_total = connections
        while in_flight:  # bounded: sending stops at the window's end or after max_requests
            events = selector.select(timeout=SELECT_TIMEOUT_S)
            now = clock()
            if not stopping and (now >= measure_until or sent_total >= max_requests):
                stopping = True
                run.window_s = min(now, measure_until) - measure_from
                drain_deadline = now + DRAIN_TIMEOUT_S
            if drain_deadline is not None and now > drain_deadline:
                raise RuntimeError(f"{in_flight} replies still missing {DRAIN_TIMEOUT_S} s after the window")
            for key, _ in events:
                proposer: _Proposer = key.data
                data = proposer.sock.recv(RECEIVE_CHUNK_BYTES)
                if not data:
                    raise RuntimeError("the controller closed a connection")
                proposer.buffer += data
                if len(proposer.buffer) < 4:
                    continue
                size = _SIZE.unpack_from(proposer.buffer)[0]
                if len(proposer.buffer) < 4 + size:
                    continue
                if len(proposer.buffer) > 4 + size:
                    raise RuntimeError("more than one reply to one request")
                offset = parse_reply(memoryview(proposer.buffer)[4:], proposer.correlation, proposer.broker_id,
                                     version)
                proposer.buffer.clear()
                if offset in run.acked:
                    raise RuntimeError(f"two registrations acknowledged at offset {offset}")
                run.acked[offset] = proposer.broker_id
                in_flight -= 1
                if measure_from <= now and not stopping:
                    run.window_latencies_s.append(now - proposer.sent_at)
                    run.window_offsets.append(offset)
                if not stopping:
                    send(proposer, now)
                    in_flight += 1
                    sent_total += 1
        if not stopping or run.window_s <= 0:
            raise RuntimeError("the cell ended before its measured window began")
    finally:
        for proposer in proposers:
            selector.unregister(proposer.sock)
            proposer.sock.close()
        selector.close()
    return run


# --------------------------------------------------------------------------
# the log, read back after the controller stopped
# --------------------------------------------------------------------------

@dataclass
class LogBatch:
    base_offset: int
    last_offset: int
    register_broker_records: int


def read_log(log_dir: Path) -> tuple[list[LogBatch], dict[int, int]]:
    """All batches (offset span, RegisterBrokerRecord count) and every RegisterBrokerRecord: offset -> broker id."""
    batches: list[LogBatch] = []
    registered: dict[int, int] = {}
    with MetadataLog.open(log_dir) as log:  # takes the log's lock: the controller must have stopped
        offset, end = log.start_offset, log.end_offset
        while offset < end:  # bounded: every read returns at least one batch past `offset`
            for batch in log.read(offset, READ_CHUNK_BYTES):
                if batch.last_offset < offset:
                    continue
                count = 0
                if not batch.is_control:
                    for item in batch.records:
                        decoded = decode_metadata_record(item.value)
                        if decoded.message is REGISTER_BROKER_RECORD:
                            registered[item.offset] = decoded.data.broker_id
                            count += 1
                batches.append(LogBatch(batch.base_offset, batch.last_offset, count))
                offset = batch.next_offset
    return batches, registered


def verify(run: CellRun, registered: dict[int, int]) -> None:
    """Every acknowledgement is durable where it said, and nothing unacknowledged was registered."""
    for offset, broker_id in run.acked.items():
        if registered.get(offset) != broker_id:
            raise RuntimeError(f"broker {broker_id} acknowledged at offset {offset}, but the log has "
                               f"{registered.get(offset)!r} there")
    if len(registered) != len(run.acked):
        raise RuntimeError(f"the log holds {len(registered)} RegisterBrokerRecords for {len(run.acked)} "
                           "acknowledged registrations")


def batches_holding(batches: list[LogBatch], offsets: list[int]) -> int:
    """How many distinct batches hold these offsets."""
    bases = [batch.base_offset for batch in batches]
    return len({bisect_right(bases, offset) - 1 for offset in offsets})


# --------------------------------------------------------------------------
# controllers
# --------------------------------------------------------------------------

@contextmanager
def controllers(work: Path, count: int, group_commit: bool, cluster_id: str,
                metadata_version: str) -> Iterator[tuple[int, int, Path]]:
    """Runs the controller(s) of one cell; yields (port the proposers use, pid serving it,
    the metadata log directory to read back once they stopped).

    count 1: one `kraftwerk controller`. count > 1: that many voters of one Raft
    quorum (real processes); the port is the active controller's (the leader's),
    and the log read back is the leader's, whose batches are the quorum's
    appends (followers copy the leader's batches as they are).
    """
    override = f"controller.group.commit.enable={'true' if group_commit else 'false'}"
    if count == 1:
        with common.kraftwerk_controller(work, metadata_version=metadata_version, cluster_id=cluster_id,
                                         extra_args=["--override", override]) as (process, port):
            yield port, process.pid, common.kraftwerk_metadata_log_dir(work)
        return
    with common.kraftwerk_quorum(work, count, metadata_version=metadata_version, cluster_id=cluster_id,
                                 overrides={"controller.group.commit.enable": str(group_commit).lower()}
                                 ) as (quorum, leader):
        yield quorum.port(leader), quorum.pid(leader), quorum.metadata_log_dir(leader)


# --------------------------------------------------------------------------
# cells
# --------------------------------------------------------------------------

@dataclass
class CellResult:
    group_commit: bool
    connections: int
    window_s: float
    records: int
    batches: int
    p50_us: float
    p99_us: float
    total_acked: int
    server_cpu_s: float
    floor_fsyncs_per_s: float


def run_cell(parent: Path, group_commit: bool, connections: int, args, batch_bytes: int) -> CellResult:
    work = parent / f"cell-{'on' if group_commit else 'off'}-{connections}"
    work.mkdir()
    # This VM's disk drifts by several times between minutes: each cell gets its own floor.
    floor_rate, _ = fsync_floor(work, batch_bytes)
    cluster_id = common.random_cluster_id()
    with controllers(work, args.controllers, group_commit, cluster_id, args.metadata_version) as (port, pid, log_dir):
        cpu_before = common.process_cpu_s(pid)
        run = drive(port, cluster_id, connections, args.warmup_s, args.duration_s, args.max_requests,
                    registration_version(args.metadata_version))
        server_cpu_s = common.process_cpu_s(pid) - cpu_before
    batches, registered = read_log(log_dir)
    verify(run, registered)
    shutil.rmtree(work, ignore_errors=True)
    return CellResult(
        group_commit=group_commit, connections=connections, window_s=run.window_s,
        records=len(run.window_offsets), batches=batches_holding(batches, run.window_offsets),
        p50_us=common.percentile(run.window_latencies_s, 0.50) * 1e6,
        p99_us=common.percentile(run.window_latencies_s, 0.99) * 1e6,
        total_acked=len(run.acked),
        server_cpu_s=server_cpu_s, floor_fsyncs_per_s=floor_rate,
    )


def fsync_floor(directory: Path, batch_bytes: int) -> tuple[float, float]:
    """(fsyncs/s, p50 µs) of os.write + os.fsync of `batch_bytes` appended to a file, one thread."""
    path = directory / "fsync-floor.bin"
    buffer = os.urandom(batch_bytes)
    samples: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        started = time.perf_counter()
        deadline = started + FSYNC_FLOOR_S
        while len(samples) < FSYNC_FLOOR_MAX:
            before = time.perf_counter()
            if before >= deadline:
                break
            os.write(fd, buffer)
            os.fsync(fd)
            samples.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return len(samples) / elapsed, common.percentile(samples, 0.50) * 1e6


def parse_concurrency(text: str) -> list[int]:
    values = [int(item) for item in text.split(",") if item.strip()]
    if not values or any(not 1 <= value <= MAX_CONCURRENCY for value in values):
        raise argparse.ArgumentTypeError(f"concurrency values must be in 1..{MAX_CONCURRENCY}")
    return values


def parse_modes(text: str) -> list[bool]:
    names = {"on": True, "off": False}
    modes = [item.strip() for item in text.split(",") if item.strip()]
    if not modes or any(mode not in names for mode in modes):
        raise argparse.ArgumentTypeError("modes are a comma list of on, off")
    return [names[mode] for mode in modes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=parse_concurrency, default=parse_concurrency(DEFAULT_CONCURRENCY),
                        help=f"comma list of proposer counts (default {DEFAULT_CONCURRENCY})")
    parser.add_argument("--modes", type=parse_modes, default=[True, False], help="group commit: on,off (default)")
    parser.add_argument("--duration-s", type=float, default=3.0, help="measured seconds per cell")
    parser.add_argument("--warmup-s", type=float, default=0.5, help="unmeasured seconds before each window")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS_PER_CELL, help="cap per cell")
    parser.add_argument("--metadata-version", default=DEFAULT_METADATA_VERSION,
                        help=f"metadata.version to format with (default {DEFAULT_METADATA_VERSION})")
    parser.add_argument("--controllers", type=int, default=1,
                        help="controller processes: 1, or the voters of one Raft quorum (3, 5); proposers "
                             "talk to the leader")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory (the disk measured)")
    args = parser.parse_args(argv)
    if not 1 <= args.controllers <= MAX_CONTROLLERS:
        parser.error(f"--controllers must be in 1..{MAX_CONTROLLERS}")
    if args.duration_s <= 0 or args.warmup_s < 0:
        parser.error("--duration-s must be positive and --warmup-s not negative")

    configure_logging("warning")  # MetadataLog.open's info lines would land among the results
    version = registration_version(args.metadata_version)
    sample_frame = registration_frame("x" * 22, FIRST_BROKER_ID, 1, version)
    work = common.work_dir(args.dir, "bench_group_commit_")
    results: list[CellResult] = []
    try:
        # A batch of one RegisterBrokerRecord is roughly the request's size plus the batch header.
        batch_bytes = len(sample_frame) + 61
        floor_rate, floor_p50 = fsync_floor(work, batch_bytes)
        # Interleaved per concurrency, so drift in the disk or machine hits both modes alike.
        for connections in args.concurrency:
            for group_commit in args.modes:
                results.append(run_cell(work, group_commit, connections, args, batch_bytes))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    controllers_text = ("one controller" if args.controllers == 1 else
                        f"a {args.controllers}-voter Raft quorum (proposers send to the leader; log and CPU are "
                        f"the leader's)")
    print(f"$ {common.command_line()}")
    print(f"BrokerRegistration v{version} ({len(sample_frame)} B), each a new broker id: one "
          f"RegisterBrokerRecord per request; {controllers_text} (metadata.version {args.metadata_version}), fresh "
          f"per cell, on 127.0.0.1; C closed-loop connections, one request in flight each, on one selectors loop "
          f"in one load-generator process; {args.warmup_s:g} s warm-up + {args.duration_s:g} s measured per "
          f"cell; every reply checked (error 0) and every acknowledged record found in the log afterwards at "
          f"the offset its reply named. batches = record batches in the log holding the records acknowledged "
          f"in the window (one append + one fsync each). Disk fsync floor (os.write + os.fsync, one thread, "
          f"same dir) at the start: {floor_rate:,.0f} fsyncs/s, p50 {floor_p50:.0f} µs, and again for "
          f"{FSYNC_FLOOR_S:g} s just before each cell (last column). Machine: {os.cpu_count()} CPUs "
          f"shared by controller and load generator, nothing pinned.\n")
    rows = []
    for r in results:
        rows.append(["on" if r.group_commit else "off", r.connections, r.records,
                     f"{r.records / r.window_s:,.0f}", f"{r.batches / r.window_s:,.0f}",
                     f"{r.records / r.batches:.1f}" if r.batches else "-",
                     f"{r.p50_us:,.0f}", f"{r.p99_us:,.0f}",
                     f"{r.server_cpu_s / r.total_acked * 1e6:.0f}" if r.total_acked else "-",
                     f"{r.floor_fsyncs_per_s:,.0f}"])
    print(common.markdown_table(["group commit", "C", "records", "records/s", "batches (fsyncs)/s",
                                 "records/fsync", "p50 µs", "p99 µs", "server CPU µs/record",
                                 "disk floor fsyncs/s"], rows))
    print("\n(server CPU µs/record: the controller's CPU over the whole cell, warm-up and drain included, "
          "per registration acknowledged in it.)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
