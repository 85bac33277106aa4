"""The network that carries KV caches from prefill replicas to decode replicas.

Each replica has one full-duplex port of ``bandwidth`` bytes/s each way. A transfer from
replica ``a`` to replica ``b`` streams through ``a``'s egress and ``b``'s ingress at once
(cut-through, as RDMA does): it serialises for ``bytes / bandwidth`` once both directions
are free, and arrives ``latency`` later (wire, switch and protocol delay, pipelined: it does
not hold the ports). Each direction is a FIFO, as the socket-to-socket links of
``rdu_sim.hw.p2p_link`` are: transfers that overlap at a port queue behind each other, so
several prefill replicas sending to one decode replica contend at its ingress, and one
prefill replica sending to several contends at its egress.

Since every start time is known when the transfer is issued, a transfer costs one SimPy
event. Times are the serving clock's integer picoseconds (``serving.step_cache``), so the
replicas' step arithmetic stays exact.
"""

from __future__ import annotations

import math

import simpy

from rdu_sim.des.timeline import Loop
from rdu_sim.serving.clock import MAX_PS, PS_PER_S, SimulatedTimeError, to_s


class KVLink:
    """Ports of ``replicas`` replicas; ``transfer`` returns the arrival event."""

    def __init__(self, loop: Loop, replicas: int, bandwidth: float, latency: float) -> None:
        if bandwidth <= 0:
            raise ValueError(f"kv_transfer.bandwidth must be > 0, got {bandwidth}")
        if latency < 0:
            raise ValueError(f"kv_transfer.latency must be >= 0, got {latency}")
        self.loop = loop
        self.bandwidth = bandwidth
        self.bytes_per_ps = bandwidth / PS_PER_S
        self.latency_ps = round(latency * PS_PER_S)
        self.egress_free = [0] * replicas  # when each port's egress has sent what it was given
        self.ingress_free = [0] * replicas
        self.transfers = 0
        self.bytes = 0
        self.queued_ps = 0  # total time transfers waited for a busy port

    def transfer(self, source: int, target: int, nbytes: int) -> simpy.Event:
        """Send ``nbytes`` from replica ``source`` to ``target``; the event fires on arrival
        (value: the arrival time, ps)."""
        if nbytes < 0:
            raise ValueError(f"a KV transfer moves >= 0 bytes, got {nbytes}")
        now = self.loop.now
        start = max(now, self.egress_free[source], self.ingress_free[target])
        end = start + self.serialise_ps(nbytes)
        self.egress_free[source] = self.ingress_free[target] = end
        arrival = end + self.latency_ps
        if arrival > MAX_PS:
            raise SimulatedTimeError(
                f"a KV transfer of {nbytes:,} bytes sent at {to_s(now):.4g} s would arrive at "
                f"{to_s(arrival):.4g} s, past the serving clock's range of {to_s(MAX_PS):.4g} s "
                "(2^63 ps): the port is too slow for this traffic",
                "kv_transfer.bandwidth",
            )
        self.transfers += 1
        self.bytes += nbytes
        self.queued_ps += start - now
        event: simpy.Event = self.loop.timeout(arrival - now, value=arrival)
        return event

    def serialise_ps(self, nbytes: int) -> int:
        """Picoseconds ``nbytes`` occupy a port (rounded up); SimulatedTimeError when no
        clock could hold them (checked in seconds first: a tiny bandwidth overflows)."""
        if nbytes == 0:
            return 0
        seconds = nbytes / self.bandwidth
        if not seconds * PS_PER_S <= MAX_PS:
            raise SimulatedTimeError(
                f"a KV transfer of {nbytes:,} bytes takes {seconds:.4g} s at "
                f"{self.bandwidth:.4g} B/s, beyond the serving clock's range of "
                f"{to_s(MAX_PS):.4g} s (2^63 ps)",
                "kv_transfer.bandwidth",
            )
        return math.ceil(nbytes / self.bytes_per_ps)
