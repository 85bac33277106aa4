"""The digest of a git checkout's changed tracked files: one label per edit of a commit
(``provenance.Simulator.label``'s ``.dirty.<digest>``), so a sweep never takes one edit's
rows for another's without saying so.

Standard library only: setup.py loads this file by its path to bake a wheel's digest, before
the package's dependencies are installed.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

STATUS_ARGS = ("status", "--porcelain", "-z", "--untracked-files=no")
"""The git command whose output :func:`changes_digest` reads: NUL-separated, so a path git
would quote and escape (a non-ASCII name) comes as it is on disk."""


def changed_paths(status: str) -> list[str]:
    """The paths ``git status --porcelain -z`` lists, sorted: each entry's, and a rename's
    or copy's source too (its absence, or its content, is part of the change)."""
    entries = status.split("\0")
    paths: list[str] = []
    at = 0
    while at < len(entries):
        entry = entries[at]
        at += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC" and at < len(entries):  # the source path follows, alone
            paths.append(entries[at])
            at += 1
    return sorted(paths)


def _content(path: Path, crc: int) -> int:
    """``crc`` carried over the file at ``path`` as it is now: a regular file's bytes, read
    in chunks; a symbolic link's target, not followed (it could name a device); anything
    else (a FIFO, which would block a read; a folder) its kind alone; a missing one its
    absence."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return zlib.crc32(b"\0gone", crc)
    if stat.S_ISLNK(mode):
        return zlib.crc32(b"\0link " + os.fsencode(os.readlink(path)), crc)
    if not stat.S_ISREG(mode):
        return zlib.crc32(b"\0special", crc)
    try:
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(2**20), b""):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return zlib.crc32(b"\0unreadable", crc)
    return crc


def changes_digest(folder: str | Path, status: str) -> str | None:
    """CRC-32 (hex) of the tracked files ``status`` (:data:`STATUS_ARGS`' output in the
    checkout ``folder``) lists as changed, each its path and its content as it is when asked
    (a process that imported the code earlier runs what it imported): two different edits
    of one commit have different digests, the same edit the same on any machine; None when
    nothing is listed. Any tracked file counts, as a commit's label counts every file."""
    paths = changed_paths(status)
    if not paths:
        return None
    crc = 0
    for path in paths:
        crc = zlib.crc32(os.fsencode(path) + b"\0", crc)
        crc = _content(Path(folder) / path, crc)
    return format(crc, "08x")
