"""A DDR-to-HBM copy engine: the DMA that moves weights between a socket's tiers.

Mechanism: copies are served one at a time, first come first served (one engine per
socket). A copy moves its bytes in chunks; each chunk is a read of the DDR channel and a
write of the HBM channel issued together, and takes at least ``chunk / bandwidth`` (the
engine's own rate). The channels are the same fair ``MemoryChannel`` objects other traffic
uses, so a copy and a step's own streams share them: each slows the other, and every byte
is counted once on each tier. A lone copy of ``b`` bytes in ``n`` chunks takes
``n * max(chunk / bandwidth, latency_ddr + chunk / B_ddr, latency_hbm + chunk / B_hbm)``.

``bandwidth`` is the engine's copy rate per socket (SN40L: "> 1 TB/s" per 8-socket node,
hw_configs/ says 128 GB/s a socket); ``chunk_bytes`` is the DMA's transfer unit (not public:
large enough that per-chunk latencies are negligible, small enough that concurrent traffic
interleaves finely).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw.memory_channel import MemoryChannel

DEFAULT_CHUNK_BYTES = 16 * 2**20
"""A copy's transfer unit (16 MiB): a latency of about 1 us per chunk is 0.1% of its time."""


class CopyEngine:
    """Copies bytes from ``ddr`` to ``hbm`` at most at ``bandwidth`` bytes/s, one copy at a
    time; ``copy(nbytes)`` returns an event that fires when the last byte has landed."""

    def __init__(
        self,
        env: CountingEnvironment,
        ddr: MemoryChannel,
        hbm: MemoryChannel,
        bandwidth: float,
        chunk_bytes: float = DEFAULT_CHUNK_BYTES,
    ) -> None:
        if bandwidth <= 0 or chunk_bytes <= 0:
            raise ValueError(
                f"need bandwidth > 0 and chunk_bytes > 0, got {bandwidth}, {chunk_bytes}"
            )
        self.env, self.ddr, self.hbm = env, ddr, hbm
        self.bandwidth, self.chunk_bytes = bandwidth, chunk_bytes
        self._engine = simpy.Resource(env, capacity=1)  # type: ignore[arg-type]
        self.copies = 0
        self.bytes_copied = 0.0
        self.busy_s = 0.0
        self._pending = 0

    @property
    def busy(self) -> bool:
        """Whether a copy has been asked for and not finished."""
        return self._pending > 0

    def copy(self, nbytes: float) -> Any:
        """Copy ``nbytes`` from DDR to HBM (queued behind earlier copies)."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        self._pending += 1
        return self.env.process(self._copy(nbytes))

    def _copy(self, nbytes: float) -> Generator[Any, Any, None]:
        with self._engine.request() as turn:
            yield turn
            start = self.env.now
            left = nbytes
            while left > 0:
                chunk = min(self.chunk_bytes, left)
                yield self.env.all_of(
                    [
                        self.ddr.read(chunk, tag="copy"),
                        self.hbm.write(chunk, tag="copy"),
                        self.env.timeout(chunk / self.bandwidth),
                    ]
                )
                left -= chunk
            self.copies += 1
            self.bytes_copied += nbytes
            self.busy_s += self.env.now - start
            self._pending -= 1
