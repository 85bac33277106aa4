"""A sweep whose spec asks for a throughput keeps what bound it (``report.sweep_companions``).

A spec with ``metrics: [decode_tokens_per_s]`` stored the throughput alone, so its table and
plot showed Poisson arrivals at 1 req/s as the hardware's answer (8 slots beating 16) and
never said "offered load", which ``rdu-sim run`` of any of its points says. Now the row keeps
``throughput_bound`` and the decode step's bound, the table shows them with a note, and the
plot marks the points and says so over its axes. Rows stored before (without them) still
load, show and plot, without the note.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.report import plots
from rdu_sim.report.plots_sweep import OFFERED_LOAD_MARK
from rdu_sim.report.sweep_companions import COMPANIONS
from rdu_sim.sweep import load
from rdu_sim.sweep.worker import select

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

SPEC = f"""
name: sw
base: {BASE}
set: {{serving.requests: 12}}
axes:
  serving.batch_slots: [8, 16]
metrics: [decode_tokens_per_s]
"""


def _sweep(tmp_path: Path) -> tuple[Path, str]:
    spec = tmp_path / "sw.yaml"
    spec.write_text(textwrap.dedent(SPEC).lstrip("\n"))
    db = tmp_path / "sw.sqlite"
    result = CliRunner().invoke(cli, ["sweep", str(spec), "--workers", "1", "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db, result.stdout


def _plot_marks(db: Path) -> tuple[set[str], str]:
    figure = plots.sweep_plot(load(db))
    labels = {c.get_label() for c in figure.axes[0].collections}
    return labels, figure.axes[0].get_title(loc="left")


def test_a_throughput_spec_keeps_and_shows_what_bound_each_point(tmp_path: Path) -> None:
    db, out = _sweep(tmp_path)
    frame = load(db, metrics=["decode_tokens_per_s"])  # as the command (and --export) load it
    assert list(frame["throughput_bound"]) == ["offered_load", "offered_load"]
    assert list(frame["decode_step.bound"]) == ["hbm", "hbm"]
    columns = [c for c in frame.columns if c in ("decode_tokens_per_s", *COMPANIONS)]
    assert columns == ["decode_tokens_per_s", *COMPANIONS]  # the spec's metric first
    header = next(line for line in out.splitlines() if "decode_tokens_per_s" in line).split()
    assert header[-3:] == ["decode_tokens_per_s", "throughput_bound", "decode_step.bound"]
    assert out.count("offered_load") >= 2
    assert "throughput_bound offered_load: at 2 of 2 points the throughput is set by the " in (
        " ".join(out.split())
    )
    labels, note = _plot_marks(db)
    assert OFFERED_LOAD_MARK in labels and "HBM-bound" not in labels
    assert "2 of 2 points' decode_tokens_per_s is set by the offered load" in " ".join(note.split())


def test_rows_stored_without_the_bound_still_show_and_plot(tmp_path: Path) -> None:
    """A database written before the companions were kept: its rows are reused as they are
    (no rerun), and the table and plot show what they hold, with no offered-load note."""
    db, _ = _sweep(tmp_path)
    with sqlite3.connect(db) as con:
        for name in COMPANIONS:
            con.execute("UPDATE results SET metrics = json_remove(metrics, ?)", (f'$."{name}"',))
    assert "throughput_bound" not in load(db).columns
    _, out = _sweep(tmp_path)
    assert "nothing to run; 2 of 2 points already done" in out
    assert "throughput_bound" not in out and "offered" not in out
    labels, note = _plot_marks(db)
    assert not labels and "offered load" not in note


def test_select_keeps_a_throughputs_bound_and_never_misses_it() -> None:
    flat = {
        "decode_tokens_per_s": 350.0,
        "tpot_s.p50": 0.01,
        "throughput_bound": "offered_load",
        "decode_step.bound": "hbm",
        "decode_step.binds": True,
        "decode_step.step_s": 0.008,
    }
    kept, missing = select(flat, ("decode_tokens_per_s",))
    assert kept == {
        "decode_tokens_per_s": 350.0,
        "throughput_bound": "offered_load",
        "decode_step.bound": "hbm",
        "decode_step.binds": True,
    }
    assert missing == ()
    assert select(flat, ("tpot_s.p50",)) == ({"tpot_s.p50": 0.01}, ())  # not a throughput
    # a result without them (no decode step; another evaluator) keeps the rest, misses none
    assert select({"decode_tokens_per_s": 1.0}, ("decode_tokens_per_s",)) == (
        {"decode_tokens_per_s": 1.0},
        (),
    )
