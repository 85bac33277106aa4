"""What binds a step: each resource's time at its sustained rate, and the largest.

The one reading of a step's binding resource, for every report that names one: a run's
``decode_step.bound``, ``rdu-sim compare``'s per-variant line and its verdict, and the
plan's why (``rdu_sim.plan.why``). A resource's time is what the step asks of it alone:
``hbm`` and ``ddr`` the tier's bytes at its bandwidth x efficiency, ``compute`` the matrix
FLOPs at the socket's peak, ``runtime`` the serving runtime's host time.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.hardware_file import Hardware
from rdu_sim.engine.timing import StepTiming

RESOURCES: dict[str, str] = {
    "hbm": "HBM bandwidth",
    "ddr": "DDR bandwidth",
    "compute": "matrix FLOP/s",
    "runtime": "the serving runtime's host time",
}
"""Each resource in words, for sentences ("bound by HBM bandwidth")."""


@dataclass(frozen=True)
class StepBound:
    """One step against its resources (seconds of one socket)."""

    step_s: float
    hbm_s: float
    ddr_s: float
    compute_s: float
    runtime_s: float
    bound: str  # the resource with the largest time (a key of RESOURCES)
    hbm_bytes: float
    ddr_bytes: float
    flops: float

    @property
    def limit_s(self) -> float:
        """The binding resource's time."""
        return self.times()[self.bound]

    def times(self) -> dict[str, float]:
        """Each resource's time, by name."""
        return {
            "hbm": self.hbm_s,
            "ddr": self.ddr_s,
            "compute": self.compute_s,
            "runtime": self.runtime_s,
        }

    @property
    def resource(self) -> str:
        """The binding resource in words."""
        return RESOURCES[self.bound]


def step_bound(timing: StepTiming, hardware: Hardware) -> StepBound:
    """The step's time on each resource of ``hardware`` and the one that binds."""
    ddr = hardware.socket.ddr if isinstance(hardware, HardwareConfig) else None
    hbm_bytes = timing.bytes_by_tier.get("hbm", 0.0)
    ddr_bytes = timing.bytes_by_tier.get("ddr", 0.0)
    times = {
        "hbm": hbm_bytes / (hardware.hbm.bandwidth * hardware.hbm.efficiency),
        "ddr": 0.0 if ddr is None else ddr_bytes / (ddr.bandwidth * ddr.efficiency),
        "compute": timing.flops / hardware.peak_flops,
        "runtime": timing.runtime_s,
    }
    return StepBound(
        step_s=timing.step_s,
        hbm_s=times["hbm"],
        ddr_s=times["ddr"],
        compute_s=times["compute"],
        runtime_s=times["runtime"],
        bound=max(times, key=lambda k: times[k]),
        hbm_bytes=hbm_bytes,
        ddr_bytes=ddr_bytes,
        flops=timing.flops,
    )
