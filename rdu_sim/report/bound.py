"""What binds a step: each resource's time on its own, and the largest.

The one reading of a step's binding resource, for every report that names one: a step's
``bound`` (``rdu-sim step``), a run's ``decode_step.bound``, ``rdu-sim compare``'s
per-variant line and its verdict, and the plan's why (``rdu_sim.report.slo_why``). A resource's
time is what the step asks of it alone: ``hbm`` and ``ddr`` the tier's bytes at its bandwidth
x efficiency; ``compute`` the time the compute units were busy (SN40L's PCUs, a GPU's SMs:
matrix and vector work at the efficiencies the engine simulated, over all the units);
``link`` the busiest socket-to-socket link direction's serialisation time (collectives);
``blocks`` the time a GPU's decode attention streamed its KV cache through its thread blocks
(few blocks over long contexts stream slower than the HBM);
``boundaries`` the device time at the kernels' boundaries, launching and synchronising them
(each call's; what kernel looping and CUDA graphs save);
``host`` the serving stack's host time per step, serial and overlapped together (what the
step would take on an infinitely fast device).

A pipelined step's resource times are its first stage's devices' over every micro-batch; the
rest of its step is mostly the pipeline's bubble (stages idle while it fills and drains,
``engine.pipeline``), which ``StepBound.bubble`` carries for every report that names the
bound (:func:`bubble_words`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rdu_sim import human
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.hardware_file import Hardware
from rdu_sim.engine.timing import StepTiming

RESOURCES: dict[str, str] = {
    "compute": "compute (PCUs or SMs)",
    "hbm": "HBM bandwidth",
    "ddr": "DDR bandwidth",
    "link": "the socket-to-socket links",
    "blocks": "decode attention's thread blocks",
    "boundaries": "kernel boundaries (launch and sync)",
    "host": "the serving stack's host time",
}
"""Each resource in words, for sentences ("bound by HBM bandwidth"); the order ties break in."""

REMEDIES: dict[str, str] = {
    "compute": "more compute (PCUs or SMs)",
    "hbm": "more HBM bandwidth",
    "ddr": "more DDR bandwidth",
    "link": "faster socket-to-socket links",
    "blocks": "decode attention split over more thread blocks",
    "boundaries": "fewer kernel boundaries (kernel looping, fused kernels)",
    "host": "less host time a step (a faster serving stack)",
}
"""What would speed a step each resource binds, in words ("a faster prefill (more HBM
bandwidth)"): the same keys as :data:`RESOURCES`."""


def others_alone(times: Mapping[str, float], bound: str) -> str:
    """The other resources' times alone, in words (``hbm 10 ms, host 1.65 ms``, the order of
    :data:`RESOURCES`; ``nothing else`` when none takes time): what the binding resource's
    share of a step leaves to name."""
    others = [
        f"{name} {human.duration(times[name])}"
        for name in RESOURCES
        if name != bound and times.get(name, 0.0) > 0
    ]
    return ", ".join(others) or "nothing else"


class ResourceTimes(Protocol):
    """What holds a step's time on each resource (seconds of one socket)."""

    @property
    def compute_s(self) -> float: ...
    @property
    def hbm_s(self) -> float: ...
    @property
    def ddr_s(self) -> float: ...
    @property
    def link_s(self) -> float: ...
    @property
    def blocks_s(self) -> float: ...
    @property
    def boundaries_s(self) -> float: ...
    @property
    def host_s(self) -> float: ...


def resource_times(step: ResourceTimes) -> dict[str, float]:
    """Each resource's time, by name, in the order of RESOURCES (the ties' order)."""
    return {
        "compute": step.compute_s,
        "hbm": step.hbm_s,
        "ddr": step.ddr_s,
        "link": step.link_s,
        "blocks": step.blocks_s,
        "boundaries": step.boundaries_s,
        "host": step.host_s,
    }


@dataclass(frozen=True)
class StepBound:
    """One step against its resources (seconds of one socket)."""

    step_s: float
    compute_s: float
    hbm_s: float
    ddr_s: float
    link_s: float
    blocks_s: float
    boundaries_s: float
    host_s: float
    bound: str  # the resource with the largest time (a key of RESOURCES)
    hbm_bytes: float
    ddr_bytes: float
    flops: float
    runtime_s: float  # what the host added to the device's step (serial + exposed)
    # a pipelined step's bubble (``StepTiming.pipeline``): its stages' idle share; None
    # without a pipeline
    bubble: float | None = None

    @property
    def limit_s(self) -> float:
        """The binding resource's time."""
        return self.times()[self.bound]

    def times(self) -> dict[str, float]:
        """Each resource's time, by name (the order of RESOURCES)."""
        return resource_times(self)

    @property
    def resource(self) -> str:
        """The binding resource in words."""
        return RESOURCES[self.bound]


def step_bound(timing: StepTiming, hardware: Hardware) -> StepBound:
    """The step's time on each resource of ``hardware`` and the one that binds."""
    ddr = hardware.socket.ddr if isinstance(hardware, HardwareConfig) else None
    hbm_bytes = timing.bytes_by_tier.get("hbm", 0.0)
    ddr_bytes = timing.bytes_by_tier.get("ddr", 0.0)
    busy = timing.busy_s
    times = {
        "compute": busy.get("pcu", busy.get("sm", 0.0)),
        "hbm": hbm_bytes / (hardware.hbm.bandwidth * hardware.hbm.efficiency),
        "ddr": 0.0 if ddr is None else ddr_bytes / (ddr.bandwidth * ddr.efficiency),
        "link": busy.get("link", 0.0),
        "blocks": busy.get("blocks", 0.0),
        "boundaries": busy.get("boundaries", 0.0),
        "host": timing.host_s,
    }
    return StepBound(
        step_s=timing.step_s,
        compute_s=times["compute"],
        hbm_s=times["hbm"],
        ddr_s=times["ddr"],
        link_s=times["link"],
        blocks_s=times["blocks"],
        boundaries_s=times["boundaries"],
        host_s=times["host"],
        bound=max(times, key=lambda k: times[k]),
        hbm_bytes=hbm_bytes,
        ddr_bytes=ddr_bytes,
        flops=timing.flops,
        runtime_s=timing.runtime_s,
        bubble=None if timing.pipeline is None else float(timing.pipeline["bubble"]),
    )


def bubble_words(bubble: float) -> str:
    """A pipeline's bubble in words, for the reports that name a step's bound beside it
    (``the pipeline's bubble 33.8% of its stages' time``)."""
    return f"the pipeline's bubble {human.percent(bubble)} of its stages' time"
