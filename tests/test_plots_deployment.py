"""The deployment plot: a panel per machine, every measured row at the batch it ran, the
simulator's speed over the measured (the same reading for seconds and for tokens/s), from
both JSON forms it reads, and one clear error for anything else."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from rdu_sim.cli.main import cli
from rdu_sim.config import shipped
from rdu_sim.report import plots
from rdu_sim.report.plots_data import PlotInputError
from rdu_sim.report.plots_deployment import deployment_rows
from rdu_sim.report.plots_style import STACK_COLORS, stack_color


def _point(
    hardware: str, group: str, batch: int | None, slots: int, unit: str, m: float, s: float
) -> dict[str, Any]:
    return {
        "hardware": hardware,
        "group": group,
        "batch": batch,
        "batch_slots": slots,
        "unit": unit,
        "measured": m,
        "simulated": s,
    }


SUITE = {
    "points": [
        _point("sn40l-8", "sn40l-8 · sambastudio-2024", 1, 1, "s", 1.0, 0.8),  # 1.25x faster
        _point("sn40l-8", "sn40l-8 · sambastudio-2024", 16, 16, "s", 2.0, 2.5),  # 1.25x slower
        _point("dgx-h100", "dgx-h100 · tensorrt-llm", 64, 64, "s", 3.0, 3.0),
        _point(
            "dgx-h100", "dgx-h100 · tensorrt-llm · full-load", None, 2299, "tokens/s", 100.0, 50.0
        ),
    ],
    "systems": [],
}


def _render(results: Any) -> Figure:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.plot("deployment", results)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    return fig


def test_a_panel_per_machine_and_the_speed_reads_alike_for_both_units() -> None:
    fig = _render(SUITE)
    assert len(fig.axes) == 2
    second, first = fig.axes  # panels in the machines' name order: dgx-h100 first
    assert first.get_title(loc="left").startswith("sn40l-8: 2 rows, batch 1 to 16")
    assert second.get_title(loc="left").startswith("dgx-h100: 2 rows, batch 64 to 2299")
    points = sorted(
        (line.get_xdata()[0], round(line.get_ydata()[0], 12))
        for line in first.get_lines()
        if line.get_marker() == "o"
    )
    assert points == [(1, 1.25), (16, 0.8)]
    full = [line for line in second.get_lines() if line.get_marker() == "s"]
    assert [(line.get_xdata()[0], line.get_ydata()[0]) for line in full] == [(2299, 0.5)]
    assert "2.00x slower at batch 2299" in second.get_title(loc="left")
    rows = deployment_rows(SUITE)
    assert [r.method for r in rows] == ["batch", "batch", "batch", "full-load"]


def test_calibrates_fit_json_held_out_rows_hollow_and_figures_left_out() -> None:
    fit = {
        "targets": [
            {"measured": 1.0, "simulated": 1.1, "unit": "s", "batch_slots": 4, "held_out": True,
             "groups": {"hardware": "sn40l-8", "stack": "sambastudio-2024", "method": "batch"}},
            {"measured": 1.0, "simulated": 1.0, "unit": "s", "batch_slots": 1, "held_out": False,
             "groups": {"hardware": "sn40l-8", "stack": "sambastudio-2024", "method": "batch"}},
            {"measured": 4.3, "simulated": 1.5, "unit": "x", "batch_slots": 0, "held_out": False,
             "groups": {"figure": "decode_throughput_ratio"}},
        ]
    }  # fmt: skip
    fig = _render(fit)
    (ax,) = fig.axes
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    hollow = [line for line in markers if line.get_markerfacecolor() == "none"]
    assert len(markers) == 2 and len(hollow) == 1 and hollow[0].get_xdata()[0] == 4


@pytest.mark.parametrize(
    ("results", "words"),
    [
        ({"rows": []}, "expected what"),
        ({"points": "x"}, "must be a list"),
        ({"points": [1]}, "must be a mapping"),
        ({"points": [{**SUITE["points"][0], "measured": 0}]}, "must be positive"),  # type: ignore[dict-item]
        ({"points": [{**SUITE["points"][0], "simulated": "fast"}]}, "must be a number"),  # type: ignore[dict-item]
        ({"points": []}, "no measured row"),
        ("text", "expected deployment rows"),
        # what `rdu-sim validate --json` prints: a list of published figures
        (
            [{"name": "max_batch_ratio", "published": 4.0, "simulated": 4.0, "unit": "x"}],
            "plot them with `rdu-sim plot calibration`",
        ),
    ],
)
def test_what_is_not_deployment_rows_is_one_error(results: Any, words: str) -> None:
    with pytest.raises(PlotInputError, match=words):
        plots.plot("deployment", results)


def test_the_command_draws_it_and_refuses_a_workload(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_text(json.dumps(SUITE))
    out = tmp_path / "d.png"
    result = CliRunner().invoke(cli, ["plot", "deployment", str(data), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    workload = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"
    result = CliRunner().invoke(cli, ["plot", "deployment", str(workload), "-o", str(out)])
    assert result.exit_code == 2 and "validate --suite deployment --json" in result.output


def _colors(fig: Figure) -> dict[str, str]:
    """Each stack's colour, from the figure's legend."""
    (legend,) = fig.legends
    return {
        text.get_text(): handle.get_color()
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        if text.get_text() in STACK_COLORS
    }


def test_a_stack_has_one_colour_and_the_panels_one_order_whatever_the_rows() -> None:
    """The trial: SambaStudio was green in one plot and blue in another, as the stacks'
    colours and the panels followed the rows' order. Reversed rows draw the same figure."""
    forward = _render(SUITE)
    backward = _render({**SUITE, "points": SUITE["points"][::-1]})
    for fig in (forward, backward):
        assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == [
            "dgx-h100",
            "sn40l-8",
        ]
        assert _colors(fig) == {
            "sambastudio-2024": STACK_COLORS["sambastudio-2024"],
            "tensorrt-llm": STACK_COLORS["tensorrt-llm"],
        }
    assert set(STACK_COLORS) == set(shipped.names("stack"))  # every shipped stack has one
    assert len(set(STACK_COLORS.values())) == len(STACK_COLORS)
    assert stack_color("my-stack") == stack_color("my-stack") not in STACK_COLORS.values()


def test_held_out_rows_are_drawn_over_the_fitted_ones() -> None:
    """A fit's held-out rows (hollow) sat under the filled ones and were mostly hidden."""
    fit = {
        "targets": [
            {"measured": 1.0, "simulated": 1.0, "unit": "s", "batch_slots": b, "held_out": h,
             "groups": {"hardware": "sn40l-8", "stack": "sambastudio-2024", "method": "batch"}}
            for b, h in ((1, True), (1, False), (2, False), (2, True))
        ]
    }  # fmt: skip
    (ax,) = _render(fit).axes
    markers = [line for line in ax.get_lines() if line.get_marker() == "o"]
    hollow = [line.get_zorder() for line in markers if line.get_markerfacecolor() == "none"]
    filled = [line.get_zorder() for line in markers if line.get_markerfacecolor() != "none"]
    assert len(hollow) == len(filled) == 2 and min(hollow) > max(filled)
