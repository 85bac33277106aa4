"""MLA's queries under the sequence_split layout (compiler.mla_queries): every socket's
attention gets every head's queries, by an all-gather or by q_b_proj and kv_b_proj whole on
every socket (which also projects the partial outputs through W_UV before their combine); the
bytes and capacity of each in closed form, the compiler's choice by cost, and the graph check
that finds a consumer reading what no socket holds."""

from __future__ import annotations

import glob
import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from rdu_sim import api
from rdu_sim.cluster.scenario import load_cluster
from rdu_sim.compiler import (
    CapacityError,
    Compiler,
    batch_capacity,
    shared_programs,
    weight_inventory,
    whole_queries,
)
from rdu_sim.compiler import sharding as sharding_module
from rdu_sim.compiler.fusion import graph_groups, kernel_graphs, layer_graphs, step_groups
from rdu_sim.compiler.layout import shard_plan
from rdu_sim.compiler.mla_queries import QUERY_GATHER, chooses_queries
from rdu_sim.compiler.placement import activation_bytes, capacity_words, kv_bytes
from rdu_sim.compiler.query_choice import (
    collective_bound_s,
    replicates,
    step_estimate,
    wiring_key,
)
from rdu_sim.compiler.stages import pipeline_stages
from rdu_sim.compiler.tensor_shares import share_problems
from rdu_sim.compiler.view import compile_view
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.config.errors import ConfigError
from rdu_sim.engine.collective_port import wiring_of
from rdu_sim.graph import operators
from rdu_sim.hw.collective_choice import choose
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from rdu_sim.plan.spec import load_plan
from rdu_sim.report.console import memory_table
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape

SNAP, FULL = "deepseek-r1-128k-snapstream", "deepseek-r1-128k-full"
BF16 = 2
ANY_BATCH = {"stack.batch_programs": "any"}
"""Every batch runnable: the capacity is what memory holds beside the query weights (the
shipped SambaStack rounds it down to a power of two: tests/test_compiler_placement.py)."""


def _arch(scenario: Scenario) -> DeepSeekArchitecture:
    arch = scenario.model
    assert isinstance(arch, DeepSeekArchitecture)
    return arch


def _query_bytes(arch: DeepSeekArchitecture, rows: int) -> int:
    """Every head's absorbed query of ``rows`` token rows: the latent and the RoPE dims."""
    return rows * arch.heads * (arch.kv_lora_rank + arch.qk_rope_head_dim) * BF16


def _replicated_params(arch: DeepSeekArchitecture, tp: int) -> int:
    """Per MLA layer, the q_b_proj and kv_b_proj (W_UK, W_UV) parameters a socket holds
    beyond its 1/tp."""
    q_b = arch.q_lora_rank * arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
    kv_b = arch.heads * (arch.qk_nope_head_dim + arch.v_head_dim) * arch.kv_lora_rank
    return (q_b + kv_b) - (q_b + kv_b) // tp


def _combine_bytes(arch: DeepSeekArchitecture, rows: int, values: int) -> int:
    """The reduce-scatter of ``rows`` rows' partial attention outputs, ``values`` a head
    (the latent's 512, or W_UV's 128 when projected first), and their softmax statistics
    (max and sum, FP32)."""
    return rows * arch.heads * (values * BF16 + 2 * 4)


def _stages(compiler: Compiler, shape: StepShape) -> dict[str, object]:
    program = compiler.program(shape)
    return {s.name: s for k in program.kernels if k.name == "decoder_moe" for s in k.stages}


@pytest.mark.parametrize("batch", [1, 158])
def test_the_query_all_gather_in_closed_form(batch: int) -> None:
    """A plan whose query weights are slices gathers: rows x heads x 576 x 2 B a layer."""
    scenario = api.load(SNAP, {"serving.batch_slots": 158})  # whole weights do not fit at 158
    compiler = Compiler(scenario)
    assert not compiler.whole_queries(158)
    stage = _stages(compiler, StepShape("decode", batch, 1, 32768))["attn.flash" + QUERY_GATHER]
    collective = stage.collective  # type: ignore[attr-defined]
    assert (collective.kind, collective.group) == ("allgather", 16)
    assert collective.bytes == _query_bytes(_arch(scenario), batch)
    assert _query_bytes(_arch(scenario), 158) == 23_298_048  # ~23 MB a layer at 158 slots
    assert _query_bytes(_arch(scenario), 1) == 147_456  # ~150 KB at batch 1


