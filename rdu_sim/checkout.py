"""The git commit of the checkout rdu_sim runs from, and whether tracked files differ from it.

Two git processes (``rev-parse HEAD``, ``status``) answer it. A command whose output records
its provenance calls :func:`start` before it imports and simulates, so the processes run
beside that work instead of after it; :func:`commit` reads their answers (or runs them, when
nothing started them). Only the process that started them reads them: a forked worker runs
its own.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rdu_sim import PACKAGE_DIR
from rdu_sim.tree_digest import STATUS_ARGS, changes_digest

if TYPE_CHECKING:
    import subprocess

GIT_TIMEOUT_S = 10.0
"""How long a git process may take before its answer counts as unknown."""


@dataclass(frozen=True)
class Commit:
    """A checkout's HEAD, whether tracked files differ from it (None: git could not say) and,
    when they do, a digest of what differs (``tree_digest.changes_digest``)."""

    head: str
    dirty: bool | None
    changes: str | None = None


def top() -> Path:
    """The folder holding the ``rdu_sim`` package (a checkout's root when it has ``.git``)."""
    return PACKAGE_DIR.parent


def in_checkout() -> bool:
    """Whether rdu_sim runs from a git checkout."""
    return (top() / ".git").exists()


def _spawn(*args: str) -> subprocess.Popen[str] | None:
    """A git process in the package's checkout, or None when git cannot start."""
    import subprocess  # here: an installed package (no checkout) starts no process

    try:
        return subprocess.Popen(
            # safe.directory (this checkout only): one another user owns ("dubious
            # ownership") reads the same commit, so a version does not depend on who runs
            # it; core.fsmonitor off: that user's configured monitor is never started
            [
                "git",
                "-c",
                f"safe.directory={top()}",
                "-c",
                "core.fsmonitor=false",
                "-C",
                str(top()),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="surrogateescape",  # a path's bytes kept as they are (os.fsencode)
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _output(process: subprocess.Popen[str] | None) -> str | None:
    """What a git process wrote, or None when it failed, timed out or never started."""
    if process is None:
        return None
    import subprocess  # loaded by _spawn, which made the process

    try:
        out, _ = process.communicate(timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        process.kill()
        process.communicate()
        return None
    return out if process.returncode == 0 else None


@dataclass
class _Lookup:
    """The two git processes of one lookup, and the process that started them."""

    pid: int
    head: subprocess.Popen[str] | None
    status: subprocess.Popen[str] | None


_started: _Lookup | None = None
_answered: dict[int, Commit | None] = {}
"""The answer, by the process that read it (a forked worker asks again)."""
_lock = threading.RLock()  # API users may ask from threads: one lookup, one answer


def _fresh_lock() -> None:
    """A forked child's own lock (a thread of the parent may have held the copied one)."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock)


def start() -> None:
    """Start the lookup in the background when rdu_sim runs from a checkout (nothing when
    it is started or answered already in this process)."""
    global _started
    with _lock:
        pid = os.getpid()
        if pid in _answered or (_started is not None and _started.pid == pid):
            return
        if not in_checkout():
            return
        head = _spawn("rev-parse", "HEAD")
        status = _spawn(*STATUS_ARGS)
        _started = _Lookup(pid, head, status)


def commit() -> Commit | None:
    """The checkout's commit, or None outside a checkout or when git cannot say (read once
    per process)."""
    global _started
    with _lock:
        pid = os.getpid()
        if pid not in _answered:
            if _started is not None and _started.pid != pid:
                _started = None  # a forked worker's copy of its parent's lookup
            start()
            lookup, _started = _started, None
            _answered[pid] = None if lookup is None else _read(lookup)
        return _answered[pid]


def _read(lookup: _Lookup) -> Commit | None:
    head = _output(lookup.head)
    status = _output(lookup.status)
    if head is None:
        return None
    if status is None:
        return Commit(head.strip(), None)
    return Commit(head.strip(), bool(status.strip()), changes_digest(top(), status))
