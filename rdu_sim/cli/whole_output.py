"""Standard output that takes every byte or says it could not.

CPython's buffered standard output drops what a short write leaves: with `> file` on a disk
that fills (or under `ulimit -f`), write(2) takes part of a flush, and the rest is lost with
no error, so a run's JSON came out cut and the command ended with status 0. Here the bytes
go through :class:`WholeWrites`, which writes again until all are taken; the write that
cannot be taken raises (``EFBIG``, ``ENOSPC``), and the CLI's error boundary names
``<stdout>`` (``cli.errors``).
"""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class WholeWrites(io.RawIOBase):
    """A file descriptor written whole: ``write`` returns only once every byte is taken."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data: ReadableBuffer, /) -> int:
        """Write all of ``data``; an OSError when the descriptor refuses part of it."""
        view = memoryview(data).cast("B")
        taken = 0
        while taken < len(view):
            taken += os.write(self.fd, view[taken:])
        return taken


def install() -> None:
    """Make ``sys.stdout`` write whole (its encoding, errors and buffering kept); nothing
    when it is not a descriptor's text stream (a test's captured output, no stdout)."""
    stream = sys.stdout
    if not isinstance(stream, io.TextIOWrapper):
        return
    try:
        fd = stream.fileno()
        stream.flush()
    except (OSError, ValueError):
        return
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(WholeWrites(fd)),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=stream.write_through,
    )