@pytest.mark.parametrize("batch", [1, 136])
def test_the_combine_follows_w_uv_where_the_program_replicates(batch: int) -> None:
    """A program that makes the queries on every socket holds kv_b_proj whole and projects
    every head's partial output through W_UV first: its reduce-scatter moves 128 values a
    head, after attn.v_up; a program that gathers combines the latent's 512 after the
    attention (batch 1 gathers)."""
    scenario = api.load(SNAP, ANY_BATCH)
    compiler = Compiler(scenario)
    assert compiler.batch_capacity() == 136 and compiler.whole_queries(136)
    arch = _arch(scenario)
    stages = _stages(compiler, StepShape("decode", batch, 1, 32768))
    combines = {
        name: stage.collective  # type: ignore[attr-defined]
        for name, stage in stages.items()
        if name.endswith(".reduce_scatter")
    }
    replicate = batch == 136
    name = "attn.v_up.reduce_scatter" if replicate else "attn.flash.reduce_scatter"
    assert list(combines) == [name]
    values = arch.v_head_dim if replicate else arch.kv_lora_rank
    assert combines[name].bytes == _combine_bytes(arch, batch, values)
    assert _combine_bytes(arch, 136, arch.kv_lora_rank) == 17_965_056  # 17 MiB a layer
    assert _combine_bytes(arch, 136, arch.v_head_dim) == 4_595_712  # a quarter and the stats
    projection = stages["attn.v_up"]
    whole = 2 * batch * arch.heads * arch.kv_lora_rank * arch.v_head_dim
    assert projection.flops == (whole if replicate else whole / 16)  # type: ignore[attr-defined]


def test_a_mixed_step_projects_its_decode_rows_before_their_combine() -> None:
    """A prefill step carrying 128 decode rows (its decode part reads, not holds, the
    weights): where it makes the queries on every socket, its decode rows' partial outputs
    are projected through W_UV before their reduce-scatter too."""
    scenario = api.load(SNAP, ANY_BATCH)
    arch = _arch(scenario)
    shape = StepShape("prefill", 1, 512, 0, decode_batch=128, decode_cache_len=32768)
    plan = replace(shard_plan(scenario, shape), whole_queries=True, replicate_queries=True)
    combines = {
        node.name: node.collective_bytes
        for _, graph in layer_graphs(scenario, shape, whole_queries=True, replicate_queries=True)
        for node in operators(graph)
        if node.collective == "reduce_scatter"
    }
    assert set(combines) == {"decode.attn.v_up.reduce_scatter"}
    assert combines["decode.attn.v_up.reduce_scatter"] == _combine_bytes(arch, 128, arch.v_head_dim)
    for _, graph in layer_graphs(scenario, shape, whole_queries=True, replicate_queries=True):
        assert share_problems(graph, plan) == []


SLOW_LINK = {"hw.system.intra_node_link.bandwidth": 12e9, **ANY_BATCH}
"""A link slow enough that both DeepSeek-R1 workloads' full-batch steps replicate the query
and value weights (at the shipped 33.53 GB/s full attention's gathers; at 17.73 GB/s the 34
full slots beside the whole weights gather too: reading W_UV whole costs that HBM-bound
step more than its combine saves)."""


@pytest.mark.parametrize("workload", [SNAP, FULL])
def test_the_replicated_weights_and_the_capacity_they_cost_in_closed_form(workload: str) -> None:
    scenario = api.load(workload, SLOW_LINK)
    arch, tp = _arch(scenario), scenario.tp
    extra = arch.layers * _replicated_params(arch, tp) * scenario.weight_dtype_bytes
    sliced = sum(w.bytes for w in weight_inventory(scenario))
    whole = sum(w.bytes for w in weight_inventory(scenario, whole_queries=True))
    assert whole - sliced == pytest.approx(extra, abs=8)  # bytes rounded up per tensor
    assert extra > 2.6e9  # FP8: 43 MB a layer on every socket
    # each slot's KV cache is the same; the activations are the longest prompt's prefill
    hbm = scenario.hardware.hbm.capacity
    slot = kv_bytes(scenario, 1)
    act = activation_bytes(scenario, 1)
    capacity = batch_capacity(scenario)
    assert kv_bytes(scenario, capacity) == capacity * slot
    assert activation_bytes(scenario, capacity) == act
    before = (hbm - sliced - act) // slot  # the slices only
    assert capacity == (hbm - sliced - extra - act) // slot
    assert whole_queries(scenario, capacity) and not whole_queries(scenario, capacity + 1)
    assert before - capacity == pytest.approx(extra / slot, abs=1)


