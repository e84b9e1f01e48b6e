"""Durable file writes: the one place that knows the fsync dance.

Owns: `write_file_atomically` (write a temp file, fsync it, rename it over the
target, fsync the directory — so a crash leaves either the old or the new
content, never a mix, and the rename itself survives power loss) and
`fsync_directory`. Used for meta.properties, the quorum-state file and the
bootstrap checkpoint.
"""

from __future__ import annotations

import os


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    fd = os.open(os.fspath(directory), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    path = os.fspath(path)
    temporary = path + ".tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:  # each round writes at least one byte or raises
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))
