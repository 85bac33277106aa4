"""SnapKV selection at prefill, as real operators (the "snapkv_select" kernel, per layer).

The fused attention kernel does not expose attention weights, so SnapStream recomputes the
observation window's scores outside it (arXiv 2511.03092). Per layer:

1. read the window's queries (stashed in HBM by the prefill) and all `prompt` cached keys;
2. QK^T of the `window` queries against the `prompt` keys (MLA: the queries absorbed by
   W_UK into the latent space, scores over kv_lora_rank + rope dims, as in decode);
3. softmax in FP32 (scale and the causal mask of the window block folded in);
4. sum over the window queries;
5. reduce over heads: GQA averages each query group, one selection per KV head (kvpress's
   choice, as rdu_sim.kv does); MLA sums over all heads, one selection per layer since the
   latent is shared by the heads (across TP sockets: the compiler adds the collective);
6. 1-D pooling (kernel k, stride 1) over the candidate tokens;
7. top-K of the candidates;
8. the gather that copies the `kept` tokens (sinks, top-K, recent) into the slot's
   compressed cache: a KV read and a KV write of `kept` tokens.

Work grows with prompt x window (steps 2-4) and prompt (1, 5-7).
"""

from __future__ import annotations

import math

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.mla import KV_B, MlaCache
from rdu_sim.graph.operator import Axis, Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.ops import SOFTMAX_FLOPS, act
from rdu_sim.graph.shape import FP32, INDEX, Precision
from rdu_sim.models.layers import Architecture, GqaArchitecture
from rdu_sim.shapes import Selection

WINDOW_QUERY, WINDOW_NOPE, WINDOW_PE = "q_window", "q_window_nope", "q_window_pe"
STASHED_BY_HEADS = frozenset({WINDOW_QUERY, WINDOW_NOPE, WINDOW_PE})
"""The window queries, kernel inputs the prefill stashed in HBM: each socket holds its own
heads' (the prefill's attention is split by heads in every layout)."""


def snapkv_graph(
    arch: Architecture,
    batch: int,
    selection: Selection,
    precision: Precision,
    cache: MlaCache = "latent",
) -> DiGraph:
    """The selection operators of one layer for `batch` slots compressing together."""
    if isinstance(arch, DeepSeekArchitecture):
        return _mla(arch, batch, selection, precision, cache)
    return _gqa(arch, batch, selection, precision)


