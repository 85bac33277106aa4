"""Speed plots: decode tokens/s vs batch and vs context, and a roofline of one step's kernels.

Runs that measured a steady window show its rate (the slots kept full), with the whole
run's (ramp-up and drain included) faint beside it (``plots_style.plot_steady``).

The throughput curves show what the extra slots SnapStream frees are worth; the roofline shows
why: decode kernels sit far left (few FLOPs per byte of weights and KV streamed), on the HBM
roof, so their time is bytes / bandwidth and a smaller cache per slot is time saved.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

from rdu_sim import human
from rdu_sim.report.plots_data import (
    PlotInputError,
    RunPoint,
    as_runs,
    group_runs,
    number,
    titled,
    with_subject,
)
from rdu_sim.report.plots_style import (
    BELOW,
    color_for,
    figure_title,
    legend_outside,
    line_style,
    new_figure,
    note_settings,
    plot_steady,
    use_token_axis,
    whole_run_key,
)

__all__ = [
    "KernelPoint",
    "kernel_points",
    "roofline",
    "throughput_vs_batch",
    "throughput_vs_context",
]


def _context(run: RunPoint) -> int:
    context: int = run.need("max_context")
    return context


def _batch(run: RunPoint) -> int:
    batch: int = run.need("batch_slots")
    return batch


def _throughput(
    results: Any,
    x_of: Callable[[RunPoint], int],
    group_by: Sequence[str],
    xlabel: str,
    title: str,
) -> Figure:
    runs = as_runs(results)
    groups = group_runs(runs, group_by)
    fig, (ax,) = new_figure()
    xs_all: list[int] = []
    steady = any(r.steady_decode_tokens_per_s is not None for r in runs)
    hollow = False
    for i, (label, members) in enumerate(groups.items()):
        members = sorted(members, key=x_of)
        xs = [x_of(r) for r in members]
        xs_all += xs
        whole = [float(r.need("decode_tokens_per_s")) for r in members]
        if steady:  # the slots kept full, the whole run's rate beside it
            hollow |= plot_steady(
                ax,
                xs,
                [r.steady_decode_tokens_per_s for r in members],
                whole,
                label=label,
                **line_style(label, i, list(groups)),
            )
        else:
            ax.plot(xs, whole, marker="o", label=label, **line_style(label, i, list(groups)))
    if steady:
        whole_run_key(ax, hollow)
    use_token_axis(ax, xs_all)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("decode throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    legend_outside(fig, ax)
    if all(r.source == "decode_step" for r in runs):
        title = "Steady-state " + title[0].lower() + title[1:]
    figure_title(fig, titled(title, runs))
    note_settings(fig, runs)
    return fig


def throughput_vs_batch(
    results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")
) -> Figure:
    """Decode tokens/s (whole system) vs batch slots, one line per model and policy.

    Decode is bandwidth bound at small batch (every step streams all weights once, whatever
    the batch), so tokens/s first grows about linearly with the batch, then bends as the KV
    cache traffic, which grows with the batch, takes over.

    Returns:
        The figure; one line per group of runs.
    """
    return _throughput(results, _batch, group_by, "batch slots", "Decode throughput vs batch")


def throughput_vs_context(
    results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")
) -> Figure:
    """Decode tokens/s vs context length, one line per model and policy.

    Each run's batch is whatever it used (its capacity when ``batch_slots: auto``), so the
    curve folds together both effects of a longer context: fewer slots fit, and each step
    streams more KV per slot.

    Returns:
        The figure; one line per group of runs.
    """
    return _throughput(
        results, _context, group_by, "context (tokens)", "Decode throughput vs context"
    )


@dataclasses.dataclass(frozen=True)
class KernelPoint:
    """One kernel of a step, as the roofline places it (per socket, per step)."""

    name: str
    flops: float
    hbm_bytes: float
    ddr_bytes: float
    time_s: float

    @property
    def offchip_bytes(self) -> float:
        return self.hbm_bytes + self.ddr_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte of off-chip (HBM + DDR) traffic."""
        return self.flops / self.offchip_bytes if self.offchip_bytes else float("inf")

    @property
    def achieved_flops(self) -> float:
        return self.flops / self.time_s if self.time_s else 0.0


def kernel_points(step: Mapping[str, Any]) -> list[KernelPoint]:
    """The kernels of a step timing as ``rdu_sim.studies.decode_step_timing`` returns it:
    ``kernels``, a list of records with ``name``, ``flops`` (matrix FLOPs), ``bytes_by_tier``
    (``hbm`` and ``ddr`` count; SRAM traffic is on-chip) and ``time_s``, per socket."""
    if not isinstance(step, Mapping) or not isinstance(step.get("kernels"), Sequence):
        raise PlotInputError(
            "results have no step timing ('kernels' with flops, bytes_by_tier and time_s); "
            "plot the roofline from a workload YAML instead"
        )
    points = []
    for i, kernel in enumerate(step["kernels"]):
        if not isinstance(kernel, Mapping):
            raise PlotInputError(f"kernel {i} of the step timing is not a record: {kernel!r}")
        name = str(kernel.get("name", f"kernel{i}"))
        tiers = kernel.get("bytes_by_tier", {})
        if not isinstance(tiers, Mapping):
            raise PlotInputError(f"bytes_by_tier of kernel {name!r} must map tiers to bytes")
        for key in ("flops", "time_s"):
            if key not in kernel:
                raise PlotInputError(f"kernel {name!r} of the step timing has no {key!r}")
        points.append(
            KernelPoint(
                name=name,
                flops=number(kernel["flops"], f"flops of kernel {name!r}"),
                hbm_bytes=number(tiers.get("hbm", 0.0), f"hbm bytes of kernel {name!r}"),
                ddr_bytes=number(tiers.get("ddr", 0.0), f"ddr bytes of kernel {name!r}"),
                time_s=number(kernel["time_s"], f"time_s of kernel {name!r}"),
            )
        )
    if not points:
        raise PlotInputError("the step timing has no kernels")
    return points


