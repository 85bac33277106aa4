"""Dataflow graphs of decoder layers: Operators with FLOPs and bytes, built per static shape.

Builders return DiGraphs (``rdu_sim.graph.digraph``: networkx's interface without its
import cost) whose nodes hold an `Operator` (attribute `op`) and whose
edges carry the tensor names they move (attribute `tensors`). Numbers are for the whole
layer (unsharded); `rdu_sim.compiler` shards, fuses and places them.
"""

from rdu_sim.graph.builder import GraphBuilder, op, operators
from rdu_sim.graph.check import check_graph, graph_problems
from rdu_sim.graph.deepseek import deepseek_layer
from rdu_sim.graph.export import (
    dot_from_records,
    graph_records,
    to_dot,
    to_graphml_graph,
    write_graphml,
)
from rdu_sim.graph.heads import embedding_graph, lm_head_graph
from rdu_sim.graph.llama import llama_layer
from rdu_sim.graph.mla import MlaCache
from rdu_sim.graph.model import GraphGroup, Totals, decoder_groups, model_groups, totals
from rdu_sim.graph.moe import (
    ExpertLoading,
    expected_distinct_experts,
    experts_data_dependent,
    experts_loaded,
    sample_distinct_experts,
)
from rdu_sim.graph.operator import Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.shape import Precision, StepShape
from rdu_sim.graph.snapkv import selection_graphs

__all__ = [
    "ExpertLoading",
    "Gemm",
    "GraphBuilder",
    "GraphGroup",
    "MlaCache",
    "Operator",
    "Precision",
    "Split",
    "StepShape",
    "TensorSpec",
    "Totals",
    "check_graph",
    "decoder_groups",
    "deepseek_layer",
    "dot_from_records",
    "embedding_graph",
    "expected_distinct_experts",
    "experts_data_dependent",
    "experts_loaded",
    "graph_problems",
    "graph_records",
    "llama_layer",
    "lm_head_graph",
    "model_groups",
    "op",
    "operators",
    "sample_distinct_experts",
    "selection_graphs",
    "to_dot",
    "to_graphml_graph",
    "totals",
    "write_graphml",
]