def test_the_step_of_a_replicating_plan_reads_the_whole_weights_instead_of_gathering() -> None:
    scenario = api.load(SNAP)
    arch, tp = _arch(scenario), scenario.tp
    shape = StepShape("decode", 139, 1, 32768)
    gathered, replicated = (
        kernel_graphs(scenario, shape, whole_queries=each, replicate_queries=each)
        for each in (False, True)
    )

    def total(kernels: list, attr: str) -> float:  # type: ignore[type-arg]
        return sum(k.calls * getattr(n, attr) for k in kernels for n in operators(k.graph))

    extra = arch.layers * _replicated_params(arch, tp) * scenario.weight_dtype_bytes
    reads = total(replicated, "weight_read_bytes") - total(gathered, "weight_read_bytes")
    assert reads == pytest.approx(extra, rel=1e-9)
    gathers = total(gathered, "collective_bytes") - total(replicated, "collective_bytes")
    combines = _combine_bytes(arch, 139, arch.kv_lora_rank) - _combine_bytes(
        arch, 139, arch.v_head_dim
    )
    assert gathers == arch.layers * (_query_bytes(arch, 139) + combines)
    # a plan holding them whole holds them whole in every step; a step that gathers reads
    # only its heads' slices of them
    one = StepShape("decode", 1, 1, 32768)
    small, small_sliced = (
        kernel_graphs(scenario, one, whole_queries=True),
        kernel_graphs(scenario, one),
    )
    assert total(small, "weight_params") == total(replicated, "weight_params")
    assert total(small, "weight_read_bytes") == total(small_sliced, "weight_read_bytes")
    assert total(small, "collective_bytes") == total(small_sliced, "collective_bytes")


def test_the_compiler_chooses_per_program_by_cost() -> None:
    """Batch 1 gathers ~150 KB, the plan's full batch replicates; a plan for more slots than
    fit beside the whole weights gathers at every batch."""
    scenario = api.load(SNAP, ANY_BATCH)
    compiler = Compiler(scenario)
    capacity = compiler.batch_capacity()
    assert compiler.whole_queries(capacity)
    gather = "attn.flash" + QUERY_GATHER
    assert gather in _stages(compiler, StepShape("decode", 1, 1, 32768))
    assert gather not in _stages(compiler, StepShape("decode", capacity, 1, 32768))
    over = Compiler(api.load(SNAP, {"serving.batch_slots": capacity + 1, **ANY_BATCH}))
    assert not over.whole_queries(capacity + 1)
    assert gather in _stages(over, StepShape("decode", capacity + 1, 1, 32768))


