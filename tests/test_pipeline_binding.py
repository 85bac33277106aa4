"""A pipeline's binding stage: the reports measure the slowest stage, not the first; the
bubble splits into fill and drain and stage imbalance; ``parallelism.stage_layers`` sets the
layer split; the trace holds every stage; the bubble's words say one batch is in flight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.stages import pipeline_stages
from rdu_sim.config.errors import ConfigError
from rdu_sim.engine.for_hardware import engine_for
from rdu_sim.engine.pipeline import bubble_shares, run_pipeline
from rdu_sim.report.bound import BUBBLE_CAVEAT, bubble_words, step_bound, step_parts
from rdu_sim.shapes import StepShape

LLAMA70 = "workloads/llama3.1-70b-decode.yaml"
GPT_OSS = "workloads/gpt-oss-120b-8socket.yaml"
PP2 = {"hardware": "sn40l-16", "parallelism.tp": 8, "parallelism.pp": 2, "serving.batch_slots": 8}
LIGHT_FIRST = {**PP2, "parallelism.stage_layers": [10, 70]}


@pytest.mark.parametrize(("stages", "micro"), [(2, 1), (4, 4), (8, 3)])
def test_equal_stages_bubble_is_all_fill_and_drain(stages: int, micro: int) -> None:
    run = run_pipeline([0.01] * stages, micro, 0.0, None, 1, 100_000)
    fill_drain, imbalance = bubble_shares([0.01] * stages, micro, run.end_s)
    assert imbalance == pytest.approx(0.0, abs=1e-12)
    assert fill_drain == pytest.approx((stages - 1) / (micro + stages - 1), rel=1e-9)


def test_unequal_stages_bubble_is_fill_and_drain_plus_imbalance() -> None:
    times = [0.002, 0.005, 0.001, 0.003]
    run = run_pipeline(times, 6, 0.0, None, 1, 100_000)
    fill_drain, imbalance = bubble_shares(times, 6, run.end_s)
    assert fill_drain + imbalance == pytest.approx(run.bubble, rel=1e-12)
    # the binding stage idles only while the others run one micro-batch each
    assert fill_drain * run.end_s == pytest.approx(sum(times) - max(times), rel=1e-9)
    assert imbalance == pytest.approx(6 * (4 * 0.005 - sum(times)) / (4 * run.end_s), rel=1e-9)


def test_stage_layers_sets_each_stages_layers() -> None:
    model = api.load(LLAMA70, LIGHT_FIRST).model
    stages = pipeline_stages(model, 2, (10, 70))
    assert [(s.first_layer, s.end_layer) for s in stages] == [(0, 10), (10, 80)]
    # the default split by count is what an even stage_layers gives, to the byte
    default = api.step(api.load(LLAMA70, PP2), batch=8).detail
    even = api.step(api.load(LLAMA70, {**PP2, "parallelism.stage_layers": [40, 40]}), batch=8)
    assert even.detail.to_dict() == default.to_dict()


def test_the_step_reports_its_binding_stage_not_its_first() -> None:
    """Stage 0 holds 10 layers, stage 1 70: stage 1 binds. The step's totals, bound and parts
    are its devices' over the micro-batches, not stage 0's, the lightest."""
    scenario = api.load(LLAMA70, LIGHT_FIRST)
    program = Compiler(scenario).program(StepShape("decode", 8, 1, 4096))
    engine = engine_for(scenario)
    stages = [engine.simulate_step(stage) for stage in program.pipeline]
    timing = engine.simulate_step(program)
    pipeline = timing.pipeline
    assert pipeline is not None
    assert stages[1].device_s > 3 * stages[0].device_s
    assert pipeline["binding_stage"] == 1
    m = pipeline["micro_batches"]
    assert timing.busy_s == pytest.approx({k: v * m for k, v in stages[1].busy_s.items()})
    assert timing.bytes_by_tier["hbm"] == pytest.approx(stages[1].bytes_by_tier["hbm"] * m)
    assert pipeline["fill_drain"] + pipeline["imbalance"] == pytest.approx(pipeline["bubble"])
    assert pipeline["imbalance"] > 0.1
    bound = step_bound(timing, scenario.hardware)
    parts = step_parts(timing, bound)
    assert sum(parts.values()) == pytest.approx(timing.step_s, rel=1e-9)
    # the rest of the step beyond the binding stage's micro-batches: the fill and drain
    assert parts["pipeline"] == pytest.approx(timing.device_s - m * stages[1].device_s)


def test_step_console_names_the_binding_stage_and_json_its_layers() -> None:
    overrides = [arg for k, v in PP2.items() for arg in ("--set", f"{k}={v}")]
    args = ["step", LLAMA70, *overrides, "--set", "parallelism.stage_layers=[10, 70]"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "pipeline: 2 stages holding 10, 70 layers" in text
    assert "stage 1 binds (the slowest: the figures above are its devices" in text
    assert "the other stages waiting for it (stage imbalance" in text
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert data["pipeline"]["binding_stage"] == 1
    assert data["pipeline"]["stage_layers"] == [10, 70]


@pytest.mark.parametrize(
    ("layers", "words"),
    [
        ([40, 41], "[40, 41] add up to 81 layers; the llama-3.1-70b model has 80"),
        ([80], "gives 1 stages' layers for pp=2 stages"),
        ([0, 80], "must give every stage at least one layer, got [0, 80]"),
    ],
)
def test_a_bad_stage_layers_is_refused_naming_the_field(layers: list[int], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA70, {**PP2, "parallelism.stage_layers": layers})
    (issue,) = caught.value.issues
    assert (issue.file, issue.field) == (LLAMA70, "parallelism.stage_layers")
    assert words in issue.message


def test_stage_layers_without_a_pipeline_is_refused() -> None:
    """At pp 1 the only split is the whole model: the field would change nothing."""
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA70, {**PP2, "parallelism.pp": 1, "parallelism.stage_layers": [80]})
    (issue,) = caught.value.issues
    assert (issue.file, issue.field) == (LLAMA70, "parallelism.stage_layers")
    assert "[80] needs pp > 1" in issue.message


def test_stage_layers_inside_a_body_is_refused_in_one_line() -> None:
    args = ["--set", "hw.system.sockets=48", "--set", "parallelism.tp=1", "--batch", "4"]
    result = CliRunner().invoke(
        cli,
        [
            "step",
            "gpt-oss-120b-8socket",
            *args,
            "--set",
            "parallelism.pp=2",
            "--set",
            "parallelism.stage_layers=[17, 19]",
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert "gpt-oss-120b-8socket.yaml: parallelism.stage_layers: " in line
    assert "cuts the gpt-oss-120b model at layer 17, inside a body" in line


def test_the_trace_holds_every_stages_micro_batches_over_the_step(tmp_path: Path) -> None:
    """The trace holds both stages' sockets (not only the first stage's 0..7), each
    micro-batch on each stage at its start in the pipeline, the hand-offs between them, and
    spans the step (not only the first micro-batch, a third of it)."""
    overrides = [arg for k, v in PP2.items() for arg in ("--set", f"{k}={v}")]
    path = tmp_path / "pp.json"
    args = ["step", LLAMA70, *overrides, "--trace-sockets", "one", "--trace", str(path)]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    step = json.loads(result.output)
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "socket 0", 8: "socket 8"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    track = [e for e in slices if tracks[(e["pid"], e["tid"])] == "pipeline"]
    runs = sorted((e["pid"], e["name"]) for e in track if not e["name"].startswith("idle"))
    assert runs == [
        (0, "stage 0 micro-batch 0"),
        (0, "stage 0 micro-batch 1"),
        (8, "stage 1 micro-batch 0"),
        (8, "stage 1 micro-batch 1"),
    ]
    device_us = (step["step_s"] - step["runtime_s"]) * 1e6
    for pid in (0, 8):  # each stage's track covers the device's step: runs and idle gaps
        assert sum(e["dur"] for e in track if e["pid"] == pid) == pytest.approx(device_us)
    sends = [e for e in slices if tracks[(e["pid"], e["tid"])] == "hand-off"]
    assert len(sends) == 2 and all(e["pid"] == 0 and e["dur"] > 0 for e in sends)
    # stage 1's kernels run on its own sockets, after stage 0's first micro-batch
    first = min(e["ts"] for e in slices if e["pid"] == 8 and tracks[(8, e["tid"])] == "kernel")
    (run0,) = [e for e in track if e["name"] == "stage 0 micro-batch 0"]
    assert first >= run0["ts"] + run0["dur"]
    end = max(e["ts"] + e["dur"] for e in slices)
    assert end == pytest.approx(step["step_s"] * 1e6, rel=1e-9)


def test_the_bubbles_words_say_one_batch_is_in_flight() -> None:
    words = bubble_words(0.338)
    assert words.startswith("the pipeline's bubble 33.8% of its stages' time (only one batch")
    assert BUBBLE_CAVEAT in words and "Left out" in words
    assert bubble_words(0.338, caveat=False) == "the pipeline's bubble 33.8% of its stages' time"
