"""Which engine times a scenario's steps: SN40L's or a GPU's, by the hardware's kind.

Both take the same compiled Program and return the same ``StepTiming``, so everything above
the engine (the backend, serving, reports) is the same for either kind of hardware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from rdu_sim.compiler.program import Program
from rdu_sim.config.dtypes import FP8_DTYPES
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.engine.engine import Engine
from rdu_sim.engine.timing import StepTiming
from rdu_sim.scenario import Scenario

if TYPE_CHECKING:
    from rdu_sim.engine.gpu import GpuSettings


class StepEngine(Protocol):
    """What times one step of a Program."""

    def simulate_step(self, program: Program) -> StepTiming:
        """Simulate one step of ``program``."""
        ...

    def estimate_events(self, program: Program) -> int:
        """A lower bound of the events ``simulate_step`` processes."""
        ...


def gpu_settings(scenario: Scenario) -> GpuSettings:
    """The serving stack's choices for a GPU: the workload's CUDA graphs, and FP8 tensor
    cores for the products whose streamed operands are stored in fp8."""
    from rdu_sim.engine.gpu import GpuSettings  # the GPU engine: loaded for GPU hardware only

    dtypes = scenario.workload.dtypes
    return GpuSettings(
        cuda_graphs=scenario.workload.cuda_graphs,
        fp8_weights=dtypes.weights in FP8_DTYPES,
        fp8_kv=dtypes.kv in FP8_DTYPES,
        comm_sms=scenario.workload.parallelism.comm_sms,
        overlap_schedule=scenario.workload.parallelism.overlap_schedule,
        decode_attention_split=scenario.stack.decode_attention_split,
    )


RDU_MATRIX_TYPE = "bf16"
"""The type of an SN40L socket's matrix peak (``pcu.peak_flops``, BF16): the one its PCUs
compute at, whatever type the weights are stored in."""


def peak_matrix_type(scenario: Scenario) -> str:
    """The type of :func:`peak_matrix_flops`' peak (``fp8``, ``bf16``), so a share of it
    says which peak it is of."""
    hardware = scenario.hardware
    if isinstance(hardware, GpuHardwareConfig):
        from rdu_sim.engine.gpu import work

        return work.peak_matrix_type(gpu_settings(scenario))
    return RDU_MATRIX_TYPE


def peak_matrix_flops(scenario: Scenario) -> float:
    """Peak matrix FLOP/s of one device, the one a step's ``flops_fraction`` is of: SN40L's
    BF16 peak, a GPU's tensor rate at the weights' type."""
    hardware = scenario.hardware
    if isinstance(hardware, GpuHardwareConfig):
        from rdu_sim.engine.gpu import work

        return work.peak_matrix_flops(hardware.gpu, gpu_settings(scenario))
    return hardware.peak_flops


def engine_for(scenario: Scenario, *, record: bool = False) -> StepEngine:
    """The engine for the scenario's hardware, with the workload's engine settings and the
    host time its serving stack adds to every step."""
    hardware = scenario.hardware
    if isinstance(hardware, GpuHardwareConfig):
        from rdu_sim.engine.gpu import GpuEngine

        return GpuEngine(
            hardware,
            scenario.workload.engine,
            gpu_settings(scenario),
            record=record,
            stack=scenario.stack,
        )
    return Engine(hardware, scenario.workload.engine, record=record, stack=scenario.stack)
