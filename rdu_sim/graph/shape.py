"""The static shape a layer graph is built for, and the storage precisions.

`StepShape` mirrors `rdu_sim.compiler.program.StaticShape` (the graph room does not import
the compiler). The attention-length convention lives here, once:

- each new token attends to the `cache_len` cached tokens plus the new tokens up to and
  including itself (causal). A decode step (`tokens` = 1) at cache length c therefore
  attends to c + 1 tokens: `rdu_sim.models.decode_flops_per_token(arch, c + 1)` is its
  FLOPs per token;
- a prefill of t tokens on top of c cached ones scores t*c + t*(t+1)/2 (query, key) pairs
  per head and slot (masked pairs are skipped, as flash-style kernels do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["prefill", "decode"]


@dataclass(frozen=True)
class StepShape:
    """Phase, batch slots, new tokens per slot, cached tokens per slot."""

    phase: Phase
    batch: int
    tokens: int
    cache_len: int

    def __post_init__(self) -> None:
        if self.batch < 1 or self.tokens < 1 or self.cache_len < 0:
            raise ValueError(f"need batch >= 1, tokens >= 1, cache_len >= 0; got {self}")

    @property
    def rows(self) -> int:
        """Token rows a projection processes: batch x tokens."""
        return self.batch * self.tokens

    @property
    def keys(self) -> int:
        """Keys the last new token attends to: cache plus all new tokens."""
        return attended_keys(self.tokens, self.cache_len)

    @property
    def pairs(self) -> int:
        """Causal (query, key) pairs per slot and head: t*c + t*(t+1)/2."""
        return attended_pairs(self.tokens, self.cache_len)


def attended_keys(tokens: int, cached: int, window: int | None = None) -> int:
    """Keys the last of `tokens` new tokens attends to, on `cached` cached ones: all of
    them, or at most `window` (itself included) in a sliding-window layer."""
    keys = cached + tokens
    return keys if window is None else min(keys, window)


def attended_pairs(tokens: int, cached: int, window: int | None = None) -> int:
    """Causal (query, key) pairs per slot and head: new token i (1-based) attends to
    min(cached + i, window) keys. Without a window: t*c + t*(t+1)/2."""
    t = tokens
    unbounded = t if window is None else max(0, min(t, window - cached))
    pairs = unbounded * cached + unbounded * (unbounded + 1) // 2
    if window is not None:
        pairs += (t - unbounded) * window
    return pairs


@dataclass(frozen=True)
class Precision:
    """Bytes per element of weights, KV cache and activations; routed experts' weights may
    have their own (`experts`, None: as the other weights)."""

    weights: float = 2.0
    kv: float = 2.0
    activations: float = 2.0
    experts: float | None = None

    @property
    def expert_weights(self) -> float:
        """Bytes per routed-expert weight (their biases stay at `weights`)."""
        return self.weights if self.experts is None else self.experts


FP32 = 4.0  # scores, softmax statistics, router logits
INDEX = 4.0  # int32 token ids and indices
