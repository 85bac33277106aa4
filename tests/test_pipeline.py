"""Pipeline parallelism: the stages' layers, the bubble against its closed form, hand-offs on
the link between stages, and a compiled pipelined step equal to its stages run through the
pipeline."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.stages import pipeline_stages
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.engine.for_hardware import engine_for
from rdu_sim.engine.pipeline import run_pipeline
from rdu_sim.models.layers import body_starts
from rdu_sim.models.presets import get_model
from rdu_sim.shapes import StepShape

LLAMA70 = "workloads/llama3.1-70b-decode.yaml"
GPT_OSS = "workloads/gpt-oss-120b-8socket.yaml"
PP2 = {"hardware": "sn40l-16", "parallelism.tp": 8, "parallelism.pp": 2, "serving.batch_slots": 8}


@pytest.mark.parametrize(("stages", "micro"), [(2, 1), (2, 4), (4, 4), (4, 16), (8, 3)])
def test_the_bubble_matches_its_closed_form(stages: int, micro: int) -> None:
    run = run_pipeline([0.01] * stages, micro, 0.0, None, 1, 100_000)
    assert run.end_s == pytest.approx((micro + stages - 1) * 0.01, rel=1e-12)
    assert run.bubble == pytest.approx((stages - 1) / (micro + stages - 1), rel=1e-9)


def test_unequal_stages_wait_for_the_slowest() -> None:
    # a line of stages with room between them: the sum once, then the slowest per micro-batch
    times = [0.002, 0.005, 0.001, 0.003]
    run = run_pipeline(times, 6, 0.0, None, 1, 100_000)
    assert run.end_s == pytest.approx(sum(times) + 5 * max(times), rel=1e-12)


def test_hand_offs_cross_the_link_between_stage_devices() -> None:
    system = api.load(LLAMA70, PP2).hardware.system
    link = system.intra_node_link
    nbytes = 8 * 8192 * 2.0
    run = run_pipeline([0.004] * 2, 4, nbytes, system, 8, 100_000)
    crossing = nbytes / link.bandwidth + link.latency
    assert run.end_s == pytest.approx(2 * 0.004 + crossing + 3 * 0.004, rel=1e-9)
    # the hand-off is reported: its bytes, link, time alone and as simulated, sends a step
    (hand_off,) = run.hand_offs
    assert (hand_off.stage, hand_off.bytes, hand_off.link, hand_off.sends) == (
        0,
        nbytes,
        "intra_node_link",
        4,
    )
    assert hand_off.estimate_s == pytest.approx(crossing, rel=1e-12)
    assert hand_off.simulated_mean_s == pytest.approx(crossing, rel=1e-9)  # stages outlast it
    assert run_pipeline([0.004] * 2, 4, nbytes, None, 8, 100_000).hand_offs == ()


def test_hand_offs_name_the_link_class_they_cross() -> None:
    """Stages of 4 devices on 4-device nodes, two nodes a rack: the boundaries alternate
    between the nodes of a rack and the racks."""
    system = api.load(LLAMA70, PP2).hardware.system
    racks = SystemConfig.model_validate(
        {
            **system.model_dump(),
            "sockets": 16,
            "sockets_per_node": 4,
            "nodes_per_rack": 2,
            "inter_rack_link": {"bandwidth": 10e9, "latency": 5e-6},
        }
    )
    run = run_pipeline([0.004] * 4, 2, 1024.0, racks, 4, 100_000)
    assert [h.link for h in run.hand_offs] == [
        "inter_node_link",
        "inter_rack_link",
        "inter_node_link",
    ]
    assert run.hand_offs[1].estimate_s == pytest.approx(5e-6 + 1024 / 10e9, rel=1e-12)


def test_stages_cut_the_layers_at_bodies() -> None:
    deepseek = pipeline_stages(get_model("deepseek-r1"), 4)
    assert [(s.first_layer, s.end_layer) for s in deepseek] == [
        (0, 15),
        (15, 30),
        (30, 46),
        (46, 61),
    ]
    gpt = pipeline_stages(get_model("gpt-oss-120b"), 4)  # bodies of two layers stay whole
    assert all(s.first_layer % 2 == 0 for s in gpt) and gpt[-1].end_layer == 36
    assert deepseek[0].first and deepseek[-1].last and not deepseek[1].first


@pytest.mark.parametrize("name", ["deepseek-r1", "gpt-oss-120b", "gpt-oss-20b", "llama3.1-8b"])
def test_every_stage_holds_a_whole_body_up_to_one_stage_a_body(name: str) -> None:
    """Any pp up to the model's bodies cuts it into non-empty runs of whole bodies that tile
    the stack; one more stage than bodies has no such cut."""
    model = get_model(name)
    starts = body_starts(model)
    for pp in range(1, len(starts) + 1):
        stages = pipeline_stages(model, pp)
        assert all(s.layers > 0 and s.first_layer in starts for s in stages), (pp, stages)
        assert [s.end_layer for s in stages[:-1]] == [s.first_layer for s in stages[1:]]
        assert (stages[0].first_layer, stages[-1].end_layer) == (0, model.layers)
    with pytest.raises(ValueError, match="leave a stage empty"):
        pipeline_stages(model, len(starts) + 1)


def test_gpt_oss_stages_are_pairs_at_one_stage_a_body() -> None:
    assert len(body_starts(get_model("gpt-oss-120b"))) == 18  # 36 layers in pairs
    stages = pipeline_stages(get_model("gpt-oss-120b"), 18)
    assert [(s.first_layer, s.layers) for s in stages] == [(2 * i, 2) for i in range(18)]


@pytest.mark.parametrize("pp", [19, 36])
def test_a_pipeline_stage_without_a_body_is_refused(pp: int) -> None:
    """gpt-oss keeps its sliding and full layers whole in pairs: 18 bodies, so pp=19 would
    leave a stage with no layer (it used to run one at 0 s)."""
    with pytest.raises(ConfigError) as caught:
        api.load(GPT_OSS, {"hw.system.sockets": 48, "parallelism.tp": 1, "parallelism.pp": pp})
    (issue,) = caught.value.issues
    assert (issue.file, issue.field) == (GPT_OSS, "parallelism.pp")
    assert issue.message == (
        f"pp={pp} would leave a pipeline stage with no layers: the gpt-oss-120b model's 36 "
        "layers are 18 layer bodies, kept whole on one stage (layers in pairs that loop as "
        "one kernel); use pp <= 18 (from overrides: parallelism.pp)"
    )
    assert api.load(GPT_OSS, {"hw.system.sockets": 48, "parallelism.tp": 1, "parallelism.pp": 18})


def test_the_cli_refuses_an_empty_stage_in_one_line() -> None:
    args = ["--set", "hw.system.sockets=48", "--set", "parallelism.tp=1", "--batch", "4"]
    result = CliRunner().invoke(
        cli, ["step", "gpt-oss-120b-8socket", *args, "--set", "parallelism.pp=36"]
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert (
        line.startswith("error: ") and "gpt-oss-120b-8socket.yaml: parallelism.pp: pp=36 " in line
    )
    assert "18 layer bodies" in line and "use pp <= 18" in line


def test_a_pipelined_step_is_its_stages_through_the_pipeline() -> None:
    scenario = api.load(LLAMA70, PP2)
    program = Compiler(scenario).program(StepShape("decode", 8, 1, 4096))
    assert len(program.pipeline) == 2 and program.pipeline_micro_batches == 2
    # each stage holds its layers' weights: half the decoder each, the embedding and the head
    # on the first and the last
    names = [[k.name for k in stage.kernels] for stage in program.pipeline]
    assert names == [["embedding", "decoder"], ["decoder", "lm_head"]]
    assert [next(k.calls for k in s.kernels if k.name == "decoder") for s in program.pipeline] == [
        40,
        40,
    ]
    timing = api.step(scenario, batch=8).detail
    pipeline = timing.pipeline
    assert pipeline is not None
    stage_s = pipeline["stage_s"]
    run = run_pipeline(
        stage_s, 2, program.pipeline_transfer_bytes, scenario.hardware.system, 8, 10**6
    )
    assert timing.device_s == pytest.approx(run.end_s, rel=1e-12)
    assert timing.to_dict()["pipeline"]["bubble"] == pytest.approx(run.bubble)
    assert timing.to_dict()["pipeline"]["hand_offs"] == [h.to_dict() for h in run.hand_offs]


def test_a_pipelined_step_reports_its_hand_offs_and_counts_them_in_p2p() -> None:
    """One micro-batch: the step is the stages' times plus the hand-off's, which the
    step's ``pipeline.hand_offs`` says; the step's totals are its binding stage's devices',
    so its bytes are in ``p2p`` when stage 0 binds (its first device sends it) and not when
    the last stage does (it sends none)."""
    scenario = api.load(LLAMA70, {**PP2, "parallelism.micro_batches": 1})
    program = Compiler(scenario).program(StepShape("decode", 8, 1, 4096))
    engine = engine_for(scenario)
    timing = engine.simulate_step(program)
    pipeline = timing.to_dict()["pipeline"]
    (hand_off,) = pipeline["hand_offs"]
    link = scenario.hardware.system.intra_node_link
    nbytes = program.pipeline_transfer_bytes
    assert nbytes > 0
    assert hand_off == {
        "stage": 0,
        "bytes": nbytes,
        "link": "intra_node_link",
        "estimate_s": pytest.approx(link.latency + nbytes / link.bandwidth, rel=1e-12),
        "simulated_mean_s": pytest.approx(link.latency + nbytes / link.bandwidth, rel=1e-9),
        "sends": 1,
    }
    assert timing.device_s - sum(pipeline["stage_s"]) == pytest.approx(
        hand_off["estimate_s"], rel=1e-6
    )
    binding = pipeline["binding_stage"]
    stage = engine.simulate_step(program.pipeline[binding]).bytes_by_tier["p2p"]
    assert stage > 0  # the stage's own collectives
    sent = nbytes if binding == 0 else 0.0
    assert timing.bytes_by_tier["p2p"] == pytest.approx(stage + sent, rel=1e-12)
    for layers, sends in (([60, 20], nbytes), ([20, 60], 0.0)):
        split = {**PP2, "parallelism.micro_batches": 1, "parallelism.stage_layers": layers}
        scenario = api.load(LLAMA70, split)
        program = Compiler(scenario).program(StepShape("decode", 8, 1, 4096))
        engine = engine_for(scenario)
        timing = engine.simulate_step(program)
        heavy = 0 if sends else 1
        assert timing.pipeline is not None and timing.pipeline["binding_stage"] == heavy
        own = engine.simulate_step(program.pipeline[heavy]).bytes_by_tier["p2p"]
        assert timing.bytes_by_tier["p2p"] == pytest.approx(own + sends, rel=1e-12)


def test_a_stage_holds_its_layers_kv_cache() -> None:
    whole = Compiler(api.load(LLAMA70, {**PP2, "parallelism.pp": 1})).placement(8)
    staged = Compiler(api.load(LLAMA70, PP2)).placement(8)
    assert staged.tiers["hbm"].kv_bytes == pytest.approx(whole.tiers["hbm"].kv_bytes / 2, rel=1e-6)


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(ConfigError, match="pp=200 exceeds the") as caught:
        api.load(LLAMA70, {"parallelism.pp": 200, "parallelism.tp": 1, "hw.system.sockets": 4096})
    assert caught.value.issues[0].field == "parallelism.pp"


def test_a_pipelined_steps_memory_plan_holds_its_stages_sram_and_names_it() -> None:
    """The pipelined step's memory plan is its fullest stage's (its HBM): it held no SRAM,
    "0 B used", while that stage's kernels hold their stage buffers; it now is that stage's
    Program's plan, SRAM included, and `inspect graph` names the stage."""
    scenario = api.load(LLAMA70, PP2)
    program = Compiler(scenario).program(StepShape("decode", 8, 1, 1024))
    stage = program.placement.pipeline_stage
    assert stage in (0, 1)
    assert program.placement == program.pipeline[stage].placement
    held = program.placement.tiers["sram"].used_bytes
    assert held == math.ceil(program.pipeline[stage].sram_bytes) > 0
    overrides = [arg for key, value in PP2.items() for arg in ("--set", f"{key}={value}")]
    result = CliRunner().invoke(cli, ["inspect", "graph", LLAMA70, *overrides])
    assert result.exit_code == 0, result.output
    assert f"memory per socket of pipeline stage {stage} (its HBM the fullest)" in result.output
