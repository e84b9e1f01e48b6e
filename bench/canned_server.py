"""The floor for bench_server.py: a trio TCP server that does no protocol work.

It answers every request frame with one canned response frame (kraftwerk's
own ApiVersions answer, captured by the benchmark), copying the request's
correlation id into it. Same runtime (CPython + trio), same socket pattern as
kraftwerk's listener (one task per connection, receive_some, send_all of
every answer that is ready), no decoding, no dispatch, no logging: what is
left between this and kraftwerk is kraftwerk's per-request cost.

Run: .venv/bin/python bench/canned_server.py --response-file F [--port 0] [--port-file P]
"""

from __future__ import annotations

import argparse
import signal
import struct
from pathlib import Path

import trio

RECEIVE_CHUNK_BYTES = 65536
MAX_FRAME_BYTES = 1024 * 1024
_SIZE = struct.Struct(">i")


def answers(buffer: bytearray, response: bytes) -> bytes:
    """Consumes every whole request frame in `buffer`; returns the answers, concatenated."""
    out = bytearray()
    position = 0
    end = len(buffer)
    while end - position >= 4:
        size = _SIZE.unpack_from(buffer, position)[0]
        if size < 8 or size > MAX_FRAME_BYTES:
            raise ValueError(f"bad frame size {size}")
        if end - position - 4 < size:
            break
        start = len(out)
        out += response
        # request: size(4) key(2) version(2) correlation(4); response: size(4) correlation(4)
        out[start + 4 : start + 8] = buffer[position + 8 : position + 12]
        position += 4 + size
    del buffer[:position]
    return bytes(out)


async def serve(stream: trio.SocketStream, response: bytes) -> None:
    buffer = bytearray()
    try:
        while True:
            data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
            if not data:
                return
            buffer += data
            out = answers(buffer, response)
            if out:
                await stream.send_all(out)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def main(args) -> None:
    response = Path(args.response_file).read_bytes()
    if len(response) < 8 or _SIZE.unpack_from(response, 0)[0] != len(response) - 4:
        raise SystemExit(f"{args.response_file} is not one size-prefixed frame")
    listeners = await trio.open_tcp_listeners(args.port, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, lambda s: serve(s, response), listeners)
        if args.port_file:
            Path(args.port_file).write_text(f"{port}\n")
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--response-file", required=True, help="one size-prefixed response frame")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="write the bound port here once listening")
    trio.run(main, parser.parse_args())
