"""rdu_sim.studies: a plot's point is what `rdu-sim run` runs, or the figure says what changed.

Covers the issue's plot bugs: `rdu-sim plot capacity WORKLOAD --set serving.batch_slots=4`
failed (the plots re-parsed overrides without YAML), and `rdu-sim plot memory` showed other
slots than `rdu-sim run` (prompts resized to the context, SnapStream's budget shrunk to a
quarter of it) without saying so.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api, studies
from rdu_sim.cli.main import cli
from rdu_sim.report import plots
from rdu_sim.report.summary import memory_summary
from rdu_sim.serving.backend import EngineBackend, resolve_batch_slots

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SNAP = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
FULL = ROOT / "workloads" / "deepseek-r1-128k-full.yaml"


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


def test_plot_capacity_takes_set_overrides_as_run_does(tmp_path: Path) -> None:
    """The issue's command, and a unit string: --set is parsed as YAML by config/overrides."""
    out = tmp_path / "capacity.png"
    args = ["plot", "capacity", str(LLAMA), "--set", "serving.batch_slots=4", "-o", str(out)]
    result = _cli([*args, "--contexts", "2k,8k"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    [row] = studies.plan_over_contexts(
        LLAMA, [8192], policies=["full"], overrides=["serving.batch_slots=4"]
    )
    assert row["batch_slots"] == 4  # the memory is planned for the 4 slots run would use
    [small] = studies.plan_over_contexts(
        LLAMA, [8192], policies=["full"], overrides=["hw.socket.hbm.capacity=32 GiB"]
    )
    assert small["memory"]["hbm"]["capacity_bytes"] == 32 * 2**30
    assert small["batch_capacity"] < row["batch_capacity"]
    result = _cli([*args[:-2], "--set", "serving.batch_slots=many", "-o", str(out)])
    assert result.exit_code == 2 and "serving.batch_slots" in result.stderr


@pytest.mark.parametrize("workload", [SNAP, FULL], ids=["snapstream", "full"])
def test_memory_points_are_what_run_does(workload: Path) -> None:
    """Differential: each point's capacity, slots and memory plan are those of
    `rdu-sim run WORKLOAD --set serving.max_context=C --set kv.policy=P` (the same
    resolve_batch_slots and plan_memory api.run calls)."""
    contexts = [8192, 131072]
    rows = studies.plan_over_contexts(workload, contexts)
    backend = EngineBackend()
    for row in rows:
        settings = {"serving.max_context": row["max_context"], "kv.policy": row["kv_policy"]}
        assert row["settings"] == settings  # nothing else was changed
        scenario = api.load(workload, settings)
        capacity, slots = resolve_batch_slots(scenario, backend)
        memory = memory_summary(backend.plan_memory(scenario, slots))
        assert (row["batch_capacity"], row["batch_slots"]) == (capacity, slots)
        assert row["memory"] == {tier: asdict(usage) for tier, usage in memory.items()}
    by_point = {(r["kv_policy"], r["max_context"]): r["batch_slots"] for r in rows}
    if workload == SNAP:
        # The deployment's 32k budget is above an 8k context: the slot is the context, as
        # for full attention (the old plot shrank the budget to 2k and showed 4x the slots).
        assert by_point[("snapstream", 8192)] == by_point[("full", 8192)]
        assert by_point[("snapstream", 131072)] > 3 * by_point[("full", 131072)]


def test_an_explicit_batch_runs_as_given_up_to_what_memory_holds() -> None:
    """SambaStack's `auto` runs a power of two (128 SnapStream slots at 128k), but an
    explicit batch runs as `rdu-sim run` runs it: up to what memory holds (158 beside the
    query weights' slices; `auto` under any batch_programs would stop at the 136 beside them
    whole), not the capacity; a batch past memory's count is left out."""
    holds = EngineBackend().memory_capacity(api.load(SNAP))
    assert holds == 158
    rows = studies.decode_over_batches(SNAP, [64, 128, holds, holds + 11], policies=["snapstream"])
    assert [r["batch_slots"] for r in rows] == [64, 128, holds]
    assert {r["batch_capacity"] for r in rows} == {128}
    [row] = studies.plan_over_contexts(
        SNAP, [131072], policies=["snapstream"], overrides={"serving.batch_slots": holds}
    )
    assert (
        row["batch_slots"]
        == holds
        == api.run(SNAP, {"serving.batch_slots": holds, "serving.requests": 1}).batch_slots
    )
    [step] = studies.decode_over_contexts(SNAP, [131072], policies=["snapstream"], batch=holds)
    assert step["batch_slots"] == holds


def test_a_run_of_a_point_reports_the_plotted_memory() -> None:
    """End to end on a cheap point: the run's JSON memory and slots are the plot's (HBM and
    DDR: SRAM holds the running kernel's buffers, which only a run that simulates steps
    knows, so the plan says 0 and the run its peak)."""
    [row] = studies.plan_over_contexts(LLAMA, [4096], policies=["snapstream"])
    run = api.run(LLAMA, {**row["settings"], "serving.requests": 2}).to_dict()
    keys = ("batch_capacity", "batch_slots", "memory_capacity", "capacity_limit", "capacity")
    assert {k: run[k] for k in keys} == {k: row[k] for k in keys}
    assert {t: run["memory"][t] for t in ("hbm", "ddr")} == {
        t: row["memory"][t] for t in ("hbm", "ddr")
    }
    assert row["memory"]["sram"]["used_bytes"] == 0 < run["memory"]["sram"]["used_bytes"]


def _note(fig: Any) -> str:
    label = fig._supxlabel  # the figure-level label note_settings writes (wrapped)
    return "" if label is None else " ".join(str(label.get_text()).split())


def test_a_study_that_changes_the_workload_says_so_on_the_figure() -> None:
    plain = studies.plan_over_contexts(LLAMA, [2048, 8192])
    note = _note(plots.batch_capacity(plain))
    assert note.endswith(
        "each point: the workload with serving.max_context = the context; kv.policy = the policy"
    )
    shrunk = studies.plan_over_contexts(LLAMA, [2048, 8192], snapstream_ratio=4, batch=2)
    snap = {r["max_context"]: r for r in shrunk if r["kv_policy"] == "snapstream"}
    assert snap[2048]["settings"]["kv.budget"] == 512
    assert snap[8192]["settings"]["kv.budget"] == 2048
    for fig in (plots.batch_capacity(shrunk), plots.memory_footprint(shrunk)):
        assert "kv.budget in {512, 2048}" in _note(fig)
    # run would use the workload's 16: the memory is planned for 2; the capacity is not
    # the batch a point runs, and its plot says so
    assert "serving.batch_slots = 2;" in _note(plots.memory_footprint(shrunk))
    assert "serving.batch_slots = 2 (the batch a point runs, not its capacity)" in _note(
        plots.batch_capacity(shrunk)
    )
    step = studies.decode_step_timing(
        LLAMA, policy="snapstream", context=8192, batch=2, snapstream_budget=1024
    )
    assert step["settings"]["kv.budget"] == 1024 and step["batch"] == 2
    assert "kv.budget = 1024" in _note(plots.roofline(step))


def test_the_roofline_of_a_gpu_step_has_the_gpus_roofs() -> None:
    """A GPU has no DDR tier (no DDR roof) and its roofs are its own; the step's kernels are
    the fusion level's (partial on a GPU), never above the HBM roof at their intensity."""
    dgx = ROOT / "hw_configs" / "dgx-h100.yaml"
    step = studies.decode_step_timing(
        ROOT / "workloads" / "llama3.1-70b-decode.yaml", {"hardware": str(dgx)}, batch=8
    )
    assert step["hardware"] == {
        "peak_flops": 989e12,
        "hbm_bandwidth": 3.35e12,
        "ddr_bandwidth": 0.0,
    }
    assert any(k["name"] == "decoder:attn.flash" for k in step["kernels"])
    for kernel in step["kernels"]:
        moved = kernel["bytes_by_tier"]["hbm"] + kernel["bytes_by_tier"]["ddr"]
        if kernel["flops"] and moved:
            achieved = kernel["flops"] / kernel["time_s"]
            assert achieved <= 3.35e12 * kernel["flops"] / moved
    plots.roofline(step)  # draws


def test_a_plot_of_a_workload_notes_its_set_edits() -> None:
    """``rdu-sim plot KIND WORKLOAD --set ...``: the figure says what the edits changed, for
    a run's plots (latency, occupancy) as for a study's (capacity)."""
    from rdu_sim.cli.plot_cmd import _simulate

    edit = ("serving.batch_slots=2",)
    run = _simulate("latency", Path(LLAMA), edit, [4096], ["full"], 4)
    assert run["batch_slots"] == 2 and run["settings"] == {"serving.batch_slots": 2}
    for fig in (plots.latency_distribution(run), plots.occupancy_timeline(run)):
        assert _note(fig) == "each point: the workload with serving.batch_slots = 2"
    rows = _simulate("capacity", Path(LLAMA), edit, [4096], ["full"], 4)
    assert (
        "each point: the workload with serving.batch_slots = 2 (the batch a point runs, not "
        "its capacity); serving.max_context"
    ) in _note(plots.batch_capacity(rows))


def test_the_capacity_plot_says_what_it_counts_beside_what_memory_holds() -> None:
    """The trial's llama3.1-8b-1socket: memory holds 12 and 3 full-attention slots at 32k
    and 128k (the memory plot's bars), the stack's power-of-two programs run 8 and 2 (the
    capacity plot's line). The capacity plot draws both, says which is which, and says the
    memory plan's serving.batch_slots {12, 3} is not what it plots."""
    rows = studies.plan_over_contexts(LLAMA, [32768, 131072], policies=["full", "snapkv"])
    full = [r for r in rows if r["kv_policy"] == "full"]
    assert [(r["batch_capacity"], r["memory_capacity"]) for r in full] == [(8, 12), (2, 3)]
    assert {r["capacity_limit"] for r in full} == {"batch_programs"}
    memory = plots.memory_footprint(full)
    ticks = [t.get_text() for t in memory.axes[0].get_xticklabels()]
    assert ticks == ["32k\n12 slots\n12 fit", "128k\n3 slots\n3 fit"]
    assert "each bar: one socket's memory planned for the slots under it" in _note(memory)
    fig = plots.batch_capacity(rows)
    (ax,) = fig.axes
    note = _note(fig)
    assert note.startswith("batch capacity: the slots 'auto' runs")
    assert "full at 32k: serving.batch_slots sets 12; at most 12 fit beside the weights" in note
    assert "serving.batch_slots in {12, 3} (the batch a point runs, not its capacity)" in note
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "none"]
    assert [12.0, 3.0] in [list(line.get_ydata()) for line in hollow]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "snapkv (= full)" in texts  # the same points: said, and not hidden
    full_line, snapkv_line = (ax.lines[0], ax.lines[2])
    assert list(full_line.get_ydata()) == list(snapkv_line.get_ydata())
    assert snapkv_line.get_marker() != full_line.get_marker()
    assert snapkv_line.get_markersize() < full_line.get_markersize()
