"""One workload on several hardware systems, side by side (``rdu-sim compare``).

For each hardware file the workload is loaded with ``hardware`` pointing at it (every other
field as written, ``--set`` overrides applied to all), compiled for that hardware (its
fusion level: ``auto`` is full on SN40L and partial on a GPU) and timed by its engine: one
decode step of ``batch`` slots at the decode bucket of ``context`` cached tokens (defaults:
the workload's batch slots, or each system's own batch capacity when they say ``auto``; the
longest cache the KV policy keeps), and the prefill of the workload's typical prompt. A
system the model does not fit (weights, KV cache and activations beyond its memory) is a
column saying so, with the compiler's reason, not an error.

Each column reports the step time, tokens/s per user (one token per step) and in total
(the batch's tokens per step, for one model instance of ``tp`` devices, and for every
instance the system holds), and the share of its peak HBM bandwidth and FLOP/s the step
achieved. ``compare_batches`` repeats the comparison over batch sizes (the notebook's
curves, the ``compare`` plot's lines).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rdu_sim.api import EngineBackend, default_step_shape, load, resolve_batch_slots
from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.fusion import fusion_level
from rdu_sim.config import shipped
from rdu_sim.config.overrides import normalize_overrides
from rdu_sim.engine.for_hardware import peak_matrix_flops
from rdu_sim.engine.timing import StepTiming
from rdu_sim.scenario import Scenario

Overrides = Iterable[str] | Mapping[str, Any] | None


@dataclass(frozen=True)
class Column:
    """One hardware system's figures for the workload (``fits`` False: ``reason`` says why
    and the timing fields are None)."""

    hardware: str  # the hardware file's name field
    hardware_file: str
    kind: str  # rdu or gpu
    devices: int  # sockets or GPUs in the system
    tp: int  # devices per model instance
    instances: int  # model instances the system holds (devices // tp)
    fusion: str  # the fusion level the compiler used
    fits: bool
    reason: str = ""
    batch_capacity: int | None = None
    batch: int | None = None
    context: int | None = None  # cached tokens the decode step attends to (its bucket)
    step_s: float | None = None
    tokens_per_s_per_user: float | None = None
    tokens_per_s: float | None = None  # one model instance
    system_tokens_per_s: float | None = None  # every instance
    hbm_bandwidth_fraction: float | None = None  # of one device's peak HBM bandwidth
    flops_fraction: float | None = None  # of one device's peak matrix FLOP/s at its weights' type
    peak_hbm_bandwidth: float = 0.0  # bytes/s of one device
    peak_flops: float = 0.0  # matrix FLOP/s of one device at its weights' type
    kernel_calls: int | None = None  # kernel calls in one decode step
    prefill_s: float | None = None  # the typical prompt's prefill

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (field names are the JSON keys)."""
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A workload on each hardware system, in the order given."""

    workload: str
    model: str
    columns: tuple[Column, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``rdu-sim compare --json``."""
        return {
            "workload": self.workload,
            "model": self.model,
            "columns": [c.to_dict() for c in self.columns],
        }


def compare(
    workload: str | Path,
    hardware_files: Sequence[str | Path],
    overrides: Overrides = None,
    *,
    batch: int | None = None,
    context: int | None = None,
) -> Comparison:
    """The workload on each of ``hardware_files`` (module docstring)."""
    if not hardware_files:
        raise ValueError("give at least one hardware file")
    # every file is validated before any is simulated: a bad one costs no simulation
    scenarios = [load(workload, _with_hardware(overrides, h)) for h in hardware_files]
    columns = tuple(_column(scenario, batch, context) for scenario in scenarios)
    first = scenarios[0]
    return Comparison(first.workload.name, first.model.name, columns)


def compare_batches(
    workload: str | Path,
    hardware_files: Sequence[str | Path],
    batches: Sequence[int],
    overrides: Overrides = None,
    *,
    context: int | None = None,
) -> list[Comparison]:
    """``compare`` at each batch size (one Comparison per batch, in order)."""
    return [compare(workload, hardware_files, overrides, batch=b, context=context) for b in batches]


def _with_hardware(overrides: Overrides, hardware: str | Path) -> dict[str, Any]:
    """The caller's overrides with ``hardware`` set to ``hardware`` (a path, or a shipped
    hardware file by name; made absolute, so it does not depend on where the workload is),
    served by that hardware's default stack unless the caller names one (``stack=``): a
    comparison of machines compares each as it is deployed."""
    merged = normalize_overrides(overrides)
    found = shipped.locate(Path(hardware).expanduser(), ("hardware",))
    merged["hardware"] = str(found.resolve())
    merged.setdefault("stack", None)
    return merged


def _column(scenario: Scenario, batch: int | None, context: int | None) -> Column:
    hardware = scenario.hardware
    devices = hardware.system.sockets
    base = Column(
        hardware=hardware.name,
        hardware_file=scenario.hardware_file,
        kind=hardware.kind,
        devices=devices,
        tp=scenario.tp,
        instances=devices // scenario.tp,
        fusion=fusion_level(scenario),
        fits=False,
        peak_hbm_bandwidth=float(hardware.hbm.bandwidth),
        peak_flops=peak_matrix_flops(scenario),
    )
    backend = EngineBackend()
    try:
        capacity = backend.batch_capacity(scenario)
        slots = batch if batch is not None else resolve_batch_slots(scenario, backend)[1]
        decode = default_step_shape(scenario, "decode", batch=slots, context=context)
        cost = backend.step_cost(scenario, decode)
        prefill = backend.step_cost(scenario, default_step_shape(scenario, "prefill"))
    except CapacityError as exc:
        return replace(base, reason=str(exc))
    timing = cost.detail
    assert isinstance(timing, StepTiming)
    step = timing.step_s
    return replace(
        base,
        fits=True,
        batch_capacity=capacity,
        batch=decode.batch,
        context=decode.cache_len,
        step_s=step,
        tokens_per_s_per_user=1.0 / step,
        tokens_per_s=decode.batch / step,
        system_tokens_per_s=decode.batch / step * base.instances,
        hbm_bandwidth_fraction=timing.hbm_bandwidth_fraction,
        flops_fraction=timing.flops_fraction,
        kernel_calls=sum(1 if k.looped else k.calls for k in timing.kernels),
        prefill_s=prefill.step_s,
    )
