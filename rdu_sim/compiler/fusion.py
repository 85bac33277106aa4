"""Fusion: the kernels one step runs, each a sharded graph called `calls` times.

- "embedding": the token gather, one call;
- the decoder layers: one kernel per run of a repeating body of layers
  (`models.layers.layer_segments`), the whole body fused into one call ("decoder" for
  Llama; "decoder_dense" and "decoder_moe" for DeepSeek; "decoder_sliding+full" for
  gpt-oss, whose body is two layers), `calls` = the number of bodies in the run;
- "snapkv_score", "snapkv_topk", "snapkv_compact": in a prefill whose prompt the KV policy
  compresses, the SnapKV selection's kernels (`graph.snapkv`: the window's scores
  recomputed outside the fused attention, the top-K, the compaction into the slot), each
  called once per layer (`calls` = layers), after the decoder layers (whose attention
  stashes the window's queries, `graph.stash`); sliding-window layers whose ring the policy
  would compress get their own ("snapkv_score_window<W>" ...). The layers' selections are
  independent, so each kernel's calls run back to back: identical consecutive calls, which
  kernel looping loops like the decoder's;
- "evict_score", "evict_topk", "evict_compact": the same three in a decode step (and over a
  mixed step's decode rows) whose KV policy evicts by scores (`KVPolicy.decode_selection`
  at the step's cache length), `rows` = the slots evicting;
- "lm_head": final norm and vocabulary projection, one call.

Inside a decoder kernel every operator is a pipeline stage, except attention: the score,
softmax and value products are fused into one flash-attention stage ("attn.flash"), as in
SN40L's fused attention kernel, whose attention weights never leave the stage (which is
why SnapStream recomputes the window's scores outside it). Streaming the full score matrix
between stages would cost more PMU bandwidth than the socket has in a long prefill.

Kernel looping (`kernel_looping` in the workload) marks kernels with more than one call
`looped`: their calls run as one call with a pipelined outer loop over the bodies.

That is the `full` fusion level (SN40L's); `fusion: none | partial` splits every kernel into
smaller ones by the rules of `fusion_levels` (then never looped, and without attention
fused at `none`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rdu_sim.compiler.fusion_levels import (
    FusionLevel,
    operator_groups,
    resolve_level,
    subgraph,
)
from rdu_sim.compiler.layout import mla_cache_form, precision, shard_plan
from rdu_sim.compiler.sharding import shard_graph
from rdu_sim.compiler.stages import PipelineStage, stage_groups
from rdu_sim.graph import (
    GraphBuilder,
    GraphGroup,
    Operator,
    model_groups,
    op,
    operators,
    selection_graphs,
)
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.moe import static_schedule
from rdu_sim.graph.shape import DECODE_PART
from rdu_sim.graph.snapkv import kernel_name
from rdu_sim.kv.policies import layer_selection_of
from rdu_sim.models.layers import window_layer_counts
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import Selection, StepShape

ATTENTION_CHAIN = ("attn.score", "attn.softmax", "attn.value")
FLASH = "attn.flash"


@dataclass(frozen=True)
class KernelGraph:
    """A fused kernel before stage allocation: one socket's sharded graph."""

    name: str
    calls: int
    looped: bool
    graph: DiGraph
    layer: str = ""  # the layer kernel it was split from ("" = itself: `full` fusion)
    rows: int | None = None  # rows its tiles stream when not the step's (`GraphGroup.rows`)

    @property
    def group(self) -> str:
        """The layer kernel this kernel belongs to: the key of its weights' placement."""
        return self.layer or self.name


def selection_shape(
    scenario: Scenario, shape: StepShape, window: int | None = None
) -> Selection | None:
    """The selection a step runs on the layers with attention `window`, or None, as the KV
    policy answers it (`kv.policies.layer_selection_of`, which checks a plugin's answer).

    A prefill: the SnapKV selection of its prompt, `cache_len + tokens` tokens (a chunked
    prefill's last chunk sees the whole prompt; none with select=False). A decode step: the
    policy's decode selection (eviction by scores) over each slot's cache at the step's
    static length, `cache_len`. A sliding-window layer holds only its ring of either
    (`window_tokens`); the policy decides whether what the layer holds is selected from.
    """
    policy = scenario.kv_policy
    if shape.phase == "decode":
        return layer_selection_of(policy, "decode", shape.cache_len, window)
    if shape.select is False:
        return None
    prompt = min(shape.cache_len + shape.tokens, policy.max_context)
    return layer_selection_of(policy, "prefill", prompt, window)


