"""The metadata log's recovery point: how far the log is known to be on disk.

Owns: the `recovery-point` file in the log directory (its byte layout, the
two alternating slots, reading it back) and `RecoveryPointFile`, the handle
`MetadataLog` keeps open to move it. Kafka keeps the same fact in
`recovery-point-offset-checkpoint`; this file is kraftwerk's own format.

The recovery point R means: every batch with offsets below R was fsynced.
Start-up recovery trusts it to tell a torn write (damage at or above R: an
append that was never acknowledged) from corruption (damage below R, or a
log that ends before R: acknowledged data is gone).

Rules kept here (the log calls them in this order; see server/storage/log.py):
- Never ahead of the data. R is raised only by `advance`, called after the
  data fsync that made the offsets below R durable; the value is pwritten
  without an fsync of its own, so the commit path pays one small pwrite,
  not a second fsync. A raise that is lost in a crash leaves R lagging,
  which only makes recovery more lenient.
- Lowered durably before the data shrinks. `lower` overwrites *both* slots
  and fsyncs before the caller cuts the log. Both slots, because the raises
  are not fsynced: with one slot rewritten, a lost later raise on the other
  slot could leave an older, higher value from before the cut as the only
  readable slot.
- Two slots, one sequence number. Raises alternate between the slots; the
  valid slot (magic, version, CRC-32C) with the highest sequence number wins.
  A torn slot write is caught by the CRC and the other slot still holds an
  older (lower or equal, so safe) value. If neither slot verifies, the point
  is unknown and recovery falls back to the lenient rule for logs without
  the file, with a warning.
- `sync` (fsync of this file alone) runs at cheap moments: segment roll,
  close. Between them the kernel's writeback bounds how far R lags.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import crc32c

RECOVERY_POINT_FILE_NAME = "recovery-point"
_MAGIC = b"KWRP"
_VERSION = 1
# magic, version, 3 reserved bytes, sequence, recovery offset; then the CRC-32C
# of those 24 bytes and 4 bytes of padding (a slot is 32 bytes).
_BODY = struct.Struct(">4sB3xqq")
_CRC = struct.Struct(">I")
SLOT_BYTES = 32
# Slots in different 4 KiB pages/blocks, so one torn page write cannot damage both.
SLOT_POSITIONS = (0, 4096)


class RecoveryPoint(NamedTuple):
    sequence: int
    offset: int


class RecoveryPointRead(NamedTuple):
    """What the file holds: `point` is None when the file is absent (`exists`
    False) or when no slot verifies (`exists` True)."""

    exists: bool
    point: RecoveryPoint | None


def encode_slot(point: RecoveryPoint) -> bytes:
    body = _BODY.pack(_MAGIC, _VERSION, point.sequence, point.offset)
    return body + _CRC.pack(crc32c.crc32c(body)) + bytes(SLOT_BYTES - _BODY.size - _CRC.size)


def decode_slot(data: bytes) -> RecoveryPoint | None:
    """The slot's point, or None if it is torn, zero, or not ours."""
    if len(data) < _BODY.size + _CRC.size:
        return None
    body = data[: _BODY.size]
    (crc,) = _CRC.unpack_from(data, _BODY.size)
    if crc32c.crc32c(body) != crc:
        return None
    magic, version, sequence, offset = _BODY.unpack(body)
    if magic != _MAGIC or version != _VERSION or sequence < 0 or offset < 0:
        return None
    return RecoveryPoint(sequence, offset)


def newest_point(data: bytes) -> RecoveryPoint | None:
    """The verifying slot with the highest sequence number in the file's bytes."""
    points = [
        point
        for position in SLOT_POSITIONS
        if (point := decode_slot(data[position : position + SLOT_BYTES])) is not None
    ]
    return max(points, default=None)


