"""Build the results a plot needs by calling the in-process API (``rdu_sim.api``).

Plots whose x axis varies across runs (memory and capacity vs context, tokens/s vs batch or
context) need several runs; these helpers make them cheap and comparable:

* :func:`plan_over_contexts`: the compiler's batch capacity and memory plan at each context
  and policy. No serving simulation: milliseconds per point.
* :func:`decode_over_contexts` / :func:`decode_over_batches`: the steady-state decode rate
  (``batch / step time`` of one simulated decode step with every slot at its largest cache)
  at each context or batch. One engine step per point: well under a second each.
* :func:`runs_over_contexts` / :func:`runs_over_batches`: short serving runs (fixed prompt and
  output lengths) at each context or batch: end-to-end numbers, prefill stalls included,
  and the per-request records and occupancy series of each run.
* :func:`decode_step_timing`: one decode step's kernels with their FLOPs, bytes and times,
  and the socket's roofs, for :func:`~rdu_sim.report.plots_perf.roofline`.

Each returns plain JSON-safe dicts (a run's ``to_dict()`` plus what the plots read), so
results can be saved, reloaded and plotted again without re-running.

How a context ``c`` is set up for a policy, so that both policies see the same traffic:
``serving.max_context = c``; prompts of ``c - output_tokens`` tokens (the cache is about ``c``
tokens when decoding, the regime the context stands for); for SnapStream a budget of
``c / snapstream_ratio`` tokens (the paper's 4x by default) with a ring of at most 1/16 of
the budget (the shipped 128k workload's 2048 of 32768), unless the workload sets
``kv.compression_ratio`` itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rdu_sim.report.plots_data import result_record
from rdu_sim.shapes import StepShape

__all__ = [
    "context_overrides",
    "decode_over_batches",
    "decode_over_contexts",
    "decode_step_timing",
    "plan_over_contexts",
    "runs_over_batches",
    "runs_over_contexts",
]

Overrides = Mapping[str, Any] | Iterable[str] | None


def _api() -> Any:
    """``rdu_sim.api``, imported when first needed (report sits above it in the layering)."""
    return importlib.import_module("rdu_sim.api")


def _as_dict(overrides: Overrides) -> dict[str, Any]:
    """Overrides as a dict (``a.b=value`` strings split at the first '=')."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        path, sep, value = str(item).partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not PATH=VALUE")
        out[path.strip()] = value.strip()
    return out


