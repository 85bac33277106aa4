"""SnapKV selection at prefill as the kernels a compressing prefill runs, per attention layer.

The fused attention kernel does not expose attention weights, so SnapStream recomputes the
observation window's scores outside it (arXiv 2511.03092). A compressing prefill writes the
whole prompt's KV (to a scratch the memory plan holds: it must, to score it) and stashes
its window's queries (`graph.stash`); then three kernels, each called once per layer (all
layers' scores, then their top-Ks, then their compactions: `compiler.fusion`):

1. ``snapkv_score``, the window's scores:
   - read the stashed window queries (HBM) and every cached key of the prompt (MLA: the
     latent and RoPE keys; GQA: K);
   - MLA latent cache: absorb q_nope with W_UK into the latent space (scores over
     kv_lora_rank + rope dims, as decode scores); the per-head cache scores q as it is;
   - QK^T of the ``window`` queries against all ``prompt`` keys, in FP32;
   - the softmax statistics of each (query, head) row: the causal mask of the window block
     (query i sees the keys up to its own position), the 1/sqrt(d) scale, the row's max and
     sum of exponentials (online softmax, ``STATS_FLOPS`` a score);
   - the window sum of the probabilities, exp(s - logsumexp) summed over the window's
     queries (``SUM_FLOPS`` a score): the scores stay on chip between the two passes over
     them (held whole, or spilled to HBM when too large: the compiler's rule);
   - the sum over heads: MLA sums all heads (one selection per layer, the latent being
     shared); GQA sums each query group (one selection per KV head, kvpress's choice, as
     rdu_sim.kv does);
   and writes the scores (one FP32 a key and group) to HBM.
2. ``snapkv_topk``: reads them, pools them along the sequence (kernel k, stride 1) over the
   candidates, and keeps the top-K by the radix select of `graph.topk`, one operator a
   pass: each reads every pooled candidate (on chip where the kernel holds them, from HBM
   where a pass is a kernel of its own) and the previous pass's histogram, and waits for
   that whole histogram; the last writes the K indices (int32) to HBM.
3. ``snapkv_compact``: reads the indices and copies the kept tokens' KV (sinks, top-K, the
   recent ring) from the scratch into the slot's static cache: a KV read and a KV write of
   ``kept`` tokens. Not in place: the slot is smaller than the prompt, so the prompt cannot
   be written into it whole, and compacting within one buffer is safe only in token order
   (a kept token may land where a later one is still to be read), which a gather cut into
   parallel tiles is not; a second buffer makes the gather hazard-free.

Tensor parallelism (`Split`, the collectives `compiler.sharding` inserts):
- MLA, sequence_split cache: each socket scores its share of the keys for every head, so
  it needs every head's absorbed queries (made where their heads live: the all-gather
  `compiler.mla_queries` splices before every sequence-split attention), its rows' softmax
  statistics are partial (an all-reduce, ``row_stats``), and its head-summed scores are its
  keys' share (an all-gather, ``selection``) so that every socket selects from all of them;
- MLA, replicated or per-head (head_split) cache: each socket scores its heads over all
  the keys; the head sum is partial (an all-reduce, ``selection``);
- GQA: each socket scores its query heads against its KV heads; when tp > kv_heads a
  group's heads are split over the sockets sharing its KV head (an all-reduce among them,
  ``group_sum``);
- the top-K runs whole on every socket that needs its result (MLA: all; GQA: each KV
  head's holders), and each socket compacts its share of the kept tokens.

Work grows with prompt x window (the score kernel) and prompt (the rest).

A decode step whose KV policy evicts by scores (``KVPolicy.decode_selection``: H2O, TOVA)
runs the same three kernels over each slot's cache, named apart (``EVICT_KERNELS``:
``evict_score``, ``evict_topk``, ``evict_compact``), its attention stashing each slot's
query: the score re-reads every cached key outside the fused attention, the compaction
copies the kept tokens (into a spare layer buffer the memory plan holds).
"""

