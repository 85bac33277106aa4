"""What `rdu-sim inspect graph` shows: a compiled step as JSON-ready data, and its DOT.

`inspect_graph(scenario, shape)` compiles one static step (`rdu_sim.api.inspect_graph` picks
the shape `rdu-sim step` would run) and returns a dict with
- `fusion`: the fusion level the kernels were made at (`auto` resolved);
- `kernels`: each fused kernel's `name`, `layer` (the layer kernel it belongs to), `calls`,
  `looped`, `tiles` (per call, the compiler's), `sram_bytes` (PMU SRAM it holds:
  `KernelProgram.sram_bytes`, what `step` and `run` report too), `operational_intensity`
  (matrix FLOPs per off-chip byte, None without off-chip traffic) and `stages` (each with
  `op`, `name`, `pcus`, `pmus`, `flops`, `vector_flops`, `bytes` per tier = reads + writes
  per call, `reads`, `writes`, `output_bytes`, `inputs`, `gemm`, `collective`, `passes` over
  its input rows, `sram_bytes`);
- `layers`: per layer kernel (a decoder layer, the embedding, the LM head), its `kernels`,
  `calls`, FLOPs and off-chip bytes per call, and their `operational_intensity`;
- `placement`: per tier of one socket `capacity_bytes`, `weights_bytes`, `kv_bytes`,
  `activations_bytes`, `used_bytes`, `free_bytes`, and the placed tensors;
- `mla_queries` (an MLA model under the sequence_split layout, else None): whether the
  memory plan holds the query weights `whole` on every socket and how this step's
  sequence-split attention gets every head's queries (`gathered`, `replicated`, or `none`
  when the step has no such attention): `compiler.mla_queries`;
- `expert_schedule`: a MoE step under static expert loading gathers its routed experts after
  the router (`gather`) or streams every expert (`all`), the compiler's choice
  (`compiler.expert_schedule`); None for any other step;
- `experts` (a MoE model, else None): what each MoE layer streams, per routing, under any
  expert loading (`compiler.step_work.ExpertStreams`, as `rdu-sim step --json` says it);
- `totals`: the step's per-socket `flops`, `bytes`, `collective_bytes`, and `model_flops`,
  the model's own matrix FLOPs over the tp sockets (`compiler.step_work.model_flops`: no
  product counted twice, where `flops` holds the work repeated on several sockets);
- `graph`: the per-socket decoder-layer graph (nodes and edges) that `to_dot` draws;
- `layout`: the parallel degrees by their `parallelism.*` names
  (`ParallelismConfig.layout`, what every report names the layout by), and with pipeline
  stages `pipeline`: its `stages` and the step's `micro_batches`; the kernels and layers are
  then the first stage's for one micro-batch, the placement the fullest stage's (its
  `pipeline_stage`, and SRAM the largest of that stage's kernels holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rdu_sim.compiler.compile import Compiler
from rdu_sim.compiler.fusion import fusion_level, layer_graphs
from rdu_sim.compiler.mla_queries import QUERY_GATHER, chooses_queries
from rdu_sim.compiler.program import (
    TIERS,
    KernelProgram,
    Placement,
    Program,
    operational_intensity,
)
from rdu_sim.compiler.step_work import expert_streams, model_flops
from rdu_sim.config.parallelism import part_placements
from rdu_sim.graph import dot_from_records, graph_records
from rdu_sim.graph import to_dot as graph_to_dot
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape


def _stage_record(stage: Any) -> dict[str, Any]:
    per_tier = {tier: stage.reads.get(tier, 0.0) + stage.writes.get(tier, 0.0) for tier in TIERS}
    gemm = stage.gemm
    collective = stage.collective
    return {
        "name": stage.name,
        "op": stage.op,
        "pcus": stage.pcus,
        "pmus": stage.pmus,
        "flops": stage.flops,
        "vector_flops": stage.vector_flops,
        "bytes": per_tier,
        "reads": dict(stage.reads),
        "writes": dict(stage.writes),
        "output_bytes": stage.output_bytes,
        "inputs": list(stage.inputs),
        # the stage whose output selects this one's weights (the router's top-k), and the
        # rows it finishes only at their end (a reduction along the row: its consumers wait)
        "selected_by": stage.selected_by,
        "whole_row_outputs": stage.whole_row_outputs,
        "gemm": None
        if gemm is None
        else {"m": gemm.m, "n": gemm.n, "k": gemm.k, "batch": gemm.batch},
        "collective": None
        if collective is None
        else {"kind": collective.kind, "bytes": collective.bytes, "group": collective.group},
        "passes": stage.passes,
        "sram_bytes": stage.sram_bytes,
    }


def _kernel_record(kernel: KernelProgram) -> dict[str, Any]:
    return {
        "name": kernel.name,
        "layer": kernel.layer or kernel.name,
        "calls": kernel.calls,
        "looped": kernel.looped,
        "operational_intensity": operational_intensity([kernel]),
        "pcus": sum(s.pcus for s in kernel.stages),
        "pmus": sum(s.pmus for s in kernel.stages),
        "tiles": kernel.tiles,
        "sram_bytes": kernel.sram_bytes,
        "flops_per_step": kernel.flops,
        "bytes_per_step": kernel.bytes_by_tier(),
        "offchip_bytes_per_step": kernel.offchip_bytes,
        "collective_bytes_per_step": kernel.collective_bytes,
        "stages": [_stage_record(s) for s in kernel.stages],
    }


def placement_record(placement: Placement) -> dict[str, Any]:
    """Per-tier usage of one socket plus the placed tensors, JSON-ready."""
    stage = {"pipeline_stage": placement.pipeline_stage} if placement.pipeline_stage >= 0 else {}
    return {
        "batch_slots": placement.batch_slots,
        **stage,  # under a pipeline, the stage it plans (the fullest HBM's)
        "per_socket": True,
        "tiers": {
            tier: {
                "capacity_bytes": u.capacity_bytes,
                "weights_bytes": u.weights_bytes,
                "kv_bytes": u.kv_bytes,
                "activations_bytes": u.activations_bytes,
                "used_bytes": u.used_bytes,
                "free_bytes": u.free_bytes,
            }
            for tier, u in placement.tiers.items()
        },
        "tensors": [
            {"name": t.name, "kind": t.kind, "tier": t.tier, "bytes": t.bytes}
            for t in placement.tensors
        ],
    }


def layer_records(program: Program) -> list[dict[str, Any]]:
    """Per layer kernel, in order: its kernels and their operational intensity together."""
    layers: dict[str, list[KernelProgram]] = {}
    for kernel in program.kernels:
        layers.setdefault(kernel.layer or kernel.name, []).append(kernel)
    return [
        {
            "name": name,
            "kernels": len(kernels),
            "calls": kernels[0].calls,
            "flops_per_call": sum(k.flops for k in kernels) / kernels[0].calls,
            "offchip_bytes_per_call": sum(k.offchip_bytes for k in kernels) / kernels[0].calls,
            "operational_intensity": operational_intensity(kernels),
        }
        for name, kernels in layers.items()
    ]


def layer_graph(
    scenario: Scenario,
    shape: StepShape,
    whole_queries: bool = False,
    replicate_queries: bool = False,
    all_experts: bool = False,
) -> DiGraph:
    """One socket's graph of the (last kind of) decoder layer at `shape`, collectives included
    (the whole layer, whatever the fusion level splits it into; MLA's queries and the
    experts as for `fusion.layer_graphs`)."""
    decoders = [
        g
        for group, g in layer_graphs(
            scenario,
            shape,
            whole_queries=whole_queries,
            replicate_queries=replicate_queries,
            all_experts=all_experts,
        )
        if group.name.startswith("decoder")
    ]
    return decoders[-1]


def queries_record(
    scenario: Scenario, program: Program, whole: bool, replicated: bool
) -> dict[str, Any] | None:
    """How ``program``'s sequence-split MLA attention gets every head's queries (module
    docstring), None when the scenario's attention is not split by sequence."""
    if not chooses_queries(scenario):
        return None
    gathered = any(
        stage.name.endswith(QUERY_GATHER) for kernel in program.kernels for stage in kernel.stages
    )
    return {
        "weights": "whole" if whole else "sliced",
        "queries": "replicated" if replicated else "gathered" if gathered else "none",
    }


