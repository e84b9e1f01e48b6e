"""`python -m cli.probe HOST:PORT`: is the node at HOST:PORT serving? The compose files'
healthchecks.

One ApiVersions exchange with a deadline; exit 0 when the node answers it without an
error, 1 with one line saying why not. `kraftwerk features describe` proves the same,
but it loads the whole CLI first (about 0.3 s of CPU per call): Docker runs a
healthcheck of every container every few seconds, and on a small machine that alone
kept a core busy. This module imports the protocol layer and nothing else.

A broker listens only once its image is current, and a controller answers ApiVersions
once it serves, so an answer means what "healthy" should mean for both.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys

from protocol.errors import DecodeError
from protocol.frames import decode_response, encode_request

API_VERSIONS_KEY = 18
API_VERSIONS_VERSION = 3
CLIENT_ID = "kraftwerk-probe"
CORRELATION_ID = 1
MAX_RESPONSE_BYTES = 1 << 20  # an ApiVersions answer is a few kilobytes
_SIZE = struct.Struct(">i")


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, remaining = [], count
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("the node closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def probe(host: str, port: int, timeout_s: float) -> str | None:
    """None when the node answered ApiVersions without an error, else why not."""
    request = encode_request(API_VERSIONS_KEY, API_VERSIONS_VERSION, CORRELATION_ID, CLIENT_ID, {
        "client_software_name": CLIENT_ID, "client_software_version": "1"})
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(request)
            (size,) = _SIZE.unpack(_receive_exactly(sock, _SIZE.size))
            if not 0 < size <= MAX_RESPONSE_BYTES:
                return f"an answer of {size} bytes is not an ApiVersions response"
            correlation_id, body = decode_response(API_VERSIONS_KEY, API_VERSIONS_VERSION,
                                                   _receive_exactly(sock, size))
    except (OSError, ConnectionError) as exc:
        return f"no answer: {exc}"
    except DecodeError as exc:
        return f"an undecodable answer: {exc}"
    if correlation_id != CORRELATION_ID:
        return f"an answer to another request (correlation id {correlation_id})"
    if body.error_code != 0:
        return f"ApiVersions answered with error code {body.error_code}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cli.probe", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("address", help="HOST:PORT of the node")
    parser.add_argument("--timeout-s", type=float, default=3.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"{args.address!r} is not HOST:PORT")
    problem = probe(host, int(port), args.timeout_s)
    if problem is not None:
        print(f"{args.address}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
