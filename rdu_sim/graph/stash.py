"""The queries a step's attention stashes for a selection's score kernel: a compressing
prefill's observation window for the SnapKV selection, a decode step's own queries for its
policy's eviction (``KVPolicy.decode_selection``).

The fused attention kernel never exposes its attention weights, so SnapStream scores the
window outside it (arXiv 2511.03092): the step's attention writes the queries of its last
``window`` tokens to HBM as it makes them (extra outputs of the operators that produce
them), and the selection's score kernel reads them back. One rule for both ends: what is
stashed (post-RoPE, per query head), its names and shapes.

- GQA: the rotated queries, ``heads x head_dim`` a token;
- MLA: the un-absorbed ``q_nope`` (from q_b_proj) and the rotated ``q_pe``; the score
  kernel absorbs q_nope with W_UK itself (for the latent cache) or scores it as it is
  (per-head cache).

A mixed step's decode rows stash theirs apart, under ``DECODE_PART`` names.
"""

from __future__ import annotations

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.operator import TensorSpec
from rdu_sim.graph.ops import act
from rdu_sim.graph.shape import DECODE_PART, Precision
from rdu_sim.models.layers import Architecture

GQA_QUERIES = "q_window"
MLA_NOPE, MLA_PE = "q_window_nope", "q_window_pe"
STASHED_BY_HEADS = frozenset(
    prefix + name for prefix in ("", DECODE_PART) for name in (GQA_QUERIES, MLA_NOPE, MLA_PE)
)
"""Every stashed tensor's name (a mixed step's decode rows' under ``DECODE_PART``): each
socket stashes its own heads' rows (attention is split by heads in every layout), which the
score kernel reads back."""


def stash_names(arch: Architecture, part: str = "") -> tuple[str, ...]:
    """The names of the stashed tensors, in ``stashed_queries``'s order (of a mixed step's
    decode rows with ``part`` = ``DECODE_PART``)."""
    names = (MLA_NOPE, MLA_PE) if isinstance(arch, DeepSeekArchitecture) else (GQA_QUERIES,)
    return tuple(part + name for name in names)


def stashed_queries(
    arch: Architecture, batch: int, window: int, precision: Precision, part: str = ""
) -> tuple[TensorSpec, ...]:
    """The window queries of ``batch`` prompts (or decoding slots), as the step's attention
    writes them (a layer's); ``part``: the prefix of a mixed step's decode rows."""
    names = stash_names(arch, part)
    if isinstance(arch, DeepSeekArchitecture):
        return (
            act(names[0], (batch, window, arch.heads, arch.qk_nope_head_dim), precision),
            act(names[1], (batch, window, arch.heads, arch.qk_rope_head_dim), precision),
        )
    return (act(names[0], (batch, window, arch.heads, arch.head_dim), precision),)
