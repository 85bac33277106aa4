"""Whether a process of this host still runs: its id, and when it started (Linux's
``/proc``), so a process id the system gave to another process since is not taken for it.

The one rule for "is that process alive": a sweep's claims ask it of the process that
claimed a point, and a pool worker asks it of the process that started its pool (when that
one is killed outright, its workers leave instead of waiting forever).
"""

from __future__ import annotations

import os

__all__ = ["running", "start_token"]


def _stat(pid: int) -> list[str]:
    """The fields of Linux's ``/proc/PID/stat`` after the command's name (the 3rd on: its
    state, ...), or [] (no such process, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return []
    return text.rsplit(")", 1)[-1].split()


def start_token(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, Linux's ``/proc``), or ''."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""  # the stat file's 22nd field


def running(pid: int, token: str = "") -> bool:
    """Whether process ``pid`` of this host runs (not ended, nor ended and waiting for its
    parent to reap it), and is the one that started at ``token`` when one is given."""
    if pid <= 0:  # never a process (and os.kill would reach a group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    except OSError:
        return False
    fields = _stat(pid)
    if fields and fields[0] in ("Z", "X"):  # ended, not yet reaped by its parent
        return False
    if token and len(fields) > 19:
        return fields[19] == token  # else another process took its id
    return True
