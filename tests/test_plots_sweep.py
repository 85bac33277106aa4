"""`rdu-sim plot` on a sweep database goes along whatever the sweep swept.

Each shipped sweep runs here with its own axes, zips and base workload but the synthetic
evaluator (closed-form, microseconds per point; its numbers are not a simulation), so the
test pins the axis handling of every shipped spec without simulating hundreds of requests.
"""

from __future__ import annotations

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
from rdu_sim.report.plots_sweep import axis_title, line_axes
from rdu_sim.sweep import load, run_sweep

# sweep -> (the x axis the plot picks, lines, points per line)
EXPECTED = {
    "coe-experts-hbm": ("coe.experts", 3, 5),  # a line per HBM capacity
    "deepseek-context": ("serving.max_context", 2, 5),  # kv.budget is zipped with kv.policy
    "deepseek-snapstream-budget": ("kv.budget", 1, 5),
    "deepseek-snapstream-batch": ("serving.batch_slots", 1, 11),  # requests zipped with slots
    "llama8b-batch": ("serving.batch_slots", 1, 4),
    "llama8b-hbm-bandwidth": ("hw.socket.hbm.bandwidth", 1, 7),
    "llama8b-sockets": ("parallelism.tp", 1, 5),  # hw.system.sockets is zipped with tp
    "speculation-acceptance-k": ("speculation.decoding.acceptance", 6, 5),  # a line per k
    # serving.requests is zipped with the batch; a line per speculation setting (mappings)
    "speculation-crossover": ("serving.batch_slots", 4, 9),
}


def test_every_shipped_sweep_is_listed() -> None:
    assert sorted(EXPECTED) == shipped.names("sweep")


def synthetic_db(name: str, folder: Path, own_metrics: bool = False) -> Path:
    """The shipped spec ``name`` with the synthetic evaluator (all its metrics kept, or only
    the spec's own with ``own_metrics``)."""
    source = shipped.folder("workloads/sweeps") / f"{name}.yaml"
    text = source.read_text() if own_metrics else source.read_text().split("\nmetrics:", 1)[0]
    base = (source.parent / "..").resolve()
    spec = folder / f"{name}.yaml"
    spec.write_text(
        text.replace("base: ../", f"base: {base}/") + "\nevaluator: {name: synthetic}\n"
    )
    db = folder / f"{name}.sqlite"
    summary = run_sweep(spec, db=db, workers=1)
    assert summary.failed == 0
    return db