def inspect_graph(
    scenario: Scenario, shape: StepShape, compiler: Compiler | None = None
) -> dict[str, Any]:
    """The compiled step of `shape`, as JSON-ready data (see the module docstring)."""
    compiler = compiler or Compiler(scenario)
    program = compiler.program(shape)
    whole, replicated = compiler.program_queries(program)
    parallelism = scenario.workload.parallelism
    split = (
        {}
        if parallelism.tensor_parallel_only
        else {
            "parallelism": {
                "devices": parallelism.devices,
                "exchange": parallelism.exchange,
                "parts": {
                    part: placement.describe()
                    for part, placement in part_placements(parallelism).items()
                },
            }
        }
    )
    pipeline = (
        {
            "pipeline": {
                "stages": len(program.pipeline),
                "micro_batches": program.pipeline_micro_batches,
            }
        }
        if program.pipeline
        else {}
    )
    return {
        **split,
        **pipeline,
        "layout": parallelism.layout(),
        "workload": scenario.workload.name,
        "model": scenario.model.name,
        "shape": {
            "phase": shape.phase,
            "batch": shape.batch,
            "tokens": shape.tokens,
            "cache_len": shape.cache_len,
        },
        "tp": program.tp,
        "fusion": fusion_level(scenario),
        "mla_cache_layout": scenario.workload.parallelism.mla_cache_layout,
        "kv_policy": scenario.workload.kv.policy,
        "batch_capacity": compiler.batch_capacity(),
        "kernels": [_kernel_record(k) for k in program.kernels],
        "layers": layer_records(program),
        "totals": {
            "flops": program.flops,
            "bytes": program.bytes_by_tier(),
            "collective_bytes": program.collective_bytes,
            "model_flops": model_flops(scenario, program),
        },
        "placement": placement_record(program.placement),
        "mla_queries": queries_record(scenario, program, whole, replicated),
        "expert_schedule": program.expert_schedule or None,
        "experts": streams.to_dict() if (streams := expert_streams(scenario, program)) else None,
        "graph": graph_records(
            layer_graph(scenario, shape, whole, replicated, program.expert_schedule == "all")
        ),
    }


def to_dot(graph: DiGraph | Mapping[str, Any]) -> str:
    """Graphviz DOT of a graph, or of the `graph` in an `inspect_graph` result."""
    if isinstance(graph, DiGraph):
        return graph_to_dot(graph)
    records = graph.get("graph", graph)
    return dot_from_records(dict(records))