from __future__ import annotations

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.mla import KV_B, MlaCache
from rdu_sim.graph.operator import Axis, Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.shape import FP32, INDEX, Phase, Precision
from rdu_sim.graph.stash import stashed_queries
from rdu_sim.graph.topk import RADIX_BITS, radix_select
from rdu_sim.models.layers import Architecture, GqaArchitecture
from rdu_sim.shapes import Selection

SCORE, TOPK, COMPACT = "snapkv_score", "snapkv_topk", "snapkv_compact"
KERNELS = (SCORE, TOPK, COMPACT)
"""The selection's kernels, in the order a compressing prefill runs them."""

EVICT_SCORE, EVICT_TOPK, EVICT_COMPACT = "evict_score", "evict_topk", "evict_compact"
EVICT_KERNELS = (EVICT_SCORE, EVICT_TOPK, EVICT_COMPACT)
"""The same kernels as a decode step runs them, when its policy evicts by scores
(``KVPolicy.decode_selection``): named apart from SnapKV's prefill selection."""

WINDOW_SUFFIX = "_window"
"""The suffix naming a sliding-window layer's selection kernels ("snapkv_score_window128")."""


def phase_kernels(phase: Phase) -> tuple[str, str, str]:
    """The selection's kernel names in a ``phase`` step: ``KERNELS`` at prefill,
    ``EVICT_KERNELS`` at decode."""
    return KERNELS if phase == "prefill" else EVICT_KERNELS


def kernel_name(kernel: str, window: int | None) -> str:
    """The name of selection ``kernel`` for the layers of attention ``window`` (None: full
    attention)."""
    return kernel if window is None else f"{kernel}{WINDOW_SUFFIX}{window}"


def selection_kernel(name: str) -> tuple[str, int | None] | None:
    """The kernel and attention window a `kernel_name` names (a prefill's or a decode
    step's); None for any other name."""
    for kernel in (*KERNELS, *EVICT_KERNELS):
        if name == kernel:
            return kernel, None
        if name.startswith(kernel + WINDOW_SUFFIX):
            return kernel, int(name.removeprefix(kernel + WINDOW_SUFFIX))
    return None


SCORES, INDICES = "snapkv.scores", "snapkv.indices"
"""The tensors passed from kernel to kernel through HBM."""

STATS_FLOPS = 5
"""A score's softmax statistics: scale, running max, subtract it, exponential, sum."""
SUM_FLOPS = 4
"""A score's share of the window sum: scale, subtract the row's log-sum-exp, exponential,
accumulate."""
MASK_FLOPS = 1
"""An element of the causal window block, in each pass over it: a select."""

Graphs = tuple[tuple[str, DiGraph], ...]


def selection_graphs(
    arch: Architecture,
    batch: int,
    selection: Selection,
    precision: Precision,
    cache: MlaCache = "latent",
    phase: Phase = "prefill",
    part: str = "",
) -> Graphs:
    """The selection's kernels of one layer for ``batch`` prompts compressing together (a
    ``phase`` of "decode": ``batch`` slots evicting from their caches; ``part``: the prefix
    of the stashed queries, a mixed step's decode rows'): (name, unsharded graph), in order
    (``phase_kernels``)."""
    score_name, topk_name, compact_name = phase_kernels(phase)
    queries = stashed_queries(arch, batch, selection.window, precision, part)
    if isinstance(arch, DeepSeekArchitecture):
        score = _mla_score(arch, batch, selection, precision, cache, score_name, queries)
        if cache == "latent":
            per_token = (arch.kv_lora_rank + arch.qk_rope_head_dim) * precision.kv
        else:
            per_token = (
                arch.heads
                * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim)
                * precision.kv
            )
        groups, select, kv = 1, Split(), Split(kv="mla_cache")
    else:
        score = _gqa_score(arch, batch, selection, precision, score_name, queries)
        per_token = 2 * arch.kv_heads * arch.head_dim * precision.kv
        groups = arch.kv_heads
        select = Split(compute="kv_heads")
        kv = Split(compute="kv_heads", kv="kv_heads")
    name = arch.name
    return (
        (score_name, score),
        (topk_name, _topk(f"{name}.{topk_name}", batch, groups, selection, select)),
        (
            compact_name,
            _compact(f"{name}.{compact_name}", batch, groups, selection, per_token, kv),
        ),
    )


