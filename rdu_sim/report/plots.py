"""Plots of simulation results: the entry point of ``rdu_sim.report``'s plotting.

Every plot is a function that takes results (a run's JSON dict from ``RunResult.to_dict()``
or ``rdu-sim run --json``, a list of them, or a sweep DataFrame from ``rdu_sim.sweep.load``;
for the calibration plot, the rows ``rdu-sim validate --json`` prints) and returns a
``matplotlib.figure.Figure`` made without pyplot (no display needed; save it with
``fig.savefig("x.png")``, or let a notebook show it). Axes are in units people read: GiB,
tokens/s, ms, TFLOP/s.

==================  ===========================================  ==========================
kind (CLI)          function                                     needs
==================  ===========================================  ==========================
memory              :func:`memory_footprint`                     runs over contexts
capacity            :func:`batch_capacity`                       runs over contexts
throughput          :func:`throughput_vs_context` /              runs over contexts or
                    :func:`throughput_vs_batch`                  batch sizes
roofline            :func:`roofline`                             a step timing + hardware
latency             :func:`latency_distribution`                 per-request records
occupancy           :func:`occupancy_timeline`                   slot-occupancy series
calibration         :func:`calibration`                          ``rdu-sim validate`` rows
(notebooks)         :func:`design_space`                         a sweep DataFrame
==================  ===========================================  ==========================

Results over contexts or batch sizes are built in-process: :func:`plan_over_contexts` (the
compiler's capacity and memory plan only, milliseconds), :func:`decode_over_contexts` and
:func:`decode_over_batches` (steady-state decode tokens/s from one engine step per point),
:func:`runs_over_contexts` and
:func:`runs_over_batches` (short serving runs), :func:`decode_step_timing` (one step for the
roofline). :func:`result_record` turns a ``RunResult`` into the dict the plots read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rdu_sim.report.files import write_file
from rdu_sim.report.plots_calibration import calibration
from rdu_sim.report.plots_data import (
    PlotInputError,
    as_runs,
    context_of,
    find,
    result_record,
)
from rdu_sim.report.plots_memory import batch_capacity, memory_footprint
from rdu_sim.report.plots_perf import (
    KernelPoint,
    kernel_points,
    roofline,
    throughput_vs_batch,
    throughput_vs_context,
)
from rdu_sim.report.plots_runs import (
    context_overrides,
    decode_over_batches,
    decode_over_contexts,
    decode_step_timing,
    plan_over_contexts,
    runs_over_batches,
    runs_over_contexts,
)
from rdu_sim.report.plots_serving import latency_distribution, occupancy_timeline
from rdu_sim.report.plots_sweep import design_space

__all__ = [
    "PLOT_KINDS",
    "SAVE_FORMATS",
    "KernelPoint",
    "PlotInputError",
    "batch_capacity",
    "calibration",
    "context_overrides",
    "decode_over_batches",
    "decode_over_contexts",
    "decode_step_timing",
    "design_space",
    "kernel_points",
    "latency_distribution",
    "memory_footprint",
    "occupancy_timeline",
    "plan_over_contexts",
    "plot",
    "result_record",
    "roofline",
    "runs_over_batches",
    "runs_over_contexts",
    "save_figure",
    "throughput_vs_batch",
    "throughput_vs_context",
]

PLOT_KINDS: dict[str, str] = {
    "memory": "memory per tier (weights, KV, activations, free) vs context",
    "capacity": "batch capacity vs context",
    "throughput": "decode tokens/s vs context (or vs batch when only the batch varies)",
    "roofline": "a decode step's kernels on the HBM and compute roofs",
    "latency": "TTFT and TPOT distributions (CDF)",
    "occupancy": "batch slot occupancy over time",
    "calibration": "published figures with their tolerance bands vs simulated (rdu-sim validate)",
}
"""Plot kinds the CLI knows, with what each shows."""

MULTI_RUN_KINDS = frozenset({"memory", "capacity", "throughput"})
"""Kinds whose x axis is a quantity that varies across runs (a workload YAML input builds
runs over contexts for them)."""

SAVE_FORMATS = (".png", ".svg", ".pdf")
"""File suffixes :func:`save_figure` writes."""


def _throughput(results: Any) -> Figure:
    """Vs batch when the runs share one context and differ in batch slots, else vs context."""
    runs = as_runs(results)
    contexts = {context_of(r) for r in runs}
    batches = {find(r, "batch_slots", what="batch slots", default=None) for r in runs}
    if len(contexts) == 1 and len(batches) > 1:
        return throughput_vs_batch(runs)
    return throughput_vs_context(runs)


def _roofline(results: Any) -> Figure:
    """Roofline of a step timing (``decode_step_timing``'s dict), or of the first run that
    holds one under ``decode_step`` with its hardware roofs."""
    for run in as_runs(results):
        step = (
            run
            if "kernels" in run
            else find(run, "decode_step", "step_timing", what="step timing", default=None)
        )
        if step is None:
            continue
        hardware = step.get("hardware") if isinstance(step, dict) else None
        if not isinstance(hardware, dict):
            hardware = run.get("roofs", run.get("hardware"))
        if not isinstance(hardware, dict):
            raise PlotInputError(
                "results have a step timing but no hardware roofs (peak_flops, hbm_bandwidth)"
            )
        return roofline(step, hardware)
    raise PlotInputError(
        "results have no step timing ('kernels' with flops, bytes_by_tier "
        "and time_s); plot the roofline from a workload YAML instead"
    )


_RENDERERS: dict[str, Callable[[Any], Figure]] = {
    "memory": memory_footprint,
    "capacity": batch_capacity,
    "throughput": _throughput,
    "roofline": _roofline,
    "latency": latency_distribution,
    "occupancy": occupancy_timeline,
    "calibration": calibration,
}


def plot(kind: str, results: Any) -> Figure:
    """The figure of ``kind`` (one of :data:`PLOT_KINDS`) for ``results``.

    Raises:
        PlotInputError: an unknown kind (the message lists the valid ones) or results that
            lack what the kind needs.
    """
    renderer = _RENDERERS.get(kind)
    if renderer is None:
        raise PlotInputError(f"unknown plot kind {kind!r}; valid kinds: {', '.join(PLOT_KINDS)}")
    return renderer(results)


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (.png at 150 dpi, .svg or .pdf), creating parent folders,
    all or nothing (``files.write_file``: a WriteError names the path)."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in SAVE_FORMATS:
        raise PlotInputError(f"output must end in {', '.join(SAVE_FORMATS)}, got {target.name!r}")
    return write_file(
        target, lambda handle: fig.savefig(handle, format=suffix[1:], dpi=150), binary=True
    )
