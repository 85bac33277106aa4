"""Expert parallelism with data-parallel attention in a step: the all-to-alls the compiler
splices in (their groups and payloads), one socket's simulation equal to every socket's,
two-batch overlap's micro-batches, its first-come schedule on two streams (exact on hand-made
calls) and its cost (the stage-order schedule: tests/test_two_batch_overlap.py), and the
combinations refused with one error naming the field."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.expert_exchange import (
    dispatch_value_bytes,
    expert_exchange,
    micro_batch_shapes,
)
from rdu_sim.compiler.expert_load import ExpertLoad, expert_load_model
from rdu_sim.compiler.program import Program, StageProgram
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.experts import ExpertsConfig
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.engine.engine import simulate_step
from rdu_sim.engine.gpu.stream import Call, run_first_come
from rdu_sim.report.bound import step_bound
from rdu_sim.serving.backend import EngineBackend
from rdu_sim.shapes import StepShape

DEEPSEEK = "workloads/deepseek-r1-128k-full.yaml"
EP16 = {  # two 8-socket nodes: 8 attention ranks of 2 sockets, experts whole over 16
    "parallelism.tp": 2,
    "parallelism.dp_attention": 8,
    "parallelism.ep": 16,
    "serving.batch_slots": 4,
    "serving.max_context": 8192,
    "hw.system.sockets_per_node": 8,
}
DP16 = {  # the 256-user figure's data-parallel layout (rdu_sim/validate/suite.py)
    "parallelism.tp": 1,
    "parallelism.dp_attention": 16,
    "parallelism.ep": 16,
    "serving.batch_slots": 16,
    "serving.max_context": 4096,
    "kv.context_buckets": "pow2",
}
MOE_GPU = "workloads/qwen3-235b-a22b-16socket.yaml"
GPU_EP8 = {
    "hardware": "dgx-h100",
    "model": "qwen3-30b-a3b",
    "parallelism": {"tp": 1, "dp_attention": 8, "ep": 8},
    "serving.batch_slots": 8,
    "serving.max_context": 4096,
}


def uniform_load(
    tokens: int, experts: int, per_token: int, devices: int, loading: str
) -> ExpertLoad:
    """The busiest of ``devices`` devices when ``tokens`` tokens route uniformly."""
    return expert_load_model(ExpertsConfig(), experts, per_token, devices, 1, loading).load(tokens)


def test_the_exchange_splices_a_dispatch_and_a_combine_per_moe_layer() -> None:
    scenario = api.load(DEEPSEEK, EP16)
    program = Compiler(scenario).program(StepShape("decode", 4, 1, 4096))
    moe = next(k for k in program.kernels if k.name == "decoder_moe")
    specs = {s.name: s.collective for s in moe.stages if s.collective is not None}
    dispatch = specs["moe.experts_gate_up.dispatch"]
    combine = specs["moe.experts_down.combine"]
    assert dispatch is not None and combine is not None
    assert (dispatch.kind, dispatch.group, combine.group) == ("alltoall", 16, 16)
    exchange = expert_exchange(scenario)
    assert exchange is not None
    tokens = math.ceil(4 / 2)  # a socket's share of its rank's 4 tokens
    routing = 8 * (4 + 4)  # each expert's int32 index and FP32 weight
    assert dispatch.bytes == tokens * (7168 * dispatch_value_bytes("bf16") + routing)
    load = exchange.load(4)
    assert combine.bytes == pytest.approx(tokens * 7168 * 2 * load.imbalance, rel=1e-12)
    # inside the rank: the attention's all-reduce over tp, the combine's tokens gathered back
    assert specs["attn.o_proj.allreduce"].group == 2
    assert specs["moe.combine.allgather"].kind == "allgather"
    assert program.devices == 16 and program.tp == 2


def test_an_all_to_alls_sent_bytes_are_the_steps_p2p_bytes() -> None:
    """``bytes_per_step`` of an all-to-all is the tokens a socket holds (one copy each) times
    the calls; ``sent_bytes_per_step`` what it sends, every expert's copy: with tp 1 the
    dispatch's and combine's together are all the step's P2P bytes."""
    data = api.step(DEEPSEEK, DP16).detail.to_dict()
    collectives = data["collectives"]
    assert [c["kind"] for c in collectives] == ["alltoall", "alltoall"]
    for c in collectives:
        assert c["sent_bytes_per_step"] == c["sent_bytes"] * c["calls_per_step"]
        # 8 experts a token on 16 sockets of one node: auto sends the throughput form, a
        # token once to each socket it needs (15 x 0.334), not once per expert (7.5)
        assert c["algorithm"] == "hierarchical"
        assert c["sent_bytes"] == pytest.approx(5.0 * c["bytes"], rel=0.01)
    sent = sum(c["sent_bytes_per_step"] for c in collectives)
    assert sent == pytest.approx(data["bytes_by_tier"]["p2p"], rel=1e-12)
    plain = api.step("workloads/llama3.1-8b-8socket.yaml").detail.to_dict()["collectives"]
    assert plain and not any("sent_bytes" in c for c in plain)


