"""The PCUs given to one pipeline stage.

A PCU's body is either an output-stationary systolic array (GEMMs) or a
multi-stage SIMD pipeline (element-wise and vector work) [SN §IV-A]. A stage's
PCU group executes its work items one after another in issue order (a FIFO
server); the start time of each item is known when it is issued, so a work
item costs exactly one SimPy event. Its busy interval counts once that event has been
processed (a reader of ``busy`` mid-run sees the items done by then), without a callback:
the items wait in issue order, which is their order of processing (FIFO ends never
decrease and equal ends keep SimPy's id order), and ``busy`` adds the processed ones first.

The systolic-array GEMM efficiency model (``gemm_efficiency`` and the default
32 x 6 array) lives in ``rdu_sim.systolic``, which the compiler shares; it is
re-exported here for the hardware models' users.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.stats import BusyTracker
from rdu_sim.systolic import DEFAULT_ARRAY_COLS, DEFAULT_ARRAY_ROWS, gemm_efficiency

__all__ = ["DEFAULT_ARRAY_COLS", "DEFAULT_ARRAY_ROWS", "PCUGroup", "gemm_efficiency"]

_FLUSH_AT: Final = 32
"""Uncounted work items past which issuing one counts the processed ones (memory only: the
totals are the same whenever they are counted)."""


class PCUGroup:
    """``n_pcus`` PCUs serving one stage's matrix and vector work in FIFO order.

    Args:
        env: the SimPy environment.
        n_pcus: PCUs assigned to the stage (> 0).
        peak_flops_per_pcu: matrix peak per PCU in FLOP/s (638e12 / 1040 on SN40L).
        vector_flops_per_pcu: SIMD rate per PCU for element-wise ops in FLOP/s;
            default half the matrix peak (one op per lane-stage per cycle where
            a MAC counts as two FLOPs).
        name: label for reports.
    """

    def __init__(
        self,
        env: CountingEnvironment,
        n_pcus: int,
        peak_flops_per_pcu: float,
        vector_flops_per_pcu: float | None = None,
        name: str = "pcus",
    ) -> None:
        if n_pcus <= 0:
            raise ValueError(f"{name}.n_pcus must be > 0, got {n_pcus}")
        if peak_flops_per_pcu <= 0:
            raise ValueError(f"{name}.peak_flops_per_pcu must be > 0, got {peak_flops_per_pcu}")
        vec = peak_flops_per_pcu / 2 if vector_flops_per_pcu is None else vector_flops_per_pcu
        if vec <= 0:
            raise ValueError(f"{name}.vector_flops_per_pcu must be > 0, got {vec}")
        self.env = env
        self.name = name
        self.n_pcus = n_pcus
        self.matrix_rate = n_pcus * float(peak_flops_per_pcu)
        self.vector_rate = n_pcus * float(vec)
        self._busy = BusyTracker(name)
        # items issued and not yet counted in _busy: (start, end, the event of their end)
        self._uncounted: deque[tuple[float, float, Event]] = deque()
        self.matrix_flops = 0.0
        self.vector_flops = 0.0
        self._free_at = float(env.now)

    @property
    def busy(self) -> BusyTracker:
        """The group's busy time: every work item whose end has been processed."""
        self._count_processed()
        return self._busy

    def _count_processed(self) -> None:
        """Add the items whose end has been processed to the busy time (they lead the queue)."""
        uncounted, tracker = self._uncounted, self._busy
        while uncounted and uncounted[0][2].callbacks is None:
            start, end, _ = uncounted.popleft()
            tracker.add(start, end)

    @property
    def free_at(self) -> float:
        """When the work queued so far ends."""
        return self._free_at

    def compute_time(self, flops: float, efficiency: float = 1.0) -> float:
        """Seconds for ``flops`` of matrix work at ``efficiency`` (no queueing)."""
        _check(flops, efficiency)
        return flops / (self.matrix_rate * efficiency)

    def vector_time(self, flops: float, efficiency: float = 1.0) -> float:
        """Seconds for ``flops`` of element-wise work at the vector rate."""
        _check(flops, efficiency)
        return flops / (self.vector_rate * efficiency)

    def compute(self, flops: float, efficiency: float = 1.0) -> Event:
        """Queue matrix work; the event fires when it finishes (value: finish time)."""
        duration = self.compute_time(flops, efficiency)
        self.matrix_flops += flops
        return self._run(duration)

    def vector(self, flops: float, efficiency: float = 1.0) -> Event:
        """Queue element-wise/vector work; fires when it finishes."""
        duration = self.vector_time(flops, efficiency)
        self.vector_flops += flops
        return self._run(duration)

    def _run(self, duration: float) -> Event:
        env = self.env
        now = float(env._now)
        free_at = self._free_at
        start = now if now > free_at else free_at
        end = self._free_at = start + duration
        done = env.timeout(end - now, value=end)
        uncounted = self._uncounted
        uncounted.append((start, end, done))
        if len(uncounted) > _FLUSH_AT:  # keep few events alive between readings of busy
            self._count_processed()
        return done


def _check(flops: float, efficiency: float) -> None:
    if flops >= 0 and 0 < efficiency <= 1:
        return
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