def selections(scenario: Scenario, shape: StepShape) -> dict[int | None, Selection]:
    """The selection of each attention window (None: full attention) whose layers select in
    this step (`selection_shape`), in the model's order of windows."""
    found = {
        window: selection_shape(scenario, shape, window)
        for window in window_layer_counts(scenario.model)
    }
    return {window: found for window, found in found.items() if found is not None}


def selection_groups(
    scenario: Scenario, shape: StepShape, chosen: dict[int | None, Selection], part: str = ""
) -> list[GraphGroup]:
    """The selection kernels of a step (``chosen``: `selections`; ``part``: the prefix of a
    mixed step's decode rows, ``shape`` their `decode_part`): for each attention window
    whose layers select, its score, top-K and compaction kernels, `calls` = its layers,
    tiles streaming each slot's keys as one row (`rows` = the step's batch). A prefill's are
    SnapKV's ("snapkv_score" ... for full attention, "snapkv_score_window<W>" ...), a decode
    step's the policy's eviction ("evict_score" ..., "evict_score_window<W>" ...)."""
    prec, cache = precision(scenario), mla_cache_form(scenario)
    layers = window_layer_counts(scenario.model)
    groups = []
    for window, selection in chosen.items():
        graphs = selection_graphs(
            scenario.model, shape.batch, selection, prec, cache, shape.phase, part
        )
        for name, graph in graphs:
            groups.append(
                GraphGroup(kernel_name(name, window), layers[window], graph, rows=shape.batch)
            )
    return groups


def graph_groups(
    scenario: Scenario, shape: StepShape, all_experts: bool = False
) -> list[GraphGroup]:
    """The unsharded graphs of one step, in execution order, with their call counts (MoE
    layers under static expert loading: streaming every expert with ``all_experts``, else
    gathering the worst case of slots, `graph.moe`): the model's, then the step's
    selections (a mixed step's prompts', then its decode rows' eviction), before the LM
    head."""
    prec, cache = precision(scenario), mla_cache_form(scenario)
    sample = scenario.stack.sampling == "device"
    chosen = selections(scenario, shape)
    decode = shape.decode_part() if shape.mixed else None
    evicting = {} if decode is None else selections(scenario, decode)
    groups = model_groups(
        scenario.model,
        shape,
        prec,
        cache,
        static_schedule(scenario.workload.moe_expert_loading, all_experts),
        sample,
        {window: selection.window for window, selection in chosen.items()},
        {window: selection.window for window, selection in evicting.items()},
    )
    selecting = selection_groups(scenario, shape, chosen)
    if decode is not None:
        selecting += selection_groups(scenario, decode, evicting, DECODE_PART)
    return groups[:-1] + selecting + groups[-1:]


def step_groups(
    scenario: Scenario,
    shape: StepShape,
    stage: PipelineStage | None = None,
    all_experts: bool = False,
) -> list[GraphGroup]:
    """`graph_groups` of one step that a pipeline ``stage`` runs (None: all of them)."""
    groups = graph_groups(scenario, shape, all_experts)
    return groups if stage is None else stage_groups(groups, scenario.model, stage)


