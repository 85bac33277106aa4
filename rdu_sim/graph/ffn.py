"""The feed-forward half of a decoder layer: a dense SwiGLU FFN or a mixture of experts.

Both write their result as a partial sum across TP sockets (row-parallel down projection;
each socket's share of the experts), marked `combine="sum"` so sharding adds the all-reduce.

MoE (DeepSeek-V3, Mixtral, Qwen3-MoE, gpt-oss): a router GEMM (DeepSeek: sigmoid scores
plus a correction bias; the others a softmax, gpt-oss with a bias), top-k, the shared
experts when the model has any (a SwiGLU as wide as all shared experts together), the
routed experts (gpt-oss: with biases, and stored in their own dtype, `Precision.experts`),
and the weighted combine. A step's routed experts read the weights of the distinct experts the
batch touches, `expected_distinct_experts(batch * tokens, E, k)` of them, or with a static
schedule the worst case min(E, batch * tokens * k) (`moe.experts_loaded`).
"""

from __future__ import annotations

import math

from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.moe import (
    DEFAULT_EXPERT_LOADING,
    ExpertLoading,
    experts_data_dependent,
    experts_loaded,
)
from rdu_sim.graph.operator import Combine, Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.ops import ADD_FLOPS, SILU_MUL_FLOPS, act, linear, silu_mul
from rdu_sim.graph.shape import FP32, INDEX, Precision, StepShape
from rdu_sim.models.figures import expert_bias_params, router_params
from rdu_sim.models.layers import MoeArchitecture


def add_swiglu(
    b: GraphBuilder,
    x: TensorSpec,
    *,
    prefix: str,
    intermediate: int,
    out: str,
    precision: Precision,
    combine: Combine,
) -> TensorSpec:
    """gate_proj, up_proj, silu_mul, down_proj; columns (intermediate) split over TP."""
    batch, tokens, hidden = x.shape
    rows = batch * tokens
    inner = (batch, tokens, intermediate)
    column = Split.along("ffn", "n")
    gate = b.add(
        linear(
            f"{prefix}.gate_proj",
            x,
            (act(f"{prefix}.gate", inner, precision),),
            rows=rows,
            k=hidden,
            n=intermediate,
            precision=precision,
            split=column,
        )
    )
    up = b.add(
        linear(
            f"{prefix}.up_proj",
            x,
            (act(f"{prefix}.up", inner, precision),),
            rows=rows,
            k=hidden,
            n=intermediate,
            precision=precision,
            split=column,
        )
    )
    gated = b.add(
        silu_mul(
            f"{prefix}.silu_mul",
            gate.outputs[0],
            up.outputs[0],
            f"{prefix}.act",
            precision,
            Split.along("ffn"),
        )
    )
    down = b.add(
        linear(
            f"{prefix}.down_proj",
            gated.outputs[0],
            (act(out, x.shape, precision),),
            rows=rows,
            k=intermediate,
            n=hidden,
            precision=precision,
            split=Split.along("ffn", "k", combine),
        )
    )
    return down.outputs[0]