def context_overrides(
    scenario: Any,
    policy: str,
    context: int,
    *,
    output_tokens: int = 32,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> dict[str, Any]:
    """Overrides that run ``scenario``'s workload at ``context`` tokens under ``policy``.

    A compressing policy gets a budget of ``snapstream_budget`` tokens when given (fixed
    whatever the context, as deployed: slots stop growing beyond it), else ``context /
    snapstream_ratio`` (the same compression at every context); its ring is 1/16 of the
    budget, between the observation window and the workload's ``kv.recent``.
    """
    if context <= output_tokens:
        raise ValueError(f"context {context} must exceed output_tokens {output_tokens}")
    out: dict[str, Any] = {
        "serving.max_context": context,
        "kv.policy": policy,
        "serving.prompt_tokens": context - output_tokens,
        "serving.output_tokens": output_tokens,
    }
    kv = scenario.workload.kv
    if policy in ("snapstream", "snapkv") and (
        kv.compression_ratio is None or snapstream_budget is not None
    ):
        budget = snapstream_budget or int(context / snapstream_ratio)
        out["kv.budget"] = budget
        out["kv.compression_ratio"] = None
        out["kv.recent"] = max(kv.observation_window, min(kv.recent, budget // 16))
    return out


def _point(workload: Any, overrides: Overrides, extra: Mapping[str, Any]) -> Any:
    """The scenario of ``workload`` with the caller's overrides, then ``extra``."""
    api = _api()
    return api.load(workload, {**_as_dict(overrides), **extra})


def _capacity_points(
    workload: Any,
    overrides: Overrides,
    policies: Sequence[str],
    contexts: Sequence[int],
    batch: int | None,
    snapstream_ratio: float,
    snapstream_budget: int | None,
) -> Iterator[tuple[str, int, Any, int, int]]:
    """(policy, context, scenario, batch capacity, slots) at each point of the grid;
    ``slots`` is ``batch`` capped at the capacity (default: the capacity)."""
    base = _point(workload, overrides, {})
    backend = _api().EngineBackend()
    for policy in policies:
        for context in contexts:
            scenario = _point(
                workload,
                overrides,
                context_overrides(
                    base,
                    policy,
                    context,
                    snapstream_ratio=snapstream_ratio,
                    snapstream_budget=snapstream_budget,
                ),
            )
            capacity = int(backend.batch_capacity(scenario))
            yield (
                policy,
                context,
                scenario,
                capacity,
                (capacity if batch is None else min(batch, capacity)),
            )


def plan_over_contexts(
    workload: str | Path | Any,
    contexts: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    batch: int | None = None,
    overrides: Overrides = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> list[dict[str, Any]]:
    """Batch capacity and memory plan at each (policy, context): compiler only, no serving.

    Args:
        workload: a workload path or a Scenario.
        contexts: context lengths (tokens).
        policies: KV policies to compare.
        batch: plan memory for this many slots (capped at the capacity); default: the
            capacity, i.e. a server filled to what fits.
        overrides: applied to the workload before the context and policy settings.

    Returns:
        One dict per point with ``model``, ``kv_policy``, ``max_context``,
        ``batch_capacity``, ``batch_slots``, ``kv_bytes_per_slot`` and ``memory`` (per tier,
        one socket), the keys of a run's ``to_dict()``.
    """
    from rdu_sim.report.summary import memory_summary

    backend = _api().EngineBackend()
    rows: list[dict[str, Any]] = []
    for policy, context, scenario, capacity, slots in _capacity_points(
        workload, overrides, policies, contexts, batch, snapstream_ratio, snapstream_budget
    ):
        row: dict[str, Any] = {
            "model": scenario.model.name,
            "workload": scenario.workload.name,
            "hardware": scenario.hardware.name,
            "tp": scenario.tp,
            "kv_policy": policy,
            "max_context": context,
            "batch_capacity": capacity,
            "batch_slots": slots,
        }
        if slots >= 1:
            placement = backend.plan_memory(scenario, slots)
            row["memory"] = memory_summary(placement)
            kv = sum(u.kv_bytes for u in placement.tiers.values())
            row["kv_bytes_per_slot"] = int(kv // slots)
        rows.append(row)
    return rows


def _decode_row(
    scenario: Any, policy: str, context: int, capacity: int, batch: int
) -> dict[str, Any]:
    """A run-like dict of one decode step of ``batch`` slots at their largest cache."""
    api = _api()
    scenario = api.load(scenario, {"serving.batch_slots": batch})
    timing = api.step(scenario, batch=batch).detail
    return {
        "source": "decode_step",
        "model": scenario.model.name,
        "workload": scenario.workload.name,
        "hardware": scenario.hardware.name,
        "tp": scenario.tp,
        "kv_policy": policy,
        "max_context": context,
        "batch_capacity": capacity,
        "batch_slots": batch,
        "cache_len": int(timing.context),
        "step_s": float(timing.step_s),
        "decode_tokens_per_s": batch / float(timing.step_s),
        "hbm_bandwidth_fraction": float(timing.hbm_bandwidth_fraction),
        "flops_fraction": float(timing.flops_fraction),
    }


def decode_over_contexts(
    workload: str | Path | Any,
    contexts: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    batch: int | None = None,
    overrides: Overrides = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> list[dict[str, Any]]:
    """Steady-state decode tokens/s at each (policy, context), at the batch capacity.

    Each point simulates one decode step with ``batch`` slots (default: as many as fit at
    that context; capped at the capacity), every slot attending to its largest cache (the
    context for full attention, the budget for SnapStream), and reports ``batch / step
    time`` as ``decode_tokens_per_s`` (``source: "decode_step"``), with the step time and
    the achieved fraction of HBM bandwidth and of peak FLOP/s.
    """
    return [
        _decode_row(scenario, policy, context, capacity, slots)
        for policy, context, scenario, capacity, slots in _capacity_points(
            workload, overrides, policies, contexts, batch, snapstream_ratio, snapstream_budget
        )
        if slots >= 1
    ]


def decode_over_batches(
    workload: str | Path | Any,
    batches: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    context: int | None = None,
    overrides: Overrides = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> list[dict[str, Any]]:
    """Steady-state decode tokens/s at each (policy, batch) at one context.

    ``context`` defaults to the workload's ``serving.max_context``; batches above the
    capacity at that context are skipped (they do not fit). See :func:`decode_over_contexts`.
    """
    api = _api()
    base = _point(workload, overrides, {})
    context = context or base.workload.serving.max_context
    backend = api.EngineBackend()
    rows = []
    for policy in policies:
        scenario = _point(
            workload,
            overrides,
            context_overrides(
                base,
                policy,
                context,
                snapstream_ratio=snapstream_ratio,
                snapstream_budget=snapstream_budget,
            ),
        )
        capacity = int(backend.batch_capacity(scenario))
        for batch in batches:
            if 1 <= batch <= capacity:
                rows.append(_decode_row(scenario, policy, context, capacity, batch))
    return rows


def _serve(scenario: Any, requests: int | None) -> dict[str, Any]:
    """One serving run of ``scenario`` in a closed loop.

    The workload's batch slots are capped at the capacity (a batch that fitted at the
    workload's own context may not at a longer one); ``requests=None`` sends one request
    per slot.
    """
    api = _api()
    capacity, slots = api.resolve_batch_slots(scenario, api.EngineBackend())
    slots = max(1, min(int(slots), int(capacity)))
    result = api.run(
        scenario,
        {
            "serving.batch_slots": slots,
            "serving.requests": requests or slots,
            "serving.arrival.process": "closed_loop",
        },
    )
    return result_record(result)


def runs_over_contexts(
    workload: str | Path | Any,
    contexts: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    requests: int | None = None,
    output_tokens: int = 32,
    overrides: Overrides = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> list[dict[str, Any]]:
    """A short serving run at each (policy, context), for tokens/s, memory and capacity.

    The batch is the workload's (``auto`` = the capacity at that context), capped at the
    capacity; ``requests`` defaults to one per slot (a closed loop, so the batch fills at
    once). Prompts are
    ``context - output_tokens`` tokens, outputs ``output_tokens``.

    Returns:
        ``result_record(run(...))`` per point: the run's ``to_dict()`` with its per-request
        columns and occupancy series.
    """
    base = _point(workload, overrides, {})
    runs = []
    for policy in policies:
        for context in contexts:
            scenario = _point(
                workload,
                overrides,
                context_overrides(
                    base,
                    policy,
                    context,
                    output_tokens=output_tokens,
                    snapstream_ratio=snapstream_ratio,
                    snapstream_budget=snapstream_budget,
                ),
            )
            runs.append(_serve(scenario, requests))
    return runs


def runs_over_batches(
    workload: str | Path | Any,
    batches: Sequence[int],
    *,
    policies: Sequence[str] = ("full", "snapstream"),
    context: int | None = None,
    requests: int | None = None,
    output_tokens: int = 32,
    overrides: Overrides = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> list[dict[str, Any]]:
    """A short serving run at each (policy, batch slots) at one context.

    ``context`` defaults to the workload's ``serving.max_context``. A batch above the
    capacity at that context is skipped (it does not fit). ``requests`` defaults to one per
    slot.
    """
    api = _api()
    base = _point(workload, overrides, {})
    context = context or base.workload.serving.max_context
    backend = api.EngineBackend()
    runs = []
    for policy in policies:
        settings = context_overrides(
            base,
            policy,
            context,
            output_tokens=output_tokens,
            snapstream_ratio=snapstream_ratio,
            snapstream_budget=snapstream_budget,
        )
        capacity = int(backend.batch_capacity(_point(workload, overrides, settings)))
        for batch in batches:
            if batch > capacity:
                continue
            scenario = _point(workload, overrides, {**settings, "serving.batch_slots": batch})
            runs.append(_serve(scenario, requests))
    return runs


def decode_step_timing(
    workload: str | Path | Any,
    overrides: Overrides = None,
    *,
    policy: str | None = None,
    context: int | None = None,
    batch: int | None = None,
    snapstream_ratio: float = 4.0,
    snapstream_budget: int | None = None,
) -> dict[str, Any]:
    """One decode step's kernels (FLOPs, bytes by tier, time) and the socket's roofs.

    The step has ``batch`` slots (default: the batch capacity when the workload says
    ``auto``, else its batch slots) each at its largest cache, as ``rdu_sim.api.step`` runs
    it. Giving ``policy`` or ``context`` sets the workload up as :func:`context_overrides`
    does (a context length and a KV policy, SnapStream's budget). FLOPs and bytes per kernel
    come from the compiled Program, times from the engine's StepTiming (matched by name).

    Returns:
        ``{"kernels": [{name, calls, flops, bytes_by_tier, time_s}], "hardware":
        {peak_flops, hbm_bandwidth, ddr_bandwidth}, "step_s", "batch", "context", "tp",
        "model", "kv_policy", "hbm_bandwidth_fraction"}``, all per socket.
    """
    api = _api()
    from rdu_sim.compiler import compile_program

    scenario = _point(workload, overrides, {})
    if policy is not None or context is not None:
        scenario = _point(
            workload,
            overrides,
            context_overrides(
                scenario,
                policy or scenario.workload.kv.policy,
                context or scenario.workload.serving.max_context,
                snapstream_ratio=snapstream_ratio,
                snapstream_budget=snapstream_budget,
            ),
        )
    if batch is not None:
        scenario = api.load(scenario, {"serving.batch_slots": batch})
    timing = api.step(scenario, batch=batch).detail
    shape = StepShape(
        timing.phase,
        int(timing.batch),
        int(timing.tokens),
        int(timing.context),
    )
    program = compile_program(scenario, shape)
    times = {k.name: k for k in timing.kernels}
    kernels = []
    for kernel in program.kernels:
        measured = times.get(kernel.name)
        if measured is None:
            continue
        kernels.append(
            {
                "name": kernel.name,
                "calls": kernel.calls,
                "flops": float(kernel.flops),
                "bytes_by_tier": {t: float(v) for t, v in kernel.bytes_by_tier().items()},
                "time_s": float(measured.time_s),
            }
        )
    socket = scenario.hardware.socket
    return {
        "model": scenario.model.name,
        "kv_policy": scenario.workload.kv.policy,
        "tp": scenario.tp,
        "batch": int(timing.batch),
        "context": int(timing.context),
        "step_s": float(timing.step_s),
        "hbm_bandwidth_fraction": float(timing.hbm_bandwidth_fraction),
        "kernels": kernels,
        "hardware": {
            "peak_flops": float(socket.peak_flops),
            "hbm_bandwidth": float(socket.hbm.bandwidth),
            "ddr_bandwidth": float(socket.ddr.bandwidth),
        },
    }
