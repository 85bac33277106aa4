"""Arrival processes: open loop (Poisson, trace replay, all at once) and closed loop.

Open loop: one SimPy process submits request ``i`` at its precomputed arrival time.
Closed loop: ``concurrency`` users; each submits a request, waits for it to complete, and
submits the next one at once (no think time). Request ids are handed out in submission
order, so request ``i`` is the ``i``-th submitted, whatever the user.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy
from numpy.typing import NDArray
from simpy.events import Event

from rdu_sim.serving.server import Server


def open_loop(
    env: simpy.Environment, server: Server, arrival_ps: NDArray[np.int64]
) -> Generator[Event, Any, None]:
    """Submit request ``i`` at ``arrival_ps[i]`` (sorted ascending)."""
    for request, at in enumerate(arrival_ps.tolist()):
        if at > env.now:
            yield env.timeout(at - env.now)
        server.submit(request)


class ClosedLoop:
    """Users that each keep one request in the system until ``total`` are submitted."""

    def __init__(self, env: simpy.Environment, server: Server, users: int, total: int) -> None:
        self.env = env
        self.server = server
        self.total = total
        self.next_request = 0
        for _ in range(min(users, total)):
            env.process(self._user())

    def _user(self) -> Generator[Event, Any, None]:
        while self.next_request < self.total:
            request = self.next_request
            self.next_request += 1
            done = self.server.submit(request, notify_done=True)
            assert done is not None
            yield done
