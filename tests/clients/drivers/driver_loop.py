"""The line protocol of tests/clients/PROTOCOL.md, shared by the Python drivers.

Owns: reading `--bootstrap`/`--path`, the ready line, one JSON answer per call line,
`close` and EOF. A driver supplies the client-specific parts: a factory that opens its
admin client, a table {call name: function(args) -> result dict}, a function that turns
an exception into (error name, retriable), and how to close. Only answers go to stdout;
everything a client library prints goes to stderr (stdout is swapped for stderr while
the client runs, so a stray print cannot corrupt the protocol).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, Callable

DEFAULT_TIMEOUT_MS = 15_000


class Unsupported(Exception):
    """The client has no way to make this call; the message says why."""


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--path", required=True, choices=("broker", "controller"))
    return parser.parse_args(argv)


def serve(client_name: str, client_version: str, open_client: Callable[[argparse.Namespace], Any],
          calls: Callable[[Any], dict[str, Callable[[dict], dict]]],
          describe_error: Callable[[BaseException], tuple[str, bool]],
          close: Callable[[Any], None], argv: list[str] | None = None) -> int:
    protocol_out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not reach the protocol stream

    def answer(message: dict) -> None:
        protocol_out.write(json.dumps(message) + "\n")
        protocol_out.flush()

    options = parse_arguments(argv)
    try:
        client = open_client(options)
    except Exception as exc:  # any failure to start is reported, then the driver exits
        traceback.print_exc(file=sys.stderr)
        answer({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    table = calls(client)
    answer({"ready": True, "client": client_name, "version": client_version})
    close_id = None
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            call_id, call = request.get("id"), request.get("call")
            if call == "close":
                close_id = call_id
                break
            handler = table.get(call)
            if handler is None:
                answer({"id": call_id, "status": "unsupported", "reason": f"unknown call {call!r}"})
                continue
            try:
                result = handler(request.get("args") or {})
            except Unsupported as exc:
                answer({"id": call_id, "status": "unsupported", "reason": str(exc)})
            except Exception as exc:  # the harness judges every failure; the driver only reports it
                traceback.print_exc(file=sys.stderr)
                name, retriable = describe_error(exc)
                answer({"id": call_id, "status": "error", "error": name, "retriable": retriable})
            else:
                answer({"id": call_id, "status": "ok", "result": result})
    finally:
        try:
            close(client)
        except Exception:  # closing after a failover may fail; the answer below still stands
            traceback.print_exc(file=sys.stderr)
    if close_id is not None:
        answer({"id": close_id, "status": "ok", "result": {}})
    return 0


def timeout_ms(args: dict) -> int:
    return int(args.get("timeout_ms", DEFAULT_TIMEOUT_MS))


def sorted_ints(values) -> list[int]:
    return sorted(int(v) for v in values)
