"""Plots render to PNG without warnings and draw the expected series.

Synthetic results (the shape ``RunResult.to_dict()`` produces) pin each plot's series
count and error messages; the real-run tests further down feed results of the simulator.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from rdu_sim import studies
from rdu_sim.report import plots
from rdu_sim.report.plots_data import GIB, PlotInputError, RunPoint, as_runs

# ---------------------------------------------------------------------------- synthetic data


def _tier(capacity: float, weights: float, kv: float, act: float) -> dict[str, float]:
    used = weights + kv + act
    return {
        "capacity_bytes": capacity,
        "used_bytes": used,
        "weights_bytes": weights,
        "kv_bytes": kv,
        "activations_bytes": act,
        "free_bytes": capacity - used,
    }


def fake_run(
    policy: str = "full",
    context: int = 8192,
    batch: int = 8,
    model: str = "llama-3.1-8b",
    requests: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """A run dict with every field the plots read, numbers of a plausible order."""
    rng = np.random.default_rng(seed)
    slot = 131072 * (context if policy == "full" else min(context, 2048))
    kv = batch * slot
    capacity = int((64 * GIB - 16 * GIB) // slot)
    times = np.cumsum(rng.uniform(0.01, 0.1, 30))
    occupied = np.minimum(batch, np.arange(30) // 2)
    return {
        "model": model,
        "kv_policy": policy,
        "max_context": context,
        "batch_slots": batch,
        "batch_capacity": capacity,
        "decode_tokens_per_s": 100.0 * batch / (1 + context / 65536),
        "ttft_s": {"p50": 0.2, "p90": 0.4, "p99": 0.5},
        "tpot_s": {"p50": 0.02, "p90": 0.03, "p99": 0.04},
        "memory": {
            "sram": _tier(520 * 2**20, 0, 0, 300 * 2**20),
            "hbm": _tier(64 * GIB, 16 * GIB, kv, GIB),
            "ddr": _tier(1536 * GIB, 0, 0, 0),
        },
        "requests": requests,
        "occupancy": 0.8,
        "request_records": {
            "request": list(range(requests)),
            "ttft_s": rng.uniform(0.1, 0.5, requests).tolist(),
            "tpot_s": rng.uniform(0.01, 0.04, requests).tolist(),
        },
        "slot_occupancy": {"time_s": times.tolist(), "occupied": occupied.tolist()},
    }


def fake_step() -> dict[str, Any]:
    """A decode step timing: three kernels, one without FLOPs (not placeable)."""
    return {
        "kernels": [
            {"name": "embedding", "flops": 0.0, "bytes_by_tier": {"hbm": 1e6}, "time_s": 1e-5},
            {
                "name": "decoder",
                "flops": 5e11,
                "bytes_by_tier": {"hbm": 1.5e10, "sram": 1e9},
                "time_s": 9e-3,
            },
            {"name": "lm_head", "flops": 2e10, "bytes_by_tier": {"hbm": 1e9}, "time_s": 6e-4},
        ]
    }


HARDWARE = {"peak_flops": 638e12, "hbm_bandwidth": 1.8e12, "ddr_bandwidth": 200e9}
CONTEXTS = (8192, 32768, 131072)


def context_runs() -> list[dict[str, Any]]:
    return [fake_run(p, c) for p in ("full", "snapstream") for c in CONTEXTS]


# ---------------------------------------------------------------------------- helpers


@contextmanager
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def render(make: Callable[[], Figure]) -> Figure:
    """Build the figure and save it as PNG with every warning an error."""
    with no_warnings():
        fig = make()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    assert isinstance(fig, Figure)
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    return fig


def data_axes(fig: Figure) -> list[Any]:
    return [ax for ax in fig.axes if ax.has_data()]


def labels(fig: Figure) -> list[str]:
    return [ax.get_xlabel() + " | " + ax.get_ylabel() for ax in fig.axes]


# ---------------------------------------------------------------------------- synthetic tests


def test_memory_footprint_stacks_four_parts_per_tier_and_policy() -> None:
    fig = render(lambda: plots.memory_footprint(context_runs(), tiers=["sram", "hbm", "ddr"]))
    axes = data_axes(fig)
    assert len(axes) == 3 * 2  # sram/hbm/ddr rows x full/snapstream columns
    for ax in axes:
        assert len(ax.containers) == 4  # weights, KV, activations, free
        assert len(ax.containers[0]) == len(CONTEXTS)
    assert any("GiB" in text for text in labels(fig))
    assert fig.legends, "the parts need a legend"
    # the bars are in GiB: HBM stacks add up to the 64 GiB capacity
    hbm = axes[2]
    total = sum(container[0].get_height() for container in hbm.containers)
    assert total == pytest.approx(64.0)


def test_memory_footprint_one_tier() -> None:
    fig = render(lambda: plots.memory_footprint(context_runs(), tiers=["hbm"]))
    assert len(data_axes(fig)) == 2
    # by default: HBM and the tiers something is in (the fake runs use SRAM, not DDR)
    fig = render(lambda: plots.memory_footprint(context_runs()))
    assert [ax.get_title().split(" ")[0] for ax in fig.axes] == ["SRAM"] * 2 + ["HBM"] * 2


def test_batch_capacity_one_line_per_policy() -> None:
    fig = render(lambda: plots.batch_capacity(context_runs()))
    (ax,) = fig.axes
    assert len(ax.lines) == 2
    (legend,) = fig.legends  # beside the axes, never over a line
    assert {t.get_text() for t in legend.get_texts()} == {"full", "snapstream"}
    assert "slots" in ax.get_ylabel() and "tokens" in ax.get_xlabel()


def test_throughput_vs_context_and_batch() -> None:
    fig = render(lambda: plots.throughput_vs_context(context_runs()))
    assert len(fig.axes[0].lines) == 2
    assert "tokens/s" in fig.axes[0].get_ylabel()
    runs = [fake_run(p, 8192, b) for p in ("full", "snapstream") for b in (1, 4, 16)]
    fig = render(lambda: plots.throughput_vs_batch(runs))
    assert len(fig.axes[0].lines) == 2
    assert fig.axes[0].get_xlabel() == "batch slots"


def test_roofline_places_kernels_with_flops_and_draws_roofs() -> None:
    fig = render(lambda: plots.roofline(fake_step(), HARDWARE))
    (ax,) = fig.axes
    assert len(ax.lines) == 1  # HBM + compute roof (no DDR traffic, no DDR roof)
    assert len(ax.collections) == 2  # decoder and lm_head; embedding has no FLOPs
    assert "embedding" in " ".join(t.get_text() for t in ax.texts)
    assert "TFLOP/s" in ax.get_ylabel() and "FLOP per byte" in ax.get_xlabel()
    # the HBM-bound decoder sits on or under the HBM roof
    decoder = ax.collections[0].get_offsets()[0]
    assert decoder[1] <= 1.8e12 * decoder[0] / 1e12 * 1.0001


def test_roofline_ddr_roof_when_ddr_is_read() -> None:
    step = fake_step()
    step["kernels"][1]["bytes_by_tier"]["ddr"] = 1e8
    fig = render(lambda: plots.roofline(step, HARDWARE))
    assert len(fig.axes[0].lines) == 2


def test_latency_distribution_one_cdf_per_run_in_ms() -> None:
    runs = [fake_run("full"), fake_run("snapstream", seed=1)]
    fig = render(lambda: plots.latency_distribution(runs))
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.lines) == 2
        assert "(ms)" in ax.get_xlabel()
    xs = fig.axes[0].lines[0].get_xdata()
    assert min(xs) >= 100 and max(xs) <= 500  # seconds became ms


def test_occupancy_timeline_step_and_capacity_line() -> None:
    fig = render(lambda: plots.occupancy_timeline(fake_run()))
    (ax,) = fig.axes
    assert len(ax.lines) == 2
    assert ax.get_xlabel() == "simulated time (s)"


def test_records_are_read_in_one_form_only() -> None:
    """Per-request records and the occupancy series are columns, under the names
    RunResult and `rdu-sim run --out` use; anything else is refused by name, not guessed."""
    run = fake_run()
    columns = run.pop("request_records")
    run["request_records"] = [
        {"ttft_s": a, "tpot_s": b}
        for a, b in zip(columns["ttft_s"], columns["tpot_s"], strict=True)
    ]
    with pytest.raises(PlotInputError, match="per-request records must be columns"):
        plots.latency_distribution(run)
    run = fake_run()
    run["per_request"] = run.pop("request_records")
    with pytest.raises(PlotInputError, match="no per-request records"):
        plots.latency_distribution(run)
    run = fake_run()
    series = run["slot_occupancy"]
    run["slot_occupancy"] = {"t": series["time_s"], "occupied": series["occupied"]}
    with pytest.raises(PlotInputError, match="has no 'time_s' column"):
        plots.occupancy_timeline(run)


def test_dataframe_rows_with_dotted_columns_are_runs() -> None:
    rows = []
    for run in context_runs():
        row = {k: v for k, v in run.items() if not isinstance(v, dict | list)}
        for tier, usage in run["memory"].items():
            for key, value in usage.items():
                row[f"memory.{tier}.{key}"] = value
        rows.append(row)
    frame = pd.DataFrame(rows)
    runs = as_runs(frame)
    memory = runs[0].memory
    assert memory is not None and memory["hbm"].capacity_bytes == 64 * GIB
    render(lambda: plots.batch_capacity(frame))
    render(lambda: plots.memory_footprint(frame, tiers=["hbm"]))


def test_sweep_rows_with_some_memory_columns_still_plot() -> None:
    """A sweep that kept only some memory metrics plots the rest; the memory plot names the
    column it lacks."""
    frame = pd.DataFrame(
        [
            {
                "hw.socket.hbm.bandwidth": bw,
                "decode_tokens_per_s": 1.0 + i,
                "memory.hbm.kv_bytes": 1e9,
            }
            for i, bw in enumerate(["1.8 TB/s", "3.6 TB/s"])
        ]
    )
    render(lambda: plots.design_space(frame, "hw.socket.hbm.bandwidth", "decode_tokens_per_s"))
    with pytest.raises(PlotInputError, match=r"memory\.hbm\.capacity_bytes"):
        plots.memory_footprint(frame)


def test_missing_key_is_a_plot_input_error_naming_it() -> None:
    run = fake_run()
    del run["batch_capacity"]
    with pytest.raises(PlotInputError, match="batch capacity"):
        plots.batch_capacity(run)
    del run["request_records"]
    with pytest.raises(PlotInputError, match="per-request records"):
        plots.latency_distribution(run)
    with pytest.raises(PlotInputError, match=r"unknown plot kind 'pie'.*capacity"):
        plots.plot("pie", run)
    with pytest.raises(PlotInputError, match="expected a run"):
        plots.batch_capacity(42)


def test_plot_dispatch_and_save(tmp_path: Any) -> None:
    runs = context_runs()
    for kind in ("memory", "capacity", "throughput", "latency", "occupancy"):
        fig = render(
            lambda kind=kind: plots.plot(kind, runs if kind in plots.MULTI_RUN_KINDS else runs[0])
        )
        suffix = ".svg" if kind == "capacity" else ".png"  # SVG is slow to write: once
        assert plots.save_figure(fig, tmp_path / f"{kind}{suffix}").stat().st_size > 0
    step = {**fake_step(), "hardware": HARDWARE}
    render(lambda: plots.plot("roofline", json.loads(json.dumps(step))))
    with pytest.raises(PlotInputError, match="must end in"):
        plots.save_figure(fig, tmp_path / "x.jpg")


# ---------------------------------------------------------------------------- the CLI


def _cli(args: list[str]) -> Any:
    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_cli_plots_a_run_json(tmp_path: Any) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(context_runs()))
    out = tmp_path / "capacity.png"
    result = _cli(["plot", "capacity", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    result = _cli(["plot", "latency", str(path), "-o", str(tmp_path / "latency.svg")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "latency.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plot", "pie", "RUN", "-o", "x.png"], "valid kinds: memory, capacity, throughput"),
        (["plot", "capacity", "missing.json", "-o", "x.png"], "missing.json: file not found"),
        (
            ["plot", "capacity", "RUN", "-o", "x.jpg"],
            "x.jpg: --output: cannot draw to '.jpg': use .png",
        ),
        (["plot", "capacity", "BAD", "-o", "x.png"], "not JSON"),
        (["plot", "roofline", "RUN", "-o", "x.png"], "no step timing"),
        (["plot", "capacity", "NOCAP", "-o", "x.png"], "batch capacity"),
    ],
)
def test_cli_input_errors_exit_2(
    tmp_path: Any, monkeypatch: Any, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "RUN").write_text(json.dumps(fake_run()))
    (tmp_path / "BAD").write_text("{not json")
    run = fake_run()
    del run["batch_capacity"]
    (tmp_path / "NOCAP").write_text(json.dumps(run))
    result = _cli(args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x.png").exists()


def test_design_space_orders_unit_strings_and_draws_a_line_per_group() -> None:
    rows = [
        {
            "hw.socket.hbm.bandwidth": bw,
            "hw.system.sockets": n,
            "hw.socket.pmu.sram": s,
            "decode_tokens_per_s": float(n) * (1 + i),
            "tpot_s.p50": 0.01 * n,
        }
        for i, bw in enumerate(["900 GB/s", "1.8 TB/s", "3.6 TB/s"])
        for n in (1, 2)
        for s in ("256 KiB", "512 KiB")
    ]
    frame = pd.DataFrame(rows)
    fig = render(
        lambda: plots.design_space(
            frame, "hw.socket.hbm.bandwidth", "decode_tokens_per_s", by=["hw.system.sockets"]
        )
    )
    (ax,) = fig.axes
    assert len(ax.lines) == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["900 GB/s", "1.8 TB/s", "3.6 TB/s"]
    assert "mean over other axes" in ax.get_ylabel()  # the SRAM axis was averaged
    fig = render(
        lambda: plots.design_space(
            frame,
            "hw.socket.pmu.sram",
            "tpot_s.p50",
            by=["hw.system.sockets", "hw.socket.hbm.bandwidth"],
        )
    )
    assert len(fig.axes[0].lines) == 6
    assert "(ms)" in fig.axes[0].get_ylabel()


def _shown_ticks(fig: Figure) -> list[Any]:
    """The x tick labels a saved figure shows, left to right."""
    (ax,) = fig.axes
    shown = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
    return sorted(shown, key=lambda t: t.get_window_extent().x0)


def _budget_sweep(budgets: list[int]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"kv.budget": b, "decode_tokens_per_s": 1e6 / (1000 + b)} for b in budgets]
    )


def test_close_values_on_a_linear_sweep_axis_do_not_run_together() -> None:
    """The trial's sweep over kv.budget on llama3.1-8b-1socket: 2053, 3072 and 4096 of
    16384 sit on a linear axis (they do not double) and their labels read "205330724096";
    turned, each stands apart (its corner further from the next than a line of text)."""
    budgets = [2053, 3072, 4096, 6144, 8192, 16384]
    fig = render(
        lambda: plots.design_space(_budget_sweep(budgets), "kv.budget", "decode_tokens_per_s")
    )
    ticks = _shown_ticks(fig)
    assert [t.get_text() for t in ticks] == [str(b) for b in budgets]
    assert {t.get_rotation() for t in ticks} == {45.0}
    corners = [t.get_window_extent().x1 for t in ticks]
    line = ticks[0].get_fontsize() * fig.dpi / 72 * 2**0.5  # across turned lines
    assert min(b - a for a, b in pairwise(corners)) >= line
    # labels with room stay level
    fig = render(
        lambda: plots.design_space(
            _budget_sweep([8192, 32768, 131072]), "kv.budget", "decode_tokens_per_s"
        )
    )
    assert {t.get_rotation() for t in _shown_ticks(fig)} == {0.0}


def test_a_crowded_sweep_axis_labels_every_kth_value() -> None:
    """Turned labels closer than a line of text: a label a line of text from the last one
    shown is shown, from the first (and the far value, 50000, too)."""
    budgets = [*range(1000, 10000, 100), 50000]
    fig = render(
        lambda: plots.design_space(_budget_sweep(budgets), "kv.budget", "decode_tokens_per_s")
    )
    ticks = _shown_ticks(fig)
    assert ticks[0].get_text() == "1000" and ticks[-1].get_text() == "50000"
    assert 2 < len(ticks) < len(budgets)
    corners = [t.get_window_extent().x1 for t in ticks]
    line = ticks[0].get_fontsize() * fig.dpi / 72 * 2**0.5  # across turned lines
    assert min(b - a for a, b in pairwise(corners)) >= line


def test_cli_reads_the_csv_files_run_out_writes(tmp_path: Any) -> None:
    from rdu_sim.report.files import write_outputs

    run = fake_run()
    requests = {k: np.asarray(v) for k, v in run.pop("request_records").items()}
    series = {k: np.asarray(v) for k, v in run.pop("slot_occupancy").items()}
    write_outputs(tmp_path / "out", run, requests, series)
    for kind in ("latency", "occupancy"):
        target = tmp_path / f"{kind}.pdf"
        result = _cli(["plot", kind, str(tmp_path / "out"), "-o", str(target)])
        assert result.exit_code == 0, result.output
        assert target.read_bytes()[:4] == b"%PDF"
    (tmp_path / "out" / "requests.csv").unlink()
    result = _cli(
        ["plot", "latency", str(tmp_path / "out" / "result.json"), "-o", str(tmp_path / "x.png")]
    )
    assert result.exit_code == 2
    assert "per-request records" in result.output


# ---------------------------------------------------------------------------- real results

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
REAL_CONTEXTS = [2048, 8192]


@pytest.fixture(scope="module")
def real_run() -> Any:
    """One small serving run of the simulator (Llama-3.1-8B, one socket, 12 requests)."""
    api = pytest.importorskip("rdu_sim.api")
    return api.run(LLAMA, {"serving.requests": 12, "serving.output_tokens": 64})


@pytest.fixture(scope="module")
def real_plans() -> list[dict[str, Any]]:
    return studies.plan_over_contexts(LLAMA, REAL_CONTEXTS)


@pytest.fixture(scope="module")
def real_decode() -> dict[str, list[dict[str, Any]]]:
    return {
        "context": studies.decode_over_contexts(LLAMA, REAL_CONTEXTS),
        "batch": studies.decode_over_batches(LLAMA, [1, 4, 16], context=4096),
    }


@pytest.fixture(scope="module")
def real_step() -> dict[str, Any]:
    return studies.decode_step_timing(LLAMA)


def test_real_memory_footprint(real_plans: list[dict[str, Any]], real_run: Any) -> None:
    fig = render(lambda: plots.memory_footprint(real_plans))
    axes = data_axes(fig)
    tiers = {ax.get_title().split(" ")[0] for ax in axes}
    assert "HBM" in tiers
    assert len(axes) == 2 * len(tiers)  # full and snapstream columns
    for ax in axes:
        assert len(ax.containers) == 4
        assert len(ax.containers[0]) == len(REAL_CONTEXTS)
    # bars stack to the HBM capacity in GiB (64 GiB on an SN40L socket)
    hbm = next(ax for ax in axes if ax.get_title().startswith("HBM"))
    assert sum(c[0].get_height() for c in hbm.containers) == pytest.approx(64.0)
    # a single run plots too (one bar, one column)
    fig = render(lambda: plots.memory_footprint(real_run, tiers=["hbm"]))
    assert len(data_axes(fig)) == 1


def test_real_batch_capacity(real_plans: list[dict[str, Any]]) -> None:
    fig = render(lambda: plots.batch_capacity(real_plans))
    (ax,) = fig.axes
    series = [line for line in ax.lines if not str(line.get_label()).startswith("_")]
    assert [line.get_label() for line in series][:2] == ["full", "snapstream"]
    full, snap = (line.get_ydata() for line in series[:2])
    assert all(s >= f for s, f in zip(snap, full, strict=True))  # SnapStream never fits fewer


def test_real_throughput(real_decode: dict[str, list[dict[str, Any]]]) -> None:
    fig = render(lambda: plots.throughput_vs_context(real_decode["context"]))
    assert len(fig.axes[0].lines) == 2
    assert fig.get_suptitle().startswith("Steady-state")
    fig = render(lambda: plots.throughput_vs_batch(real_decode["batch"]))
    (ax,) = fig.axes
    assert len(ax.lines) == 2
    for line in ax.lines:  # more slots, more tokens/s
        ys = list(line.get_ydata())
        assert ys == sorted(ys)


def test_real_roofline(real_step: dict[str, Any]) -> None:
    fig = render(lambda: plots.roofline(real_step))
    (ax,) = fig.axes
    placeable = [
        k
        for k in real_step["kernels"]
        if k["flops"] > 0 and k["bytes_by_tier"]["hbm"] + k["bytes_by_tier"]["ddr"] > 0
    ]
    assert placeable
    assert len(ax.collections) == len(placeable)
    ddr = any(k["bytes_by_tier"]["ddr"] > 0 for k in placeable)
    assert len(ax.lines) == (2 if ddr else 1)


def test_real_latency_and_occupancy(real_run: Any) -> None:
    record = plots.result_record(real_run)
    completed = record["requests_completed"]
    for results in (real_run, record, json.loads(json.dumps(record))):
        fig = render(lambda results=results: plots.latency_distribution(results))
        assert len(fig.axes) == 2
        for ax in fig.axes:
            assert len(ax.lines) == 1
        assert len(fig.axes[0].lines[0].get_xdata()) == completed
        fig = render(lambda results=results: plots.occupancy_timeline(results))
        (ax,) = fig.axes
        assert len(ax.lines) == 2
        assert max(ax.lines[0].get_ydata()) <= record["batch_slots"]


def test_occupancy_legend_is_the_run_reports_mean(real_run: Any) -> None:
    """The legend's mean is the summary's ``occupancy`` (first arrival to last token, the
    run report's "batch slots occupied"), in slots and as a share, whatever form the run
    comes in; not the series' mean from time 0, which the idle wait for the first arrival
    pulls below it."""
    from rdu_sim import human

    record = plots.result_record(real_run)
    share, slots = record["occupancy"], record["batch_slots"]
    expected = (
        f"occupied: mean {human.number(share * slots)} of {slots:,} slots "
        f"({human.percent(share)})\nfrom the first arrival to the last token"
    )
    series = record["slot_occupancy"]
    times, occupied = np.asarray(series["time_s"]), np.asarray(series["occupied"])
    assert times[0] == 0 < min(record["request_records"]["arrival_s"])
    from_zero = float(np.sum(occupied[:-1] * np.diff(times)) / times[-1])
    assert human.number(from_zero) != human.number(share * slots)  # the old legend's figure
    typed = RunPoint.of_summary(
        real_run.summary(), occupancy={k: np.asarray(v) for k, v in series.items()}
    )
    for results in (real_run, typed, record, json.loads(json.dumps(record))):
        fig = render(lambda results=results: plots.occupancy_timeline(results))
        (ax,) = fig.axes
        assert ax.lines[0].get_label() == expected
    bare = dict(record)
    del bare["occupancy"]  # results without the summary's figure show no mean at all
    fig = render(lambda: plots.occupancy_timeline(bare))
    assert fig.axes[0].lines[0].get_label() == "occupied"


def test_cli_plot_capacity_from_rdu_sim_run_json(tmp_path: Path) -> None:
    """The must-show: `rdu-sim run --json > RUN.json; rdu-sim plot capacity RUN.json`."""
    pytest.importorskip("rdu_sim.api")
    result = _cli(["run", str(LLAMA), "--set", "serving.requests=4", "--json"])
    assert result.exit_code == 0, result.output
    run_json = tmp_path / "RUN.json"
    run_json.write_text(result.stdout)
    out = tmp_path / "capacity.png"
    result = _cli(["plot", "capacity", str(run_json), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    for kind in ("memory", "throughput"):
        result = _cli(["plot", kind, str(run_json), "-o", str(tmp_path / f"{kind}.svg")])
        assert result.exit_code == 0, result.output


def test_cli_plot_every_kind_from_run_out_dir(tmp_path: Path) -> None:
    pytest.importorskip("rdu_sim.api")
    result = _cli(
        ["run", str(LLAMA), "--set", "serving.requests=4", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 0, result.output
    for kind in ("memory", "capacity", "throughput", "latency", "occupancy"):
        out = tmp_path / f"{kind}.png"
        result = _cli(["plot", kind, str(tmp_path / "run"), "-o", str(out)])
        assert result.exit_code == 0, (kind, result.output)
        assert out.stat().st_size > 0


@pytest.mark.parametrize("kind", ["capacity", "roofline"])
def test_cli_plot_from_a_workload_yaml(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("rdu_sim.api")
    out = tmp_path / f"{kind}.png"
    result = _cli(["plot", kind, str(LLAMA), "-o", str(out), "--contexts", "2k,8k"])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0


def test_cli_plots_a_sweep_database(tmp_path: Path) -> None:
    """A sweep's SQLite rows (synthetic evaluator: instant) plot like runs."""
    from rdu_sim.sweep import run_sweep

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: plot-ctx
base: {LLAMA}
axes:
  serving.max_context: [2048, 4096, 8192]
  kv.policy: [full, snapstream]
evaluator: {{name: synthetic}}
""")
    db = tmp_path / "sweep.sqlite"
    run_sweep(spec, db=db, workers=1)
    out = tmp_path / "throughput.png"
    result = _cli(["plot", "throughput", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    result = _cli(["plot", "capacity", str(db), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output  # along the swept context
    assert (tmp_path / "c.png").stat().st_size > 0
    (tmp_path / "junk.sqlite").write_text("not a database")
    result = _cli(["plot", "capacity", str(tmp_path / "junk.sqlite"), "-o", "x.png"])
    assert result.exit_code == 2


def test_compare_plot_bars_lines_and_bad_input() -> None:
    """`plot compare` draws `rdu-sim compare --json` output: bars for one comparison (a
    system that does not fit is a labelled gap), a line per system over batch sizes."""
    from rdu_sim.report.plots_compare import comparisons

    def column(name: str, batch: int, step: float | None) -> dict[str, object]:
        fits = step is not None
        return {
            "hardware": name,
            "fits": fits,
            "batch": batch if fits else None,
            "step_s": step,
            "tokens_per_s_per_user": 1 / step if step else None,
            "tokens_per_s": batch / step if step else None,
            "hbm_bandwidth_fraction": 0.5 if fits else None,
        }

    one = {"columns": [column("a", 8, 0.01), column("b", 8, None)]}
    fig = plots.plot("compare", one)
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == pytest.approx([10.0, 0.0])  # ms; b does not fit
    assert "does not fit" in [t.get_text() for t in fig.axes[0].texts]
    # a gap says why as compare's lines do: a system not run, an invalid combination
    refused = {**column("c", 8, None), "invalid": True, "unsupported": True}
    crossed = {**column("d", 8, None), "invalid": True}
    fig = plots.plot("compare", {"columns": [column("a", 8, 0.01), refused, crossed]})
    said = [t.get_text() for t in fig.axes[0].texts]
    assert said[1:] == ["not run", "invalid combination"]
    many = [{"columns": [column("a", b, 0.01 * b), column("b", b, 0.02 * b)]} for b in (1, 4)]
    fig = plots.plot("compare", many)
    lines = fig.axes[1].get_lines()
    assert [line.get_label() for line in lines] == ["a", "b"]
    assert list(lines[0].get_ydata()) == pytest.approx([100.0, 25.0])  # tokens/s per user
    assert len(comparisons(many)) == 2
    with pytest.raises(plots.PlotInputError, match="columns"):
        plots.plot("compare", {"runs": []})


# ---------------------------------------------------------------------------- paper-ready


def legends_over_data(fig: Figure) -> list[str]:
    """Legend texts whose box overlaps the plotting area of any axes holding data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # lays out (constrained layout) as a save does
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    hits = []
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in data_axes(fig):
            if box.overlaps(ax.get_window_extent(renderer)):
                hits.append(legend.get_texts()[0].get_text())
    return hits


def test_real_figures_name_what_was_simulated_and_keep_legends_off_the_data(
    real_run: Any,
    real_plans: list[dict[str, Any]],
    real_decode: dict[str, list[dict[str, Any]]],
    real_step: dict[str, Any],
) -> None:
    figures = {
        "memory": plots.memory_footprint(real_plans),
        "capacity": plots.batch_capacity(real_plans),
        "throughput": plots.throughput_vs_context(real_decode["context"]),
        "batch": plots.throughput_vs_batch(real_decode["batch"]),
        "roofline": plots.roofline(real_step),
        "latency": plots.latency_distribution(real_run),
        "occupancy": plots.occupancy_timeline(real_run),
    }
    for name, fig in figures.items():
        render(lambda fig=fig: fig)
        assert legends_over_data(fig) == [], name
    subject = "llama3.1-8b-1socket: llama-3.1-8b on sn40l"
    for name in ("latency", "occupancy"):
        assert subject in figures[name].get_suptitle().replace("\n", " "), name
    assert "llama-3.1-8b" in figures["capacity"].get_suptitle()
    assert subject in figures["roofline"].get_suptitle().replace("\n", " ")


def test_saved_figures_embed_truetype_keep_svg_text_and_repeat_their_bytes(
    tmp_path: Path,
) -> None:
    from rdu_sim.provenance import simulator

    fig = render(lambda: plots.throughput_vs_context(context_runs()))
    written = {}
    for suffix in (".pdf", ".svg"):
        first = plots.save_figure(fig, tmp_path / f"a{suffix}", source="a test").read_bytes()
        again = plots.save_figure(fig, tmp_path / f"b{suffix}", source="a test").read_bytes()
        assert first == again, suffix  # no dates, fixed SVG ids
        written[suffix] = first
    pdf, svg = written[".pdf"], written[".svg"].decode()
    assert b"/Type3" not in pdf and b"/FontFile2" in pdf  # TrueType (fonttype 42)
    assert simulator().label.encode() in pdf and b"(a test)" in pdf
    assert "<text" in svg and "decode throughput" in svg  # text, not glyph outlines
    assert "a test" in svg
    import matplotlib

    assert matplotlib.rcParams["pdf.fonttype"] == 3  # nothing global changed


def test_a_config_folder_matplotlib_cannot_write_prints_nothing(tmp_path: Path) -> None:
    """With HOME unset (or another user's), matplotlib printed two lines about making a
    temporary config folder on every plot: rdu-sim points MPLCONFIGDIR at one itself (only
    when the user has not set it) and removes it at exit."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "MPLCONFIGDIR")}
    env.update(XDG_CONFIG_HOME=str(blocker / "config"), TMPDIR=str(tmp_path))
    out = tmp_path / "m.png"
    done = subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.entry", "plot", "memory", str(LLAMA), "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if not line.startswith("rdu-sim:")] == []
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob("rdu-sim-matplotlib-*"))  # removed at exit


def test_a_batch_sweeps_plot_marks_each_points_bound_and_the_batch_limits() -> None:
    """Issue 42: a batch sweep's plot names what binds each point, filled where the
    resource binds its step and hollow where it is only the largest part (the step report's
    rule, ``decode_step.binds``), and marks the slots memory holds and the batch 'auto' runs
    with the rule that cut it (the rows' ``memory_capacity``, ``batch_capacity``,
    ``capacity_limit``)."""
    rows = [
        (1, "hbm", False, 235.0),
        (64, "hbm", True, 1690.0),
        (128, "hbm", True, 2722.0),
        (158, "link", True, 1551.0),
    ]
    frame = pd.DataFrame(
        [
            {
                "serving.batch_slots": slots,
                "steady_decode_tokens_per_s": rate,
                "decode_step.bound": bound,
                "decode_step.binds": binds,
                "batch_capacity": 128,
                "memory_capacity": 158,
                "capacity_limit": "batch_programs",
            }
            for slots, bound, binds, rate in rows
        ]
    )
    frame.attrs["axes"] = ["serving.batch_slots"]
    fig = render(lambda: plots.sweep_plot(frame))
    ax = fig.axes[0]
    marked = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert marked == {"largest: HBM": 1, "HBM-bound": 2, "link-bound": 1}
    words = {t.get_text() for t in ax.texts}
    assert {"memory holds 158", "'auto' runs 128 (batch_programs)"} <= words
    vertical = {line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"}
    assert vertical == {128.0, 158.0}
