"""Chains of P2P link transfers computed in plain Python: one SimPy event per completion.

A symmetric collective (``hw.collectives``) is a set of *chains*: a chain sends a chunk on a
link direction and, when it has arrived, sends it on the next hop of its route, ``steps``
times; the collective is done when its last chain arrives. With one SimPy timeout per
transfer (``P2PLink.transfer``) a ring over two 8-socket nodes costs 8 x 30 events per
all-reduce chunk, more than the rest of a decode step. :class:`LinkChains` computes the same
transfers with its own small event loop (a heap of pending sends) and touches SimPy only to
fire each collective's completion event, so a collective costs a few SimPy events.

Exactness: a transfer's times depend only on when it is sent and on the transfers sent
before it on the same direction (``P2PLink``: FIFO in send order, latency does not hold the
link). The loop sends in the event simulation's order: by send time, ties in the order the
sends were scheduled (SimPy's event ids), and it reproduces SimPy's clock arithmetic (an
arrival fires at ``now + (arrival - now)``). So it gives the event-per-transfer simulation's
times, including when several collectives share the links at once.

The catch is that the future is not fixed: a collective started at ``t`` (or any other
transfer on these links) claims links that the in-flight chains will ask for after ``t``.
So the loop runs ahead only *provisionally*: it computes until the earliest completion it
can be sure of (no pending send earlier than it), logging how to undo each send, and
schedules one SimPy timeout there. When the timeout fires untouched, the provisional work is
committed (link counters updated) and the loop runs on to the next completion. When
something new arrives first at time ``t``, the loop undoes the sends computed for after
``t`` (the sends up to ``t`` are final: nothing sent later can delay them), adds the
newcomer and runs ahead again. Pending sends at exactly ``t`` go before the newcomer's (ties
between a SimPy process and an arrival are left to chance in the event simulation too: event
ids, not physics).

Link counters (bytes, busy intervals) count a send once it is final: when work is
committed, or up to now on :meth:`LinkChains.flush` (which the engine calls before reading
them). At the end of a run (every collective done) they are complete.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.p2p_link import P2PLink, series

Hop = tuple[list[float], int, float, float, P2PLink, P2PLink | None]
"""A link direction as the loop uses it: (its ``free_at`` list, direction, bandwidth,
latency, link, the port a send crosses first or None)."""


def hop_of(link: P2PLink, direction: int, via: P2PLink | None = None) -> Hop:
    """The loop's view of ``link``'s ``direction``, behind port ``via`` (its direction 0, in
    series: ``P2PLink.transfer_via``) when not None."""
    return (link.free_at, direction, link.bandwidth, link.latency, link, via)


class _Collective:
    """One collective in flight: its chains' routes and how many chains have not arrived."""

    __slots__ = ("done", "finish", "hops", "remaining", "size", "steps", "tag")

    def __init__(
        self,
        env: CountingEnvironment,
        hops: Sequence[Hop],
        steps: int,
        size: float,
        chains: int,
        tag: str | None,
    ) -> None:
        self.hops = tuple(hops)
        self.steps, self.size, self.tag = steps, size, tag
        self.remaining = chains
        self.finish = float("-inf")
        self.done = env.event()


_Pending = tuple[float, P2PLink, int, float, str | None, float, float, float]
"""A send's link counters, counted once it is final: (send time, link, direction, bytes, tag,
start, end, arrival)."""

_Send = tuple[float, int, _Collective, int, int]
"""A pending send: (time, order, collective, first hop of the chain, step)."""