def fuse_attention(graph: DiGraph) -> DiGraph:
    """The graph with attention score -> softmax -> value merged into one "attn.flash" stage
    (per layer of a multi-layer body: "l1.attn.flash" fuses "l1.attn.score" ...).

    The fused operator keeps the sum of the three's work and weights (gpt-oss's sink
    logits), the score product's GEMM shape (the larger of the two products), and the
    value's combine (its output is what leaves). Graphs without the chain are unchanged.
    """
    prefixes = [
        str(name)[: -len(ATTENTION_CHAIN[0])]
        for name in graph
        if str(name).endswith(ATTENTION_CHAIN[0])
        and all(str(name)[: -len(ATTENTION_CHAIN[0])] + part in graph for part in ATTENTION_CHAIN)
    ]
    if not prefixes:
        return graph
    fused: dict[str, Operator] = {}  # score node -> the fused operator replacing the chain
    dropped: set[str] = set()
    for prefix in prefixes:
        chain = [op(graph, prefix + name) for name in ATTENTION_CHAIN]
        internal = {t.name for node in chain[:-1] for t in node.outputs}
        inputs = {t.name: t for node in chain for t in node.inputs if t.name not in internal}
        score, value = chain[0], chain[-1]
        fused[score.name] = Operator(
            prefix + FLASH,
            "flash_attention",
            inputs=tuple(inputs.values()),
            outputs=value.outputs,
            flops=sum(n.flops for n in chain),
            vector_flops=sum(n.vector_flops for n in chain),
            weight_params=sum(n.weight_params for n in chain),
            weight_bytes=sum(n.weight_bytes for n in chain),
            weight_read_bytes=sum(n.weight_read_bytes for n in chain),
            kv_read_bytes=sum(n.kv_read_bytes for n in chain),
            kv_write_bytes=sum(n.kv_write_bytes for n in chain),
            gemm=score.gemm,
            split=replace(score.split, combine=value.split.combine),
        )
        dropped.update(n.name for n in chain[1:])
    builder = GraphBuilder(str(graph.name), graph.graph["inputs"].values())
    for node in operators(graph):
        if node.name in fused:
            builder.add(fused[node.name])
        elif node.name not in dropped:
            builder.add(node)
    return builder.finish(graph.graph["outputs"])


def layer_graphs(
    scenario: Scenario,
    shape: StepShape,
    stage: PipelineStage | None = None,
    *,
    whole_queries: bool = False,
    replicate_queries: bool = False,
    all_experts: bool = False,
) -> list[tuple[GraphGroup, DiGraph]]:
    """Each group of one step (of one pipeline ``stage``: its layers) with its sharded graph
    (attention fused, except at `none`), on a memory plan that holds MLA's query weights
    whole (``whole_queries``) or not, the step making every head's queries on every socket
    (``replicate_queries``, the compiler's choice: `compiler.query_choice`) or gathering
    them; under static expert loading streaming every expert (``all_experts``, the
    compiler's choice: `compiler.expert_schedule`) or gathering the worst case."""
    plan = replace(
        shard_plan(scenario, shape, all_experts),
        whole_queries=whole_queries,
        replicate_queries=replicate_queries,
    )
    fuse = fusion_level(scenario) != "none"
    return [
        (group, shard_graph(fuse_attention(group.graph) if fuse else group.graph, plan))
        for group in step_groups(scenario, shape, stage, all_experts)
    ]


def kernel_graphs(
    scenario: Scenario,
    shape: StepShape,
    stage: PipelineStage | None = None,
    *,
    whole_queries: bool = False,
    replicate_queries: bool = False,
    all_experts: bool = False,
) -> list[KernelGraph]:
    """The fused, sharded kernels of one step on one socket (of one pipeline ``stage``), at
    the workload's fusion level (MLA's queries and the experts: as for `layer_graphs`)."""
    level = fusion_level(scenario)
    looping = scenario.workload.kernel_looping and level == "full"
    kernels: list[KernelGraph] = []
    for group, sharded in layer_graphs(
        scenario,
        shape,
        stage,
        whole_queries=whole_queries,
        replicate_queries=replicate_queries,
        all_experts=all_experts,
    ):
        if level == "full":
            looped = looping and group.count > 1
            kernels.append(KernelGraph(group.name, group.count, looped, sharded, rows=group.rows))
            continue
        for names in operator_groups(sharded, level):
            kernels.append(
                KernelGraph(
                    f"{group.name}:{names[0]}",
                    group.count,
                    False,
                    subgraph(sharded, names),
                    layer=group.name,
                    rows=group.rows,
                )
            )
    return kernels


def fusion_level(scenario: Scenario) -> FusionLevel:
    """The workload's fusion level, `auto` resolved for the hardware (full on SN40L)."""
    return resolve_level(scenario.workload.fusion, scenario.hardware.kind == "gpu")
