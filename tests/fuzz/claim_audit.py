"""What a decoder asks of its input, audited read by read: a pure function of the input.

Owns: `audited_decode(decode, data)`, which runs a decoder with every BytesIO the
protocol package makes replaced by `AuditedStream`, and `ClaimViolation`, raised
inside the decoder the moment it asks for more than the rule allows:

- a read of more than `CLAIM_UNCHECKED_MAX` bytes (protocol/primitives.py) must fit
  in what remains of the input: a length the input cannot hold (a string, bytes, an
  unknown tagged field) is refused before it is acted on, never read or allocated;
- the number of reads is at most `READS_PER_INPUT_BYTE` per input byte plus
  `READS_CONSTANT`: every read but the failing one consumes input (a length prefix
  precedes each zero-byte read, a varint's first byte is read twice), so a loop
  driven by a claimed count — array elements, tagged fields, records — cannot run
  past the bytes present.

Both are counted on the decoder's requests, not on the heap, so the verdict is the
same on every run, loaded machine or not. Raising inside the decoder also stops a
runaway loop at once instead of letting it run for a claimed 2**31 elements.
"""

from __future__ import annotations

from contextlib import ExitStack
from io import BytesIO
from unittest import mock

import protocol.frames
import protocol.header
import protocol.record_batch
import protocol.records
import protocol.schema
from protocol.primitives import CLAIM_UNCHECKED_MAX

# Measured over the fuzz inputs (dense arrays, lying counts, metadata record frames,
# record batches): at most 1.2 reads per byte of inputs of 8 bytes or more. By
# construction a byte is read at most twice (a varint's head is peeked, then re-read),
# plus one zero-byte read after each length prefix: 4 per byte holds any honest
# decoder, and stops a runaway loop within a few reads per byte.
READS_PER_INPUT_BYTE = 4
READS_CONSTANT = 16

# Every module of the protocol package that builds a stream over bytes it decodes.
PATCHED_MODULES = (protocol.schema, protocol.frames, protocol.records, protocol.record_batch, protocol.header)


class ClaimViolation(AssertionError):
    """A decoder acted on a claim its input could not hold."""


class AuditedStream(BytesIO):
    """A BytesIO that checks every read against the input it was built on."""

    def __init__(self, initial_bytes=b"") -> None:
        super().__init__(initial_bytes)
        self.size = memoryview(initial_bytes).nbytes
        self.reads = 0
        self.largest_read = 0
        self.read_limit = READS_PER_INPUT_BYTE * self.size + READS_CONSTANT

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        remaining = self.size - self.tell()
        if size is not None and size > self.largest_read:
            self.largest_read = size
        if size is not None and size > CLAIM_UNCHECKED_MAX and size > remaining:
            raise ClaimViolation(f"asked for {size} bytes with {remaining} remaining "
                                 f"(a claimed length acted on before it was checked)")
        if self.reads > self.read_limit:
            raise ClaimViolation(f"{self.reads} reads from a {self.size}-byte input "
                                 f"(a claimed count driving a loop past the input)")
        return super().read(size)


def audited_decode(decode, data: bytes, extra_modules=()):
    """`decode(data)` with every stream the protocol package (and `extra_modules`)
    builds audited; returns what `decode` returns. ClaimViolation propagates."""
    with ExitStack() as patches:
        for module in (*PATCHED_MODULES, *extra_modules):
            patches.enter_context(mock.patch.object(module, "BytesIO", AuditedStream))
        return decode(data)
