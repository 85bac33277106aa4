"""Simulations over a grid of contexts or batch sizes, for the plots and the notebooks.

Plots whose x axis varies across runs (memory and capacity vs context, tokens/s vs batch or
context) need several simulations. This module runs them through the public API, so it sits
above it (``rdu_sim.report`` only draws what it is given):

* :func:`plan_over_contexts`: the compiler's batch capacity and memory plan at each context
  and policy. No serving simulation: milliseconds per point.
* :func:`decode_over_contexts` / :func:`decode_over_batches`: the steady-state decode rate
  (``batch / step time`` of one simulated decode step with every slot at its largest cache)
  at each context or batch. One engine step per point.
* :func:`decode_step_timing`: one decode step's kernels with their FLOPs, bytes and times,
  and the socket's roofs, for the roofline.

A point at context ``c`` under policy ``p`` is exactly what ``rdu-sim run WORKLOAD --set ...
--set serving.max_context=c --set kv.policy=p`` runs: the workload's own budget, prompts and
batch (a SnapStream budget above ``c`` is clipped to it, as the policy does). A study may ask
for a different compressing budget (``snapstream_budget``, or ``snapstream_ratio`` for
``c / ratio``); every point then records what it changed under ``settings`` (the overrides
applied on top of the workload and the caller's own), and the plots print them on the
figure, so a plot never shows something ``run`` would not do without saying so.

Each function returns plain JSON-safe dicts, the keys of a run's ``to_dict()`` where they
mean the same thing, so results can be saved, reloaded and plotted again without re-running.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rdu_sim import api
from rdu_sim.compiler import capacity_words
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.overrides import GivenOverrides, plain
from rdu_sim.engine import StepTiming
from rdu_sim.kv.policies import budget_determines, policy_reads, takes_budget
from rdu_sim.report.summary import memory_summary
from rdu_sim.scenario import Scenario
from rdu_sim.serving.backend import EngineBackend
from rdu_sim.serving.step_shape import dimension

__all__ = [
    "decode_over_batches",
    "decode_over_contexts",
    "decode_step_timing",
    "plan_over_contexts",
    "point_settings",
]

Overrides = api.Overrides  # (a str is no overrides: the API's type)

POINT = "the study's point"
"""Where a point's settings (its context, policy, budget: ``point_settings``) were given: the
study's grid, not the caller's overrides, which an error at one of them names instead."""
BATCH = "the study's batch"
"""Where the batch slots a study runs a point at were given (``serving.batch_slots``)."""
Workload = str | Path | Scenario


def point_settings(
    scenario: Scenario,
    policy: str,
    context: int,
    *,
    snapstream_budget: int | None = None,
    snapstream_ratio: float | None = None,
) -> dict[str, Any]:
    """The overrides that run ``scenario``'s workload at ``context`` tokens under ``policy``.

    By default only ``serving.max_context`` and ``kv.policy``: what ``rdu-sim run --set``
    of those two runs. A policy that keeps a budget (``kv.policies.takes_budget``: the
    shipped SnapStream, StreamingLLM and SnapKV, a plugin's alike) is given a budget of
    ``snapstream_budget`` tokens (fixed whatever the context, as deployed) or ``context /
    snapstream_ratio`` (the same compression at every context) when asked; SnapStream's
    ring is then 1/16 of the budget (the shipped 128k workload's 2048 of 32768), between
    the observation window and the workload's ``kv.recent`` (SnapKV keeps no ring;
    StreamingLLM's is the rest of its budget).
    """
    settings: dict[str, Any] = {"serving.max_context": context, "kv.policy": policy}
    if takes_budget(policy) and (snapstream_budget or snapstream_ratio):
        kv = scenario.workload.kv
        budget = snapstream_budget or int(context / (snapstream_ratio or 1.0))
        settings["kv.budget"] = budget
        settings["kv.compression_ratio"] = None
        # SnapKV keeps no ring; StreamingLLM's is the budget's rest (budget_determines)
        if "recent" in (policy_reads(policy) or ()) and "recent" not in budget_determines(policy):
            settings["kv.recent"] = max(kv.observation_window, min(kv.recent, budget // 16))
    return settings


def _identity(scenario: Scenario, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What every row says about its point: the run's identity keys, and the settings."""
    return {
        "model": scenario.model.name,
        "workload": scenario.workload.name,
        "hardware": scenario.hardware.name,
        "tp": scenario.tp,
        "kv_policy": scenario.kv_policy.name,
        "max_context": scenario.workload.serving.max_context,
        "settings": dict(settings),
    }


def _points(
    workload: Workload,
    overrides: Overrides,
    policies: Sequence[str],
    contexts: Sequence[int],
    budget: int | None,
    ratio: float | None,
) -> Iterator[tuple[Scenario, dict[str, Any], int, int]]:
    """(scenario, settings, batch capacity, what memory holds) at each (policy, context) of
    the grid: ``auto`` runs the capacity, an explicit batch runs as given up to what memory
    holds (`Compiler.memory_capacity`), as ``rdu-sim run`` does."""
    base = api.load(workload, overrides)
    backend = EngineBackend()
    for policy in policies:
        for context in map(plain, contexts):  # (``2 ** np.arange(12, 15)``: plain ints)
            settings = point_settings(
                base, policy, context, snapstream_budget=budget, snapstream_ratio=ratio
            )
            scenario = api.load(base, GivenOverrides(settings, POINT))
            capacity = backend.batch_capacity(scenario)
            yield scenario, settings, capacity, backend.memory_capacity(scenario)


def plan_over_contexts(
    workload: Workload,
    contexts: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    batch: int | None = None,
    overrides: Overrides = None,
    snapstream_budget: int | None = None,
    snapstream_ratio: float | None = None,
) -> list[dict[str, Any]]:
    """Batch capacity and memory plan at each (policy, context): compiler only, no serving.

    Args:
        workload: a workload path or a Scenario.
        contexts: context lengths (tokens).
        policies: KV policies to compare.
        batch: plan memory for this many slots (capped at what memory holds); default: the
            batch slots ``rdu-sim run`` would use at that point (the capacity for ``auto``,
            capped at what memory holds when the workload's fixed batch no longer fits).
        overrides: applied to the workload before the point's settings.

    Returns:
        One dict per point with the identity keys (``model``, ``kv_policy``, ``max_context``
        ...), ``settings``, ``batch_capacity``, ``memory_capacity``, ``capacity_limit``,
        ``capacity``, ``batch_slots``, ``kv_bytes_per_slot`` and ``memory`` (per tier, one
        socket), the keys of a run's ``to_dict()``.
    """
    batch = dimension("batch", batch, 1)  # (0 is refused, not the default)
    backend = EngineBackend()
    rows: list[dict[str, Any]] = []
    for scenario, settings, capacity, holds in _points(
        workload, overrides, policies, contexts, snapstream_budget, snapstream_ratio
    ):
        slots = min(_run_slots(scenario, capacity) if batch is None else batch, holds)
        row: dict[str, Any] = {
            **_identity(scenario, _with_slots(scenario, settings, capacity, slots)),
            "source": "plan",
            "batch_capacity": capacity,
            **_capacity_keys(scenario, capacity, holds, slots),
            "batch_slots": slots,
        }
        if slots >= 1:
            placement = backend.plan_memory(scenario, slots)
            row["memory"] = {t: asdict(m) for t, m in memory_summary(placement).items()}
            kv = sum(u.kv_bytes for u in placement.tiers.values())
            row["kv_bytes_per_slot"] = int(kv // slots)
        rows.append(row)
    return rows


def _capacity_keys(scenario: Scenario, capacity: int, holds: int, slots: int) -> dict[str, Any]:
    """What bounds the batch at a point, under a run's JSON keys: ``memory_capacity`` (what
    memory holds), ``capacity_limit`` (what bounds ``batch_capacity`` below it) and
    ``capacity`` (both in `compiler.capacity_words`'s words, for the ``slots`` it runs)."""
    return {
        "memory_capacity": holds,
        "capacity_limit": scenario.stack.batch_limit(holds),
        "capacity": capacity_words(scenario, holds, capacity, slots),
    }


def _timing(scenario: Scenario, batch: int) -> StepTiming:
    """The engine's timing of the default decode step of ``batch`` slots of ``scenario``."""
    timing = api.step(scenario, batch=batch).detail
    assert isinstance(timing, StepTiming)
    return timing


def _run_slots(scenario: Scenario, capacity: int) -> int:
    """The batch slots ``rdu-sim run`` uses: the workload's, or the capacity for auto."""
    return scenario.workload.serving.slots_for(lambda: capacity)


def _with_slots(
    scenario: Scenario, settings: Mapping[str, Any], capacity: int, slots: int
) -> dict[str, Any]:
    """``settings``, plus ``serving.batch_slots`` when the point runs another batch than
    ``rdu-sim run`` would (a batch asked for, or the workload's capped at what memory
    holds)."""
    if slots == _run_slots(scenario, capacity):
        return dict(settings)
    return {**settings, "serving.batch_slots": slots}


def _decode_row(
    scenario: Scenario, settings: Mapping[str, Any], capacity: int, holds: int, batch: int
) -> dict[str, Any]:
    """A run-like dict of one decode step of ``batch`` slots at their largest cache (the
    server of that point runs ``batch`` slots, so its memory is planned for them)."""
    settings = _with_slots(scenario, settings, capacity, batch)
    timing = _timing(
        api.load(scenario, GivenOverrides({"serving.batch_slots": batch}, BATCH)), batch
    )
    return {
        **_identity(scenario, settings),
        "source": "decode_step",
        "batch_capacity": capacity,
        **_capacity_keys(scenario, capacity, holds, batch),
        "batch_slots": batch,
        "cache_len": int(timing.context),
        "step_s": float(timing.step_s),
        "decode_tokens_per_s": batch / float(timing.step_s),
        "hbm_bandwidth_fraction": float(timing.hbm_bandwidth_fraction),
        "flops_fraction": float(timing.flops_fraction),
    }


def decode_over_contexts(
    workload: Workload,
    contexts: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    batch: int | None = None,
    overrides: Overrides = None,
    snapstream_budget: int | None = None,
    snapstream_ratio: float | None = None,
) -> list[dict[str, Any]]:
    """Steady-state decode tokens/s at each (policy, context), at the batch capacity.

    Each point simulates one decode step with ``batch`` slots (default: the batch capacity
    at that context; capped at what memory holds), every slot attending to its largest cache (the
    context for full attention, the slot for SnapStream), and reports ``batch / step
    time`` as ``decode_tokens_per_s`` (``source: "decode_step"``), with the step time and
    the achieved fraction of HBM bandwidth and of peak FLOP/s. A ``batch`` below 1 is
    refused (``StepShapeError``), never read as the default.
    """
    batch = dimension("batch", batch, 1)
    return [
        _decode_row(
            scenario, settings, capacity, holds, min(capacity if batch is None else batch, holds)
        )
        for scenario, settings, capacity, holds in _points(
            workload, overrides, policies, contexts, snapstream_budget, snapstream_ratio
        )
        if capacity >= 1
    ]


def decode_over_batches(
    workload: Workload,
    batches: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    context: int | None = None,
    overrides: Overrides = None,
    snapstream_budget: int | None = None,
    snapstream_ratio: float | None = None,
) -> list[dict[str, Any]]:
    """Steady-state decode tokens/s at each (policy, batch) at one context.

    ``context`` (the points' ``serving.max_context``) defaults to the workload's; batches
    above what memory holds at that context are skipped (they do not fit); a batch or a
    context below 1 is refused (``StepShapeError``, an InputError), never read as the
    default. See :func:`decode_over_contexts`.
    """
    sizes = [dimension("batches", batch, 1) for batch in batches]  # (plain ints)
    context = dimension("context", context, 1)
    if context is None:
        context = api.load(workload, overrides).workload.serving.max_context
    rows = []
    for scenario, settings, capacity, holds in _points(
        workload, overrides, policies, [context], snapstream_budget, snapstream_ratio
    ):
        rows += [
            _decode_row(scenario, settings, capacity, holds, b)
            for b in sizes
            if b is not None and 1 <= b <= holds
        ]
    return rows


def decode_step_timing(
    workload: Workload,
    overrides: Overrides = None,
    *,
    policy: str | None = None,
    context: int | None = None,
    batch: int | None = None,
    snapstream_budget: int | None = None,
    snapstream_ratio: float | None = None,
) -> dict[str, Any]:
    """One decode step's kernels (FLOPs, bytes by tier, time) and the socket's roofs.

    The step has ``batch`` slots (default: the workload's batch slots, its capacity for
    ``auto``) each at its largest cache, as ``rdu_sim.api.step`` runs it. Giving ``policy``
    or ``context`` sets the point up as :func:`point_settings` does. FLOPs and bytes per
    kernel come from the compiled Program, times from the engine's StepTiming.

    Returns:
        ``{"kernels": [{name, calls, flops, bytes_by_tier, time_s}], "hardware":
        {peak_flops, hbm_bandwidth, ddr_bandwidth}, "step_s", "batch", "context", "tp",
        "model", "kv_policy", "hbm_bandwidth_fraction", "settings"}``, all per socket.
    """
    batch = dimension("batch", batch, 1)
    context = dimension("context", context, 1)
    scenario = api.load(workload, overrides)
    settings: dict[str, Any] = {}
    if policy is not None or context is not None:
        settings = point_settings(
            scenario,
            policy or scenario.workload.kv.policy,
            scenario.workload.serving.max_context if context is None else context,
            snapstream_budget=snapstream_budget,
            snapstream_ratio=snapstream_ratio,
        )
        scenario = api.load(scenario, GivenOverrides(settings, POINT))
    if batch is not None:  # the server of this step runs `batch` slots
        settings["serving.batch_slots"] = batch
        scenario = api.load(scenario, GivenOverrides({"serving.batch_slots": batch}, BATCH))
    shape = api.default_step_shape(scenario, "decode")
    timing = _timing(scenario, shape.batch)
    program = EngineBackend().compiler(scenario).program(shape)  # as the step was timed
    times = {k.name: k for k in timing.kernels}
    kernels = [
        {
            "name": kernel.name,
            "calls": kernel.calls,
            "flops": float(kernel.flops),
            "bytes_by_tier": {t: float(v) for t, v in kernel.bytes_by_tier().items()},
            "time_s": float(times[kernel.name].time_s),
        }
        for kernel in program.kernels
        if kernel.name in times
    ]
    hardware = scenario.hardware
    ddr = hardware.socket.ddr.bandwidth if isinstance(hardware, HardwareConfig) else 0.0  # GPU
    return {
        "workload": scenario.workload.name,
        "system": hardware.name,  # "hardware" holds the roofs
        "model": scenario.model.name,
        "kv_policy": scenario.kv_policy.name,
        "tp": scenario.tp,
        "batch": shape.batch,
        "context": shape.cache_len,
        "step_s": float(timing.step_s),
        "hbm_bandwidth_fraction": float(timing.hbm_bandwidth_fraction),
        "settings": settings,
        "kernels": kernels,
        "hardware": {
            "peak_flops": float(hardware.peak_flops),
            "hbm_bandwidth": float(hardware.hbm.bandwidth),
            "ddr_bandwidth": float(ddr),
        },
    }
