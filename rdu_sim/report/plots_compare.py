"""The compare plot: one workload under several variants (hardware systems, values of a
varied field), side by side.

It reads what ``rdu-sim compare --json`` prints (a dict with ``columns``), a list of those
(the same variants at several batch sizes, as ``rdu_sim.compare.compare_batches`` returns
them once turned into dicts), or ``Comparison`` objects. Four panels: decode step time
(each bar marked with what binds it), tokens/s per user, tokens/s for one model instance, and
share of peak HBM bandwidth. One comparison gives bars (a variant with no timing is a gap
labelled why: the model does not fit, an invalid combination, a system not run); several
give a line per variant over the batch size. A variant is named by its ``label`` (what
differs), or its hardware in JSON written before labels. The title names the workload and
model the comparisons carry (``workload``, ``model``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rdu_sim import human
from rdu_sim.report.bound import LABELS
from rdu_sim.report.console import not_timed
from rdu_sim.report.plots_data import PlotInputError, number, with_subject
from rdu_sim.report.plots_style import (
    BESIDE,
    color_for,
    figure_title,
    new_figure,
    use_token_axis,
)

__all__ = ["PANELS", "compare_plot", "comparisons"]

PANELS: tuple[tuple[str, str, float], ...] = (
    ("step_s", "decode step (ms)", 1e3),
    ("tokens_per_s_per_user", "tokens/s per user", 1.0),
    ("tokens_per_s", "tokens/s (one model instance)", 1.0),
    ("hbm_bandwidth_fraction", "share of peak HBM bandwidth (%)", 100.0),
)
"""(column field, axis label, scale) of each panel."""


def _subject(results: Any) -> tuple[str, str]:
    """The one workload and the one model the comparisons name ('' where they name none or
    several)."""
    items = [results] if isinstance(results, Mapping) or hasattr(results, "to_dict") else results
    found: dict[str, set[str]] = {"workload": set(), "model": set()}
    for item in items if isinstance(items, Sequence) else ():
        data = item.to_dict() if hasattr(item, "to_dict") else item
        for key, seen in found.items():
            value = data.get(key) if isinstance(data, Mapping) else None
            if value:
                seen.add(str(value))
    workload, model = (next(iter(v)) if len(v) == 1 else "" for v in found.values())
    return workload, model


def comparisons(results: Any) -> list[list[dict[str, Any]]]:
    """The columns of each comparison in ``results`` (see the module docstring)."""
    if hasattr(results, "to_dict"):
        results = results.to_dict()
    if isinstance(results, Mapping):
        results = [results]
    if not isinstance(results, Sequence) or isinstance(results, str) or not results:
        raise PlotInputError(
            "the compare plot reads `rdu-sim compare --json` output (a dict with 'columns') "
            "or a list of them"
        )
    out = []
    for item in results:
        data = item.to_dict() if hasattr(item, "to_dict") else item
        columns = data.get("columns") if isinstance(data, Mapping) else None
        if not isinstance(columns, list) or not columns:
            raise PlotInputError("each comparison needs a non-empty 'columns' list")
        for column in columns:
            if not isinstance(column, Mapping) or "hardware" not in column or "fits" not in column:
                raise PlotInputError("each column needs 'hardware' and 'fits'")
        out.append([dict(c) for c in columns])
    return out


def compare_plot(results: Any) -> Figure:
    """Bars for one comparison, lines over the batch size for several."""
    groups = comparisons(results)
    fig, axes = new_figure(2, 2, width=5.2, height=3.6)
    if len(groups) == 1:
        _bars(axes, groups[0])
    else:
        _lines(axes, groups)
    workload, model = _subject(results)
    figure_title(fig, with_subject("Decode step compared", workload=workload, model=model))
    return fig


def _name(column: Mapping[str, Any]) -> str:
    """A variant's name: what differs (its label), else its hardware."""
    return str(column.get("label") or column["hardware"])


def _value(column: Mapping[str, Any], key: str, scale: float) -> float | None:
    raw = column.get(key)
    return None if raw is None or not column["fits"] else scale * number(raw, key)


def _bars(axes: list[Axes], columns: list[dict[str, Any]]) -> None:
    names = [_name(c) for c in columns]
    for ax, (key, label, scale) in zip(axes, PANELS, strict=True):
        for i, column in enumerate(columns):
            value = _value(column, key, scale)
            if value is None:
                ax.bar(i, 0, color="none")
                said = not_timed(bool(column.get("invalid")), bool(column.get("unsupported")))
                ax.annotate(said, (i, 0), ha="center", va="bottom", fontsize=8)
            else:
                ax.bar(i, value, color=color_for(names[i], i))
                text = human.number(value)
                if key == "step_s" and column.get("bound") in LABELS:
                    text += f"\n{LABELS[column['bound']]}-bound"
                ax.annotate(text, (i, value), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label)
        ax.margins(y=0.15)
    batch = next((c.get("batch") for c in columns if c.get("batch")), None)
    if batch is not None:
        axes[0].set_title(f"batch {batch}", fontsize=9, loc="left")


def _lines(axes: list[Axes], groups: list[list[dict[str, Any]]]) -> None:
    names = list(dict.fromkeys(_name(c) for g in groups for c in g))
    batches: list[float] = []
    for ax, (key, label, scale) in zip(axes, PANELS, strict=True):
        for i, name in enumerate(names):
            xs, ys = [], []
            for group in groups:
                for column in group:
                    value = _value(column, key, scale)
                    if _name(column) == name and value is not None:
                        xs.append(number(column["batch"], "batch"))
                        ys.append(value)
            batches += xs
            ax.plot(xs, ys, marker="o", color=color_for(name, i), label=name)
        ax.set_ylabel(label)
        ax.set_xlabel("batch slots")
        if batches:
            use_token_axis(ax, batches)
    axes[0].legend(fontsize=8, **BESIDE)
