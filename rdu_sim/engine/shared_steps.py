"""Step results shared between runs in one process: sweep points whose engine inputs are equal.

A sweep over hardware and serving knobs compiles and simulates the same step again and
again: points that differ only in what the engine never reads (the serving knobs, the
request count, the arrival seed, the hardware file's name) ask for steps whose program,
socket, system and engine settings are equal, and so are their results (the engine is
deterministic). Inside :func:`sharing` (the sweep's worker wraps every point in it; the
deployment suite its rows, a calibration each unit) both engines' results are memoized per
process (so per worker, on a local pool or on Dask) under :func:`step_key`: a digest of
exactly what an engine's ``simulate_step`` reads (the program but its memory plan; the
hardware's socket or GPU and its system; the stack, and how it runs a GPU's step; the
engine settings). Anything that changes one of them changes the key, so a shared result is
never stale; a field outside them (the hardware's name, the placement's bookkeeping) does
not.
Runs that record a trace are never shared (their records are the point), nor is anything
outside :func:`sharing`: a single run, a test, a notebook simulate as before. The scope and
the memo are the compiler's (``compiler.shared_programs``), which shares its programs in
the same scope, keyed by what it reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from rdu_sim.compiler import shared_programs
from rdu_sim.compiler.program import Program
from rdu_sim.compiler.shared_programs import Memo, active, sharing
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.stack import StackConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine.timing import StepTiming

__all__ = [
    "MAX_SHARED_STEPS",
    "active",
    "clear",
    "device_key",
    "device_stats",
    "shared_device",
    "shared_step",
    "sharing",
    "stats",
    "step_key",
    "with_stack",
]

MAX_SHARED_STEPS = 4096
"""Results kept per process by each memo, steps and device runs (least recently used
dropped first): a DeepSeek-R1 step's timing is a few kB, so the two are tens of MB at
most, while a 1,000-point sweep asks for ~35 shapes a point."""

_memo: Memo[StepTiming] = Memo(MAX_SHARED_STEPS)
stats = _memo.stats
"""Lookups answered from the memo and simulated, since the process started."""

_devices: Memo[Any] = Memo(MAX_SHARED_STEPS)
device_stats = _devices.stats
"""Device runs (a step's simulation before its stack's host time) answered from their memo
and simulated, since the process started."""


def step_key(
    program: Program,
    hardware: HardwareConfig | GpuHardwareConfig,
    config: EngineConfig,
    stack: StackConfig,
    settings: object = None,
) -> str:
    """A digest of everything an engine's ``simulate_step`` reads for ``program``: what its
    device run reads (:func:`device_key`) and the stack, whose host time the step adds."""
    return with_stack(device_key(program, hardware, config, settings), stack)


def device_key(
    program: Program,
    hardware: HardwareConfig | GpuHardwareConfig,
    config: EngineConfig,
    settings: object = None,
) -> str:
    """A digest of everything an engine's device run of ``program`` reads: the device (an
    SN40L socket, or a GPU and ``settings``, how its stack runs a step), the system and the
    engine settings; not the stack's host time, which only the step's timing adds."""
    device = hardware.gpu if isinstance(hardware, GpuHardwareConfig) else hardware.socket
    text = "\n".join(
        (
            _program_text(program),
            device.model_dump_json(),
            hardware.system.model_dump_json(),
            config.model_dump_json(),
            repr(settings),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def with_stack(device: str, stack: StackConfig) -> str:
    """The step key of a device run's key under ``stack``."""
    return hashlib.sha256(f"{device}\n{stack.model_dump_json()}".encode()).hexdigest()


def _program_text(program: Program) -> str:
    """Every field of ``program`` an engine reads, its micro-batches' and pipeline stages'
    too: all but the memory plan (``placement``), which the compiler read to make them."""
    fields = (
        repr(program.shape),
        repr(program.tp),
        repr(program.stage_devices),
        repr(program.kernels),
        repr(program.host_bytes),
        repr(program.expert_balance),
        repr(program.expert_schedule),
        repr(program.pipeline_micro_batches),
        repr(program.pipeline_transfer_bytes),
        *(f"micro batch: {_program_text(micro)}" for micro in program.micro_batches),
        *(f"pipeline stage: {_program_text(stage)}" for stage in program.pipeline),
    )
    return "\n".join(fields)


def shared_step(key: str, simulate: Callable[[], StepTiming]) -> StepTiming:
    """The result under ``key``: remembered when sharing, else (or on a miss) simulated."""
    return _memo.get(key, simulate)


T = TypeVar("T")


def shared_device(key: str, simulate: Callable[[], T]) -> T:
    """The device run under ``key`` (:func:`device_key`): remembered when sharing, else (or
    on a miss) simulated. Steps that differ only in their stack's host time (a calibration's
    host-time parameters) share it."""
    run: T = _devices.get(key, simulate)
    return run


def clear() -> None:
    """Forget every shared result, compiled programs too (tests)."""
    _memo.clear()
    _devices.clear()
    shared_programs.clear()
