"""A mixed cluster's replicas and arrivals on one heap of next-event times, without SimPy.

A cluster with no decode pool has only mixed replicas, which meet only at the router: each
replica's server is its SimPy process (``Server.driven``) resumed by this heap instead of by
SimPy's events. A step end is an entry ``(time, LATE, seq, replica)``, a wake of an idle
replica ``(time, NORMAL, seq, replica)``; ``seq`` counts pushes. Entries pop in ``(time,
priority, seq)`` order, which is SimPy's order for the same events (its heap key is ``(time,
priority, event id)`` and its event ids count schedulings, in the same order as the pushes
here); the arrivals, sorted, are merged in as SimPy orders its arrival process's timeouts
(NORMAL). So the same-instant rules hold exactly:

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

from rdu_sim.serving.server import Idle, Server

NORMAL, LATE = 1, 2  # SimPy's priorities of an event (a wake) and of a step end
SEQ_BITS = 48  # pushes counted in a key (2.8e14: beyond any run's events)


class EventHeap:
    """The timeline of a mixed cluster's servers (``serving.server.Timeline``).

    An entry is one int, ``((time * 4 + priority) << SEQ_BITS | seq) << who_bits | who``:
    ints compare in one step where tuples compare field by field (the heap is the
    driver's inner loop)."""

    def __init__(self, servers: int) -> None:
        self.now = 0
        self._heap: list[int] = []
        self._seq = 0
        self._who_bits = max(1, servers.bit_length())
        self._index: dict[Server, int] = {}  # server (hashed by identity) -> its number here
        self._steps: list[Any] = []  # each server's process (``Server.driven``)
        self._current: list[int] = []  # each server's live entry (an older one is stale)

    def add(self, server: Server) -> None:
        """Drive ``server`` (in the order the servers were made, as SimPy starts them)."""
        if len(self._steps) >> self._who_bits:
            raise ValueError(f"an event heap for {len(self._steps)} servers is full")
        self._index[server] = len(self._steps)
        self._steps.append(server.driven())
        self._current.append(-1)

    def wake(self, server: Server) -> None:
        self._push(self.now, NORMAL, self._index[server])

    def move(self, server: Server, at: int) -> None:
        self._push(at, LATE, self._index[server])

    def _push(self, at: int, priority: int, who: int) -> None:
        seq = self._seq = self._seq + 1
        if seq >> SEQ_BITS:
            raise OverflowError(f"an event heap counts at most 2**{SEQ_BITS} pushes")
        key = (((at << 2 | priority) << SEQ_BITS | seq) << self._who_bits) | who
        heappush(self._heap, key)
        self._current[who] = key

    def run(self, arrival_ps: list[int], arrive: Callable[[int], None]) -> int:
        """Start every server, then call ``arrive(i)`` at ``arrival_ps[i]`` (sorted) and
        resume each server at its entries' times until nothing is left; returns the time
        of the last entry (SimPy's ``env.now`` after ``run``).

        The arrivals stay out of the heap: the next one goes before the heap's top when it
        is not later (SimPy's arrival timeout at an instant is NORMAL and scheduled before
        anything else at that instant that is not LATE: a wake at an instant comes from an
        arrival there, so none is pending when the arrival is)."""
        heap, steps, current, push = self._heap, self._steps, self._current, self._push
        for who, process in enumerate(steps):  # each runs to its first yield at time 0
            waits_for = _next_wait(process)
            if type(waits_for) is int:  # a step end (an idle server waits for a wake)
                push(waits_for, LATE, who)
        who_bits = self._who_bits
        time_shift = SEQ_BITS + who_bits + 2
        who_mask = (1 << who_bits) - 1
        sends = [process.send for process in steps]
        count = len(arrival_ps)
        following = 0  # the next request to arrive
        upcoming = arrival_ps[0] if count else -1
        # The loop inlines ``_next_wait`` and ``_push`` (two calls a resumption: a replica is
        # resumed ~3 times a request); the push sequence is ``self._seq``'s, kept in ``seq``.
        while heap or following < count:
            if following < count and (not heap or upcoming <= heap[0] >> time_shift):
                self.now = upcoming
                while following < count and arrival_ps[following] == upcoming:
                    arrive(following)
                    following += 1
                if following < count:
                    upcoming = arrival_ps[following]
                continue
            key = heappop(heap)
            self.now = key >> time_shift
            who = key & who_mask
            if key == current[who]:
                try:
                    waits_for = sends[who](None)
                except StopIteration:
                    raise _ended() from None
                if type(waits_for) is int:
                    seq = self._seq = self._seq + 1
                    if seq >> SEQ_BITS:
                        raise OverflowError(f"an event heap counts at most 2**{SEQ_BITS} pushes")
                    key = (((waits_for << 2 | LATE) << SEQ_BITS | seq) << who_bits) | who
                    heappush(heap, key)
                    current[who] = key
                elif not isinstance(waits_for, Idle):
                    raise _refused(waits_for)
        return self.now


def _next_wait(process: Any) -> int | Idle:
    """What a server's process yields when resumed: the time (ps) of its next step end, or
    the wake it waits for when idle; anything else (a NumPy integer, a SimPy event) would
    leave it never resumed, so it is refused, as is a process that ends (replicas serve
    until the cluster has no events left)."""
    try:
        waits_for = process.send(None)
    except StopIteration:
        raise _ended() from None
    if type(waits_for) is int or isinstance(waits_for, Idle):
        return waits_for
    raise _refused(waits_for)


def _ended() -> RuntimeError:
    return RuntimeError("a cluster server's process ended: replicas serve forever")


def _refused(waits_for: object) -> TypeError:
    return TypeError(f"a server on the event heap yielded {waits_for!r}: a step end is an int")
