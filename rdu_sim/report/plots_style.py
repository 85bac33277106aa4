"""Figure plumbing shared by the plots: figures without pyplot, colours, token-count ticks.

Figures are made with ``matplotlib.figure.Figure`` directly, never ``pyplot``: no GUI backend
is touched, nothing is registered globally (a sweep or a test making hundreds of figures
leaks none, and gets no "too many open figures" warning), and ``savefig`` renders through
Agg for PNG. Notebooks display the returned Figure like any other.
"""

from __future__ import annotations

import math
import textwrap
import zlib
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import Bbox

from rdu_sim import human
from rdu_sim.report.plots_data import RunPoint, settings_note

__all__ = [
    "BELOW",
    "BESIDE",
    "PART_COLORS",
    "POLICY_COLORS",
    "STACK_COLORS",
    "color_for",
    "figure_title",
    "legend_outside",
    "legible_xticks",
    "line_style",
    "new_figure",
    "note_settings",
    "plain_log2",
    "plot_steady",
    "stack_color",
    "use_token_axis",
    "whole_run_key",
]

PART_COLORS = {
    "weights": "#4c72b0",
    "kv": "#dd8452",
    "activations": "#55a868",
    "free": "#e5e5e5",
}
"""Colours of the stacked memory parts (free space is pale so the used parts stand out)."""

POLICY_COLORS = {
    "full": "#c44e52",
    "snapstream": "#4c72b0",
    "streamingllm": "#8172b3",
    "snapkv": "#937860",
}
"""A fixed colour per KV policy, so full vs SnapStream read the same in every plot."""

_CYCLE = (
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
    "#ccb974",
    "#64b5cd",
)


STACK_COLORS = {
    "sambastack-2025": "#4c72b0",
    "sambastudio-2024": "#55a868",
    "sglang": "#8172b3",
    "tensorrt-llm": "#c44e52",
    "tensorrt-llm-2024": "#dd8452",
    "vllm-2024": "#64b5cd",  # light blue: apart from the TensorRT-LLM stacks' orange and red
}
"""A fixed colour per shipped serving stack (stacks/), so a stack reads the same in every
plot whatever else the plot holds (tests/test_plots_deployment.py checks every shipped stack
has one)."""


def stack_color(stack: str) -> str:
    """The stack's colour: :data:`STACK_COLORS` for a shipped stack, else a colour of the
    cycle the shipped ones leave, chosen by the name (the same in every plot)."""
    if stack in STACK_COLORS:
        return STACK_COLORS[stack]
    spare = [c for c in _CYCLE if c not in STACK_COLORS.values()]
    return spare[zlib.crc32(stack.encode()) % len(spare)]


def color_for(label: str, index: int) -> str:
    """The policy's colour when ``label`` (``model · policy``) names one policy, else the
    ``index``-th colour of the cycle."""
    return _policy_color(label) or _CYCLE[index % len(_CYCLE)]


def _policy_color(label: str) -> str | None:
    """The colour of the one KV policy ``label`` names, else None."""
    named = [POLICY_COLORS[part] for part in label.split(" · ") if part in POLICY_COLORS]
    return named[0] if len(named) == 1 else None


_CYCLE_DASHES = ("-", "--", ":", "-.")
"""The dash of each round of :data:`_CYCLE`: line 11 is line 1's colour, dashed, so no two
of the first 40 lines look alike."""


def _cycle_dash(index: int) -> str:
    return _CYCLE_DASHES[(index // len(_CYCLE)) % len(_CYCLE_DASHES)]


_POLICY_DASHES = {"full": "--", "streamingllm": ":", "snapkv": "-."}


def line_style(label: str, index: int, labels: Sequence[str]) -> dict[str, Any]:
    """Colour and dash of one line among ``labels`` (``model · policy`` legend labels).

    When the lines span several models and policies, the colour says the model and the dash
    the policy (full attention dashed, SnapStream solid), so pairs read at a glance;
    otherwise :func:`color_for`, dashed from the cycle's second round on (``_CYCLE_DASHES``).
    """

    def split(text: str) -> tuple[str, str]:
        parts = text.split(" · ")
        policy = parts[-1] if parts[-1] in POLICY_COLORS else ""
        rest = " · ".join(parts[:-1] if policy else parts)
        return rest, policy

    prefixes = list(dict.fromkeys(split(lab)[0] for lab in labels))
    prefix, policy = split(label)
    if len(prefixes) > 1 and policy:
        return {
            "color": _CYCLE[prefixes.index(prefix) % len(_CYCLE)],
            "linestyle": _POLICY_DASHES.get(policy, "-"),
        }
    named = _policy_color(label)
    if named is not None:
        return {"color": named, "linestyle": "-"}
    return {"color": _CYCLE[index % len(_CYCLE)], "linestyle": _cycle_dash(index)}


BESIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0}
"""Where an axes' own legend goes: to the right of the axes, top-aligned (constrained
layout makes room), never over the data."""


BELOW: dict[str, Any] = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.15)}
"""Where a legend with long entries goes: under the axes and their x label."""


