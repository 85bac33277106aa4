"""The speculation plots (``rdu-sim plot speculation`` and ``crossover``) and the sweep rule
they rely on: a metric inside a section a point does not have (``speculation: null``) is
stored as null, so plain and speculative points share one sweep.

Synthetic sweep frames pin the series and the crossover's arithmetic; one small real sweep
of the 70B workload (plain and k = 4 at batch 1 and 128) runs the whole path: sweep, SQLite,
plot.
"""

from __future__ import annotations

import io
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from rdu_sim.cli.main import cli
from rdu_sim.report import plots
from rdu_sim.report.plots_data import PlotInputError, as_runs, lookup
from rdu_sim.report.plots_speculation import crossover_batch
from rdu_sim.serving.acceptance import expected_tokens_per_round
from rdu_sim.sweep import load, run_sweep
from rdu_sim.sweep.worker import select

REPO = Path(__file__).resolve().parents[1]
SPECDEC = REPO / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
NAN = float("nan")


def render(kind: str, results: Any) -> Figure:
    """The figure of ``kind``, saved as PNG with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.plot(kind, results)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:4] == b"\x89PNG"
    return fig


# ------------------------------------------------------------------- the sweep's null rule


def test_a_metric_inside_a_null_section_is_null_and_a_typo_is_missing() -> None:
    flat = {"speculation": None, "accepted_tokens_per_step": None, "batch_slots": 1}
    kept, missing = select(
        flat, ("speculation.decoding.draft_tokens", "accepted_tokens_per_step", "batch_slot")
    )
    assert kept == {"speculation.decoding.draft_tokens": None, "accepted_tokens_per_step": None}
    assert missing == ("batch_slot",)
    # a section that is there but lacks the leaf: still missing
    kept, missing = select({"speculation.draft": "x"}, ("speculation.decoding.k",))
    assert kept == {} and missing == ("speculation.decoding.k",)


def test_an_empty_sweep_cell_is_missing() -> None:
    (run,) = as_runs(pd.DataFrame([{"speculation.decoding.draft_tokens": NAN, "x": 1.0}]))
    assert lookup(run, "speculation.decoding.draft_tokens", None) is None
    assert lookup(run, "x") == 1.0


# ---------------------------------------------------------------------------- crossover


def test_crossover_batch_interpolates_on_log2_batch() -> None:
    # speedup 1.5 at batch 16, 0.5 at 64: halfway in log2 (4 -> 6) is 5, batch 32
    assert crossover_batch([16, 64], [1.5, 0.5]) == pytest.approx(32.0)
    # 1.2 at 8, 0.9 at 16: two thirds of the way from log2 3 to 4
    assert crossover_batch([4, 8, 16], [2.0, 1.2, 0.9]) == pytest.approx(2 ** (3 + 2 / 3))
    assert crossover_batch([1, 2, 4], [2.0, 1.5, 1.1]) is None  # always helps
    assert crossover_batch([1, 2], [0.9, 0.8]) is None  # never helped
    assert crossover_batch([1, 2], [1.0, 0.5]) == pytest.approx(1.0)  # exactly 1 at batch 1


def crossover_frame() -> pd.DataFrame:
    """Rows as the crossover sweep stores them: plain points have NaN speculation cells."""
    rows = []
    for batch in (1, 4, 16, 64):
        plain = 100.0 * batch
        rows.append(
            {
                "batch_slots": batch,
                "steady_decode_tokens_per_s": plain,
                "speculation.decoding.draft_tokens": NAN,
                "accepted_tokens_per_step": NAN,
            }
        )
        for k, speedups in ((2, (2.0, 1.5, 1.2, 0.9)), (8, (3.0, 1.8, 0.6, 0.4))):
            rows.append(
                {
                    "batch_slots": batch,
                    "steady_decode_tokens_per_s": plain * speedups[(1, 4, 16, 64).index(batch)],
                    "speculation.decoding.draft_tokens": float(k),
                    "accepted_tokens_per_step": 2.5,
                }
            )
    return pd.DataFrame(rows)


def test_crossover_plot_draws_each_k_and_marks_where_it_stops_helping() -> None:
    fig = render("crossover", crossover_frame())
    rate_ax, speed_ax = fig.axes
    labels = [line.get_label() for line in rate_ax.lines]
    assert labels == ["no speculation", "k = 2", "k = 8"]
    assert list(rate_ax.lines[0].get_ydata()) == [100.0, 400.0, 1600.0, 6400.0]
    k8 = next(line for line in speed_ax.lines if line.get_label() == "k = 8")
    np.testing.assert_allclose(k8.get_ydata(), [3.0, 1.8, 0.6, 0.4])
    # k = 2 crosses between 16 (1.2) and 64 (0.9): log2 4 + 0.2/0.3 x 2; k = 8 between 4 and 16
    k2_cross = 2 ** (4 + 0.2 / 0.3 * 2)
    k8_cross = 2 ** (2 + 0.8 / 1.2 * 2)
    title = speed_ax.get_title()
    assert f"k = 2 at batch {k2_cross:.0f}" in title and f"k = 8 at batch {k8_cross:.0f}" in title
    marks = sorted(line.get_xdata()[0] for line in speed_ax.lines if line.get_linestyle() == ":")
    assert marks == pytest.approx(sorted([k2_cross, k8_cross]))


def test_crossover_needs_both_kinds_of_point() -> None:
    frame = crossover_frame()
    with pytest.raises(PlotInputError, match="with and without speculation"):
        plots.plot("crossover", frame[frame["speculation.decoding.draft_tokens"].notna()])
    with pytest.raises(PlotInputError, match="with and without speculation"):
        plots.plot("crossover", frame[frame["speculation.decoding.draft_tokens"].isna()])


# ---------------------------------------------------------------- acceptance rate x k


def test_speculation_plot_puts_the_formula_beside_the_served_tokens() -> None:
    rows = [
        {
            "speculation.decoding.acceptance_rate_mean": a,
            "speculation.decoding.draft_tokens": k,
            "accepted_tokens_per_step": expected_tokens_per_round(a, k) + 0.01,
            "user_tokens_per_s.p50": 100.0 * k * a,
        }
        for a in (0.5, 0.9)
        for k in (1, 2, 4)
    ]
    fig = render("speculation", pd.DataFrame(rows))
    tokens_ax, rate_ax = fig.axes
    assert len(tokens_ax.lines) == 4  # served markers and the dashed formula, per rate
    formula = [line for line in tokens_ax.lines if line.get_linestyle() == "--"]
    np.testing.assert_allclose(
        formula[1].get_ydata(), [expected_tokens_per_round(0.9, k) for k in (1, 2, 3, 4)]
    )
    assert [line.get_label() for line in rate_ax.lines] == ["a = 0.5", "a = 0.9"]
    with pytest.raises(PlotInputError, match="no speculative points"):
        plots.plot("speculation", pd.DataFrame([{"speculation.decoding.draft_tokens": NAN}]))


def test_cli_refuses_a_sweep_spec_as_input(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    spec = REPO / "workloads" / "sweeps" / "speculation-crossover.yaml"
    result = CliRunner().invoke(cli, ["plot", "crossover", str(spec), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "rdu-sim sweep workloads/sweeps/speculation-crossover.yaml" in result.output
    assert not out.exists()


# ------------------------------------------------------------------- a real, small sweep


def test_a_real_sweep_plots_speculation_helping_then_hurting(tmp_path: Path) -> None:
    spec = tmp_path / "crossover.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            name: small-crossover
            base: {SPECDEC}
            set:
              serving.prompt_tokens: 128
              serving.output_tokens: 64
              serving.max_context: 1024
            zip:
              - serving.batch_slots: [1, 128]
                serving.requests: [2, 256]
            axes:
              speculation:
                - null
                - {{draft: llama-3.2-1b, decoding: {{draft_tokens: 4, acceptance: 0.8}}}}
            metrics:
              - batch_slots
              - steady_decode_tokens_per_s
              - decode_tokens_per_s
              - accepted_tokens_per_step
              - speculation.decoding.draft_tokens
            """
        )
    )
    summary = run_sweep(spec, db=tmp_path / "c.sqlite", workers=1)
    assert summary.done == 4
    frame = load(tmp_path / "c.sqlite")
    plain = frame["speculation.decoding.draft_tokens"].isna()
    assert plain.sum() == 2 and frame.loc[plain, "accepted_tokens_per_step"].isna().all()
    assert (frame.loc[~plain, "accepted_tokens_per_step"] > 2).all()
    fig = render("crossover", frame)
    speedup = fig.axes[1].lines[0].get_ydata()
    assert speedup[0] > 1.5 and speedup[1] < 1  # helps at batch 1, hurts at 128
    (mark,) = [line for line in fig.axes[1].lines if line.get_linestyle() == ":"]
    assert 1 < mark.get_xdata()[0] < 128
    assert f"k = 4 at batch {mark.get_xdata()[0]:.0f}" in fig.axes[1].get_title()