def test_one_socket_simulated_equals_every_socket() -> None:
    one = api.step(DEEPSEEK, EP16).step_s
    every = api.step(DEEPSEEK, {**EP16, "engine.all_sockets": True}).step_s
    assert one == every


@pytest.mark.parametrize("tokens", [100, 1000])
@pytest.mark.parametrize("layout", [{}, DP16], ids=["tp16", "dp16-ep16"])
def test_routed_expert_loads_run_where_static_ones_do_within_the_roofline(
    layout: dict[str, object], tokens: int
) -> None:
    """Expert weights loaded after the router (``routed``) never deadlock a step that runs
    with the static bound (a 1000-token prefill of the data-parallel layout did: its shared
    expert's output waited on two slots for the routed experts' combine), no step is faster
    than its busiest resource, and the routed experts read no more than the static bound."""
    shape = StepShape("prefill", 1, tokens, 0)
    reads: dict[str, dict[str, float]] = {}
    for loading in ("static", "routed"):
        scenario = api.load(DEEPSEEK, {**layout, "moe_expert_loading": loading})
        cost = api.step(scenario, phase="prefill", tokens=tokens)
        assert cost.step_s >= step_bound(cost.detail, scenario.hardware).limit_s
        moe = next(k for k in Compiler(scenario).program(shape).kernels if k.name == "decoder_moe")
        reads[loading] = {s.name: s.reads.get("hbm", 0.0) / s.passes for s in moe.stages}
    experts = [name for name in reads["routed"] if name.startswith("moe.experts_")]
    for name in experts:
        assert reads["routed"][name] <= reads["static"][name], name
    assert sum(reads["routed"][name] for name in experts) > 0


def test_a_long_data_parallel_prefill_runs_at_its_link_bound() -> None:
    """The data-parallel layout's prefill is link-bound (the all-to-alls) and scales with
    its tokens: the shared expert, bypassing the dispatch and the combine, must run ahead of
    them by the chunks they hold back. On two slots it stalled the layer's fork: at 3,000
    tokens the branches stopped overlapping (2.5x the link bound), at 6,000 (64 tiles, a
    chunk of 16) the pipeline deadlocked."""
    scenario = api.load(DEEPSEEK, {**DP16, "serving.max_context": 8192})
    per_token = []
    for tokens in (1000, 3000, 6000, 8000):
        cost = api.step(scenario, phase="prefill", tokens=tokens)
        bound = step_bound(cost.detail, scenario.hardware)
        assert bound.bound == "link"
        assert bound.limit_s <= cost.step_s <= 1.1 * bound.limit_s, tokens
        per_token.append(cost.step_s / tokens)
    assert max(per_token) <= 1.05 * min(per_token)


def test_busiest_device_load_at_the_ends() -> None:
    # one token, one expert each: 16 devices, the busiest holds it whole
    assert uniform_load(1, 256, 1, 16, "routed").pairs == pytest.approx(1)
    # a huge balanced batch: the busiest is the mean to within a few per cent
    big = uniform_load(500_000, 256, 8, 32, "routed")
    assert 1 < big.imbalance < 1.01
    assert big.distinct == pytest.approx(256 / 32)  # every expert of the device touched


def test_two_streams_overlap_one_ones_communication_with_the_others_compute() -> None:
    # per stream: compute 1 s, all-to-all 1 s, compute 1 s; kernel 1 communicates
    streams = [[Call(0, 1.0), Call(1, 1.0), Call(2, 1.0)]] * 2
    overlapped = run_first_come(streams, [False, True, False], 0.0, None, 1.0, 10_000)
    assert overlapped.end_s == pytest.approx(4.0)  # one after another: 6 s
    # the SMs the communication holds slow every computing call down
    slowed = run_first_come(streams, [False, True, False], 0.0, None, 1.5, 10_000)
    assert slowed.end_s == pytest.approx(1.5 + 1.5 + 1.5 + 1.5)
    # launches: a call waits for the host to have launched it
    launched = run_first_come(streams, [False, True, False], 2.0, None, 1.0, 10_000)
    assert launched.end_s == pytest.approx(12.0 + 1.0)  # the last of 6 launches, then its call