def figure_title(fig: Figure, text: str) -> None:
    """The figure's title above everything (legends outside the axes included), wrapped to
    the figure's width so a long one (workload, model, hardware) is never cut off."""
    width = fig.get_figwidth()
    wrapped = textwrap.fill(text, width=max(40, int(width * 9)), break_on_hyphens=False)
    fig.suptitle(wrapped, fontsize=11)


LONG_LABEL = 30
"""Characters beyond which a legend goes under the axes rather than beside them (beside,
long labels would squeeze the axes)."""


def legend_outside(fig: Figure, ax: Axes, *, fontsize: float = 8) -> None:
    """The legend of ``ax``'s labelled lines outside the axes, so it never covers data:
    beside them, or under them when a label has a long line; the figure grows by the
    legend's size (``_make_room``), so the axes keep theirs however many lines there are."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # a label of several lines is as wide as its longest
        below = max(len(line) for label in labels for line in label.splitlines() or [""]) > (
            LONG_LABEL
        )
        legend = fig.legend(
            handles,
            labels,
            loc="outside lower center" if below else "outside right center",
            fontsize=fontsize,
            handlelength=3,  # long enough to show a line's dash beside its marker
        )
        _make_room(fig, legend, below=below)


LEGEND_PAD_IN = 0.25
"""Inches the figure grows beyond a legend's own size (the layout's padding around it)."""


def _make_room(fig: Figure, legend: Any, *, below: bool) -> None:
    """Grow ``fig`` by ``legend``'s height (under the axes) or width (beside them), and to
    the legend's other side when it is larger than the figure: constrained layout takes a
    legend's room from the axes, which a 16-line legend collapsed to nothing."""
    box = legend.get_window_extent()
    wide, tall = box.width / fig.dpi + LEGEND_PAD_IN, box.height / fig.dpi + LEGEND_PAD_IN
    width, height = fig.get_size_inches()
    if below:
        fig.set_size_inches(max(width, wide), height + tall)
    else:
        fig.set_size_inches(width + wide, max(height, tall))


TICK_GAP_PX = 4.0
"""Pixels (at the figure's dpi) that must separate two tick labels side by side."""


def _labels(ax: Axes) -> list[Any]:
    """``ax``'s x tick labels that show text, left to right."""
    shown = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
    return sorted(shown, key=lambda t: t.get_window_extent().x0)


def legible_xticks(fig: Figure, ax: Axes) -> None:
    """Keep ``ax``'s x tick labels apart: as they are when none touches the next; else
    turned 45 degrees; and where even turned they sit closer than a line of text, a label
    is shown only a line from the last one shown (left to right), so values close together
    on a linear axis (2053, 3072, 4096 of 16384) do not run into one number.
    Measured on the laid-out figure (``Figure.draw_without_rendering``)."""
    fig.draw_without_rendering()
    labels = _labels(ax)
    boxes = [t.get_window_extent() for t in labels]
    if all(a.x1 + TICK_GAP_PX <= b.x0 for a, b in pairwise(boxes)):
        return
    for label in labels:
        label.set_rotation(45)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
    # turned 45 degrees, labels a horizontal d apart are d / sqrt(2) apart across their
    # lines: a line of text (pixels) needs d of sqrt(2) lines
    apart = math.sqrt(2) * max(t.get_fontsize() for t in labels) * fig.dpi / 72
    fig.draw_without_rendering()
    last = -math.inf
    for label in _labels(ax):  # left to right: a label a line of text from the last kept
        corner = label.get_window_extent().x1
        label.set_visible(corner - last >= apart)
        if label.get_visible():
            last = corner


