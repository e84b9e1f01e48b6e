"""`FrameDecoder` fed arbitrary byte streams in arbitrary chunkings.

Properties, checked against a reference parse of the whole stream:
- the frames that come out are exactly the stream's frames, in order, and
  none is larger than `max_frame_bytes`;
- the only exception is `FrameError`, raised exactly when the stream holds a
  negative or over-limit size prefix (and only once those 4 bytes have
  arrived), and the decoder stays broken afterwards;
- `pending_frame_size` (asked before `next_frame`, as the listener does to
  reserve memory) announces exactly the size of the frame that follows;
- a cap changed between frames (`set_max_frame_bytes`, the SASL case) holds
  the next frame to the new cap;
- `take_frames` (every whole frame at once, as the listener drains a chunk when
  no per-frame limit applies) gives the same frames and fails at the same chunk
  as `next_frame` one by one, also when the two are mixed on one stream;
- once drained, it buffers less than one frame: below max(4, limit) bytes,
  whatever the chunking (what it holds momentarily is that plus the chunk
  just handed to it, and the listener reads fixed-size chunks).

Run with the rest of tests/fuzz; `FUZZ_EXAMPLES=N` scales it (budget.py).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.net.framing import DEFAULT_MAX_FRAME_BYTES, SIZE_PREFIX_BYTES, FrameDecoder, FrameError

from .budget import fuzz_settings


def cap_for(caps: list[int], frame_index: int) -> int:
    return caps[min(frame_index, len(caps) - 1)]


def reference_frames(stream: bytes, caps: list[int]) -> tuple[list[bytes], int | None]:
    """(the complete frames, the stream offset at which a bad prefix is
    complete, or None): Kafka's framing, written plainly. Frame i is held to
    `caps[i]` (the last cap for the rest), as a SASL listener raises its cap
    once the client has authenticated."""
    frames = []
    pos = 0
    while len(stream) - pos >= SIZE_PREFIX_BYTES:
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 0 or size > cap_for(caps, len(frames)):
            return frames, pos + SIZE_PREFIX_BYTES
        if len(stream) - pos - SIZE_PREFIX_BYTES < size:
            break
        frames.append(stream[pos + SIZE_PREFIX_BYTES:pos + SIZE_PREFIX_BYTES + size])
        pos += SIZE_PREFIX_BYTES + size
    return frames, None


@st.composite
def framed_streams(draw, max_frame_bytes: int) -> bytes:
    """Mostly honest frames, some lying prefixes (negative, at and beyond the
    limit, int32 extremes), sometimes noise or a truncated tail."""
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["frame", "frame", "frame", "lie", "noise"]))
        if kind == "frame":
            body = draw(st.binary(max_size=min(max_frame_bytes, 48)))
            parts.append(struct.pack(">i", len(body)) + body)
        elif kind == "lie":
            size = draw(st.sampled_from([-1, -(1 << 31), (1 << 31) - 1, max_frame_bytes, max_frame_bytes + 1]))
            parts.append(struct.pack(">i", size) + draw(st.binary(max_size=8)))
        else:
            parts.append(draw(st.binary(max_size=12)))
    stream = b"".join(parts)
    if stream and draw(st.booleans()):
        stream = stream[:draw(st.integers(0, len(stream)))]
    return stream


@st.composite
def chunkings(draw, stream: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


def feed(decoder: FrameDecoder, chunks: list[bytes], caps: list[int],
         peeks: list[bool], batches: list[bool] = (False,)) -> tuple[list[bytes], int | None]:
    """Feeds `chunks`, draining after each as the listener does (asking
    `pending_frame_size` first where `peeks` says so, and moving the cap to the
    next frame's as soon as a frame is out; or, where `batches` says so for that
    chunk, with `take_frames` until it gives nothing); returns the frames and the
    stream offset (end of the chunk) at which FrameError came, or None."""
    frames: list[bytes] = []
    offset = 0
    for index, chunk in enumerate(chunks):
        offset += len(chunk)
        try:
            decoder.receive_data(chunk)
            batch = batches[index % len(batches)]
            while batch:
                taken = decoder.take_frames()
                if not taken:
                    break
                for frame in taken:
                    assert len(frame) <= cap_for(caps, len(frames))
                    frames.append(frame)
            while not batch:
                cap = cap_for(caps, len(frames))
                announced = None
                if peeks[len(frames) % len(peeks)]:
                    announced = decoder.pending_frame_size()
                    if announced is None:
                        break
                    assert 0 <= announced <= cap
                frame = decoder.next_frame()
                if frame is None:
                    break
                assert len(frame) <= cap
                assert announced is None or announced == len(frame)
                frames.append(frame)
                decoder.set_max_frame_bytes(cap_for(caps, len(frames)), "test.cap")
        except FrameError:
            return frames, offset
        # Drained: less than one frame (of the current cap) is held.
        assert decoder.buffered_bytes < max(SIZE_PREFIX_BYTES, cap_for(caps, len(frames)) + 1)
    return frames, None


def check(stream: bytes, chunks: list[bytes], caps: list[int], peeks: list[bool] = (False,),
          batches: list[bool] = (False,)) -> None:
    assert b"".join(chunks) == stream
    decoder = FrameDecoder(caps[0])
    frames, failed_at = feed(decoder, chunks, caps, list(peeks), list(batches))
    expected_frames, bad_prefix_end = reference_frames(stream, caps)
    if bad_prefix_end is None:
        assert failed_at is None
        assert frames == expected_frames
        return
    assert failed_at is not None, "a bad size prefix was accepted"
    # It fails on the chunk that completed the bad prefix, not before, not later.
    chunk_ends = [sum(len(c) for c in chunks[:i + 1]) for i in range(len(chunks))]
    assert failed_at == next(end for end in chunk_ends if end >= bad_prefix_end)
    assert frames == expected_frames
    for call in (decoder.next_frame, decoder.pending_frame_size, lambda: decoder.receive_data(b"\x00" * 4)):
        with pytest.raises(FrameError):
            call()


def test_structured_streams_in_arbitrary_chunkings():
    @fuzz_settings(600)
    @given(max_frame_bytes=st.integers(0, 64), data=st.data())
    def run(max_frame_bytes: int, data) -> None:
        stream = data.draw(framed_streams(max_frame_bytes))
        peeks = data.draw(st.lists(st.booleans(), min_size=1, max_size=4))
        check(stream, data.draw(chunkings(stream)), [max_frame_bytes], peeks)

    run()


def test_taking_every_frame_at_once_equals_one_by_one():
    # The listener takes a chunk's frames at once where no per-frame limit applies;
    # a connection may switch between the two ways (a SASL client authenticating).
    @fuzz_settings(600)
    @given(max_frame_bytes=st.integers(0, 64), data=st.data())
    def run(max_frame_bytes: int, data) -> None:
        stream = data.draw(framed_streams(max_frame_bytes))
        batches = data.draw(st.lists(st.booleans(), min_size=1, max_size=4))
        check(stream, data.draw(chunkings(stream)), [max_frame_bytes], batches=batches)
        check(stream, [stream], [max_frame_bytes], batches=[True])

    run()


def test_cap_raised_after_the_first_frames_like_sasl():
    # A SASL listener holds frames to sasl.server.max.receive.size until the
    # client authenticates, then to socket.request.max.bytes: the decoder must
    # apply each frame's cap to that frame's prefix, never a stale one.
    @fuzz_settings(300)
    @given(caps=st.lists(st.integers(0, 64), min_size=1, max_size=4), data=st.data())
    def run(caps: list[int], data) -> None:
        stream = data.draw(framed_streams(max(caps)))
        peeks = data.draw(st.lists(st.booleans(), min_size=1, max_size=4))
        check(stream, data.draw(chunkings(stream)), caps, peeks)

    run()


def test_random_streams_against_the_default_limit():
    # Random bytes almost always start with a size far beyond any test stream;
    # against the real 100 MiB limit the decoder must wait (and buffer only
    # what it was given) or reject, never return a frame it has not received.
    @fuzz_settings(300)
    @given(stream=st.binary(max_size=200), data=st.data())
    def run(stream: bytes, data) -> None:
        check(stream, data.draw(chunkings(stream)), [DEFAULT_MAX_FRAME_BYTES], [data.draw(st.booleans())])

    run()


def test_byte_at_a_time_equals_all_at_once():
    @fuzz_settings(200)
    @given(max_frame_bytes=st.integers(0, 64), data=st.data())
    def run(max_frame_bytes: int, data) -> None:
        stream = data.draw(framed_streams(max_frame_bytes))
        one_by_one = [stream[i:i + 1] for i in range(len(stream))]
        check(stream, one_by_one, [max_frame_bytes])
        check(stream, [stream], [max_frame_bytes], [True])

    run()


def test_a_lying_prefix_is_rejected_before_any_body_is_buffered():
    # 2 GiB claimed in the first 4 bytes: refused at once, nothing buffered.
    decoder = FrameDecoder(1024)
    decoder.receive_data(struct.pack(">i", (1 << 31) - 1))
    with pytest.raises(FrameError):
        decoder.next_frame()
    with pytest.raises(FrameError):
        decoder.receive_data(b"\x00" * 4096)
    assert decoder.buffered_bytes <= SIZE_PREFIX_BYTES
