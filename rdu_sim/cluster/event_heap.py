"""A mixed cluster's replicas and arrivals on one heap of next-event times, without SimPy.

A cluster with no decode pool has only mixed replicas, which meet only at the router: each
replica's server is its SimPy process (``Server.driven``) resumed by this heap instead of by
SimPy's events. A step end is an entry ``(time, LATE, seq, replica)``, a wake of an idle
replica ``(time, NORMAL, seq, replica)``, the arrival process ``(time, URGENT or NORMAL,
seq, -1)``; ``seq`` counts pushes. Entries pop in ``(time, priority, seq)`` order, which is
SimPy's order for the same events (its heap key is ``(time, priority, event id)`` and its
event ids count schedulings, in the same order as the pushes here), so same-instant rules
hold exactly:

- every arrival at an instant is routed before any replica acts at that instant (the arrival
  process's timeout is NORMAL and was scheduled earlier; step ends are LATE), so a router
  sees every replica as of the end of the previous instant;
- a replica woken by an arrival decides after every arrival at its instant (its wake is
  NORMAL, pushed by the arrival) and before the step ends at that instant (LATE);
- ties among replicas' step ends at one instant go in push order, as SimPy's event ids.

An arrival that cuts a replica's decode run moves its step end earlier (``Timeline.move``):
a new entry, and the old one is skipped when it pops (the replica's current ``seq`` no
longer matches), as SimPy's orphaned event fires with no one waiting; the clock still
passes it, so the run's end time is SimPy's ``env.now`` at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from rdu_sim.serving.server import Server

URGENT, NORMAL, LATE = 0, 1, 2  # SimPy's priorities of a process start, an event, a step end


class EventHeap:
    """The timeline of a mixed cluster's servers (``serving.server.Timeline``)."""

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, int, int]] = []
        self._seq = 0
        self._index: dict[int, int] = {}  # id(server) -> its number here
        self._steps: list[Any] = []  # each server's process (``Server.driven``)
        self._current: list[int] = []  # the seq of each server's live entry

    def add(self, server: Server) -> None:
        """Drive ``server`` (in the order the servers were made, as SimPy starts them)."""
        self._index[id(server)] = len(self._steps)
        self._steps.append(server.driven())
        self._current.append(0)

    def wake(self, server: Server) -> None:
        self._push(self.now, NORMAL, self._index[id(server)])

    def move(self, server: Server, at: int) -> None:
        self._push(at, LATE, self._index[id(server)])

    def _push(self, at: int, priority: int, who: int) -> None:
        seq = self._seq = self._seq + 1
        heappush(self._heap, (at, priority, seq, who))
        if who >= 0:
            self._current[who] = seq

    def run(self, arrival_ps: list[int], arrive: Callable[[int], None]) -> int:
        """Start every server, then call ``arrive(i)`` at ``arrival_ps[i]`` (sorted) and
        resume each server at its entries' times until nothing is left; returns the time
        of the last entry (SimPy's ``env.now`` after ``run``)."""
        heap, steps, current, push = self._heap, self._steps, self._current, self._push
        for who, process in enumerate(steps):  # each runs to its first yield at time 0
            self._resume(who, process.send(None))
        count = len(arrival_ps)
        following = 0  # the next request to arrive
        push(0, URGENT, -1)  # the arrival process starts after the servers
        while heap:
            at, _priority, seq, who = heappop(heap)
            self.now = at
            if who < 0:
                while following < count and arrival_ps[following] <= at:
                    arrive(following)
                    following += 1
                if following < count:
                    push(arrival_ps[following], NORMAL, -1)
            elif seq == current[who]:
                self._resume(who, steps[who].send(None))
        return self.now

    def _resume(self, who: int, waits_for: object) -> None:
        """Push the step end a server yielded (an int); an idle one waits for a wake."""
        if type(waits_for) is int:
            self._push(waits_for, LATE, who)