def add_moe(
    b: GraphBuilder,
    x: TensorSpec,
    arch: MoeArchitecture,
    shape: StepShape,
    precision: Precision,
    out: str,
    loading: ExpertLoading = DEFAULT_EXPERT_LOADING,
) -> TensorSpec:
    """Router, top-k, shared experts, routed experts and combine; returns the partial sum.

    `loading` says which experts' weights the step streams (see `moe.experts_loaded`); the
    FLOPs are the routed tokens' either way."""
    batch, tokens, hidden = x.shape
    rows = shape.rows
    experts, k, inter = arch.routed_experts, arch.experts_per_token, arch.moe_intermediate
    gate = router_params(arch)
    router = b.add(
        Operator(
            "moe.router",
            "router",
            inputs=(x,),
            outputs=(TensorSpec("moe.logits", (batch, tokens, experts), FP32),),
            flops=2 * rows * hidden * experts,
            weight_params=gate,
            weight_bytes=gate * precision.weights,
            weight_read_bytes=gate * precision.weights,
            gemm=Gemm(m=rows, n=experts, k=hidden),
        )
    )
    routing = TensorSpec("moe.routing", (batch, tokens, k), FP32 + INDEX)
    b.add(
        Operator(
            "moe.topk",
            "topk",
            inputs=router.outputs,
            outputs=(routing,),
            # sigmoid and bias per score, a partial sort, then normalising the k weights
            vector_flops=rows * experts * (5 + math.ceil(math.log2(max(k, 2)))) + 2 * rows * k,
        )
    )
    shared = None
    if arch.shared_experts:
        shared = add_swiglu(
            b,
            x,
            prefix="moe.shared",
            intermediate=arch.shared_experts * inter,
            out="moe.shared_out",
            precision=precision,
            combine="none",
        )
    distinct = experts_loaded(rows, experts, k, loading)
    # which experts' weights are read is known only after the router, unless it is all
    selected_by = routing.name if experts_data_dependent(rows, experts, k, loading) else ""
    # expectations land a rounding error off an integer (one token's 8 experts: 7.999...):
    # round before the ceiling, or one row per expert becomes two
    per_expert_rows = max(1, math.ceil(round(rows * k / distinct, 9)))
    active = max(1, math.ceil(round(distinct, 9)))
    split = Split.along("experts", "batch")
    biased = expert_bias_params(arch) > 0
    # one expert's stored weight bytes: the products at the experts' dtype, biases at the
    # weights' (gpt-oss keeps its expert biases in BF16 beside MXFP4 matrices)
    gate_up_params = hidden * 2 * inter + (2 * inter if biased else 0)
    gate_up_bytes = hidden * 2 * inter * precision.expert_weights + (
        2 * inter * precision.weights if biased else 0
    )
    gate_up = b.add(
        Operator(
            "moe.experts_gate_up",
            "expert_gemm",
            inputs=(x, routing),
            outputs=(act("moe.experts_gu", (batch, tokens, k, 2 * inter), precision),),
            flops=2 * rows * k * hidden * 2 * inter,
            vector_flops=ADD_FLOPS * rows * k * 2 * inter if biased else 0,
            weight_params=experts * gate_up_params,
            weight_bytes=experts * gate_up_bytes,
            weight_read_bytes=distinct * gate_up_bytes,
            gemm=Gemm(m=per_expert_rows, n=2 * inter, k=hidden, batch=active),
            split=split,
            weights_selected_by=selected_by,
        )
    )
    gated = b.add(
        Operator(
            "moe.experts_silu_mul",
            "silu_mul",
            inputs=gate_up.outputs,
            outputs=(act("moe.experts_act", (batch, tokens, k, inter), precision),),
            vector_flops=SILU_MUL_FLOPS * rows * k * inter,
            split=Split.along("experts"),
        )
    )
    down_params = inter * hidden + (hidden if biased else 0)
    down_bytes = inter * hidden * precision.expert_weights + (
        hidden * precision.weights if biased else 0
    )
    down = b.add(
        Operator(
            "moe.experts_down",
            "expert_gemm",
            inputs=gated.outputs,
            outputs=(act("moe.experts_out", (batch, tokens, k, hidden), precision),),
            flops=2 * rows * k * inter * hidden,
            vector_flops=ADD_FLOPS * rows * k * hidden if biased else 0,
            weight_params=experts * down_params,
            weight_bytes=experts * down_bytes,
            weight_read_bytes=distinct * down_bytes,
            gemm=Gemm(m=per_expert_rows, n=hidden, k=inter, batch=active),
            split=split,
            weights_selected_by=selected_by,
        )
    )
    inputs = (down.outputs[0], routing) + ((shared,) if shared is not None else ())
    combine = b.add(
        Operator(
            "moe.combine",
            "moe_combine",
            inputs=inputs,
            outputs=(act(out, x.shape, precision),),
            vector_flops=2 * rows * k * hidden + ADD_FLOPS * rows * hidden,
            split=Split.along("experts", combine="sum"),
        )
    )
    return combine.outputs[0]