def score_work(batch: int, heads: int, sel: Selection) -> tuple[int, int]:
    """Score elements (batch x heads x window x keys) and causal-block elements (batch x
    heads x window x window) of the window's score matrix."""
    w = sel.window
    return batch * heads * w * sel.scored_keys, batch * heads * w * w


def _scores(
    b: GraphBuilder,
    queries: tuple[TensorSpec, ...],
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
    """QK^T, the softmax statistics and the window sum, for both families; returns the
    (batch, heads, keys) window sums. ``sharing`` query heads share one key set (the GQA
    group; all heads for the MLA latent): they form the m of one product."""
    w, prompt = sel.window, sel.scored_keys
    elements, masked = score_work(batch, heads, sel)
    scores = TensorSpec("snapkv.qk", (batch, heads, w, prompt), FP32)
    b.add(
        Operator(
            "snapkv.score",
            "attention_score",
            inputs=(*queries, keys),
            outputs=(scores,),
            flops=2 * elements * dim,
            gemm=Gemm(m=w * sharing, n=prompt, k=dim, batch=batch * heads // sharing),
            split=Split(compute=compute, kv=kv, gemm_dim="batch" if sharing < heads else "m"),
        )
    )
    stats = TensorSpec("snapkv.row_stats", (batch, heads, w, 2), FP32)
    b.add(
        Operator(
            "snapkv.softmax",
            "softmax",
            inputs=(scores,),
            outputs=(stats,),
            vector_flops=STATS_FLOPS * elements + MASK_FLOPS * masked,
            split=Split(compute=compute, combine="row_stats"),
        )
    )
    summed = TensorSpec("snapkv.window_sum", (batch, heads, prompt), FP32)
    b.add(
        Operator(
            "snapkv.window_sum",
            "reduce",
            inputs=(scores, stats),
            outputs=(summed,),
            vector_flops=SUM_FLOPS * elements + MASK_FLOPS * masked,
            split=Split(compute=compute),
        )
    )
    return summed


def _gqa_score(
    arch: GqaArchitecture,
    batch: int,
    sel: Selection,
    precision: Precision,
    kernel: str,
    queries: tuple[TensorSpec, ...],
) -> DiGraph:
    heads, kv_heads, dim = arch.heads, arch.kv_heads, arch.head_dim
    b = GraphBuilder(f"{arch.name}.{kernel}", queries)
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
    summed = _scores(
        b,
        queries,
        keys,
        batch=batch,
        heads=heads,
        dim=dim,
        sel=sel,
        compute="heads",
        kv="none",
        sharing=heads // kv_heads,
    )
    return _head_sum(b, "snapkv.group_sum", summed, kv_heads, Split("heads", combine="group_sum"))


def _mla_score(
    arch: DeepSeekArchitecture,
    batch: int,
    sel: Selection,
    precision: Precision,
    cache: MlaCache,
    kernel: str,
    stashed: tuple[TensorSpec, ...],
) -> DiGraph:
    heads, nope, pe, rank = (
        arch.heads,
        arch.qk_nope_head_dim,
        arch.qk_rope_head_dim,
        arch.kv_lora_rank,
    )
    w = sel.window
    q_nope, q_pe = stashed
    b = GraphBuilder(f"{arch.name}.{kernel}", (q_nope, q_pe))
    compute: Axis
    queries: tuple[TensorSpec, ...]
    if cache == "latent":
        # the queries in the latent space: q_nope absorbed by W_UK, q_pe carried along
        queries = (TensorSpec("snapkv.q", (batch, w, heads, rank + pe), precision.activations),)
        b.add(
            Operator(
                "snapkv.q_absorb",
                "batched_gemm",
                inputs=(q_nope, q_pe),
                outputs=queries,
                flops=2 * batch * w * heads * nope * rank,
                weight_read_bytes=heads * nope * rank * precision.weights,
                gemm=Gemm(m=batch * w, n=rank, k=nope, batch=heads),
                split=Split.along("heads", "batch"),
                weights=KV_B,
            )
        )
        keys = TensorSpec("snapkv.keys", (batch, sel.scored_keys, rank + pe), precision.kv)
        # heads split (replicated cache) or keys split (sequence_split), by layout
        dim, compute, sharing = rank + pe, "attention", heads
    else:
        queries = (q_nope, q_pe)
        keys = TensorSpec("snapkv.keys", (batch, sel.scored_keys, heads, nope + pe), precision.kv)
        dim, compute, sharing = nope + pe, "heads", 1
    b.add(
        Operator(
            "snapkv.k_read",
            "kv_read",
            outputs=(keys,),
            kv_read_bytes=keys.bytes,
            split=Split(kv="mla_cache"),
        )
    )
    summed = _scores(
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
    return _head_sum(b, "snapkv.head_sum", summed, 1, Split(compute=compute, combine="selection"))


def _head_sum(b: GraphBuilder, name: str, summed: TensorSpec, groups: int, split: Split) -> DiGraph:
    """Sum the window sums over the heads of each group into the kernel's output scores."""
    batch, heads, prompt = summed.shape
    b.add(
        Operator(
            name,
            "reduce",
            inputs=(summed,),
            outputs=(TensorSpec(SCORES, (batch, groups, prompt), FP32),),
            vector_flops=batch * heads * prompt,
            split=split,
        )
    )
    return b.finish([SCORES])


def _topk(name: str, batch: int, groups: int, sel: Selection, split: Split) -> DiGraph:
    """Pool the candidates' scores and keep the top-K of each group: one operator a radix
    pass (`graph.topk`), each reading the pooled scores and the previous pass's histogram."""
    scores = TensorSpec(SCORES, (batch, groups, sel.scored_keys), FP32)
    b = GraphBuilder(name, [scores])
    pooled = TensorSpec("snapkv.pooled", (batch, groups, sel.candidates), FP32)
    b.add(
        Operator(
            "snapkv.pool",
            "pool",
            inputs=(scores,),
            outputs=(pooled,),
            vector_flops=batch * groups * sel.candidates * sel.kernel_size,
            split=split,
        )
    )
    rows = batch * groups
    previous: tuple[TensorSpec, ...] = ()
    for radix in radix_select(sel.candidates, sel.topk, rows):
        last = radix.name == "gather"
        out = (
            TensorSpec(INDICES, (batch, groups, sel.topk), INDEX)
            if last
            else TensorSpec(f"snapkv.histogram_{radix.name}", (batch, groups, 2**RADIX_BITS), INDEX)
        )
        b.add(
            Operator(
                f"snapkv.topk.{radix.name}",
                "topk",
                inputs=(pooled, *previous),
                outputs=(out,),
                vector_flops=radix.vector_flops,
                split=split,
            )
        )
        previous = (out,)
    return b.finish([INDICES])


def _compact(
    name: str, batch: int, groups: int, sel: Selection, per_token: float, split: Split
) -> DiGraph:
    """Copy the kept tokens' KV from the prompt's scratch into the slot's static cache."""
    indices = TensorSpec(INDICES, (batch, groups, sel.topk), INDEX)
    b = GraphBuilder(name, [indices])
    moved = batch * sel.kept * per_token
    b.add(
        Operator(
            "snapkv.compact",
            "gather",
            inputs=(indices,),
            kv_read_bytes=moved,
            kv_write_bytes=moved,
            split=split,
        )
    )
    return b.finish([])


__all__ = [
    "COMPACT",
    "EVICT_COMPACT",
    "EVICT_KERNELS",
    "EVICT_SCORE",
    "EVICT_TOPK",
    "INDICES",
    "KERNELS",
    "SCORE",
    "SCORES",
    "TOPK",
    "kernel_name",
    "phase_kernels",
    "score_work",
    "selection_graphs",
    "selection_kernel",
]