ROOFS = ("peak_flops", "hbm_bandwidth", "ddr_bandwidth")
"""A socket's roofs, FLOP/s and bytes/s (``ddr_bandwidth`` optional)."""


def _roofs(hardware: Any) -> dict[str, float]:
    """Peak FLOP/s and HBM/DDR bytes/s of one socket from a HardwareConfig or a mapping."""
    socket = getattr(hardware, "socket", None)
    if socket is not None:
        return {
            "peak_flops": float(socket.peak_flops),
            "hbm_bandwidth": float(socket.hbm.bandwidth),
            "ddr_bandwidth": float(socket.ddr.bandwidth),
        }
    if not isinstance(hardware, Mapping):
        raise PlotInputError("hardware must be a HardwareConfig or a mapping of roofs")
    for key in ROOFS[:2]:
        if key not in hardware:
            raise PlotInputError(f"the hardware roofs have no {key!r}")
    return {key: number(hardware.get(key, 0.0), key) for key in ROOFS}


def roofline(step: Mapping[str, Any], hardware: Any = None, *, title: str | None = None) -> Figure:
    """A roofline of one step: each kernel at (FLOP per off-chip byte, achieved FLOP/s).

    Roofs of one socket: compute (peak matrix FLOP/s) and HBM (bandwidth x intensity); a DDR
    roof is added when some kernel reads DDR. A kernel below the roofs at its intensity loses
    time to something else (launch and sync, collectives, skinny GEMM tiles); a kernel on
    the HBM roof is bandwidth bound. Marker area is the kernel's share of the step time.
    Kernels without FLOPs (an embedding gather) or without off-chip bytes cannot be placed
    on log axes and are listed under the plot instead.

    Args:
        step: the step timing ``rdu_sim.studies.decode_step_timing`` returns (kernels with
            flops, bytes_by_tier, time_s).
        hardware: a ``HardwareConfig`` or a mapping with ``peak_flops``, ``hbm_bandwidth``
            and optionally ``ddr_bandwidth`` (per socket, FLOP/s and bytes/s); default: the
            step's own ``hardware`` entry.

    Returns:
        The figure: one line per roof, one scatter collection per placed kernel.
    """
    points = kernel_points(step)
    if hardware is None:
        hardware = step.get("hardware")
        if hardware is None:
            raise PlotInputError(
                "roofline needs the hardware's roofs: pass hardware= or a "
                "step with a 'hardware' entry"
            )
    roofs = _roofs(hardware)
    placed = [p for p in points if p.flops > 0 and p.offchip_bytes > 0 and p.time_s > 0]
    skipped = [p.name for p in points if p not in placed]
    fig, (ax,) = new_figure(width=7.2, height=4.8)
    peak = roofs["peak_flops"]
    intensities = [p.intensity for p in placed]
    ridge = peak / roofs["hbm_bandwidth"]
    lo = min([*intensities, ridge / 100]) / 2
    hi = max([*intensities, ridge * 10]) * 2
    x = np.geomspace(lo, hi, 200)
    tflops = 1e12
    ax.plot(
        x,
        np.minimum(peak, roofs["hbm_bandwidth"] * x) / tflops,
        color="black",
        label=f"HBM roof ({human.bandwidth(roofs['hbm_bandwidth'])}) "
        f"and compute roof ({human.flops(peak)})",
    )
    if roofs["ddr_bandwidth"] > 0 and any(p.ddr_bytes > 0 for p in placed):
        ax.plot(
            x,
            np.minimum(peak, roofs["ddr_bandwidth"] * x) / tflops,
            color="gray",
            linestyle="--",
            label=f"DDR roof ({human.bandwidth(roofs['ddr_bandwidth'])})",
        )
    total_time = sum(p.time_s for p in points) or 1.0
    for i, p in enumerate(placed):
        share = p.time_s / total_time
        ax.scatter(
            [p.intensity],
            [p.achieved_flops / tflops],
            s=30 + 600 * share,
            color=color_for(p.name, i),
            alpha=0.8,
            edgecolors="black",
            linewidths=0.5,
            label=f"{p.name} ({human.percent(share, 0)} of step)",
            zorder=3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM + DDR traffic)")
    ax.set_ylabel("achieved TFLOP/s per socket")
    ax.grid(True, which="both", alpha=0.2)
    legend = ax.legend(fontsize=8, **BELOW)
    for handle in legend.legend_handles:  # one marker size in the legend, whatever the share
        if isinstance(handle, PathCollection):
            handle.set_sizes([40.0])
    if skipped:
        ax.text(
            0.01,
            0.99,
            # wrapped: a split layer (fusion none or partial) leaves many kernels unplaced
            textwrap.fill(
                "not placed (no FLOPs or no off-chip bytes): " + ", ".join(skipped), width=110
            ),
            transform=ax.transAxes,
            va="top",
            fontsize=7,
            color="dimgray",
        )
    default = with_subject(
        "Roofline of one decode step (per socket)",
        workload=str(step.get("workload") or ""),
        model=str(step.get("model") or ""),
        hardware=str(step.get("system") or ""),
    )
    figure_title(fig, title or default)
    settings = step.get("settings") or {}
    note_settings(fig, [RunPoint(settings=settings if isinstance(settings, Mapping) else {})])
    return fig
