"""Child process for the kill -9 test: appends forever, printing each acknowledgement.

Usage: crash_child.py DIRECTORY SEGMENT_BYTES MAX_APPENDS
Prints "ready <end_offset>" after opening, then one "ack <base> <last>" line per
append, written and flushed only after `append` returned (i.e. after fsync).
Value of offset N is b"value-N" so the parent can check contents, not just offsets.
Batch sizes cycle 1, 2, 3 so batches of several records are crash-tested too;
the leader epoch goes up every 50 appends (and once per run).
"""

import sys

from server.observability import configure_logging
from server.storage.log import LogConfig, MetadataLog


def main() -> None:
    directory, segment_bytes, max_appends = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    configure_logging(stream=sys.stderr)  # stdout carries only the protocol lines
    log = MetadataLog.open(directory, LogConfig(segment_bytes=segment_bytes))
    print(f"ready {log.end_offset}", flush=True)
    for index in range(max_appends):
        count = index % 3 + 1
        base = log.end_offset
        values = [f"value-{base + i}".encode() for i in range(count)]
        first, last = log.append(values, leader_epoch=log.last_epoch + (index % 50 == 0), timestamp_ms=index)
        print(f"ack {first} {last}", flush=True)


if __name__ == "__main__":
    main()