def lines_of(figure: Figure) -> list[Any]:
    """The plotted series: labelled lines with points (not the faint or hollow companions a
    plot draws beside a series unlabelled, nor a legend's empty key)."""
    return [
        line
        for line in figure.axes[0].get_lines()
        if len(line.get_xdata()) and not str(line.get_label()).startswith("_")
    ]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_plot_sweep_and_throughput_go_along_the_swept_axis(name: str, tmp_path: Path) -> None:
    db = synthetic_db(name, tmp_path)
    x, count, points = EXPECTED[name]
    figure = plots.sweep_plot(load(db))
    assert figure.axes[0].get_xlabel() == axis_title(x)
    lines = lines_of(figure)
    assert len(lines) == count
    assert all(len(line.get_xdata()) == points for line in lines)
    assert name in figure.get_suptitle()
    for kind in ("sweep", "throughput"):
        out = tmp_path / f"{kind}.svg"
        result = CliRunner().invoke(cli, ["plot", kind, str(db), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 0


def test_a_sweep_of_the_hardwares_fields_says_so_beside_its_files_name(tmp_path: Path) -> None:
    # the points ran 0.8 to 3.2 TB/s, not the file's own machine: the title says which field
    # varied; a sweep of no hw. field names the file alone
    title = plots.sweep_plot(load(synthetic_db("llama8b-hbm-bandwidth", tmp_path))).get_suptitle()
    assert " ".join(title.split()).endswith("on sn40l (socket.hbm.bandwidth swept)"), title
    title = plots.sweep_plot(load(synthetic_db("llama8b-batch", tmp_path))).get_suptitle()
    assert " ".join(title.split()).endswith("on sn40l"), title


def test_the_bandwidth_axis_is_ordered_by_quantity(tmp_path: Path) -> None:
    """0.8 TB/s .. 3.2 TB/s in order, and the synthetic throughput rises along it."""
    figure = plots.plot("throughput", load(synthetic_db("llama8b-hbm-bandwidth", tmp_path)))
    ticks = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert ticks[0] == "0.8 TB/s" and ticks[-1] == "3.2 TB/s" and len(ticks) == 7
    (line,) = lines_of(figure)
    values = list(line.get_ydata())
    assert values == sorted(values) and values[0] < values[-1]


def test_named_axes_and_bad_names(tmp_path: Path) -> None:
    db = synthetic_db("deepseek-context", tmp_path)
    frame = load(db)
    by_policy = plots.sweep_plot(frame, x="kv.policy", y="tpot_s.p50", by=["serving.max_context"])
    assert by_policy.axes[0].get_xlabel() == "KV-cache policy by registered name\nkv.policy"
    assert len(lines_of(by_policy)) == 5
    runner = CliRunner()
    bad = runner.invoke(cli, ["plot", "sweep", str(db), "--x", "hw.nope", "-o", "x.png"])
    assert bad.exit_code == 2
    assert "no column 'hw.nope'; its swept axes: serving.max_context, kv.policy" in bad.output
    bad = runner.invoke(cli, ["plot", "sweep", str(db), "--y", "joules", "-o", "x.png"])
    assert bad.exit_code == 2 and "no metric 'joules'" in bad.output
    assert "decode_tokens_per_s" in bad.output and "wall_s" not in bad.output
    spec = shipped.folder("workloads/sweeps") / "llama8b-batch.yaml"
    bad = runner.invoke(cli, ["plot", "sweep", str(spec), "-o", "x.png"])
    assert bad.exit_code == 2 and "reads a sweep database" in bad.output


def test_capacity_and_throughput_plot_a_context_sweep_titled_with_model_and_hardware(
    tmp_path: Path,
) -> None:
    """The shipped deepseek-context sweep, with only its own metrics (no ``max_context`` nor
    ``model`` among them): the context comes from its axis, the names from its points."""
    db = synthetic_db("deepseek-context", tmp_path, own_metrics=True)
    frame = load(db)
    assert "max_context" not in frame.columns and "model" not in frame.columns
    assert frame.attrs["model"] == ["deepseek-r1"] and frame.attrs["hardware"] == ["sn40l-16"]
    contexts = [8192, 16384, 32768, 65536, 131072]
    for kind, metric in (("capacity", "batch_capacity"), ("throughput", "decode_tokens_per_s")):
        figure = plots.plot(kind, frame)
        lines = lines_of(figure)
        assert len(lines) == 2  # full and snapstream
        for line in lines:
            assert list(line.get_xdata()) == contexts
            policy = str(line.get_label()).split(" (= ")[0]  # a line on another says so
            rows = frame[frame["kv.policy"] == policy].sort_values("serving.max_context")
            assert list(line.get_ydata()) == [float(v) for v in rows[metric]]
        title = " ".join(figure.get_suptitle().split())  # wrapped to the figure's width
        assert "deepseek-r1 on sn40l-16" in title
        out = tmp_path / f"{kind}.png"
        result = CliRunner().invoke(cli, ["plot", kind, str(db), "-o", str(out)])
        assert result.exit_code == 0, result.output
    sweep = plots.sweep_plot(frame)
    assert "deepseek-context" in sweep.get_suptitle()
    assert "deepseek-r1 on sn40l-16" in " ".join(sweep.get_suptitle().split())
    assert sweep.axes[0].get_xlabel() == (
        "longest sequence a slot holds (tokens)\nserving.max_context"
    )


def test_a_rate_metric_is_not_drawn_as_milliseconds(tmp_path: Path) -> None:
    """``*_per_s`` names a rate: plotted as stored, never as a time scaled to ms."""
    frame = load(synthetic_db("llama8b-batch", tmp_path))
    for metric in ("steady_decode_tokens_per_s", "decode_tokens_per_s"):
        figure = plots.sweep_plot(frame, y=metric)
        assert "(ms)" not in figure.axes[0].get_ylabel()
        (line,) = lines_of(figure)
        assert sorted(line.get_ydata()) == sorted(float(v) for v in frame[metric])


def test_a_database_of_two_sweeps_plots_the_one_named(tmp_path: Path) -> None:
    """A database may hold several sweeps: plotting it whole is refused naming them, --sweep
    picks one (its own axes and points), and a name it does not hold is refused too."""
    one = synthetic_db("llama8b-batch", tmp_path)
    other = synthetic_db("llama8b-hbm-bandwidth", tmp_path)
    spec = tmp_path / "llama8b-hbm-bandwidth.yaml"
    assert run_sweep(spec, db=one, workers=1).failed == 0  # the second sweep, into the first's
    assert other.exists()
    runner = CliRunner()
    out = tmp_path / "x.png"
    whole = runner.invoke(cli, ["plot", "sweep", str(one), "-o", str(out)])
    assert whole.exit_code == 2
    assert "holds 2 sweeps (llama8b-batch, llama8b-hbm-bandwidth); name one with --sweep" in (
        " ".join(whole.output.split())
    )
    assert not out.exists()
    picked = runner.invoke(
        cli, ["plot", "sweep", str(one), "--sweep", "llama8b-hbm-bandwidth", "-o", str(out)]
    )
    assert picked.exit_code == 0, picked.output
    assert out.stat().st_size > 0
    unknown = runner.invoke(cli, ["plot", "sweep", str(one), "--sweep", "nope", "-o", str(out)])
    assert unknown.exit_code == 2
    assert "--sweep nope" in unknown.output and "llama8b-batch" in unknown.output


def test_a_line_per_x_value_is_refused(tmp_path: Path) -> None:
    """``--by`` the x axis would draw one dot a line: refused, naming the axis."""
    db = synthetic_db("deepseek-context", tmp_path)
    with pytest.raises(plots.PlotInputError, match=r"--by serving\.max_context is the x axis"):
        plots.sweep_plot(load(db), x="serving.max_context", by=["serving.max_context"])
    result = CliRunner().invoke(
        cli,
        ["plot", "sweep", str(db), "--by", "serving.max_context", "-o", str(tmp_path / "x.png")],
    )
    assert result.exit_code == 2 and "is the x axis" in result.output


def test_a_policy_keeps_its_colour_and_long_times_are_in_seconds(tmp_path: Path) -> None:
    """A line per KV policy takes the policy's colour, as in every other plot; a time
    metric reaching 10 s is drawn in s (its values unscaled), shorter ones in ms."""
    from rdu_sim.report.plots_style import POLICY_COLORS

    frame = load(synthetic_db("deepseek-context", tmp_path))
    figure = plots.sweep_plot(frame, y="tpot_s.p50")
    colours = {str(line.get_label()): line.get_color() for line in lines_of(figure)}
    assert colours == {
        "kv.policy=full": POLICY_COLORS["full"],
        "kv.policy=snapstream": POLICY_COLORS["snapstream"],
    }
    slow = frame.copy()
    slow["ttft_s.p50"] = [12.0 + i for i in range(len(slow))]
    seconds = plots.sweep_plot(slow, y="ttft_s.p50")
    assert seconds.axes[0].get_ylabel().startswith("TTFT p50 (s)")
    drawn = sorted(v for line in lines_of(seconds) for v in line.get_ydata())
    assert drawn == sorted(slow["ttft_s.p50"])
    slow["ttft_s.p50"] = [0.5] * len(slow)
    assert "(ms)" in plots.sweep_plot(slow, y="ttft_s.p50").axes[0].get_ylabel()


def test_a_long_y_label_wraps(tmp_path: Path) -> None:
    frame = load(synthetic_db("deepseek-context", tmp_path))
    label = plots.sweep_plot(frame, y="memory.hbm.kv_bytes", by=[]).axes[0].get_ylabel()
    assert "(mean over other axes)" in label.replace("\n", " ")
    assert all(len(line) <= 44 for line in label.split("\n")) and "\n" in label


def grid_db(
    folder: Path,
    axes: dict[str, list[Any]],
    name: str = "grid",
    fail_when: dict[str, Any] | None = None,
) -> Path:
    """A synthetic sweep of ``axes`` over the 8B workload (every combination; the points
    matching ``fail_when`` fail)."""
    base = shipped.folder("workloads") / "llama3.1-8b-1socket.yaml"
    lines = "".join(f"  {path}: {json.dumps(values)}\n" for path, values in axes.items())
    options = json.dumps({"fail_when": fail_when or {}})
    spec = folder / f"{name}.yaml"
    spec.write_text(
        f"base: {base}\nset: {{serving.requests: 4}}\naxes:\n{lines}"
        f"evaluator: {{name: synthetic, options: {options}}}\n"
    )
    db = folder / f"{name}.sqlite"
    run_sweep(spec, db=db, workers=1)
    return db


MANY_AXES: dict[str, list[Any]] = {
    "hw.socket.hbm.bandwidth": ["1.8 TB/s", "3.6 TB/s"],
    "hw.socket.hbm.capacity": ["64 GiB", "128 GiB"],
    "hw.socket.pmu.sram": ["512 KiB", "1 MiB"],
    "hw.socket.pcu.count": [1040, 2080],
    "hw.system.intra_node_link.bandwidth": ["33.53 GB/s", "100 GB/s"],
}


def overlaps(a: Any, b: Any) -> bool:
    """Whether two display boxes share area (touching edges do not)."""
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


@pytest.mark.parametrize(
    "axes",
    [
        {"serving.batch_slots": [1, 2], "hw.socket.hbm.capacity": ["64 GiB"]},  # one line
        {  # 9 lines: the y label was cut
            "serving.batch_slots": [1, 2],
            "hw.socket.hbm.capacity": ["48 GiB", "64 GiB", "96 GiB"],
            "hw.socket.hbm.bandwidth": ["1 TB/s", "2 TB/s", "3 TB/s"],
        },
        MANY_AXES,  # 16 lines: the legend covered the data, the layout collapsed
    ],
    ids=["1-line", "9-lines", "16-lines"],
)
def test_a_plot_of_many_lines_is_legible(tmp_path: Path, axes: dict[str, list[Any]]) -> None:
    """No layout warning, every text inside the figure, and title, legend, axes, axis
    labels and tick labels each in their own place, whatever the number of lines; the
    lines' styles all differ (colours repeat after ten: the dash then differs)."""
    frame = load(grid_db(tmp_path, axes))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = plots.sweep_plot(frame)
        figure.canvas.draw()
    (ax,) = figure.axes
    styles = [(line.get_color(), line.get_linestyle()) for line in lines_of(figure)]
    assert len(set(styles)) == len(styles)
    whole = figure.bbox
    boxes = {
        "title": figure._suptitle.get_window_extent(),  # type: ignore[union-attr]
        "axes": ax.get_window_extent(),
        "xlabel": ax.xaxis.label.get_window_extent(),
        "ylabel": ax.yaxis.label.get_window_extent(),
    }
    if figure.legends:
        boxes["legend"] = figure.legends[0].get_window_extent()
    ticks = [t.get_window_extent() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    ticks = [t for t in ticks if t.width]
    for name, box in [*boxes.items(), *(("tick", t) for t in ticks)]:
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1, name
        assert whole.y0 <= box.y0 and box.y1 <= whole.y1, name
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if {a, b} & {"xlabel", "ylabel"} and "axes" in {a, b}:
                continue  # an axis label sits beside the axes' own box, tested by ticks below
            assert not overlaps(boxes[a], boxes[b]), (a, b)
    for tick in ticks:
        for name in ("title", "legend", "xlabel", "ylabel"):
            if name in boxes:
                assert not overlaps(tick, boxes[name]), name


def test_legend_and_title_name_an_axis_by_enough_of_its_path(tmp_path: Path) -> None:
    """'bandwidth=1.8 TB/s' did not say which bandwidth, nor 'count=1040' which units: a
    name is the shortest tail of two parts or more that no other plotted column shares."""
    frame = load(grid_db(tmp_path, MANY_AXES))
    figure = plots.sweep_plot(
        frame, x="hw.system.intra_node_link.bandwidth", by=["hw.socket.hbm.bandwidth"]
    )
    labels = [str(line.get_label()) for line in lines_of(figure)]
    assert labels == ["hbm.bandwidth=1.8 TB/s", "hbm.bandwidth=3.6 TB/s"]
    title = " ".join(figure.get_suptitle().split())
    assert title.startswith("grid: decode throughput, all slots busy (tokens/s) vs intra_node_link")
    assert " vs intra_node_link.bandwidth — llama-3.1-8b on sn40l" in title
    figure = plots.sweep_plot(frame, x="hw.socket.hbm.bandwidth", by=["hw.socket.pcu.count"])
    labels = [str(line.get_label()) for line in lines_of(figure)]
    assert labels == ["pcu.count=1040", "pcu.count=2080"]
    assert " vs hbm.bandwidth —" in " ".join(figure.get_suptitle().split())


def test_failed_points_are_said_over_the_axes(tmp_path: Path) -> None:
    """A failed point left a gap without a word: a note over the axes counts the failed
    points, the plotted axes' values they share and the first one's error, in its own room
    (the x axis keeps the failed points' values, so the gap shows where)."""
    db = grid_db(tmp_path, MANY_AXES, fail_when={"hw.socket.hbm.capacity": 68719476736})
    frame = load(db)
    assert (frame["status"] == "failed").sum() == 16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = plots.sweep_plot(frame)
        figure.canvas.draw()
    note = " ".join(figure.axes[0].get_title(loc="left").split())
    assert note == (
        "16 of 32 points failed and are not drawn, all at hbm.capacity=64 GiB (the first: "
        "RuntimeError: synthetic failure requested by fail_when "
        "(hw.socket.hbm.capacity=68719476736)...)"  # the sweep table's words: a traceback follows
    )
    assert len(lines_of(figure)) == 8  # the 128 GiB lines
    shown = figure.axes[0]._left_title.get_window_extent()
    assert figure.bbox.y1 >= shown.y1
    title = figure._suptitle.get_window_extent()  # type: ignore[union-attr]
    for other in (figure.legends[0].get_window_extent(), figure.axes[0].bbox, title):
        assert not overlaps(shown, other)
    out = tmp_path / "sweep.png"
    result = CliRunner().invoke(cli, ["plot", "sweep", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["plot", "throughput", str(db), "-o", str(out)])
    assert "note: 16 failed points of 32 not drawn" in result.output


def test_throughput_of_a_two_axis_sweep_draws_a_line_per_other_axis(tmp_path: Path) -> None:
    """``plot throughput`` on batch slots x HBM bandwidth drew every point as one zig-zag
    line labelled by the KV policy (the batch plot groups by model and policy only): it now
    draws what ``plot sweep`` draws, a line per bandwidth along the batch."""
    axes = {"serving.batch_slots": [1, 2, 4], "hw.socket.hbm.bandwidth": ["1 TB/s", "2 TB/s"]}
    frame = load(grid_db(tmp_path, axes))
    lines = lines_of(plots.plot("throughput", frame))
    assert [str(line.get_label()) for line in lines] == [
        "hbm.bandwidth=1 TB/s",
        "hbm.bandwidth=2 TB/s",
    ]
    assert [list(line.get_xdata()) for line in lines] == [[1, 2, 4], [1, 2, 4]]


def test_throughput_of_the_speculation_crossover_draws_a_line_per_setting(
    tmp_path: Path,
) -> None:
    """The shipped crossover zips the batch with the request count and crosses it with a
    speculation axis: a line per speculation setting, each along the batch."""
    frame = load(synthetic_db("speculation-crossover", tmp_path))
    throughput = lines_of(plots.plot("throughput", frame))
    sweep = lines_of(plots.sweep_plot(frame))
    assert len(throughput) == 4 and all(len(line.get_xdata()) == 9 for line in throughput)
    assert [line.get_label() for line in throughput] == [line.get_label() for line in sweep]


def bound_frame() -> Any:
    """Four points of batch slots x HBM bandwidth, each with its decode step's bound, as
    ``rdu_sim.sweep.load`` gives them (a line per bandwidth shares each batch value)."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "status": ["done"] * 4,
            "serving.batch_slots": [1, 2, 1, 2],
            "hw.socket.hbm.bandwidth": ["1 TB/s", "1 TB/s", "2 TB/s", "2 TB/s"],
            "decode_tokens_per_s": [10.0, 20.0, 15.0, 30.0],
            "decode_step.bound": ["hbm", "hbm", "hbm", "compute"],
            "decode_step.binds": [True, True, True, False],
        }
    )
    frame.attrs["axes"] = ["serving.batch_slots", "hw.socket.hbm.bandwidth"]
    return frame


def test_bound_markers_are_drawn_on_every_line_of_a_multi_line_plot() -> None:
    """Each point named its bound only when no other row shared its x: with a line per
    bandwidth every x is shared, so no marker was drawn. Now each line's points are marked."""
    figure = plots.sweep_plot(bound_frame())
    marks = {c.get_label(): c.get_offsets().tolist() for c in figure.axes[0].collections}
    assert marks == {"HBM-bound": [[1, 10], [2, 20], [1, 15]], "largest: compute": [[2, 30]]}
    # averaged over an axis left out of the lines: no one bound, no marker
    averaged = plots.sweep_plot(bound_frame(), by=[])
    assert not averaged.axes[0].collections


def test_a_stopped_sweep_says_how_many_points_it_has_not_run(tmp_path: Path) -> None:
    """A sweep stopped after its first points plotted those as if they were all, and along
    the bandwidth (the batch, one value among the stored points, no longer counted as
    swept). The database records the spec's points before any runs: ``load`` says how many
    the spec has and holds, the plot stays along the batch and says what is missing."""
    import sqlite3

    axes = {"serving.batch_slots": [1, 2, 4], "hw.socket.hbm.bandwidth": ["1 TB/s", "2 TB/s"]}
    db = grid_db(tmp_path, axes)
    first = list(load(db)["key"][:2])  # grid order: batch 1 at both bandwidths
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM results WHERE key NOT IN (?, ?)", first)
    connection.close()
    frame = load(db)
    assert (frame.attrs["spec_points"], frame.attrs["stored_points"]) == (6, 2)
    assert frame.attrs["axis_values"]["serving.batch_slots"] == [1, 2, 4]
    for figure in (plots.sweep_plot(frame), plots.plot("throughput", frame)):
        ax = figure.axes[0]
        assert ax.get_xlabel() == axis_title("serving.batch_slots")
        assert ax.get_title(loc="left") == "4 of 6 points not run yet"
        assert [str(line.get_label()) for line in lines_of(figure)] == [
            "hbm.bandwidth=1 TB/s",
            "hbm.bandwidth=2 TB/s",
        ]
    result = CliRunner().invoke(cli, ["plot", "throughput", str(db), "-o", str(tmp_path / "t.png")])
    assert result.exit_code == 0, result.output
    assert "note: 4 of 6 points not run yet" in result.output
    whole = load(grid_db(tmp_path, axes, name="whole"))
    assert (whole.attrs["spec_points"], whole.attrs["stored_points"]) == (6, 6)
    assert plots.sweep_plot(whole).axes[0].get_title(loc="left") == ""


def test_a_point_that_does_not_fit_is_said_as_the_sweep_table_says_it() -> None:
    """The note quoted the error's first 110 characters: the exception's class and the
    workload's absolute path used them up before the reason."""
    frame = bound_frame()
    frame.loc[3, "status"] = "failed"
    frame.loc[3, "decode_tokens_per_s"] = None
    frame["error"] = [
        None,
        None,
        None,
        (
            "WeightsCapacityError: /home/someone/a long/path/workloads/llama3.1-8b-1socket.yaml: "
            "hw.socket.hbm.capacity: the weights alone do not fit, so not one sequence does: "
            "llama-3.1-8b weights need 14.96 GiB per socket; serve the weights from DDR\n"
            "Traceback (most recent call last):"
        ),
    ]
    note = " ".join(plots.sweep_plot(frame).axes[0].get_title(loc="left").split())
    assert note == (
        "1 of 4 points failed and are not drawn, all at serving.batch_slots=2, "
        "hbm.bandwidth=2 TB/s (does not fit: hw.socket.hbm.capacity: the "
        "weights alone do not fit, so not one sequence does: llama-3.1-8b weights need...)"
    )


def test_a_share_is_labelled_in_percent_with_the_commands_words() -> None:
    """``--y utilization.hbm`` was labelled with its path and no unit: a utilization reads
    as every command says it, in %, as a share named ``*_fraction`` or ``*_share`` does."""
    frame = bound_frame()
    frame["utilization.hbm"] = [0.5, 0.6, 0.7, 0.8]
    frame["prefill_step.busy_share"] = [0.1, 0.2, 0.3, 0.4]
    figure = plots.sweep_plot(frame, y="utilization.hbm")
    assert figure.axes[0].get_ylabel() == "HBM bandwidth used (of peak) (%)"
    assert list(lines_of(figure)[0].get_ydata()) == [50.0, 60.0]
    label = plots.sweep_plot(frame, y="prefill_step.busy_share").axes[0].get_ylabel()
    assert label == "prefill_step.busy_share (%)"


def test_memory_of_a_batch_sweep_goes_along_the_batch(tmp_path: Path) -> None:
    """A sweep over the batch at one context was titled "vs context" over an x axis of
    "context (tokens)"; its bars go along the batch slots, and say so."""
    db = grid_db(tmp_path, {"serving.batch_slots": [4, 1, 2]}, fail_when={"serving.batch_slots": 2})
    out = tmp_path / "memory.png"
    result = CliRunner().invoke(cli, ["plot", "memory", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "not drawn" not in result.output  # the figure says it (the sweep plot's note)
    figure = plots.plot("memory", load(db))
    note = " ".join(figure.get_supxlabel().split())  # type: ignore[attr-defined]
    assert "1 of 3 points failed and are not drawn" in note
    ax = figure.axes[0]
    assert ax.get_xlabel() == "batch slots"
    assert "Memory per socket vs batch slots" in " ".join(figure.get_suptitle().split())
    assert [t.get_text().split("\n")[1] for t in ax.get_xticklabels()] == ["1 slots", "4 slots"]


def test_a_sparse_stopped_sweep_keeps_its_independent_axes_apart(tmp_path: Path) -> None:
    """Which axes move together was read off the stored rows: a stopped sweep holding batch 1
    at 1 TB/s and batch 2 at 2 TB/s looked like a zip of the two, and drew one line. The
    spec's points (stored before any runs) say the two are crossed: a line per bandwidth."""
    import sqlite3

    axes = {"serving.batch_slots": [1, 2, 4], "hw.socket.hbm.bandwidth": ["1 TB/s", "2 TB/s"]}
    db = grid_db(tmp_path, axes)
    keys = list(load(db)["key"])  # grid order: (1, 1 TB/s), (1, 2 TB/s), (2, 1 TB/s), ...
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM results WHERE key NOT IN (?, ?)", (keys[0], keys[3]))
    connection.close()
    frame = load(db)
    assert list(frame["hw.socket.hbm.bandwidth"]) == ["1 TB/s", "2 TB/s"]
    figure = plots.sweep_plot(frame)
    assert [str(line.get_label()) for line in lines_of(figure)] == [
        "hbm.bandwidth=1 TB/s",
        "hbm.bandwidth=2 TB/s",
    ]
    # a real zip stays one axis, stopped or not (llama8b-sockets zips tp with the sockets)
    zipped = load(synthetic_db("llama8b-sockets", tmp_path))
    assert line_axes(zipped, "parallelism.tp") == []


def test_memory_of_a_sweep_goes_along_its_axis_and_says_what_it_leaves_out(
    tmp_path: Path,
) -> None:
    """A sweep over the HBM capacity drew its bars in context order (one context: any
    order), labelled by context, with the failed point on stderr only. Its bars go along
    the capacity in order, each named by its value as the spec wrote it, the axis named
    by its field, and the note the sweep plot writes (its rule) is in the figure."""
    axes = {"hw.socket.hbm.capacity": ["96 GiB", "48 GiB", "64 GiB", "32 GiB"]}
    db = grid_db(tmp_path, axes, fail_when={"hw.socket.hbm.capacity": 68719476736})
    frame = load(db)
    figure = plots.plot("memory", frame)
    ax = figure.axes[0]
    assert ax.get_xlabel() == axis_title("hw.socket.hbm.capacity")
    ticks = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
    assert ticks == ["32 GiB", "48 GiB", "96 GiB"]
    free = [bar.get_height() for bar in ax.containers[-1]]  # more HBM, more room free
    assert free == sorted(free) and free[0] < free[-1]
    assert "Memory per socket vs hbm.capacity" in " ".join(figure.get_suptitle().split())
    note = " ".join(figure.get_supxlabel().split())  # type: ignore[attr-defined]
    assert "1 of 4 points failed and are not drawn, all at hbm.capacity=64 GiB" in note
    out = tmp_path / "memory.png"
    result = CliRunner().invoke(cli, ["plot", "memory", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "not drawn" not in result.output  # said in the figure, as plot sweep says it


def test_memory_of_a_stopped_two_axis_sweep(tmp_path: Path) -> None:
    """Two crossed axes: the bars go along the first that is a quantity (plot sweep's x), a
    column per value of the other (its lines); --x picks the axis; a stopped sweep says
    how many points it has not run."""
    import sqlite3

    axes = {"hw.socket.hbm.bandwidth": ["2 TB/s", "1 TB/s"], "serving.batch_slots": [1, 2]}
    db = grid_db(tmp_path, axes)
    keys = list(load(db)["key"])
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM results WHERE key = ?", (keys[0],))
    connection.close()
    frame = load(db)
    figure = plots.memory_footprint(frame)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["HBM · serving.batch_slots=1", "HBM · serving.batch_slots=2"]
    ticks = [t.get_text().split("\n")[:2] for t in figure.axes[1].get_xticklabels()]
    assert ticks == [["1 TB/s", "2 slots"], ["2 TB/s", "2 slots"]]
    assert len(figure.axes[0].get_xticklabels()) == 1  # (2 TB/s, batch 1) not run
    note = " ".join(figure.get_supxlabel().split())  # type: ignore[attr-defined]
    assert "1 of 4 points not run yet" in note
    along = plots.memory_footprint(frame, x="serving.batch_slots")
    assert along.axes[0].get_xlabel() == "batch slots"
    assert [ax.get_title() for ax in along.axes] == [
        "HBM · hbm.bandwidth=1 TB/s",
        "HBM · hbm.bandwidth=2 TB/s",
    ]
    out = tmp_path / "memory.png"
    result = CliRunner().invoke(cli, ["plot", "memory", str(db), "--x", "hbm.nope", "-o", str(out)])
    assert result.exit_code == 2
    assert "no column 'hbm.nope'; its swept axes: hw.socket.hbm.bandwidth" in result.output
