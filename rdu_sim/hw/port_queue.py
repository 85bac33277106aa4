"""Sends waiting for one port, served oldest piece first (age-based arbitration).

A port (``P2PLink`` direction) on its own is a FIFO in issue order: a send claims the next
free slot the moment it is issued. That is right while every send is a piece's first and
only hop. A two-hop all-to-all (``hw.all_to_all``'s hierarchical form) issues a piece's
second hop only once its first hop has arrived, and under FIFO that second hop queues as new
work behind every send issued meanwhile, a later call's first hops included. Which of them
it lands behind then depends on when its first hop arrived: a faster network brings it back
sooner, into a different place in the queue, and the schedule of a
looped kernel can settle into a worse steady state (a four-rack EP prefill step took 12%
longer at 11 GB/s between racks than at 10 GB/s: the combine's network leg, which the next
layer waits for, queued behind the dispatch's forwarding).

:class:`PortQueue` serves the sends waiting for a port by age instead: the oldest piece
first, a piece's age being the time its stage handed it to the links (every hop of a piece
has its piece's age; a call's pieces are handed over together, so they tie and only a later
call's pieces are overtaken), ties in issue order. Network routers arbitrate the same way
(age-based arbitration) so that a packet's later hops do not starve behind younger
traffic. A send the port can take at once, with nothing waiting, goes at once; otherwise it
waits and the port, when free, takes the oldest waiting send (non-preemptive: a send under
way finishes). When every send waiting has the same age, or none is a later hop, this is the
FIFO's order and times exactly. Every other sender claims the port in issue order, ahead of
sends still waiting: the symmetric collectives' chains (``hw.link_chains``), the ring, tree
and direct collectives (``hw.collectives``, ``hw.direct_collectives``) and a pipeline's
hand-offs (``engine.pipeline``), all through ``Topology.send``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.link_chains import LinkChains
from rdu_sim.hw.p2p_link import P2PLink

_Waiting = tuple[float, int, Callable[[], Event], Event]
"""A send waiting: (its piece's age, issue order, start it now, the event to fire on its
arrival)."""


class PortQueue:
    """The sends waiting for ``port``'s direction ``direction`` (module docstring)."""

    def __init__(
        self, env: CountingEnvironment, port: P2PLink, direction: int, chains: LinkChains
    ) -> None:
        self.env, self.port, self.direction, self.chains = env, port, direction, chains
        self._waiting: list[_Waiting] = []
        self._order = itertools.count()
        self._armed: float | None = None  # the port's free time a wake-up is set for

    def __len__(self) -> int:
        return len(self._waiting)

    def send(self, age: float, start: Callable[[], Event]) -> Event:
        """Send (``start()`` claims the port and returns the arrival event) once the port is
        free and no older send waits; the returned event fires on arrival."""
        if not self._waiting and self._free_at() <= float(self.env.now):
            return start()
        done = self.env.event()
        heapq.heappush(self._waiting, (age, next(self._order), start, done))
        self._arm()
        return done

    def _free_at(self) -> float:
        """When the port has finished what it was given (the chains' sends up to now made:
        those computed ahead are undone, ``LinkChains.interrupt``)."""
        if self.chains.busy:
            self.chains.interrupt()
            free = self.port.free_at[self.direction]
            self.chains.resume()
            return free
        return self.port.free_at[self.direction]

    def _arm(self) -> None:
        if self._armed is not None or not self._waiting:
            return
        free = self._free_at()
        self._armed = free
        ahead = free - float(self.env.now)
        self.env.timeout(ahead if ahead > 0.0 else 0.0).add_callback(self._serve)

    def _serve(self, _event: Event) -> None:
        armed, self._armed = self._armed, None
        free = self._free_at()
        # free now, or still at the time the wake-up was set for (the clock's sum may fall a
        # bit short of it)
        if free <= float(self.env.now) or free == armed:
            _, _, start, done = heapq.heappop(self._waiting)
            start().add_callback(lambda _e: self._arrived(done))
        self._arm()

    def _arrived(self, done: Event) -> None:
        done.succeed(float(self.env.now))
