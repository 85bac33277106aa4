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
deployment          :func:`deployment`                           measured deployment rows
compare             :func:`compare_plot`                         ``rdu-sim compare`` JSON
sweep               :func:`sweep_plot` (:func:`design_space`)     a sweep database
==================  ===========================================  ==========================

This package only draws: results over contexts or batch sizes are simulated by
``rdu_sim.studies`` (above the API: ``plan_over_contexts``, ``decode_over_contexts``,
``decode_over_batches``, ``decode_step_timing``). When such results changed something on
top of their workload (their ``settings``), the figure says so under its axes.
:func:`result_record` turns a ``RunResult`` into the dict the plots read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from rdu_sim.provenance import simulator
from rdu_sim.report.files import write_file
from rdu_sim.report.plots_calibration import calibration
from rdu_sim.report.plots_compare import compare_plot
from rdu_sim.report.plots_data import PlotInputError, as_runs, result_record
from rdu_sim.report.plots_deployment import deployment
from rdu_sim.report.plots_memory import batch_capacity, memory_footprint
from rdu_sim.report.plots_perf import (
    KernelPoint,
    kernel_points,
    roofline,
    throughput_vs_batch,
    throughput_vs_context,
)
from rdu_sim.report.plots_serving import latency_distribution, occupancy_timeline
from rdu_sim.report.plots_speculation import acceptance_tradeoff, speculation_crossover
from rdu_sim.report.plots_sweep import (
    design_space,
    line_axes,
    sweep_plot,
    swept_axes,
    throughput_metric,
)

__all__ = [
    "PAPER_RC",
    "PLOT_KINDS",
    "SAVE_FORMATS",
    "KernelPoint",
    "PlotInputError",
    "batch_capacity",
    "calibration",
    "compare_plot",
    "deployment",
    "design_space",
    "kernel_points",
    "latency_distribution",
    "memory_footprint",
    "occupancy_timeline",
    "plot",
    "result_record",
    "roofline",
    "save_figure",
    "sweep_plot",
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
    "deployment": "simulated over measured against the batch, a panel per machine (rdu-sim "
    "validate --suite deployment --json, or calibrate's fit.json)",
    "compare": "step time, tokens/s and share of peak bandwidth per hardware (rdu-sim compare)",
    "speculation": "tokens per target step and per-user rate vs draft tokens k, a line per "
    "acceptance rate (a sweep)",
    "crossover": "throughput and speedup with and without speculation vs batch (a sweep)",
    "sweep": "a metric of a sweep database along any swept axis, a line per other axis",
}
"""Plot kinds the CLI knows, with what each shows."""

MULTI_RUN_KINDS = frozenset({"memory", "capacity", "throughput"})
"""Kinds whose x axis is a quantity that varies across runs (a workload YAML input builds
runs over contexts for them)."""

SAVE_FORMATS = (".png", ".svg", ".pdf")
"""File suffixes :func:`save_figure` writes."""


CONTEXT_AXIS = "serving.max_context"


def _along_other_axis(results: Any) -> bool:
    """True for a sweep database whose swept axes leave the context alone: its points line
    up along those axes, not along the context."""
    axes = swept_axes(results)
    return bool(axes) and CONTEXT_AXIS not in axes


def _lines_by(results: Any) -> tuple[str, ...]:
    """What splits a context plot into lines: the model and KV policy, and for a sweep
    database every other axis it swept along the context (``plots_sweep.line_axes``; the
    policy's own axis is already the policy)."""
    if not hasattr(results, "columns"):
        return ("model", "kv_policy")
    others = [a for a in line_axes(results, CONTEXT_AXIS) if a != "kv.policy"]
    return ("model", "kv_policy", *others)


def _throughput(results: Any) -> Figure:
    """Along the swept axis for a sweep that keeps the context (a line per other swept axis,
    as ``plot sweep`` draws it), else vs batch when the runs share one context and differ
    in batch slots, else vs context (a line per other swept axis); the steady window's
    rate where the runs measured one. The sweep goes first: the batch plot's lines are
    the model and KV policy only, so a second swept axis (an HBM bandwidth, a speculation
    setting) would fold into one zig-zag line."""
    if _along_other_axis(results):
        return sweep_plot(results, y=throughput_metric(results))
    runs = as_runs(results)
    contexts = {r.max_context for r in runs}
    batches = {r.batch_slots for r in runs}
    if len(contexts) == 1 and len(batches) > 1:
        return throughput_vs_batch(runs)
    return throughput_vs_context(runs, group_by=_lines_by(results))


def _capacity(results: Any) -> Figure:
    """Vs context, or along the swept axis for a sweep that keeps the context."""
    if _along_other_axis(results):
        return sweep_plot(results, y="batch_capacity")
    return batch_capacity(results)


def _roofline(results: Any) -> Figure:
    """Roofline of a step timing (``rdu_sim.studies.decode_step_timing``'s dict, with its
    hardware roofs)."""
    if not isinstance(results, Mapping):
        raise PlotInputError(
            "results have no step timing ('kernels' with flops, bytes_by_tier "
            "and time_s); plot the roofline from a workload YAML instead"
        )
    return roofline(results)


_RENDERERS: dict[str, Callable[[Any], Figure]] = {
    "memory": memory_footprint,
    "capacity": _capacity,
    "throughput": _throughput,
    "roofline": _roofline,
    "latency": latency_distribution,
    "occupancy": occupancy_timeline,
    "calibration": calibration,
    "deployment": deployment,
    "compare": compare_plot,
    "speculation": acceptance_tradeoff,
    "crossover": speculation_crossover,
    "sweep": sweep_plot,
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


PAPER_RC: dict[str, Any] = {
    "pdf.fonttype": 42,  # TrueType in PDF and PS: Type 3 fonts fail IEEE/ACM checks
    "ps.fonttype": 42,
    "svg.fonttype": "none",  # SVG text stays text, editable in Inkscape or Illustrator
    "svg.hashsalt": "rdu-sim",  # SVG element ids from a fixed salt: same figure, same bytes
}
"""matplotlib settings :func:`save_figure` writes with (read at save time, so set only
around the save: nothing global changes)."""


def _metadata(fmt: str, source: str | None) -> dict[str, str | None]:
    """What made the file (the simulator's version and commit, the command or source), in
    each format's own fields; no dates, so the same figure saves to the same bytes."""
    made_by = f"rdu-sim {simulator().label}"
    about = source or "rdu-sim figure"
    if fmt == "png":
        return {"Software": made_by, "Description": about}
    if fmt == "pdf":
        return {"Creator": made_by, "Producer": made_by, "Subject": about, "CreationDate": None}
    return {"Creator": made_by, "Description": about, "Date": None}


def save_figure(fig: Figure, path: str | Path, *, source: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (.png at 150 dpi, .svg or .pdf), creating parent folders,
    all or nothing (``files.write_file``: a WriteError names the path).

    Ready for a paper: TrueType fonts in PDF, text as text in SVG (:data:`PAPER_RC`); the
    file's metadata names the simulator (version and commit) and ``source`` (what the
    figure shows, e.g. the command that drew it); no timestamps, so the bytes repeat.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in SAVE_FORMATS:
        raise PlotInputError(f"output must end in {', '.join(SAVE_FORMATS)}, got {target.name!r}")
    fmt = suffix[1:]

    def save(handle: Any) -> None:
        with matplotlib.rc_context(PAPER_RC):  # type: ignore[arg-type]
            fig.savefig(handle, format=fmt, dpi=150, metadata=_metadata(fmt, source))

    return write_file(target, save, binary=True)
