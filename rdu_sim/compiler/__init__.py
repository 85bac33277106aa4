"""The compiler: shard over TP, fuse into kernels, allocate PCUs/PMUs, place in tiers -> Program.

Public API:
- `Compiler(scenario)`: `.program(shape)`, `.placement(slots)`, `.batch_capacity()`,
  `.batch_slots()`, `.kernels(shape)`, `.whole_queries(slots)` (per-instance caches);
- `compile_program(scenario, shape) -> Program`;
- `plan_memory(scenario, batch_slots) -> Placement`, `batch_capacity(scenario) -> int`,
  `whole_queries(scenario, batch_slots) -> bool` (MLA's query weights whole on every socket),
  `CapacityError`;
- `inspect_graph(scenario, shape) -> dict`, `to_dot(graph_or_result) -> str`,
  `layer_graph(scenario, shape) -> rdu_sim.graph.digraph.DiGraph` (for GraphML via
  `rdu_sim.graph.write_graphml`).
"""

from rdu_sim.compiler.compile import Compiler, compile_program
from rdu_sim.compiler.errors import CapacityError
from rdu_sim.compiler.inspect import inspect_graph, layer_graph, to_dot
from rdu_sim.compiler.layout import ShardPlan, kv_slot_bytes_per_socket, shard_plan
from rdu_sim.compiler.placement import (
    activation_bytes,
    batch_capacity,
    capacity_words,
    kv_bytes,
    plan_memory,
    slot_tokens,
    weight_inventory,
    whole_queries,
)
from rdu_sim.compiler.program import (
    CollectiveSpec,
    KernelProgram,
    Placement,
    Program,
    StageProgram,
    TensorPlacement,
    TierUsage,
)
from rdu_sim.compiler.sharding import shard_graph, shard_operator

__all__ = [
    "CapacityError",
    "CollectiveSpec",
    "Compiler",
    "KernelProgram",
    "Placement",
    "Program",
    "ShardPlan",
    "StageProgram",
    "TensorPlacement",
    "TierUsage",
    "activation_bytes",
    "batch_capacity",
    "capacity_words",
    "compile_program",
    "inspect_graph",
    "kv_bytes",
    "kv_slot_bytes_per_socket",
    "layer_graph",
    "plan_memory",
    "shard_graph",
    "shard_operator",
    "shard_plan",
    "slot_tokens",
    "to_dot",
    "weight_inventory",
    "whole_queries",
]