def read_recovery_point(directory: str) -> RecoveryPointRead:
    path = os.path.join(directory, RECOVERY_POINT_FILE_NAME)
    try:
        with open(path, "rb") as file:
            data = file.read(SLOT_POSITIONS[-1] + SLOT_BYTES)
    except FileNotFoundError:
        return RecoveryPointRead(False, None)
    return RecoveryPointRead(True, newest_point(data))


def lower_recovery_point(directory: str, offset: int) -> None:
    """Durably lowers the point of a log that is not open (a repair, before it
    cuts the log at `offset`). No file: nothing to lower. A file whose slots
    are both torn is rewritten at `offset` too, so it reads back."""
    found = read_recovery_point(directory)
    if not found.exists or (found.point is not None and found.point.offset <= offset):
        return
    fd = os.open(os.path.join(directory, RECOVERY_POINT_FILE_NAME), os.O_RDWR)
    handle = RecoveryPointFile(directory, fd, found.point or RecoveryPoint(0, offset))
    try:
        handle._write_both(offset)
    finally:
        handle.close()


class RecoveryPointFile:
    """An open `recovery-point` file. Not thread-safe: the log's mutex guards it."""

    def __init__(self, directory: str, fd: int, current: RecoveryPoint) -> None:
        self._directory = directory
        self._fd: int | None = fd
        self._current = current

    @classmethod
    def open(cls, directory: str, offset: int, previous: RecoveryPoint | None) -> RecoveryPointFile:
        """Opens (creating if needed) the file and durably sets it to `offset`.

        The caller must have fsynced the data below `offset` first. Both slots
        are written, so whatever the file held before no longer counts —
        unless `previous` (what the file holds) is already at `offset`: then
        nothing is written, so opening a log that is only read leaves its
        files byte for byte as they were. That is safe because a lowering
        rewrites both slots and raises only go up, so the older slot is never
        above the newer one.
        """
        path = os.path.join(directory, RECOVERY_POINT_FILE_NAME)
        created = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if previous is not None and previous.offset == offset and not created:
            return cls(directory, fd, previous)
        sequence = previous.sequence if previous is not None else 0
        handle = cls(directory, fd, RecoveryPoint(sequence, offset))
        try:
            handle._write_both(offset)
            if created:
                fd_dir = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd_dir)
                finally:
                    os.close(fd_dir)
        except BaseException:
            handle.close()
            raise
        return handle

    @property
    def offset(self) -> int:
        return self._current.offset

    def advance(self, offset: int) -> None:
        """Raises the point to `offset` with a pwrite and no fsync. Call only
        after the fsync that made every offset below `offset` durable."""
        if offset <= self._current.offset:
            return
        point = RecoveryPoint(self._current.sequence + 1, offset)
        self._pwrite(encode_slot(point), SLOT_POSITIONS[point.sequence % 2])
        self._current = point

    def lower(self, offset: int) -> None:
        """Durably lowers the point to `offset` (no-op if it is not above it).
        Call *before* removing data at or above `offset`."""
        if offset < self._current.offset:
            self._write_both(offset)

    def reset(self, offset: int) -> None:
        """Durably sets the point to `offset`, up or down. Only for a log that
        holds no batch below `offset` (just reset to start there)."""
        self._write_both(offset)

    def sync(self) -> None:
        assert self._fd is not None
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write_both(self, offset: int) -> None:
        first = RecoveryPoint(self._current.sequence + 1, offset)
        second = RecoveryPoint(self._current.sequence + 2, offset)
        self._pwrite(encode_slot(first), SLOT_POSITIONS[first.sequence % 2])
        self._pwrite(encode_slot(second), SLOT_POSITIONS[second.sequence % 2])
        self.sync()
        self._current = second

    def _pwrite(self, data: bytes, position: int) -> None:
        assert self._fd is not None
        written = os.pwrite(self._fd, data, position)
        # A 32-byte pwrite to a regular file is not short unless something is badly wrong;
        # if it were, the CRC would reject the slot on read, so say so loudly.
        if written != len(data):
            raise OSError(f"recovery-point pwrite wrote {written} of {len(data)} bytes")