def test_micro_batches_split_slots_or_a_lone_prompt() -> None:
    assert micro_batch_shapes(StepShape("decode", 5, 1, 1024)) == (
        StepShape("decode", 3, 1, 1024),
        StepShape("decode", 2, 1, 1024),
    )
    first, second = micro_batch_shapes(StepShape("prefill", 1, 1000, 0))
    assert (first.tokens, first.cache_len, second.tokens, second.cache_len) == (500, 0, 500, 500)
    assert micro_batch_shapes(StepShape("decode", 1, 1, 1024)) == ()


def test_two_batch_overlap_on_a_gpu_hides_communication_at_a_cost() -> None:
    # a prompt long enough that the hidden all-to-all outweighs the micro-batches' doubled
    # kernel boundaries (at 2,048 tokens the H100's 6.3 us boundaries cost more than it hides)
    plain = api.step(MOE_GPU, GPU_EP8, phase="prefill", tokens=4096)
    overlap = {**GPU_EP8, "parallelism.two_batch_overlap": True}
    hidden = api.step(MOE_GPU, overlap, phase="prefill", tokens=4096)
    assert hidden.step_s < plain.step_s
    names = {k.name.split("/")[0] for k in hidden.detail.kernels}
    assert names == {"mb0", "mb1"}
    # holding more SMs for communication costs compute: slower with more held
    costly = api.step(
        MOE_GPU, {**overlap, "parallelism.comm_sms": 100}, phase="prefill", tokens=4096
    )
    assert costly.step_s > hidden.step_s


