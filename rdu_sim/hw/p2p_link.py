"""A full-duplex socket-to-socket link (the AGCU peer-to-peer protocol).

Each direction is a FIFO server: a transfer of ``b`` bytes occupies its
direction for ``b / bandwidth`` seconds, starting when the previous transfer
in that direction has finished serialising, and arrives ``latency`` seconds
after its last byte left. Latency is pipelined (wire and protocol delay do not
hold the link), so back-to-back transfers stream at full bandwidth; a lone
transfer takes ``latency + b / bandwidth``.

This is exactly a ``simpy.Resource(capacity=1)`` per direction with FIFO
grant order, but since the start time is known at issue time it costs one
event per transfer instead of four (request, grant, timeout, release).
``hw.link_chains`` claims the same FIFO directions in plain Python (through ``free_at``
and :meth:`P2PLink.account`) for the symmetric collectives' chains of transfers.

Two ports in series (:meth:`P2PLink.transfer_via`, :func:`series`): a socket whose traffic
to other nodes leaves through its in-node port and then its network port (the hardware's
``system.network_through_node_port``) holds both, each a FIFO server, cut-through: the
second stage starts when the first starts or when its own port is free, whichever is later,
and ends no earlier than the first ends; the transfer arrives the second port's latency after
that. So it queues behind the socket's in-node traffic and streams at the slower port's rate.

Bandwidth, latency and topology of SN40L P2P links are not public; they are
parameters [sn40l.md, "Node and system"].
"""

from __future__ import annotations

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.stats import BusyTracker, ByteCounter


def series(
    now: float, free1: float, bandwidth1: float, free2: float, bandwidth2: float, nbytes: float
) -> tuple[float, float, float, float]:
    """(start, end) on the first port, then on the second, of ``nbytes`` sent at ``now``
    through two FIFO ports in series, cut-through (module docstring): the one rule
    :meth:`P2PLink.transfer_via` and ``hw.link_chains`` share."""
    start1 = free1 if free1 > now else now
    end1 = start1 + nbytes / bandwidth1
    start2 = free2 if free2 > start1 else start1
    end2 = start2 + nbytes / bandwidth2
    return start1, end1, start2, end2 if end2 > end1 else end1


class P2PLink:
    """Link between two sockets; direction 0 is ``a -> b``, direction 1 is ``b -> a``.

    Args:
        env: the SimPy environment.
        bandwidth: bytes/s per direction.
        latency: seconds from a transfer's last byte leaving to its arrival.
        name: label for reports.
    """

    def __init__(
        self,
        env: CountingEnvironment,
        bandwidth: float,
        latency: float = 0.0,
        name: str = "p2p",
    ) -> None:
        if bandwidth <= 0:
            raise ValueError(f"{name}.bandwidth must be > 0, got {bandwidth}")
        if latency < 0:
            raise ValueError(f"{name}.latency must be >= 0, got {latency}")
        self.env = env
        self.name = name
        self.bandwidth = float(bandwidth)
        self.latency = float(latency)
        self.bytes = (ByteCounter(), ByteCounter())
        self.busy = (BusyTracker(f"{name}[0]"), BusyTracker(f"{name}[1]"))
        # Each direction's time with a transfer under way, from its first byte leaving to its
        # arrival (serialisation and latency): what the links cost a step's critical path
        # where it waits for them (``report.bound``'s link time), latency included.
        self.flight = (BusyTracker(f"{name}[0]"), BusyTracker(f"{name}[1]"))
        # When each direction has finished serialising what it was given (the FIFO's tail).
        self.free_at = [float(env.now), float(env.now)]

    def transfer_time(self, nbytes: float) -> float:
        """Uncontended time of one transfer: ``latency + nbytes / bandwidth``."""
        return self.latency + nbytes / self.bandwidth

    def transfer(self, nbytes: float, direction: int = 0, tag: str | None = None) -> Event:
        """Send ``nbytes`` one way; the event fires on arrival (value: arrival time)."""
        if direction not in (0, 1):
            raise ValueError(f"{self.name}: direction must be 0 or 1, got {direction}")
        if nbytes < 0:
            raise ValueError(f"{self.name}: nbytes must be >= 0, got {nbytes}")
        self.bytes[direction].add(nbytes, tag)
        now = float(self.env.now)
        start = max(now, self.free_at[direction])
        end = start + nbytes / self.bandwidth
        self.free_at[direction] = end
        arrival = end + self.latency
        # Busy [start, end] is recorded at once (known now; in send order, as ``hw.link_chains``
        # records its transfers, so that both can share a link).
        self.busy[direction].add(start, end)
        self.flight[direction].add(start, arrival)
        return self.env.timeout(arrival - now, value=arrival)

    def transfer_via(self, via: P2PLink, nbytes: float, tag: str | None = None) -> Event:
        """Send ``nbytes`` through port ``via`` (its direction 0) and then this link's
        direction 0, two FIFO servers in series (:func:`series`); the event fires on arrival,
        this link's latency after the second stage ends. Both ports count the bytes and the
        time they held them (``via`` until its stage ends: this link's latency is the one
        paid)."""
        if nbytes < 0:
            raise ValueError(f"{self.name}: nbytes must be >= 0, got {nbytes}")
        now = float(self.env.now)
        start1, end1, start2, end2 = series(
            now, via.free_at[0], via.bandwidth, self.free_at[0], self.bandwidth, nbytes
        )
        via.free_at[0] = end1
        self.free_at[0] = end2
        arrival = end2 + self.latency
        via.account(nbytes, 0, tag, start1, end1, end1)
        self.account(nbytes, 0, tag, start2, end2, arrival)
        return self.env.timeout(arrival - now, value=arrival)

    def account(
        self,
        nbytes: float,
        direction: int,
        tag: str | None,
        start: float,
        end: float,
        arrival: float,
    ) -> None:
        """Count a transfer claimed outside :meth:`transfer` (bytes, busy ``[start, end]``,
        under way ``[start, arrival]``)."""
        self.bytes[direction].add(nbytes, tag)
        self.busy[direction].add(start, end)
        self.flight[direction].add(start, arrival)

    @property
    def total_bytes(self) -> float:
        """Bytes sent in both directions."""
        return self.bytes[0].total + self.bytes[1].total

    def busy_time(self, direction: int) -> float:
        """Seconds direction ``direction`` spent serialising bytes."""
        return self.busy[direction].busy_time

    def flight_time(self, direction: int) -> float:
        """Seconds direction ``direction`` had a transfer under way, from its first byte
        leaving to its arrival (serialisation and latency, overlaps once)."""
        return self.flight[direction].busy_time