class LinkChains:
    """The chains of transfers of one topology's symmetric collectives (module docstring)."""

    def __init__(self, env: CountingEnvironment) -> None:
        self.env = env
        self._heap: list[_Send] = []
        self._order = itertools.count()
        self._active: list[_Collective] = []  # started, completion not yet fired
        self._arrived: list[tuple[float, int, _Collective]] = []  # complete, not yet fired
        # Sends computed since the last commit, in send order: their counters (send time, link,
        # direction, bytes, tag, start, end, arrival; the first
        # ``_applied`` of them already counted by ``flush``; a send through two ports in
        # series has its own pending entry for the first, just before its own) and how to
        # undo them: (the send, its direction's ``free_at`` list, direction, previous free
        # time, the order of the send it scheduled or -1 when it ended its chain, the chain's
        # collective's previous finish, the first port's previous free time or -1).
        self._pending: list[_Pending] = []
        self._applied = 0
        self._undo: list[tuple[_Send, list[float], int, float, int, float, float]] = []
        self._wake: tuple[float, Event] | None = None

    def pending_sends(self) -> list[float]:
        """When each send not yet made is due (computed ahead or not)."""
        return [send[0] for send in self._heap]

    @property
    def busy(self) -> bool:
        """True while a collective is in flight."""
        return bool(self._active)

    def start(
        self,
        hops: Sequence[Hop],
        steps: int,
        size: float,
        firsts: Sequence[int],
        tag: str | None = None,
    ) -> Event:
        """Start chains (one per entry of ``firsts``: its first hop's index in ``hops``) that
        each send ``size`` bytes ``steps`` times, chain ``r``'s step ``s`` on
        ``hops[(r + s) % len(hops)]``, now; the event fires when all have arrived."""
        env = self.env
        coll = _Collective(env, hops, steps, size, len(firsts), tag)
        if steps == 0 or not firsts:
            coll.done.succeed(env.now)
            return coll.done
        self.interrupt()
        now = float(env.now)
        for r in firsts:
            self._heap.append((now, next(self._order), coll, r, 0))
        heapq.heapify(self._heap)
        self._active.append(coll)
        self.resume()
        return coll.done

    def interrupt(self) -> None:
        """Bring the links to the present (now): undo the sends computed for after now and
        commit the rest. Call before touching the links from outside, then :meth:`resume`."""
        now = float(self.env.now)
        undo = self._undo
        if undo and undo[-1][0][0] > now:
            dropped: set[int] = set()
            back: list[_Send] = []
            arrived = self._arrived
            pending = len(self._pending)
            while undo and undo[-1][0][0] > now:
                send, free, direction, prev, scheduled, finish, via_prev = undo.pop()
                free[direction] = prev
                pending -= 1
                if via_prev >= 0.0:  # the first of two ports in series
                    coll, r, step = send[2], send[3], send[4]
                    via = coll.hops[(r + step) % len(coll.hops)][5]
                    assert via is not None
                    via.free_at[0] = via_prev
                    pending -= 1
                back.append(send)
                if scheduled >= 0:
                    dropped.add(scheduled)
                    continue
                coll = send[2]
                if coll.remaining == 0:
                    arrived.pop()  # appended when this send completed the collective
                coll.remaining += 1
                coll.finish = finish
            del self._pending[pending:]
            # back to the heap: the undone sends, but not those an undone send had scheduled
            heap = [s for s in itertools.chain(self._heap, back) if s[1] not in dropped]
            heapq.heapify(heap)
            self._heap = heap
        self._run(now, inclusive=True)  # (sends at exactly now may still be pending)
        self._commit()

    def resume(self) -> None:
        """Compute ahead to the next completion and wake up then (module docstring)."""
        first = min(self._arrived)[0] if self._arrived else None
        first = self._run(first, inclusive=False)
        if first is None:
            self._wake = None
            return
        if self._wake is not None and self._wake[0] == first:
            return  # the timeout already scheduled still fires at the right time
        now = float(self.env.now)
        ahead = first - now
        wake = self.env.timeout(0.0 if ahead < 0.0 else ahead)  # max(ahead, 0.0), no call
        self._wake = (first, wake)
        wake.add_callback(self._woken)

    def _woken(self, event: Event) -> None:
        if self._wake is None or self._wake[1] is not event:
            return  # superseded by a later resume
        at = self._wake[0]
        self._wake = None
        self._commit()  # the sends computed (all before ``at``) are final
        self._arrived.sort(key=lambda a: (a[0], a[1]))
        while self._arrived and self._arrived[0][0] <= at:
            _, _, coll = self._arrived.pop(0)
            self._active.remove(coll)
            coll.done.succeed(self.env.now)
        self.resume()

    def flush(self) -> None:
        """Count the sends made up to now on the links (they are final): a snapshot of the
        link counters then sees what the event-per-transfer simulation would have sent."""
        now = float(self.env.now)
        pending, i = self._pending, self._applied
        while i < len(pending) and pending[i][0] <= now:
            _, link, direction, size, tag, start, end, arrival = pending[i]
            link.account(size, direction, tag, start, end, arrival)
            i += 1
        self._applied = i

    def _commit(self) -> None:
        for _, link, direction, size, tag, start, end, arrival in self._pending[self._applied :]:
            link.account(size, direction, tag, start, end, arrival)
        self._pending.clear()
        self._applied = 0
        self._undo.clear()

    def _run(self, limit: float | None, inclusive: bool) -> float | None:
        """Send in order while the next send is before ``limit`` (at or before it if
        ``inclusive``); ``limit=None`` with ``inclusive=False`` runs until the first
        completion is certain and returns its time (None when nothing is in flight)."""
        heap, order, pending, arrived = self._heap, self._order, self._pending, self._arrived
        undo = self._undo
        pop, push = heapq.heappop, heapq.heappush
        first = limit
        while heap:
            t = heap[0][0]
            if first is not None and (t > first or (t == first and not inclusive)):
                break
            send = pop(heap)
            now, _, coll, r, step = send
            free, direction, bandwidth, latency, link, via = coll.hops[(r + step) % len(coll.hops)]
            size = coll.size
            prev = free[direction]
            if via is None:
                start = prev if prev > now else now
                end = start + size / bandwidth
                via_prev = -1.0
            else:  # through ``via`` first, in series (``p2p_link.series``)
                via_prev = via.free_at[0]
                start1, end1, start, end = series(
                    now, via_prev, via.bandwidth, prev, bandwidth, size
                )
                via.free_at[0] = end1
                pending.append((now, via, 0, size, coll.tag, start1, end1, end1))
            free[direction] = end
            # SimPy fires the arrival at now + (arrival - now), which can differ in the last bit
            at = now + ((end + latency) - now)
            pending.append((now, link, direction, size, coll.tag, start, end, at))
            if step + 1 < coll.steps:
                scheduled = next(order)
                push(heap, (at, scheduled, coll, r, step + 1))
                undo.append((send, free, direction, prev, scheduled, 0.0, via_prev))
                continue
            undo.append((send, free, direction, prev, -1, coll.finish, via_prev))
            coll.remaining -= 1
            if at > coll.finish:
                coll.finish = at
            if coll.remaining == 0:
                arrived.append((coll.finish, next(order), coll))
                if not inclusive and (first is None or coll.finish < first):
                    first = coll.finish
        return first