@pytest.mark.parametrize(
    ("workload", "sets", "field", "message"),
    [
        (
            DEEPSEEK,
            {**EP16, "hw.system.topology": "ring"},
            "parallelism.ep",
            "a 'ring' wiring links each socket to its neighbours only",
        ),
        (
            DEEPSEEK,
            {**EP16, "parallelism.two_batch_overlap": True},
            "parallelism.two_batch_overlap",
            "SN40L's fused layer kernels already stream the all-to-all",
        ),
        (
            MOE_GPU,
            {**GPU_EP8, "parallelism.two_batch_overlap": True, "fusion": "full"},
            "parallelism.two_batch_overlap",
            "fusion full makes a layer one kernel",
        ),
        (
            MOE_GPU,
            {**GPU_EP8, "parallelism.two_batch_overlap": True, "parallelism.comm_sms": 132},
            "parallelism.comm_sms",
            "leave none of the 132",
        ),
        (
            MOE_GPU,
            {**GPU_EP8, "parallelism.comm_sms": 60},
            "parallelism.comm_sms",
            "it needs two_batch_overlap: true, got 60 without it",
        ),
        (
            DEEPSEEK,
            {**EP16, "parallelism.comm_sms": 50},
            "parallelism.comm_sms",
            "it needs two_batch_overlap: true, got 50 without it",
        ),
        (
            MOE_GPU,
            {**GPU_EP8, "parallelism.overlap_schedule": "stage_order"},
            "parallelism.overlap_schedule",
            "it needs two_batch_overlap: true, got 'stage_order' without it",
        ),
        (
            DEEPSEEK,
            {"parallelism.overlap_schedule": "stage_order"},
            "parallelism.overlap_schedule",
            "sets the experts' all-to-all, which runs only with",
        ),
        (
            MOE_GPU,
            {
                **GPU_EP8,
                "parallelism.two_batch_overlap": True,
                "parallelism.overlap_schedule": "fifo",
            },
            "parallelism.overlap_schedule",
            "first_come",
        ),
        (
            DEEPSEEK,
            {"parallelism.two_batch_overlap": True},
            "parallelism.two_batch_overlap",
            "sets the experts' all-to-all, which runs only with",
        ),
        (
            MOE_GPU,
            {
                **GPU_EP8,
                "parallelism": {"tp": 1, "dp_attention": 4, "ep": 4, "pp": 2},
                "parallelism.two_batch_overlap": True,
            },
            "parallelism.two_batch_overlap",
            "not modelled together",
        ),
    ],
)
def test_refused_with_one_error_naming_the_field(
    workload: str, sets: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        api.load(workload, sets)
    (issue,) = caught.value.issues
    assert issue.field == field


def test_comm_sms_at_its_default_stays_when_two_batch_overlap_goes() -> None:
    """The shipped two-batch-overlap files write DeepEP's default ``comm_sms: 20``: turning
    the overlap off leaves it, and the step is the one without the field, while another
    value without the overlap is refused (test above)."""
    ep72 = "workloads/ep/deepseek-v3-h100-ep72-decode.yaml"
    off = {"parallelism.two_batch_overlap": False}
    assert api.load(ep72, {**off, "parallelism.comm_sms": 20}) == api.load(ep72, off)
    with pytest.raises(ConfigError, match="got 21 without it"):
        api.load(ep72, {**off, "parallelism.comm_sms": 21})


@pytest.mark.parametrize(("tokens", "devices"), [(64, 32), (256, 32), (1024, 64)])
def test_busiest_device_load_against_sampled_routings(tokens: int, devices: int) -> None:
    import numpy as np

    rng = np.random.default_rng(5)
    per = 256 // devices
    busiest = []
    for _ in range(400):
        experts = np.argsort(rng.random((tokens, 256)), axis=1)[:, :8]
        busiest.append(np.bincount((experts // per).ravel(), minlength=devices).max())
    load = uniform_load(tokens, 256, 8, devices, "routed")
    assert load.pairs == pytest.approx(np.mean(busiest), rel=0.05)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_ranks_running_different_shapes_time_the_experts_on_their_tokens_together(
    phase: str,
) -> None:
    """A step whose ranks send the experts ``joint_tokens`` together (serving.lockstep,
    ranks running different shapes): with every rank's copy of this shape's tokens it is
    the symmetric step exactly; with one rank's prompt beside 15 ranks' 16 decode slots, the
    experts' load and the all-to-alls' payload shrink, and the step is faster but never
    below its busiest resource."""
    scenario = api.load(DEEPSEEK, DP16)
    backend = EngineBackend()
    shape = StepShape(phase, 1, 1000, 0) if phase == "prefill" else StepShape(phase, 16, 1, 2048)
    alone = backend.step_cost(scenario, shape)
    every = backend.step_cost(scenario, replace(shape, joint_tokens=16 * shape.rows))
    assert every.step_s == alone.step_s
    fewer = shape.rows + 15 * 16 if phase == "prefill" else 3 * shape.rows  # 13 ranks idle
    joint = backend.step_cost(scenario, replace(shape, joint_tokens=fewer))
    assert joint.step_s < alone.step_s
    assert joint.step_s >= step_bound(joint.detail, scenario.hardware).limit_s


def test_a_joint_step_is_continuous_at_the_symmetric_one() -> None:
    """Two-batch overlap on 8 GPU ranks: one token more than every rank's copy barely moves
    the step (each micro-batch carries its share of the joint tokens), and half the ranks
    idle never makes it slower."""
    scenario = api.load(MOE_GPU, {**GPU_EP8, "parallelism.two_batch_overlap": True})
    backend = EngineBackend()
    shape = StepShape("prefill", 1, 2048, 0)
    alone = backend.step_cost(scenario, shape).step_s
    one_more = backend.step_cost(scenario, replace(shape, joint_tokens=8 * 2048 + 1)).step_s
    assert one_more == pytest.approx(alone, rel=0.01)
    half = backend.step_cost(scenario, replace(shape, joint_tokens=4 * 2048)).step_s
    assert half <= alone


@pytest.mark.parametrize("rows", [1, 3, 1001])
def test_the_joint_combine_payload_is_continuous_where_tp_splits_a_ranks_tokens(
    rows: int,
) -> None:
    """tp 2: a device carries ceil(rows / 2) of its rank's tokens. The busiest device's
    combine with one joint token more than every rank's copy is the symmetric one's within
    that token's share, also where 2 does not divide the rows."""
    scenario = api.load(DEEPSEEK, EP16)

    def combine_bytes(shape: StepShape) -> float:
        moe = next(k for k in Compiler(scenario).program(shape).kernels if k.name == "decoder_moe")
        specs = {s.name: s.collective for s in moe.stages if s.collective is not None}
        combine = specs["moe.experts_down.combine"]
        assert combine is not None
        return combine.bytes

    shape = StepShape("prefill", 1, rows, 0)
    symmetric = combine_bytes(shape)
    joint = combine_bytes(replace(shape, joint_tokens=8 * rows + 1))
    assert symmetric <= joint <= 1.1 * symmetric  # (a payload of rows / 2, not ceil: 0.5x)
    # what the busiest device returns of every rank's tokens does not grow as this rank's
    # rows shrink (the rounding of a device's share, ceil(rows / 2), stays a rounding)
    if rows < 1001:
        fewer = combine_bytes(replace(StepShape("decode", rows, 1, 4096), joint_tokens=8199))
        more = combine_bytes(replace(StepShape("decode", rows + 1, 1, 4096), joint_tokens=8199))
        assert fewer <= 1.01 * more


def test_a_micro_batch_keeps_its_share_of_the_joint_tokens() -> None:
    shape = StepShape("prefill", 1, 2048, 0, joint_tokens=2048 + 15 * 16)
    first, second = micro_batch_shapes(shape)
    assert (first.rows, second.rows) == (1024, 1024)
    assert first.joint_tokens == second.joint_tokens == (2288 + 1) // 2
    symmetric = StepShape("decode", 16, 1, 2048, joint_tokens=16 * 8)
    assert [part.joint_tokens for part in micro_batch_shapes(symmetric)] == [64, 64]
    assert micro_batch_shapes(StepShape("decode", 16, 1, 2048))[0].joint_tokens == 0


EP64_RACKS = "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml"


@pytest.mark.parametrize(
    ("phase", "network", "faster", "convention"),
    [
        ("decode", "2 GB/s", "throughput", "direct"),
        ("prefill", "25 GB/s", "low_latency", "hierarchical"),
    ],
)
def test_auto_runs_the_form_its_estimate_says_is_faster(
    phase: str, network: str, faster: str, convention: str
) -> None:
    """On SN40L ``all_to_all: auto`` runs the forms that are faster on the ports the calls
    share, here each call's form whose idle-link estimate is smaller too, where DeepEP's
    convention (low latency in decode, throughput in prefill) is the slower one: in decode
    at 2 GB/s between racks the throughput form crosses the network once per rack (340.8 ms
    a step by the convention, 127.7 ms); in prefill at 25 GB/s the forwarding hop costs the
    P2P port the network traffic also crosses (953.9 ms, 845.9 ms). The report names the
    rule and both estimates."""
    steps = {
        mode: api.step(
            EP64_RACKS,
            {"parallelism.all_to_all": mode, "hw.system.inter_rack_link.bandwidth": network},
            phase=phase,
            batch=1 if phase == "prefill" else None,
            tokens=256 if phase == "prefill" else None,
        )
        for mode in ("auto", "throughput", "low_latency")
    }
    slower = "low_latency" if faster == "throughput" else "throughput"
    assert steps["auto"].step_s == steps[faster].step_s < steps[slower].step_s
    calls = [c for c in steps["auto"].detail.to_dict()["collectives"] if c["kind"] == "alltoall"]
    assert len(calls) == 2
    for c in calls:
        assert c["policy"] == "auto" and set(c["candidates"]) == {"direct", "hierarchical"}
        assert c["algorithm"] != convention
        assert c["estimate_s"] == min(c["candidates"].values())


def test_auto_weighs_the_port_the_dispatch_and_combine_share() -> None:
    """Two nodes of sn40l-16 at 20 GB/s: alone on idle links the combine's direct form is
    the faster (its second hop does not wait for a first), but it puts 8% more bytes on the
    in-node port that the dispatch loads too and the network traffic crosses, the port that
    binds the prefill; ``auto`` runs both calls' throughput form, as fast as forcing it and
    faster than forcing low latency. Each call's estimate alone chose the direct combine:
    199.1 ms a step against 191.2 ms."""
    overrides = {
        "hardware": "sn40l-16",
        "hw.system.sockets": 32,
        "parallelism": {"tp": 1, "dp_attention": 32, "ep": 32},
        "hw.system.inter_node_link.bandwidth": "20 GB/s",
    }
    steps = {
        mode: api.step(
            EP64_RACKS, {**overrides, "parallelism.all_to_all": mode}, phase="prefill", tokens=512
        )
        for mode in ("auto", "throughput", "low_latency")
    }
    assert steps["auto"].step_s == steps["throughput"].step_s < steps["low_latency"].step_s
    calls = {
        c["stage"].rsplit(".", 1)[-1]: c
        for c in steps["auto"].detail.to_dict()["collectives"]
        if c["kind"] == "alltoall"
    }
    combine = calls["combine"]
    assert combine["policy"] == "auto" and combine["algorithm"] == "hierarchical"
    assert combine["candidates"]["direct"] < combine["candidates"]["hierarchical"]


def _forced(program: Program, modes: tuple[str, ...]) -> Program:
    """``program`` with its expert all-to-alls (in stage order) run in ``modes``, not chosen."""

    def force(stage: StageProgram, mode: str) -> StageProgram:
        spec = stage.collective
        assert spec is not None and spec.exchange is not None
        exchange = replace(spec.exchange, mode=mode, choose=False)
        return replace(stage, collective=replace(spec, exchange=exchange))

    kernels = []
    for kernel in program.kernels:
        stages = list(kernel.stages)
        exchanged = [i for i, s in enumerate(stages) if s.collective and s.collective.exchange]
        if exchanged:
            assert len(exchanged) == len(modes)
            for i, mode in zip(exchanged, modes, strict=True):
                stages[i] = force(stages[i], mode)
        kernels.append(replace(kernel, stages=tuple(stages)))
    return replace(program, kernels=tuple(kernels))


def test_auto_in_decode_is_no_slower_than_any_pair_of_forms() -> None:
    """Four racks at 15 GB/s between them, decoding 64 slots: the pipeline hands out a
    layer's dispatch and combine pieces slower than the ports drain them (the busiest port's
    load of both calls, 0.52 to 0.54 ms a layer, under the kernel's 0.59 ms pace for every
    pair but both direct forms, 0.77 ms), so the pieces interleave without queueing and
    ``auto`` takes each call's faster form alone: a step no slower than any pair of forms
    forced. Summing the calls' port loads as in prefill, it ran the direct dispatch and
    hierarchical combine: 39.47 ms a step against 39.37 ms."""
    overrides = {"hw.system.inter_rack_link.bandwidth": "15 GB/s"}
    scenario = api.load(EP64_RACKS, overrides)
    program = api.step_report(EP64_RACKS, overrides, phase="decode", batch=64).program
    hardware, config = scenario.hardware, scenario.workload.engine
    assert isinstance(hardware, HardwareConfig)
    chosen = simulate_step(program, hardware, config).step_s
    pairs = list(itertools.product(("direct", "hierarchical"), repeat=2))
    forced = {p: simulate_step(_forced(program, p), hardware, config).step_s for p in pairs}
    assert all(chosen <= step for step in forced.values()), (chosen, forced)


def test_auto_on_a_gpu_is_deepeps_convention() -> None:
    """On GPUs ``auto`` is what SGLang's ``--deepep-mode auto`` runs (low latency in decode,
    throughput in prefill), whatever the estimate says: the normal kernels' host wait for
    their receive counts, which keeps them out of a decode CUDA graph, is not in it."""
    for phase, mode in (("decode", "direct"), ("prefill", "hierarchical")):
        data = api.step(
            MOE_GPU,
            {
                **GPU_EP8,
                "hardware": "dgx-h100-4nodes",
                "parallelism": {"tp": 1, "dp_attention": 32, "ep": 32},
            },
            phase=phase,
            batch=1 if phase == "prefill" else None,
            tokens=256 if phase == "prefill" else None,
        ).detail.to_dict()
        calls = [c for c in data["collectives"] if c["kind"] == "alltoall"]
        assert calls and all(
            c["algorithm"] == mode and list(c["candidates"]) == [mode] for c in calls
        )


def test_more_all_to_alls_than_are_chosen_together_are_each_chosen_alone() -> None:
    """A kernel with more than ``MAX_JOINT_CALLS`` all-to-alls has each chosen as it would be
    alone, not a search over every pairing: 20 calls are planned in the CPU time of their
    estimates (2^20 pairings, scored, would take tens of seconds)."""
    import time

    from rdu_sim.engine.collective_port import MAX_JOINT_CALLS, plan_all_to_alls
    from rdu_sim.shapes import AllToAllSpec

    system = api.load(EP64_RACKS).hardware.system
    needs = tuple((size, min(1.0, 8 * size / 64)) for size in (1, 2, 4, 8, 16, 32, 64))
    calls = [
        (AllToAllSpec("hierarchical", direction, 0.125, needs, choose=True), 2e6 * (1 + i % 3))
        for i, direction in enumerate(("dispatch", "combine") * 10)
    ]
    start = time.process_time()
    many = plan_all_to_alls(calls, 64, system)
    assert time.process_time() - start < 5.0
    assert len(many) == len(calls) > MAX_JOINT_CALLS
    assert many == tuple(plan_all_to_alls([call], 64, system)[0] for call in calls)
