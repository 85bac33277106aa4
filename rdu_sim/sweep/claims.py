"""Claims: which process is computing which point, so two sweeps on one database share work.

Two ``rdu-sim sweep`` processes on the same database (the same spec twice, or two specs
sharing points) each computed every point neither had stored yet. Now a sweep claims the
points it is about to run in the database (``store.Store.claim``: one transaction, which
also re-reads what is stored), skips those a live other process holds, and once its own are
done takes over the others' that are left: those whose owner died, stopped, or gave them
back without a row. A point's row and the end of its claim are one transaction, so a point
is claimed until its row is stored, and a process that claims a point after another stored
it finds the row (``run._claimed_plan`` reads the rows again after claiming).

An owner is its host, process id and the process's start time (``token``: Linux's
``/proc/PID/stat``; empty elsewhere), so a recycled process id is not taken for the owner.
An owner on this host is alive while its process is; one on another host (a database on a
shared disk) while it has refreshed its claims (each row it stores, each poll while it
waits) within ``STALE_S``. The rows are what the points compute, whichever process ran
them: claims only decide who computes.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from functools import cache

from rdu_sim.processes import running, start_token

STALE_S = 3600.0
"""How long a claim of an owner on another host holds without being refreshed: its process
cannot be seen from here, and a point rarely runs this long."""

POLL_S = 1.0
"""How often a sweep waiting for another process's points looks at the database."""


@dataclass(frozen=True)
class Owner:
    """A process that claims points: its host, process id and start token."""

    host: str
    pid: int
    token: str = ""

    @property
    def label(self) -> str:
        """``host:pid``, as a row's ``worker`` column names a process."""
        return f"{self.host}:{self.pid}"


@cache
def _this_host() -> str:
    return socket.gethostname()


def me() -> Owner:
    """This process, as an owner of claims."""
    pid = os.getpid()
    return Owner(_this_host(), pid, start_token(pid))


def alive(owner: Owner, seen: float) -> bool:
    """Whether ``owner``, which last refreshed its claims at ``seen`` (seconds since the
    epoch), may still be computing them (module docstring)."""
    if owner.host != _this_host():
        return time.time() - seen < STALE_S
    return running(owner.pid, owner.token)
