"""The commit path of a 3-voter quorum with nothing but the path: a yardstick.

Three trio processes exchange the messages a kraftwerk commit needs, in the
same pattern and with the same durability, and nothing else: no Kafka codec,
no Raft core, no controller, no logging. What this costs on a machine is
what any Python/trio implementation of that pattern pays before it does any
work of its own, so bench_quorum.py reports it next to the physical floor.

  leader    accepts one client and the followers on 127.0.0.1. A client
            request is "proposed": appended to the in-memory log, sent at
            once to every follower whose fetch is parked, and written +
            fsynced by a worker thread (as kraftwerk's leader does). The reply
            leaves once a majority (leader's durable end and the followers'
            acknowledged ends) holds the entry.
  follower  long-polls the leader: sends its durable end offset, receives
            the records after it, appends + fsyncs them on the event loop (as
            kraftwerk's followers do), and fetches again, which acknowledges.

Frames are a 4-byte big-endian length then the payload. A follower's fetch
is 8 bytes (its end offset); the leader's answer is a 4-byte record count and
the records after it; the client's request is any bytes (one record) and the
reply is 8 bytes (the committed offset).

Run: python bench/raft_skeleton.py leader --dir D --followers 2 --port-file F
     python bench/raft_skeleton.py follower --dir D --port P
(bench_quorum.py latency --skeleton starts and stops them.)
"""

from __future__ import annotations

import argparse
import os
import struct
import sys

import trio

_SIZE = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
MAX_FRAME_BYTES = 1 << 20
HELLO_FOLLOWER, HELLO_CLIENT = b"F", b"C"


class FrameReader:
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def next(self) -> bytes | None:
        # Bounded by MAX_FRAME_BYTES: each round reads more or returns.
        while True:
            if len(self._buffer) >= 4:
                size = _SIZE.unpack_from(self._buffer)[0]
                if not 0 <= size <= MAX_FRAME_BYTES:
                    raise ValueError(f"frame of {size} bytes")
                if len(self._buffer) >= 4 + size:
                    frame = bytes(self._buffer[4:4 + size])
                    del self._buffer[:4 + size]
                    return frame
            data = await self._stream.receive_some(65536)
            if not data:
                return None
            self._buffer += data


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def records_frame(records: list[bytes]) -> bytes:
    return frame(_SIZE.pack(len(records)) + b"".join(records))


def open_log(directory: str, name: str) -> int:
    return os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def append_and_fsync(fd: int, data: bytes) -> None:
    os.write(fd, data)
    os.fsync(fd)


class Leader:
    def __init__(self, directory: str, followers: int) -> None:
        self.fd = open_log(directory, "leader.log")
        self.records: list[bytes] = []
        self.flushed_end = 0
        self.acked: dict[int, int] = {}  # follower connection -> acknowledged end
        self.parked: dict[int, trio.SocketStream] = {}  # follower connection -> its stream
        self.majority = (followers + 1) // 2 + 1
        self.changed = trio.Event()
        self.flushing = False

    def committed_end(self) -> int:
        ends = sorted([self.flushed_end, *self.acked.values()], reverse=True)
        return ends[self.majority - 1] if len(ends) >= self.majority else 0

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def serve(self, stream: trio.SocketStream) -> None:
        reader = FrameReader(stream)
        hello = await reader.next()
        if hello == HELLO_FOLLOWER:
            await self._follower(stream, reader)
        elif hello == HELLO_CLIENT:
            await self._client(stream, reader)

    async def _follower(self, stream: trio.SocketStream, reader: FrameReader) -> None:
        me = id(stream)
        while (request := await reader.next()) is not None:
            end = _OFFSET.unpack(request)[0]
            self.acked[me] = end
            self._notify()
            if end < len(self.records):
                await stream.send_all(records_frame(self.records[end:]))
            else:
                self.parked[me] = stream  # answered by the next proposal

    async def _client(self, stream: trio.SocketStream, reader: FrameReader) -> None:
        async with trio.open_nursery() as nursery:
            while (request := await reader.next()) is not None:
                offset = len(self.records)
                self.records.append(request)
                parked, self.parked = self.parked, {}
                answer = records_frame([request])
                for follower in parked.values():
                    await follower.send_all(answer)
                if not self.flushing:
                    self.flushing = True
                    nursery.start_soon(self._flush)
                while self.committed_end() <= offset:
                    await self.changed.wait()
                await stream.send_all(frame(_OFFSET.pack(offset)))

    async def _flush(self) -> None:
        # Bounded: each round writes what was appended before it.
        while self.flushed_end < len(self.records):
            end = len(self.records)
            data = b"".join(self.records[self.flushed_end:end])
            await trio.to_thread.run_sync(append_and_fsync, self.fd, data)
            self.flushed_end = end
            self._notify()
        self.flushing = False


async def run_leader(directory: str, followers: int, port_file: str) -> None:
    leader = Leader(directory, followers)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    with open(port_file + ".tmp", "w") as out:
        out.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    await trio.serve_listeners(leader.serve, listeners)


async def run_follower(directory: str, port: int) -> None:
    fd = open_log(directory, f"follower-{os.getpid()}.log")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reader = FrameReader(stream)
    await stream.send_all(frame(HELLO_FOLLOWER))
    end = 0
    while True:
        await stream.send_all(frame(_OFFSET.pack(end)))
        answer = await reader.next()
        if answer is None:
            return
        append_and_fsync(fd, answer[4:])
        end += _SIZE.unpack_from(answer)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    lead = sub.add_parser("leader")
    lead.add_argument("--dir", required=True)
    lead.add_argument("--followers", type=int, default=2)
    lead.add_argument("--port-file", required=True)
    follow = sub.add_parser("follower")
    follow.add_argument("--dir", required=True)
    follow.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        if args.role == "leader":
            trio.run(run_leader, args.dir, args.followers, args.port_file)
        else:
            trio.run(run_follower, args.dir, args.port)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
