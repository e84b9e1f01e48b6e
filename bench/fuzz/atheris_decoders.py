"""Coverage-guided fuzzing of kraftwerk's decoders with atheris (libFuzzer). Not in CI.

Owns: one libFuzzer target over every decoder tests/fuzz checks with
Hypothesis: each (message, version) body decoder (requests, responses,
metadata and KRaft records, headers), the metadata record frame, record
batches, whole request frames as the dispatcher reads them, and the
FrameDecoder. The first two input bytes pick the target; the rest is the input.

Property: a decoder returns or raises `DecodeError` (`FrameError` for the
framing); anything else escapes and libFuzzer reports a crash with the input
saved as `crash-<sha1>`. Memory: run with `-rss_limit_mb` (below) so a decoder
that allocates what a length prefix claims is reported as an OOM.

atheris is not a kraftwerk dependency. It installs from its wheel on Python
3.11 (atheris 3.0.0, measured: ~10 s). Keep it out of the project venv:

    python3.11 -m venv /tmp/atheris-venv
    /tmp/atheris-venv/bin/pip install atheris
    # let that venv see kraftwerk and its dependencies
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/atheris-venv/lib/python3.11/site-packages/kw.pth
    echo "$PWD" >> /tmp/atheris-venv/lib/python3.11/site-packages/kw.pth
    /tmp/atheris-venv/bin/python bench/fuzz/atheris_decoders.py -runs=200000 -rss_limit_mb=512 \\
        -max_len=4096 [corpus_dir]

Reproduce a crash: run the same command with the crash file as the only
argument. Seeds: with `--seed-corpus DIR` the script first writes one valid
encoding per target into DIR (then pass DIR as the corpus).
"""

from __future__ import annotations

import sys
from io import BytesIO
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from protocol import header, metadata_records, raft_records
    from protocol.errors import DecodeError
    from protocol.header import REQUEST_HEADER, peek_api, request_header_version
    from protocol.record_batch import decode_batches, encode_batch
    from protocol.records import MetadataRecord, decode_metadata_record, encode_metadata_record
    from protocol.registry import API_MESSAGES
    from protocol.schema import Message
    from server.net.framing import FrameDecoder, FrameError

MESSAGES: list[Message] = [m for api_key in sorted(API_MESSAGES) for m in API_MESSAGES[api_key]]
for _module in (metadata_records, raft_records, header):
    MESSAGES += [m for m in vars(_module).values() if isinstance(m, Message)]
BODY_CASES = [(m, v) for m in MESSAGES for v in range(m.version_range[0], m.version_range[1] + 1)]


def _decode_body(case: int, data: bytes) -> None:
    message, version = BODY_CASES[case % len(BODY_CASES)]
    message.decode(version, data)


def _decode_request_frame(_case: int, data: bytes) -> None:
    api_key, version = peek_api(data)
    pair = API_MESSAGES.get(api_key)
    if pair is None or version not in pair[0].versions:
        return
    stream = BytesIO(data)
    REQUEST_HEADER.decode(request_header_version(pair[0], version), stream)
    pair[0].decode(version, stream)


def _decode_record_frame(_case: int, data: bytes) -> None:
    decode_metadata_record(data)


def _decode_batches(case: int, data: bytes) -> None:
    decode_batches(data, allow_partial_tail=bool(case & 1))


def _frame(case: int, data: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=case % 4096)
    step = case % 7 + 1
    try:
        for start in range(0, len(data), step):
            decoder.receive_data(data[start:start + step])
            while (frame := decoder.next_frame()) is not None:
                if len(frame) > decoder.max_frame_bytes:
                    raise AssertionError(f"frame of {len(frame)} bytes over the cap")
    except FrameError:
        pass


TARGETS = (_decode_body, _decode_request_frame, _decode_record_frame, _decode_batches, _frame)


def test_one_input(raw: bytes) -> None:
    """raw[0] picks the target; body decoders take the case from raw[1:3] and
    the input from raw[3:], the others a parameter from raw[1] and raw[2:]."""
    if len(raw) < 3:
        return
    target = TARGETS[raw[0] % len(TARGETS)]
    try:
        if target is _decode_body:
            target(int.from_bytes(raw[1:3], "big"), raw[3:])
        else:
            target(raw[1], raw[2:])
    except DecodeError:
        pass


def write_seed_corpus(directory: Path) -> int:
    """One valid input per body case (its defaults), plus a record frame and a batch."""
    directory.mkdir(parents=True, exist_ok=True)
    for index, (message, version) in enumerate(BODY_CASES):
        body = message.encode(version, message.default(version))
        (directory / f"body-{index}").write_bytes(bytes([0]) + index.to_bytes(2, "big") + body)
    feature = metadata_records.FEATURE_LEVEL_RECORD
    framed = encode_metadata_record(MetadataRecord(feature, 0, {"name": "metadata.version", "feature_level": 19}))
    (directory / "record-frame").write_bytes(bytes([2, 0]) + framed)
    (directory / "batch").write_bytes(bytes([3, 0]) + encode_batch(0, 1, [framed], 0, None))
    return len(BODY_CASES) + 2


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--seed-corpus":
        print(f"wrote {write_seed_corpus(Path(sys.argv[2]))} seed inputs to {sys.argv[2]}")
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