def test_a_compiler_asks_each_inventory_and_query_choice_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch capacity, the plan's whole_queries, its memory plan and the Program of a
    shape share their answers (`placement.PlanFacts`, the compiler's replicate choices):
    the slices' and the whole weights' one-slot inventories, the largest decode step's
    choice and the Program's step's, each computed once."""
    from rdu_sim.compiler import compile as compile_module
    from rdu_sim.compiler import placement as placement_module

    asked: list[object] = []

    def counted(name: str, module: object) -> None:
        rule = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            if name != "weight_inventory" or (len(args) < 3 and "kernels" not in kwargs):
                asked.append((name, args[1:2] if name != "replicates" else (), *kwargs.items()))
            return rule(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted("weight_inventory", placement_module)
    counted("_replicates", placement_module)
    counted("replicates", compile_module)
    scenario = api.load(SNAP)
    compiler = Compiler(scenario)
    slots = compiler.batch_slots()
    assert compiler.whole_queries(slots)
    program = compiler.program(StepShape("decode", slots, 1, 32768))
    compiler.queries(program.shape, slots)
    assert len(asked) == len(set(map(repr, asked))) == 4, asked


def test_the_two_estimates_differ_by_the_mechanisms_in_closed_form() -> None:
    """The compiler's two estimates of one step: replicating adds the query weights' extra
    reads at the HBM's sustained rate and their FLOPs at peak; gathering adds one all-gather
    of every head's queries a layer, each socket receiving 15/16 through its port."""
    scenario = api.load(SNAP)
    arch, hw = _arch(scenario), scenario.hardware
    shape = StepShape("decode", 139, 1, 32768)
    groups = graph_groups(scenario, shape)
    plan = replace(shard_plan(scenario), whole_queries=True)
    system = scenario.hardware.system
    gather = step_estimate(scenario, groups, plan, system)
    replicate = step_estimate(scenario, groups, replace(plan, replicate_queries=True), system)
    extra = arch.layers * _replicated_params(arch, 16)
    hbm = hw.hbm.bandwidth * hw.hbm.efficiency
    assert replicate.hbm_s - gather.hbm_s == pytest.approx(
        extra * scenario.weight_dtype_bytes / hbm, rel=1e-9
    )
    assert replicate.compute_s - gather.compute_s == pytest.approx(
        2 * shape.rows * extra / hw.peak_flops, rel=1e-9
    )
    link = hw.system.intra_node_link
    each = 15 / 16 * _query_bytes(arch, 139) / link.bandwidth + link.latency
    # the combine's reduce-scatter moves 128 values a head instead of 512 (latencies cancel)
    saved = _combine_bytes(arch, 139, arch.kv_lora_rank) - _combine_bytes(
        arch, 139, arch.v_head_dim
    )
    each += 15 / 16 * saved / link.bandwidth
    assert gather.link_s - replicate.link_s == pytest.approx(arch.layers * each, rel=1e-9)
    # at the branch's link the step is link-bound, so the extra reads are the cheaper
    assert gather.time_s == gather.link_s and replicate.time_s < gather.time_s
    assert replicates(scenario, groups, plan, system)
    assert not replicates(scenario, groups, shard_plan(scenario), system)  # slices: gather


@pytest.mark.parametrize(
    ("bandwidth", "capacity", "whole"),
    [(17.73e9, 136, True), (64e9, 136, True), (128e9, 158, False)],
)
def test_the_plan_holds_the_whole_weights_where_its_full_step_replicates(
    bandwidth: float, capacity: int, whole: bool
) -> None:
    """Where the links bind the full step, the plan holds the whole weights and plans the
    capacity with them; at 128 GB/s the step is bound by the HBM, which the gather leaves
    alone: the slices stay, and the capacity with them. Batch 1 always gathers."""
    scenario = api.load(SNAP, {"hw.system.intra_node_link.bandwidth": bandwidth, **ANY_BATCH})
    assert batch_capacity(scenario) == capacity
    assert whole_queries(scenario, capacity) == whole
    plan = replace(shard_plan(scenario), whole_queries=True)
    for batch, replicate in ((1, False), (capacity, whole)):
        groups = graph_groups(scenario, StepShape("decode", batch, 1, 32768))
        assert replicates(scenario, groups, plan, scenario.hardware.system) == replicate, batch


@pytest.mark.parametrize(
    ("topology", "sockets_per_node"), [("switched", 16), ("switched", 8), ("ring", 16)]
)
def test_the_collective_bound_against_the_collective_chooser(
    topology: str, sockets_per_node: int
) -> None:
    """On one switched node the compiler's bound is the one-shot all-gather's and
    reduce-scatter's estimate, and the two-shot all-reduce's when the bytes keep the port
    busy; on other wirings it is at most the chosen estimate."""
    scenario = api.load(
        SNAP,
        {"hw.system.topology": topology, "hw.system.sockets_per_node": sockets_per_node},
    )
    system = scenario.hardware.system
    kinds = {"allgather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER, "allreduce": ALL_REDUCE}
    for kind, hw_kind in kinds.items():
        for nbytes in (147_456.0, 23_298_048.0):
            chosen = choose(hw_kind, nbytes, 16, wiring_of(system), pieces=4).chosen
            bound = collective_bound_s(system, kind, nbytes, 16)
            assert bound <= chosen.time_s * (1 + 1e-12), (kind, nbytes)
            one_node = topology == "switched" and sockets_per_node == 16
            if one_node and (kind != "allreduce" or nbytes > 1e6):
                assert bound == pytest.approx(chosen.time_s, rel=1e-12), (kind, nbytes)


@pytest.mark.parametrize("group", [32, 64])
def test_the_collective_bound_crosses_racks_on_the_rack_link(group: int) -> None:
    """Four racks of one 16-socket node: a group's other racks are reached through the rack
    link, its node's sockets through the node's, and every send through the node's port
    (SN40L's network leaves through it); the bound is the slowest port's, at most the
    direct form's estimate, and a rack link of its own makes a wiring of its own."""
    scenario = api.load(SNAP, {"hardware": "sn40l-4racks", "parallelism.tp": 64})
    system = scenario.hardware.system
    node, racks = system.intra_node_link, system.inter_rack_link
    assert racks is not None and system.sockets_per_rack == 16
    nbytes = 23_298_048.0
    shard = nbytes / group
    assert system.network_via_intra_node_port
    expected = max(
        (group - 1) * shard / node.bandwidth + node.latency,
        (group - 16) * shard / racks.bandwidth + racks.latency,
    )
    bound = collective_bound_s(system, "allgather", nbytes, group)
    assert bound == pytest.approx(expected, rel=1e-12)
    # at most the direct form's time (the sends the bound counts); a ring can beat it across
    # racks: it forwards other racks' shards over the rack's own links, so only the sockets
    # at a rack's edge send on the rack link
    plan = choose(ALL_GATHER, nbytes, group, wiring_of(system), pieces=4)
    direct = next(e for e in plan.candidates if e.algorithm == "one_shot")
    assert bound <= direct.time_s * (1 + 1e-12)
    faster = api.load(
        SNAP,
        {
            "hardware": "sn40l-4racks",
            "parallelism.tp": 64,
            "hw.system.inter_rack_link.bandwidth": 1e11,
        },
    )
    assert wiring_key(faster.hardware.system) != wiring_key(system)
    assert compile_view(faster).digest == compile_view(scenario).digest


def test_each_pipeline_stage_chooses_for_its_own_layers() -> None:
    """Two stages of eight sockets: each stage's memory plan holds its own layers' query
    weights whole where its own full step replicates, its capacity planned with them; the
    batch capacity is the tighter stage's, and each stage's Program gathers or not by its
    own choice."""
    scenario = api.load(SNAP, {"parallelism.tp": 8, "parallelism.pp": 2, **SLOW_LINK})
    arch = _arch(scenario)
    compiler = Compiler(scenario)
    stages = pipeline_stages(arch, 2)
    capacities = [batch_capacity(scenario, stage=stage) for stage in stages]
    capacity = compiler.batch_capacity()
    assert capacity == min(capacities)
    for stage, most in zip(stages, capacities, strict=True):
        assert whole_queries(scenario, most, stage)  # the links bind: replicate
        sliced = sum(w.bytes for w in weight_inventory(scenario, stage=stage))
        whole = sum(w.bytes for w in weight_inventory(scenario, stage=stage, whole_queries=True))
        extra = stage.layers * _replicated_params(arch, 8) * scenario.weight_dtype_bytes
        assert whole - sliced == pytest.approx(extra, abs=8)
    shape = StepShape("decode", capacity, 1, 32768)
    program = compiler.program(shape)
    assert [p.placement.pipeline_stage for p in program.pipeline] == [0, 1]
    for stage, part in zip(stages, program.pipeline, strict=True):
        whole_weights, replicate = compiler.queries(part.shape, capacity, stage)
        assert whole_weights == compiler.whole_queries(capacity, stage)
        names = {s.name for k in part.kernels for s in k.stages}
        gathers = any(n.endswith(QUERY_GATHER) for n in names)
        assert gathers == (not replicate), stage
    assert compiler.program_queries(program) == compiler.queries(
        program.pipeline[0].shape, capacity, stages[0]
    )


def _pool_workloads() -> set[Path]:
    """The workload files the shipped clusters name for their pools."""
    named = set()
    for path in sorted(glob.glob("workloads/clusters/*.yaml")):
        pools = yaml.safe_load(Path(path).read_text())["pools"]
        named |= {(Path(path).parent / pool["workload"]).resolve() for pool in pools.values()}
    return named


def _shipped_scenarios() -> list[tuple[str, str, str]]:
    """(kind, file, which) of every scenario the shipped files run: each workload alone,
    except one only a cluster's pool can run (its file alone does not fit its hardware);
    each cluster's pools, with their ``set``; each plan's searched parallelisms."""
    pooled = _pool_workloads()
    found = []
    for path in sorted(glob.glob("workloads/**/*.yaml", recursive=True)):
        if path.startswith(("workloads/sweeps/", "workloads/plans/")):
            continue
        if path.startswith("workloads/clusters/"):
            found += [("cluster", path, pool.name) for pool in load_cluster(path).pools]
            continue
        try:
            api.load(path)
        except ConfigError:
            assert Path(path).resolve() in pooled, f"{path} runs in no shipped file"
            continue
        found.append(("workload", path, ""))
    for path in sorted(glob.glob("workloads/plans/*.yaml")):
        splits = {c.split(): c for c in load_plan(path).configurations()}
        found += [("plan", path, split) for split in splits]
    return found


def _load(kind: str, path: str, which: str) -> Scenario:
    if kind == "workload":
        return api.load(path)
    if kind == "cluster":
        return next(p.scenario for p in load_cluster(path).pools if p.name == which)
    plan = load_plan(path)
    configuration = next(c for c in plan.configurations() if c.split() == which)
    return plan.build(configuration, 1).cluster.pools[0].scenario


SHAPES = (
    StepShape("decode", 2, 1, 4096),
    StepShape("decode", 64, 2, 4096),  # a verify step's tokens too
    StepShape("prefill", 1, 4096, 512),  # a cached prefix
    StepShape("prefill", 1, 100_000, 0),  # SnapKV compresses it
    StepShape("prefill", 1, 512, 0, decode_batch=64, decode_cache_len=4096),  # a mixed step
)


@pytest.mark.parametrize(("kind", "path", "which"), _shipped_scenarios())
def test_every_operator_reads_what_its_socket_holds(kind: str, path: str, which: str) -> None:
    """No consumer of any shipped scenario's step (each pipeline stage's, each query choice)
    reads a tensor its producer's split leaves partial, or split another way, without a
    collective between them."""
    scenario = _load(kind, path, which)
    pp = scenario.workload.parallelism.pp
    for stage in pipeline_stages(scenario.model, pp) if pp > 1 else (None,):
        for shape in SHAPES:
            for whole in (False, True) if chooses_queries(scenario) else (False,):
                plan = replace(shard_plan(scenario, shape), whole_queries=whole)
                groups = step_groups(scenario, shape, stage)
                replicate = replicates(scenario, groups, plan, scenario.hardware.system)
                plan = replace(plan, replicate_queries=replicate)
                for group, graph in layer_graphs(
                    scenario, shape, stage, whole_queries=whole, replicate_queries=replicate
                ):
                    problems = share_problems(graph, plan)
                    assert problems == [], (group.name, stage, shape, whole)


def test_the_shipped_scenarios_include_pipelines_and_all_to_all_experts() -> None:
    """The check above reaches the pipeline and expert-parallel splits issue 44 ships."""
    splits = {_load(*source).workload.parallelism for source in _shipped_scenarios()}
    assert any(p.pp > 1 for p in splits)
    assert any(p.exchange == "all_to_all" and p.tp > 1 for p in splits)
    assert any(p.exchange == "all_to_all" and p.tp == 1 for p in splits)


def test_the_check_finds_attention_without_its_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect this module fixed: without the all-gather, a sequence-split attention
    reads queries each socket holds only for its heads."""
    scenario = api.load(SNAP)
    monkeypatch.setattr(sharding_module, "_add_query_gather", lambda *args: ())
    plan = shard_plan(scenario)
    for shape in (SHAPES[0], SHAPES[3]):
        problems = [p for _, g in layer_graphs(scenario, shape) for p in share_problems(g, plan)]
        reader = "'attn.flash'" if shape.phase == "decode" else "'snapkv.score'"
        assert problems and all(p.startswith(reader) for p in problems), problems
        assert any("split by heads" in p and "work split by sequence" in p for p in problems)


def test_the_check_finds_a_partial_sum_read_as_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row-parallel product whose all-reduce is missing leaves a partial sum that the
    residual add reads."""
    scenario = api.load("llama3.1-8b-8socket")
    real = sharding_module._collective_for
    monkeypatch.setattr(
        sharding_module,
        "_collective_for",
        lambda node, plan: None if node.name == "attn.o_proj" else real(node, plan),
    )
    plan = shard_plan(scenario)
    problems = [p for _, g in layer_graphs(scenario, SHAPES[0]) for p in share_problems(g, plan)]
    assert problems == [
        "'attn.residual' (work whole) reads 'o' as a partial sum from 'attn.o_proj' with no "
        "collective between them"
    ]


def test_the_check_finds_a_projected_partial_without_its_combine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """W_UV's projection carries the attention's partial output; without the reduce-scatter
    after it, o_proj (split by heads) reads a partial sum."""
    scenario = api.load(SNAP)
    real = sharding_module._collective_for
    monkeypatch.setattr(
        sharding_module,
        "_collective_for",
        lambda node, plan: None if node.name == "attn.v_up" else real(node, plan),
    )
    shape = StepShape("decode", 136, 1, 32768)
    plan = replace(shard_plan(scenario, shape), whole_queries=True, replicate_queries=True)
    graphs = layer_graphs(scenario, shape, whole_queries=True, replicate_queries=True)
    problems = {p for _, g in graphs for p in share_problems(g, plan)}
    assert problems == {
        "'attn.o_proj' (work split by heads) reads 'o_heads' as a partial sum from "
        "'attn.v_up' with no collective between them"
    }


@pytest.mark.parametrize("layout", ["replicated", "head_split"])
def test_head_split_and_replicated_layouts_keep_their_queries_split(layout: str) -> None:
    """Their attention is split by heads, where the queries already are: no gather, no
    replication, no links in the compiler's view."""
    overrides = {"parallelism.mla_cache_layout": layout, "serving.max_context": 16384}
    scenario = api.load(FULL, overrides)
    assert not chooses_queries(scenario)
    capacity = batch_capacity(scenario)
    assert not whole_queries(scenario, capacity)
    program = Compiler(scenario).program(StepShape("decode", capacity, 1, 16384))
    names = {s.name for k in program.kernels for s in k.stages}
    assert not any(n.endswith(QUERY_GATHER) for n in names)
    arch = _arch(scenario)
    for kernel in kernel_graphs(scenario, StepShape("decode", capacity, 1, 16384)):
        for node in operators(kernel.graph):
            if node.name == "attn.q_b_proj":  # its heads' columns only
                q_b = (
                    arch.q_lora_rank * arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
                )
                assert node.weight_params == math.ceil(q_b / 16)
    faster = api.load(FULL, {**overrides, "hw.system.intra_node_link.bandwidth": 1e11})
    assert compile_view(faster).digest == compile_view(scenario).digest


def test_points_differing_in_their_links_share_what_their_choices_share() -> None:
    """The links are the compiler's argument, not its view: SnapStream at 17.73 and 64 GB/s
    both replicate at their 136 slots and share that step's compiled kernels; at 128 GB/s
    the plan keeps the slices and gathers, and compiles its own."""
    link = "hw.system.intra_node_link.bandwidth"
    shape = StepShape("decode", 136, 1, 32768)
    shared_programs.clear()
    try:
        with shared_programs.sharing():
            scenarios = {
                bw: api.load(SNAP, {link: bw, **ANY_BATCH}) for bw in (17.73e9, 64e9, 128e9)
            }
            assert len({compile_view(s).digest for s in scenarios.values()}) == 1
            compilers = {bw: Compiler(s) for bw, s in scenarios.items()}
            kernels = {bw: c.program(shape).kernels for bw, c in compilers.items()}
            assert [c.batch_capacity() for c in compilers.values()] == [136, 136, 158]
            assert kernels[17.73e9] is kernels[64e9]
            assert kernels[128e9] is not kernels[64e9]
            assert kernels[128e9] != kernels[64e9]
    finally:
        shared_programs.clear()


HBM_SWEEP = ("50GiB", "52GiB", "53GiB", "54GiB", "56GiB", "64GiB")


@pytest.mark.parametrize(
    ("stack", "runs"),
    [("powers_of_two", [32, 64, 64, 64, 64, 128]), ("any", [53, 68, 54, 61, 76, 136])],
)
def test_what_memory_holds_grows_with_the_hbm_and_bounds_the_batch(
    stack: str, runs: list[int]
) -> None:
    """A plan holds the whole query weights only beside its slots, so what memory holds is
    the most slots beside the slices: more HBM, never fewer, and never below the batch
    `auto` picks (fewer beside the whole weights, where their step replicates: 54 of the 76
    at 53 GiB). The trial's counts were 53, 68, 54, 61, 76, 136."""
    holds, picks = [], []
    for hbm in HBM_SWEEP:
        scenario = api.load(SNAP, {"hw.socket.hbm.capacity": hbm, "stack.batch_programs": stack})
        holds.append(batch_capacity(scenario, runnable=False))
        picks.append(batch_capacity(scenario))
    assert holds == [53, 68, 76, 83, 98, 158]
    assert picks == runs
    assert all(b >= a for a, b in pairwise(holds))
    assert all(p <= h for p, h in zip(picks, holds, strict=True))


@pytest.mark.parametrize(("slots", "spilled"), [(76, 0), (77, 131_783_307)])
def test_an_explicit_batch_spills_exactly_past_what_memory_holds(slots: int, spilled: int) -> None:
    """At 53 GiB 76 slots fit beside the slices (the plan holds them so): no weight in DDR
    and no word of one; under a hot set of all HBM the 77th pushes weights out, and the
    words say so (``memory.weights: hbm`` refuses it)."""
    overrides = {
        "hw.socket.hbm.capacity": "53GiB",
        "stack.batch_programs": "any",
        "serving.batch_slots": slots,
    }
    if spilled:
        with pytest.raises(CapacityError, match="keeps every weight in HBM"):
            Compiler(api.load(SNAP, overrides)).placement(slots)
    scenario = api.load(
        SNAP, {**overrides, "memory.weights": "hot_set", "memory.hot_set_fraction": 1.0}
    )
    compiler = Compiler(scenario)
    placement = compiler.placement(slots)
    assert not compiler.whole_queries(slots)
    assert placement.tiers["ddr"].weights_bytes == spilled
    words = capacity_words(scenario, compiler.memory_capacity(), compiler.batch_capacity(), slots)
    assert ("read from DDR instead" in words) == (spilled > 0), words
    assert "at most 76 fit beside the weights; 'auto' would pick 54, the most the stack " in words


def test_the_capacity_says_where_the_query_weights_stop_being_whole_and_what_it_costs() -> None:
    """The shipped SnapStream workload runs 128 (powers of two) of the 158 slots memory holds;
    136 fit beside the whole query weights. The words name both counts and the cost of the
    137th slot: a plan that gathers the queries, its decode step ~2x as long, as the
    compiler's own estimate of the two plans says (simulated: 41.8 ms at 136, 81.8 ms at
    137, link-bound)."""
    scenario = api.load(SNAP)
    holds, runs = batch_capacity(scenario, runnable=False), batch_capacity(scenario)
    whole = batch_capacity(api.load(SNAP, ANY_BATCH))
    assert (holds, runs, whole) == (158, 128, 136)
    words = capacity_words(scenario, holds, runs)
    system = scenario.hardware.system

    def estimate(slots: int, held: bool) -> float:
        shape = StepShape("decode", slots, 1, 32768)
        plan = replace(shard_plan(scenario, shape), whole_queries=held, replicate_queries=held)
        return step_estimate(scenario, step_groups(scenario, shape), plan, system).time_s

    ratio = estimate(137, False) / estimate(136, True)
    assert 1.9 < ratio < 2.2
    assert "'auto' picks 128, the most of them the stack runs" in words
    assert (
        "; 136 fit beside MLA's query and value weights held whole (attn.q_b_proj and "
        "attn.kv_b_proj on every socket: 2.9 GiB of replicas)"
    ) in words, words
    assert (
        f"from 137 the plan holds their slices and gathers the queries, a decode step "
        f"{ratio:.2g}x as long" in words
    ), words
    # the memory plan says which weights are the replicas, and their bytes
    sliced = sum(w.bytes for w in weight_inventory(scenario))
    replicated = sum(w.bytes for w in weight_inventory(scenario, whole_queries=True))
    compiler = Compiler(api.load(SNAP, ANY_BATCH))
    held = compiler.placement(136)
    assert held.replicas == ("attn.q_b_proj", "attn.kv_b_proj")
    assert held.replica_bytes == replicated - sliced
    gathering = compiler.placement(137)
    assert (gathering.replicas, gathering.replica_bytes) == ((), 0)
    # a layout that never holds them whole says nothing of them
    head_split = api.load(SNAP, {"parallelism.mla_cache_layout": "head_split"})
    assert "MLA" not in capacity_words(head_split, 100, 64)


def test_a_run_says_which_weights_are_replicas() -> None:
    """The run's JSON and its memory table name the replicas inside the HBM weights (a plan
    of 136 slots holds them; one of 137 gathers the queries and holds none)."""
    result = api.run(SNAP, {"serving.requests": 2, **ANY_BATCH, "serving.batch_slots": 136})
    summary = result.summary()
    assert summary.to_dict()["weight_replicas"] == {
        "names": ["attn.q_b_proj", "attn.kv_b_proj"],
        "bytes": 3_118_964_160,
    }
    caption = str(memory_table(summary).caption)
    assert caption.startswith("Of the HBM weights, 2.9 GiB are replicas: attn.q_b_proj and ")
    gathering = api.run(SNAP, {"serving.requests": 2, **ANY_BATCH, "serving.batch_slots": 137})
    assert "weight_replicas" not in gathering.to_dict()
    assert memory_table(gathering.summary()).caption is None
