"""Arrival processes of a server running alone: open loop (Poisson, trace replay, all at
once) and closed loop.

A server that serves its own requests (``serving.simulate``; not a cluster replica, whose
requests a router hands over) knows when each arrives: at a precomputed time (open loop), or
at the completion of a request (closed loop: ``concurrency`` users; each submits a request,
waits for it to complete, and submits the next one at once, no think time). Its driver pulls
them (``serving.driver.KnownArrivals``, :meth:`Arrivals.land`), so an arrival costs no
simulation event. Request ids are handed out in submission order, so request ``i`` is the
``i``-th submitted, whatever the user.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

NEVER = 2**63
"""``next_time`` when no arrival is due: later than any time the serving clock can hold."""


class Arrivals:
    """Where a server running alone gets its requests from (a base class, not a protocol:
    compiled, its subclasses' methods are called directly)."""

    def next_time(self) -> int:
        """Time (ps) of the next request not yet taken; ``NEVER`` if none is known yet."""
        raise NotImplementedError

    def take(self) -> int:
        """The id of that next request (it has now arrived)."""
        raise NotImplementedError

    def completed(self, now: int) -> None:
        """A request completed at ``now``. A request it brings comes after every one already
        known, so ``next_time`` changes only if it was ``NEVER`` (the server relies on it)."""
        raise NotImplementedError

    def land(self, until: int, arrived: Callable[[int, int], None]) -> int:
        """Every request due by ``until`` arrives, in order: ``arrived(request, at)`` at its
        own time. The time of the next one after (``NEVER``: none known)."""
        at = self.next_time()
        while at <= until:
            arrived(self.take(), at)
            at = self.next_time()
        return at


class OpenLoop(Arrivals):
    """Request ``i`` arrives at ``arrival_ps[i]`` (sorted ascending), whatever completes."""

    def __init__(self, arrival_ps: NDArray[np.int64]) -> None:
        self._times: list[int] = arrival_ps.tolist()
        self._next = 0

    def next_time(self) -> int:
        """The next request's arrival time, ``NEVER`` after the last."""
        return self._times[self._next] if self._next < len(self._times) else NEVER

    def take(self) -> int:
        """The next request id."""
        request = self._next
        self._next += 1
        return request

    def completed(self, now: int) -> None:
        """Open loop: completions do not bring requests."""


class ClosedLoop(Arrivals):
    """``users`` users that each keep one request in the system until ``total`` are
    submitted: every user submits at time 0, and again at each of its completions."""

    def __init__(self, users: int, total: int) -> None:
        self.total = total
        self._next = 0
        self._due: deque[int] = deque([0] * min(users, total))  # submission times, in order

    def next_time(self) -> int:
        """When the next submission happens (at a completion already seen), or ``NEVER``."""
        return self._due[0] if self._due else NEVER

    def take(self) -> int:
        """The next request id (ids in submission order)."""
        self._due.popleft()
        request = self._next
        self._next += 1
        return request

    def completed(self, now: int) -> None:
        """The completing request's user submits its next one now, if any is left."""
        if self._next + len(self._due) < self.total:
            self._due.append(now)
