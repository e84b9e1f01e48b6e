"""Kafka request framing as a sans-I/O state machine.

Owns: splitting a byte stream into size-prefixed frames (int32 big-endian
length, then that many bytes), with a hard cap on the frame size
(`socket.request.max.bytes`, default 100 MiB like Kafka).

Rules kept here:
- Never buffers more than one frame plus the 4-byte prefix beyond what was
  asked for: a hostile size prefix is rejected *before* any body is read.
- Bad peer input is an error value (`FrameError`), never an unexpected
  exception; after an error the decoder stays broken (the connection closes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SIZE_PREFIX_BYTES = 4
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer's framing is unacceptable; the connection must be closed."""


@dataclass(frozen=True, slots=True)
class FrameTooLarge:
    size_bytes: int
    max_bytes: int


class FrameDecoder:
    """Feed bytes in, take whole frames out.

    `receive_data(data)` appends; `next_frame()` returns one frame's body
    (without the size prefix) or None when more bytes are needed.
    """

    __slots__ = ("_buffer", "_max_frame_bytes", "_limit_name", "_need", "_broken")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes
        self._limit_name = "socket.request.max.bytes"
        self._need = -1  # body size of the frame being read, -1 = reading the prefix
        self._broken: FrameError | None = None

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    def set_max_frame_bytes(self, value: int, limit_name: str) -> None:
        """The cap may change between frames: a SASL listener allows only
        sasl.server.max.receive.size until the client has authenticated."""
        self._max_frame_bytes = value
        self._limit_name = limit_name

    def pending_frame_size(self) -> int | None:
        """The body size of the next frame once its size prefix has arrived (checked
        against the cap like next_frame does), else None. Lets the caller reserve
        memory for a frame before reading its body."""
        if self._broken is not None:
            raise self._broken
        if self._need < 0:
            if len(self._buffer) < SIZE_PREFIX_BYTES:
                return None
            self._take_prefix()
        return self._need

    def _take_prefix(self) -> None:
        size = _SIZE.unpack_from(self._buffer, 0)[0]
        if size < 0:
            self._broken = FrameError(f"negative frame size {size}")
            raise self._broken
        if size > self._max_frame_bytes:
            self._broken = FrameError(f"frame of {size} bytes exceeds {self._limit_name}={self._max_frame_bytes}")
            raise self._broken
        del self._buffer[:SIZE_PREFIX_BYTES]
        self._need = size

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    @property
    def in_frame(self) -> bool:
        """True when part of a frame has arrived (a disconnect now is mid-request)."""
        return bool(self._buffer) or self._need >= 0

    def receive_data(self, data: bytes) -> None:
        if self._broken is not None:
            raise self._broken
        self._buffer += data

    def next_frame(self) -> bytes | None:
        if self._broken is not None:
            raise self._broken
        buffer = self._buffer
        need = self._need
        if need < 0:
            if len(buffer) < SIZE_PREFIX_BYTES:
                return None
            need = _SIZE.unpack_from(buffer, 0)[0]
            if need < 0 or need > self._max_frame_bytes:
                self._take_prefix()  # words the error, breaks the decoder, raises
            end = SIZE_PREFIX_BYTES + need
            if len(buffer) >= end:
                # The whole frame is here (the usual case): prefix and body in one go.
                frame = bytes(buffer[SIZE_PREFIX_BYTES:end])
                del buffer[:end]
                return frame
            del buffer[:SIZE_PREFIX_BYTES]
            self._need = need
            return None
        if len(buffer) < need:
            return None
        frame = bytes(buffer[:need])
        del buffer[:need]
        self._need = -1
        return frame

    def take_frames(self) -> list[bytes]:
        """Every whole frame buffered, in order (their bodies, as `next_frame` gives
        them one by one), for a reader that applies no per-frame limit of its own
        between frames (a memory pool, a cap that changes after authentication). A
        bad size prefix behind good frames breaks the decoder: this call still returns
        the frames before it, the next one raises."""
        frames: list[bytes] = []
        if self._need >= 0:  # the body of a frame whose prefix was taken
            frame = self.next_frame()
            if frame is None:
                return frames
            frames.append(frame)
        elif self._broken is not None:
            raise self._broken
        buffer = self._buffer
        end = len(buffer)
        cap = self._max_frame_bytes
        position = 0
        while end - position >= SIZE_PREFIX_BYTES:
            need = _SIZE.unpack_from(buffer, position)[0]
            if need < 0 or need > cap:
                del buffer[:position]
                if not frames:
                    self._take_prefix()  # words the error, breaks the decoder, raises
                try:
                    self._take_prefix()
                except FrameError:
                    pass  # broken now: raised by the next call
                return frames
            stop = position + SIZE_PREFIX_BYTES + need
            if stop > end:
                # Partly here: its prefix is taken, as next_frame takes it.
                position += SIZE_PREFIX_BYTES
                self._need = need
                break
            frames.append(bytes(buffer[position + SIZE_PREFIX_BYTES:stop]))
            position = stop
        if position:
            del buffer[:position]
        return frames

    def wanted_bytes(self) -> int:
        """How many more bytes would complete the current frame (a read-size hint)."""
        if self._need < 0:
            return max(SIZE_PREFIX_BYTES - len(self._buffer), 1)
        return max(self._need - len(self._buffer), 1)