def _scores_to_topk(
    b: GraphBuilder,
    q: tuple[TensorSpec, ...],
    keys: TensorSpec,
    *,
    batch: int,
    heads: int,
    dim: int,
    sel: Selection,
    compute: Axis,
    kv: Axis,
    sharing: int,
) -> TensorSpec:
    """Score, softmax and window sum; shared by both families. Returns (batch, heads, P).

    `sharing` query heads share one key set (the GQA group; all heads for the MLA latent):
    they form the m of one product.
    """
    w, prompt = sel.window, sel.scored_keys
    full = (batch, heads, w, prompt)
    b.add(
        Operator(
            "snapkv.score",
            "attention_score",
            inputs=(*q, keys),
            outputs=(TensorSpec("snapkv.scores", full, FP32),),
            flops=2 * batch * heads * w * prompt * dim,
            gemm=Gemm(m=w * sharing, n=prompt, k=dim, batch=batch * heads // sharing),
            split=Split(compute=compute, kv=kv, gemm_dim="batch" if sharing < heads else "m"),
        )
    )
    probs = TensorSpec("snapkv.probs", full, FP32)
    b.add(
        Operator(
            "snapkv.softmax",
            "softmax",
            inputs=(b.tensor("snapkv.scores"),),
            outputs=(probs,),
            vector_flops=SOFTMAX_FLOPS * math.prod(full),
            split=Split(compute=compute),
        )
    )
    summed = TensorSpec("snapkv.window_sum", (batch, heads, prompt), FP32)
    b.add(
        Operator(
            "snapkv.window_sum",
            "reduce",
            inputs=(probs,),
            outputs=(summed,),
            vector_flops=math.prod(full),
            split=Split(compute=compute),
        )
    )
    return summed


def _pool_topk_gather(
    b: GraphBuilder,
    scores: TensorSpec,
    *,
    groups: int,
    sel: Selection,
    per_token_kv: float,
    split: Split,
) -> None:
    """Pool the candidates, pick the top-K, gather the kept tokens into the slot."""
    batch = scores.shape[0]
    pooled = TensorSpec("snapkv.pooled", (batch, groups, sel.candidates), FP32)
    b.add(
        Operator(
            "snapkv.pool",
            "pool",
            inputs=(scores,),
            outputs=(pooled,),
            vector_flops=batch * groups * sel.candidates * sel.kernel_size,
            split=Split(compute=split.compute),
        )
    )
    index = TensorSpec("snapkv.index", (batch, groups, sel.topk), INDEX)
    b.add(
        Operator(
            "snapkv.topk",
            "topk",
            inputs=(pooled,),
            outputs=(index,),
            vector_flops=batch * groups * sel.candidates * math.ceil(math.log2(max(sel.topk, 2))),
            split=Split(compute=split.compute),
        )
    )
    b.add(
        Operator(
            "snapkv.gather",
            "gather",
            inputs=(index,),
            kv_read_bytes=batch * sel.kept * per_token_kv,
            kv_write_bytes=batch * sel.kept * per_token_kv,
            split=split,
        )
    )


def _gqa(arch: GqaArchitecture, batch: int, sel: Selection, precision: Precision) -> DiGraph:
    heads, kv_heads, dim = arch.heads, arch.kv_heads, arch.head_dim
    q = act(WINDOW_QUERY, (batch, sel.window, heads, dim), precision)
    b = GraphBuilder(f"{arch.name}.snapkv_select", [q])
    keys = TensorSpec("snapkv.keys", (batch, sel.scored_keys, kv_heads, dim), precision.kv)
    b.add(
        Operator(
            "snapkv.k_read",
            "kv_read",
            outputs=(keys,),
            kv_read_bytes=keys.bytes,
            split=Split(compute="kv_heads", kv="kv_heads"),
        )
    )
    summed = _scores_to_topk(
        b,
        (q,),
        keys,
        batch=batch,
        heads=heads,
        dim=dim,
        sel=sel,
        compute="heads",
        kv="none",
        sharing=heads // kv_heads,
    )
    grouped = TensorSpec("snapkv.group_mean", (batch, kv_heads, sel.scored_keys), FP32)
    b.add(
        Operator(
            "snapkv.group_mean",
            "reduce",
            inputs=(summed,),
            outputs=(grouped,),
            vector_flops=batch * heads * sel.scored_keys,
            split=Split(compute="kv_heads"),
        )
    )
    _pool_topk_gather(
        b,
        grouped,
        groups=kv_heads,
        sel=sel,
        per_token_kv=2 * kv_heads * dim * precision.kv,
        split=Split(compute="kv_heads", kv="kv_heads"),
    )
    return b.finish([])


def _mla(
    arch: DeepSeekArchitecture,
    batch: int,
    sel: Selection,
    precision: Precision,
    cache: MlaCache,
) -> DiGraph:
    heads, nope, pe, vdim, rank = (
        arch.heads,
        arch.qk_nope_head_dim,
        arch.qk_rope_head_dim,
        arch.v_head_dim,
        arch.kv_lora_rank,
    )
    w = sel.window
    compute: Axis
    q_nope = act(WINDOW_NOPE, (batch, w, heads, nope), precision)
    q_pe = act(WINDOW_PE, (batch, w, heads, pe), precision)
    b = GraphBuilder(f"{arch.name}.snapkv_select", [q_nope, q_pe])
    if cache == "latent":
        q_lat = act("snapkv.q_latent", (batch, w, heads, rank), precision)
        b.add(
            Operator(
                "snapkv.q_absorb",
                "batched_gemm",
                inputs=(q_nope,),
                outputs=(q_lat,),
                flops=2 * batch * w * heads * nope * rank,
                weight_read_bytes=heads * nope * rank * precision.weights,
                gemm=Gemm(m=batch * w, n=rank, k=nope, batch=heads),
                split=Split.along("heads", "batch"),
                weights=KV_B,
            )
        )
        keys = TensorSpec("snapkv.keys", (batch, sel.scored_keys, rank + pe), precision.kv)
        queries: tuple[TensorSpec, ...] = (q_lat, q_pe)
        dim, compute, per_token = rank + pe, "attention", (rank + pe) * precision.kv
        sharing = heads
        # heads split (replicated cache) or keys split (sequence_split), by layout
    else:
        keys = TensorSpec("snapkv.keys", (batch, sel.scored_keys, heads, nope + pe), precision.kv)
        queries = (q_nope, q_pe)
        dim, compute, per_token = nope + pe, "heads", heads * (nope + pe + vdim) * precision.kv
        sharing = 1
    b.add(
        Operator(
            "snapkv.k_read",
            "kv_read",
            outputs=(keys,),
            kv_read_bytes=keys.bytes,
            split=Split(kv="mla_cache"),
        )
    )
    summed = _scores_to_topk(
        b,
        queries,
        keys,
        batch=batch,
        heads=heads,
        dim=dim,
        sel=sel,
        compute=compute,
        kv="mla_cache",
        sharing=sharing,
    )
    total = TensorSpec("snapkv.head_sum", (batch, 1, sel.scored_keys), FP32)
    b.add(
        Operator(
            "snapkv.head_sum",
            "reduce",
            inputs=(summed,),
            outputs=(total,),
            vector_flops=batch * heads * sel.scored_keys,
            split=Split(compute=compute, combine="selection"),
        )
    )
    _pool_topk_gather(
        b, total, groups=1, sel=sel, per_token_kv=per_token, split=Split(kv="mla_cache")
    )
    return b.finish([])
