"""The observation window's queries a compressing prefill stashes for the SnapKV selection.

The fused attention kernel never exposes its attention weights, so SnapStream scores the
window outside it (arXiv 2511.03092): the prefill's attention writes the queries of the
prompt's last ``window`` tokens to HBM as it makes them (extra outputs of the operators
that produce them), and the selection's score kernel reads them back. One rule for both
ends: what is stashed (post-RoPE, per query head), its names and shapes.

- GQA: the rotated queries, ``heads x head_dim`` a token;
- MLA: the un-absorbed ``q_nope`` (from q_b_proj) and the rotated ``q_pe``; the score
  kernel absorbs q_nope with W_UK itself (for the latent cache) or scores it as it is
  (per-head cache).
"""

from __future__ import annotations

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.operator import TensorSpec
from rdu_sim.graph.ops import act
from rdu_sim.graph.shape import Precision
from rdu_sim.models.layers import Architecture

GQA_QUERIES = "q_window"
MLA_NOPE, MLA_PE = "q_window_nope", "q_window_pe"
STASHED_BY_HEADS = frozenset({GQA_QUERIES, MLA_NOPE, MLA_PE})
"""Every stashed tensor's name: each socket stashes its own heads' rows (the prefill's
attention is split by heads in every layout), which the score kernel reads back."""


def stash_names(arch: Architecture) -> tuple[str, ...]:
    """The names of the stashed tensors, in ``stashed_queries``'s order."""
    return (MLA_NOPE, MLA_PE) if isinstance(arch, DeepSeekArchitecture) else (GQA_QUERIES,)


def stashed_queries(
    arch: Architecture, batch: int, window: int, precision: Precision
) -> tuple[TensorSpec, ...]:
    """The window queries of ``batch`` prompts, as the prefill writes them (a layer's)."""
    if isinstance(arch, DeepSeekArchitecture):
        return (
            act(MLA_NOPE, (batch, window, arch.heads, arch.qk_nope_head_dim), precision),
            act(MLA_PE, (batch, window, arch.heads, arch.qk_rope_head_dim), precision),
        )
    return (act(GQA_QUERIES, (batch, window, arch.heads, arch.head_dim), precision),)
