"""The PCUs given to one pipeline stage.

A PCU's body is either an output-stationary systolic array (GEMMs) or a
multi-stage SIMD pipeline (element-wise and vector work) [SN §IV-A]. A stage's
PCU group executes its work items one after another in issue order (a FIFO
server); the start time of each item is known when it is issued, so a work
item costs exactly one SimPy event.

The systolic-array GEMM efficiency model (``gemm_efficiency`` and the default
32 x 6 array) lives in ``rdu_sim.systolic``, which the compiler shares; it is
re-exported here for the hardware models' users.
"""

from __future__ import annotations

import simpy

from rdu_sim.hw.stats import BusyTracker
from rdu_sim.systolic import DEFAULT_ARRAY_COLS, DEFAULT_ARRAY_ROWS, gemm_efficiency

__all__ = ["DEFAULT_ARRAY_COLS", "DEFAULT_ARRAY_ROWS", "PCUGroup", "gemm_efficiency"]


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
        env: simpy.Environment,
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
        self.busy = BusyTracker(name)
        self.matrix_flops = 0.0
        self.vector_flops = 0.0
        self._free_at = float(env.now)

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

    def compute(self, flops: float, efficiency: float = 1.0) -> simpy.Event:
        """Queue matrix work; the event fires when it finishes (value: finish time)."""
        _check(flops, efficiency)
        self.matrix_flops += flops
        return self._run(flops / (self.matrix_rate * efficiency))

    def vector(self, flops: float, efficiency: float = 1.0) -> simpy.Event:
        """Queue element-wise/vector work; fires when it finishes."""
        _check(flops, efficiency)
        self.vector_flops += flops
        return self._run(flops / (self.vector_rate * efficiency))

    def _run(self, duration: float) -> simpy.Event:
        env = self.env
        now = float(env._now)
        free_at = self._free_at
        start = now if now > free_at else free_at
        end = self._free_at = start + duration
        done = env.timeout(end - now, value=end)
        busy = self.busy
        done.callbacks.append(lambda _ev: busy.add(start, end))
        return done


def _check(flops: float, efficiency: float) -> None:
    if flops >= 0 and 0 < efficiency <= 1:
        return
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