def plain_log2(ax: Axes, axis: str = "y") -> None:
    """A log-2 axis labelled with plain numbers (32, 64, 128) instead of powers of two."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log", base=2)
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


class SteadyLayout(ConstrainedLayoutEngine):
    """Constrained layout with each axes' position rounded to 1e-9 of the figure: the
    layout's iterations move an axes by a last bit from one draw to the next, and an SVG's
    clip-path ids hash the exact position, so two saves of one figure differed."""

    def execute(self, fig: Any) -> Any:
        result = super().execute(fig)
        for ax in fig.axes:
            bounds = ax.get_position(original=True).bounds
            ax._set_position(Bbox.from_bounds(*(round(v, 9) for v in bounds)))
        return result


def new_figure(
    rows: int = 1, cols: int = 1, *, width: float = 6.4, height: float = 4.2, sharex: bool = False
) -> tuple[Figure, list[Axes]]:
    """A figure of ``rows`` x ``cols`` axes (flattened, row-major), constrained layout;
    ``width`` and ``height`` are per axes."""
    fig = Figure(figsize=(width * cols, height * rows), layout=SteadyLayout())
    grid = fig.subplots(rows, cols, squeeze=False, sharex=sharex)
    return fig, [ax for row in grid for ax in row]


def use_token_axis(ax: Axes, values: Sequence[float], axis: str = "x") -> None:
    """Log-2 scale with a tick at each value, labelled 8k, 32k, ... (contexts, batch sizes)."""
    ticks = sorted({float(v) for v in values if v > 0})
    target = ax.xaxis if axis == "x" else ax.yaxis
    if len(ticks) > 1:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_ticks(ticks)
    target.set_major_formatter(FuncFormatter(lambda v, _pos: human.tokens(v)))
    target.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))


def note_settings(
    fig: Figure,
    runs: Sequence[RunPoint],
    *,
    counts: Sequence[str] = (),
    asides: Mapping[str, str] | None = None,
) -> None:
    """Print under the figure what it counts (``counts``, a sentence each) and what its
    points changed on top of their workload (a study's ``settings``, with ``asides``: see
    ``rdu_sim.report.plots_data.settings_note``), so a plot never shows something ``rdu-sim
    run`` would not do without saying so."""
    note = settings_note(runs, asides)
    lines = [*counts, *([note] if note is not None else [])]
    if lines:
        width = max(40, int(fig.get_figwidth() * 17))  # characters of 7-point text per line
        text = "\n".join(textwrap.fill(line, width) for line in lines)
        fig.supxlabel(text, fontsize=7, color="dimgray")


WHOLE_RUN_LABEL = "faint, x: whole run (ramp-up and drain included)"
NO_WINDOW_LABEL = "hollow: no steady window (at the whole run's rate)"


def plot_steady(
    ax: Axes,
    xs: Sequence[float],
    steady: Sequence[float | None],
    whole: Sequence[float | None],
    *,
    label: str,
    **style: Any,
) -> bool:
    """One throughput line over the steady window (the slots kept full, ``steady``), the
    whole run's rate beside it faint with x markers (its ramp-up and drain included), and a
    hollow marker at the whole-run rate of a point without a steady window. Returns whether
    any point was hollow (for :func:`whole_run_key`)."""
    solid = [(x, s) for x, s in zip(xs, steady, strict=True) if s is not None]
    ax.plot([p[0] for p in solid], [p[1] for p in solid], marker="o", label=label, **style)
    faint = [(x, w) for x, w in zip(xs, whole, strict=True) if w is not None]
    if faint:
        ax.plot(
            [p[0] for p in faint],
            [p[1] for p in faint],
            marker="x",
            linewidth=1,
            alpha=0.45,
            **style,
        )
    hollow = [(x, w) for x, s, w in zip(xs, steady, whole, strict=True) if s is None and w]
    if hollow:
        ax.plot(
            [p[0] for p in hollow],
            [p[1] for p in hollow],
            linestyle="none",
            marker="o",
            markerfacecolor="none",
            color=style.get("color"),
        )
    return bool(hollow)


def whole_run_key(ax: Axes, hollow: bool) -> None:
    """Legend entries saying what the faint lines (and hollow markers) of
    :func:`plot_steady` are."""
    ax.plot([], [], marker="x", linewidth=1, alpha=0.45, color="gray", label=WHOLE_RUN_LABEL)
    if hollow:
        hollow_key(ax, NO_WINDOW_LABEL)


def hollow_key(ax: Axes, label: str) -> None:
    """A legend entry for a plot's hollow markers, saying what they are (``label``)."""
    ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none", color="gray", label=label)
