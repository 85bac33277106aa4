"""How a scenario lays the model over its TP sockets: shard divisors and the KV layout.

Tensor parallelism is symmetric: every socket of the TP group runs the same stages on its
share. `ShardPlan.divisor(axis)` is the number of ways an operator axis is split:

- none -> 1: replicated (norms, residuals, MLA q_a/kv_a down-projections, router,
  embedding);
- heads, ffn, vocab, experts -> tp: query heads, FFN columns, LM-head vocabulary, routed
  experts (`parallelism.moe_experts`: tensor slices every expert tp ways, the mean share;
  expert places E/tp whole experts per socket, and the routed expert GEMMs then take the
  busiest socket's share, `ExpertPlacement.busiest`, since the step waits for it);
- kv_heads -> min(tp, kv_heads): GQA K/V heads; with tp > kv_heads each K/V head is
  replicated on tp/kv_heads sockets;
- attention -> tp: MLA decode attention, by heads (replicated, head_split) or by cached
  tokens (sequence_split);
- mla_cache -> 1 or tp: the whole latent cache on every socket (replicated), 1/tp of each
  slot's tokens (sequence_split), or 1/tp of the per-head K/V (head_split).

MLA cache layouts (`parallelism.mla_cache_layout`), per token and layer in BF16 with 16-way
TP (DeepSeek-R1: kv_lora_rank 512 + rope 64; 128 heads x (128 + 64 + 128) per-head K/V):
- replicated: 576 values on every socket (1,152 B); attention split by heads, no collective;
- sequence_split: 576 / 16 = 36 values per socket (72 B); each socket attends all heads over
  its tokens, so it needs every head's absorbed query (gathered, or computed from q_b_proj
  and kv_b_proj held whole on every socket: `compiler.mla_queries`), then a reduce-scatter
  (with the softmax statistics) combines the partial outputs and hands each socket its heads
  for o_proj (and for W_UV, unless the socket holds it whole and projected its partial
  outputs first);
- head_split: 40,960 / 16 = 2,560 values per socket (5,120 B): the up-projected per-head
  cache is 71x the latent, so even split 16 ways it is 4.4x the replicated latent; attention
  is the non-absorbed form (no W_UK/W_UV absorption, fewer attention FLOPs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rdu_sim.compiler.expert_exchange import ExpertExchange, expert_exchange
from rdu_sim.compiler.expert_load import ExpertLoadModel, expert_load_model
from rdu_sim.compiler.stages import PipelineStage
from rdu_sim.config.architecture import DeepSeekArchitecture, GqaMoeArchitecture
from rdu_sim.graph import MlaCache, Precision
from rdu_sim.graph.moe import (
    expected_busiest_socket_experts,
    expected_distinct_experts,
    static_schedule,
)
from rdu_sim.graph.operator import Axis
from rdu_sim.models.layers import LayerKind, layer_kinds, window_tokens
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import Phase, StepShape


@dataclass(frozen=True)
class ExpertPlacement:
    """Whole routed experts placed E/tp per socket (expert parallelism): how many of a step's
    selected experts the busiest socket holds, which sets the pace of the step."""

    experts: int
    per_token: int
    groups: int = 1  # DeepSeek-V3's group-limited routing: expert groups ...
    groups_per_token: int = 1  # ... and how many of them one token's experts come from

    def busiest(self, selected: int, sockets: int) -> float:
        """Expected selected experts on the socket holding the most of them. The selected set
        is uniform (graph.moe's routing model); one token's (selected <= k) lies within its
        `groups_per_token` groups, i.e. within their sockets when groups are whole sockets
        (groups dividing the sockets, experts numbered group by group); a batch's union of
        groups varies by token and is taken as uniform over all sockets."""
        if selected <= self.per_token and self.groups > 1 and sockets % self.groups == 0:
            held = sockets // self.groups * self.groups_per_token
            return expected_busiest_socket_experts(selected, self.experts * held // sockets, held)
        return expected_busiest_socket_experts(selected, self.experts, sockets)

    def busiest_pairs_share(self, tokens: int, sockets: int) -> float:
        """The busiest socket's share of ``tokens`` tokens' token-expert pairs, by routed
        loading's rule whatever the loading: the experts the tokens touch (uniform routing,
        rounded up as the graph streams them) each take an equal share of the pairs, and the
        busiest socket holds `busiest` of them. A static schedule streams more experts than
        the tokens touch, but their pairs land as routing puts them."""
        touched = expected_distinct_experts(tokens, self.experts, self.per_token)
        selected = max(1, math.ceil(round(touched, 9)))
        return self.busiest(selected, sockets) / selected


@dataclass(frozen=True)
class ShardPlan:
    """TP degree and the layout choices that set each axis's divisor; under data-parallel
    attention with all-to-all experts, the exchange and the step it is for (its phase and
    its rank's token rows: the experts' load and the all-to-all's mode depend on them)."""

    tp: int
    mla_cache_layout: str = "sequence_split"
    kv_heads: int | None = None  # GQA key/value heads (None for MLA)
    experts: ExpertPlacement | None = None  # whole experts per socket (None: sliced)
    exchange: ExpertExchange | None = None  # all-to-all experts (compiler.expert_exchange)
    # whole experts paced by their placement's busiest device (compiler.expert_load): under
    # an exchange, or a load or placement the workload states (`experts`)
    expert_load: ExpertLoadModel | None = None
    rows: int = 0  # the step's token rows per rank (with an expert load)
    joint_tokens: int = 0  # the ranks' tokens together, when they differ (StepShape's)
    phase: Phase = "decode"  # the step's phase (with an expert load)
    # sequence_split MLA (compiler.mla_queries): q_b_proj and kv_b_proj resident whole on
    # every socket, and whether this program computes every head's queries with them and
    # projects its partial outputs through W_UV before combining them (else it computes its
    # heads' queries and gathers the rest)
    whole_queries: bool = False
    replicate_queries: bool = False

    def divisor(self, axis: Axis) -> int:
        """Ways `axis` is split over the TP group (see the module table)."""
        if axis == "none":
            return 1
        if axis == "kv_heads":
            return min(self.tp, self.kv_heads) if self.kv_heads else self.tp
        if axis == "mla_cache":
            return 1 if self.mla_cache_layout == "replicated" else self.tp
        return self.tp

    @property
    def sequence_split(self) -> bool:
        """MLA decode attention split by cached tokens (needs the combining reduce-scatter)."""
        return self.mla_cache_layout == "sequence_split" and self.tp > 1


def shard_plan(
    scenario: Scenario, shape: StepShape | None = None, all_experts: bool = False
) -> ShardPlan:
    """The ShardPlan a scenario asks for (for a step of ``shape``: what an all-to-all
    exchange of experts needs to know of it; ``all_experts``: under static expert loading,
    the schedule that streams every expert, `graph.moe`)."""
    arch = scenario.model
    kv_heads = None if isinstance(arch, DeepSeekArchitecture) else arch.kv_heads
    parallelism = scenario.workload.parallelism
    experts = None
    if parallelism.expert_ways > 1 and isinstance(arch, DeepSeekArchitecture | GqaMoeArchitecture):
        groups = (
            (arch.expert_groups, arch.groups_per_token)
            if isinstance(arch, DeepSeekArchitecture)
            else (1, 1)
        )
        experts = ExpertPlacement(arch.routed_experts, arch.experts_per_token, *groups)
    exchange = expert_exchange(scenario, all_experts)
    load = None
    if exchange is not None:
        load = exchange.load_model
    elif experts is not None and not scenario.workload.experts.is_default:
        load = expert_load_model(
            scenario.workload.experts,
            experts.experts,
            experts.per_token,
            scenario.tp,
            1,
            static_schedule(scenario.workload.moe_expert_loading, all_experts),
        )
    if load is not None:
        experts = None  # whole experts, paced by the placement's busiest device
    plan = ShardPlan(scenario.tp, parallelism.mla_cache_layout, kv_heads, experts, exchange, load)
    if load is None or shape is None:
        return plan
    joint = shape.distinct_joint(load.ranks)
    return replace(plan, rows=shape.rows, phase=shape.phase, joint_tokens=joint)


def mla_cache_form(scenario: Scenario) -> MlaCache:
    """What the MLA cache holds: per-head K/V under head_split, else the latent."""
    return (
        "per_head" if scenario.workload.parallelism.mla_cache_layout == "head_split" else "latent"
    )


def precision(scenario: Scenario) -> Precision:
    """Bytes per element of weights, KV and activations."""
    return Precision(
        weights=scenario.weight_dtype_bytes,
        kv=scenario.kv_dtype_bytes,
        activations=scenario.activation_dtype_bytes,
        experts=scenario.expert_dtype_bytes,
    )


def kv_slot_bytes_per_socket(
    scenario: Scenario,
    tokens: int,
    stage: PipelineStage | None = None,
    kinds: Sequence[LayerKind] | None = None,
) -> int:
    """Bytes one socket holds for `tokens` cached tokens of one slot, all layers (of a
    pipeline ``stage``: its layers; ``kinds``: these layers).

    Token-split layouts round the slot's tokens up to a multiple of tp (each socket holds
    ceil(tokens / tp)); head-split layouts divide the per-token values. A sliding-window
    layer holds only its ring (`models.layers.window_tokens`).
    """
    arch, plan, kv = scenario.model, shard_plan(scenario), scenario.kv_dtype_bytes
    if kinds is None:
        kinds = layer_kinds(arch) if stage is None else stage.kinds(arch)
    if not isinstance(arch, DeepSeekArchitecture):
        per_token = 2 * arch.kv_heads * arch.head_dim * kv / plan.divisor("kv_heads")
        held = sum(window_tokens(tokens, kind.window) for kind in kinds)
        return math.ceil(held * per_token)
    if mla_cache_form(scenario) == "per_head":
        per_token = (
            arch.heads
            * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim)
            * kv
            / plan.tp
        )
        return math.ceil(len(kinds) * tokens * per_token)
    per_token = (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv
    split = plan.divisor("mla_cache")
    return math.ceil(len(kinds) * math.ceil(tokens / split) * per_token)
