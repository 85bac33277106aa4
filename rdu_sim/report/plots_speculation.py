"""Plots of speculative decoding, from sweeps (``workloads/sweeps/speculation-*.yaml``).

- :func:`acceptance_tradeoff` (kind ``speculation``): over a grid of acceptance rate x k,
  the tokens each target step emitted (markers) against the acceptance arithmetic's
  (1 - a^(k+1)) / (1 - a) (dashed), and the per-user rate, a line per acceptance rate.
- :func:`speculation_crossover` (kind ``crossover``): over batch sizes, with and without
  speculation, the decode throughput and speculation's speedup; where the speedup falls
  below 1 (interpolated on the log of the batch) is marked: speculation helps at small
  batch, where a step is bound by reading the weights, and hurts at large batch, where the
  verify step's k + 1 tokens per slot are compute the rounds do not repay.

Points are read by the JSON contract's names (``accepted_tokens_per_step``,
``speculation.decoding.*``, ``user_tokens_per_s.p50``, ``steady_decode_tokens_per_s``); a
point without a draft is plain decoding.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rdu_sim.report.plots_data import PlotInputError, RunPoint, as_runs, lookup, number, whole
from rdu_sim.report.plots_style import color_for, new_figure, use_token_axis
from rdu_sim.serving.acceptance import expected_tokens_per_round

__all__ = ["acceptance_tradeoff", "crossover_batch", "speculation_crossover"]

PLAIN = "no speculation"


def _draft_tokens(run: RunPoint) -> int | None:
    """k of a speculative point, None for plain decoding."""
    value = lookup(run, "speculation.decoding.draft_tokens", None)
    return None if value is None else whole(value, "speculation.decoding.draft_tokens")


def _metric(run: RunPoint, path: str) -> float:
    return number(lookup(run, path), path)


def acceptance_tradeoff(results: Any) -> Figure:
    """Tokens per target step and per-user tokens/s vs k, a line per acceptance rate."""
    runs = [r for r in as_runs(results) if _draft_tokens(r) is not None]
    if not runs:
        raise PlotInputError(
            "results have no speculative points ('speculation.decoding.draft_tokens'); "
            "plot a sweep of workloads/sweeps/speculation-acceptance-k.yaml"
        )
    groups: dict[float, list[tuple[int, float, float]]] = {}
    for run in runs:
        rate = round(_metric(run, "speculation.decoding.acceptance_rate_mean"), 6)
        k = _draft_tokens(run)
        assert k is not None
        groups.setdefault(rate, []).append(
            (k, _metric(run, "accepted_tokens_per_step"), _metric(run, "user_tokens_per_s.p50"))
        )
    fig, (tokens_ax, rate_ax) = new_figure(1, 2, width=5.6)
    for i, (rate, points) in enumerate(sorted(groups.items())):
        points.sort()
        ks = [p[0] for p in points]
        color = color_for(f"a={rate}", i)
        tokens_ax.plot(ks, [p[1] for p in points], "o", color=color, label=f"a = {rate:g}")
        grid = np.arange(1, max(ks) + 1)
        tokens_ax.plot(
            grid, [expected_tokens_per_round(rate, int(k)) for k in grid], "--", color=color
        )
        rate_ax.plot(ks, [p[2] for p in points], "o-", color=color, label=f"a = {rate:g}")
    tokens_ax.set_xlabel("draft tokens per round (k)")
    tokens_ax.set_ylabel("tokens per target step")
    tokens_ax.set_title("Served (markers) vs (1 - a^(k+1)) / (1 - a) (dashed)")
    rate_ax.set_xlabel("draft tokens per round (k)")
    rate_ax.set_ylabel("per-user tokens/s (p50)")
    rate_ax.set_title("Per-user rate")
    for ax in (tokens_ax, rate_ax):
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def crossover_batch(batches: Sequence[float], speedups: Sequence[float]) -> float | None:
    """The batch where a speedup first falls to 1, interpolated linearly in log2(batch)
    between the two batches around it; None when it never does (or starts below 1)."""
    for (b0, s0), (b1, s1) in itertools.pairwise(zip(batches, speedups, strict=True)):
        if s0 >= 1 > s1:
            x0, x1 = math.log2(b0), math.log2(b1)
            return float(2 ** (x0 + (s0 - 1) / (s0 - s1) * (x1 - x0)))
    return None


def _throughput(run: RunPoint) -> float:
    """The decode rate with the slots kept full when the run has one, else over the run."""
    steady = lookup(run, "steady_decode_tokens_per_s", None)
    if steady is not None:
        return number(steady, "steady_decode_tokens_per_s")
    return float(run.need("decode_tokens_per_s"))


def speculation_crossover(results: Any) -> Figure:
    """Decode throughput vs batch with and without speculation, and the speedup."""
    runs = as_runs(results)
    lines: dict[int | None, dict[int, float]] = {}
    for run in runs:
        lines.setdefault(_draft_tokens(run), {})[int(run.need("batch_slots"))] = _throughput(run)
    plain = lines.pop(None, None)
    if not plain or not lines:
        raise PlotInputError(
            "the crossover needs points with and without speculation at the same batch "
            "sizes; plot a sweep of workloads/sweeps/speculation-crossover.yaml"
        )
    fig, (rate_ax, speed_ax) = new_figure(1, 2, width=5.6)
    batches = sorted(plain)
    rate_ax.plot(batches, [plain[b] for b in batches], "o-", color="black", label=PLAIN)
    notes = []
    for i, (k, rates) in enumerate(sorted(lines.items(), key=lambda item: item[0] or 0)):
        shared = [b for b in batches if b in rates]
        color = color_for(f"k={k}", i)
        rate_ax.plot(shared, [rates[b] for b in shared], "o-", color=color, label=f"k = {k}")
        speedups = [rates[b] / plain[b] for b in shared]
        speed_ax.plot(shared, speedups, "o-", color=color, label=f"k = {k}")
        cross = crossover_batch(shared, speedups)
        if cross is not None:
            speed_ax.axvline(cross, color=color, linestyle=":", alpha=0.8)
            notes.append(f"k = {k} at batch {cross:.0f}")
    speed_ax.axhline(1.0, color="black", linewidth=1)
    rate_ax.set_ylabel("decode tokens/s (all users)")
    speed_ax.set_ylabel("speedup over plain decoding")
    rate_ax.set_title("Throughput vs batch")
    speed_ax.set_title(
        "Crossover (dotted): " + ", ".join(notes) if notes else "No crossover in range"
    )
    for ax in (rate_ax, speed_ax):
        use_token_axis(ax, batches)
        ax.set_xlabel("batch slots")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    rate_ax.set_ylim(bottom=0)
    return fig
