"""Functional NumPy reference of SnapStream KV-cache compression (the executable specification).

This module is deliberately slow-but-obvious NumPy: it is the ground truth that the simulator's
cost models and any faster implementation are checked against, not something the simulator
runs on the hot path.  It implements three pieces:

* :func:`snapkv_select` -- SnapKV prefill selection (arXiv 2404.14469, FasterDecoding/SnapKV):
  the attention of the last ``window`` prompt queries (the *observation window*) over all
  earlier keys, computed in float32 with a causal mask on the last ``window x window`` block,
  summed over the window queries, pooled along the sequence (1-D, stride 1, padding
  ``kernel_size // 2``), and the top ``budget - window`` earlier tokens kept per KV head, plus
  the window itself.
* :class:`SnapStreamCache` -- the static-shape compressed cache of SnapStream
  (arXiv 2511.03092): ``sinks + topk + ring`` slots per sequence, filled once at prefill
  (sinks, SnapKV top-K, most recent tokens) and then decoded StreamingLLM-style, each new
  token overwriting the oldest ring slot.  Sinks and selected tokens never move and the arrays
  never change shape.
* :class:`StreamingLLMCache` (sinks + ring, arXiv 2309.17453) and :class:`FullCache`
  (uncompressed, grows) with the same ``prefill``/``append``/``attend`` interface, for ablations.

Shapes follow one convention everywhere: queries are ``(n_q_heads, T, d)``, keys and values are
``(n_kv_heads, T, d)``, and with grouped-query attention (GQA) query head ``h`` reads KV head
``h // (n_q_heads // n_kv_heads)`` (the ``repeat_kv`` layout of Hugging Face models).

Positions: a kept key keeps its *original* token position (the SnapKV rule; decoding continues
from the uncompressed length).  This reference stores positions as metadata only and applies no
RoPE: attention here is position-free, so the metadata exists for bookkeeping and tests.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.workload import KVConfig

__all__ = [
    "FloatArray",
    "FullCache",
    "GQAMode",
    "IntArray",
    "KVCache",
    "Pooling",
    "SnapStreamCache",
    "StreamingLLMCache",
    "full_attention",
    "observation_scores",
    "pool1d",
    "snapkv_scores",
    "snapkv_select",
    "topk_indices",
]

FloatArray = NDArray[np.floating[Any]]
"""Any floating-point array accepted as input."""
IntArray = NDArray[np.int64]
"""Token indices / positions."""
Pooling = Literal["max", "avg"]
"""1-D pooling applied to SnapKV scores: ``max`` (max_pool1d) or ``avg`` (avg_pool1d)."""
GQAMode = Literal["group_mean", "repeat"]
"""How SnapKV handles grouped-query attention (see :func:`snapkv_select`)."""

EMPTY_POSITION = -1
"""Position stored in a cache slot that holds no token yet."""


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _gqa_group(n_q_heads: int, n_kv_heads: int) -> int:
    """Return the number of query heads per KV head, rejecting layouts that do not divide."""
    if n_kv_heads < 1 or n_q_heads < 1 or n_q_heads % n_kv_heads != 0:
        raise ValueError(
            f"n_q_heads ({n_q_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})"
        )
    return n_q_heads // n_kv_heads


def _check_qk(q: FloatArray, k: FloatArray) -> tuple[int, int, int, int]:
    """Validate prompt query/key shapes; return ``(n_q_heads, n_kv_heads, T, d)``."""
    if q.ndim != 3 or k.ndim != 3:
        raise ValueError(f"q and k must be 3-D (heads, T, d); got {q.shape} and {k.shape}")
    n_q, t_q, d_q = q.shape
    n_kv, t_k, d_k = k.shape
    if t_q != t_k or d_q != d_k:
        raise ValueError(f"q {q.shape} and k {k.shape} must share T and d")
    _gqa_group(n_q, n_kv)
    return n_q, n_kv, t_k, d_k


# --------------------------------------------------------------------------------------------
# SnapKV selection
# --------------------------------------------------------------------------------------------


def pool1d(x: FloatArray, kernel_size: int, pooling: Pooling) -> NDArray[np.float32]:
    """1-D pooling along the last axis with stride 1 and padding ``kernel_size // 2``.

    Matches PyTorch's ``F.max_pool1d`` (implicit padding with ``-inf``, so padding never wins)
    and ``F.avg_pool1d`` with its default ``count_include_pad=True`` (zero padding, and every
    output is divided by ``kernel_size`` even at the borders).  SnapKV uses this smoothing so
    that the neighbours of a strongly attended token are kept with it, which preserves local
    context.  ``kernel_size`` must be odd: only then does padding ``kernel_size // 2`` keep the
    sequence length (an even kernel would return one extra element in PyTorch).
    """
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}")
    if pooling not in ("max", "avg"):
        raise ValueError(f"pooling must be 'max' or 'avg', got {pooling!r}")
    xf = np.asarray(x, dtype=np.float32)
    pad = kernel_size // 2
    fill = -np.inf if pooling == "max" else 0.0
    widths = [(0, 0)] * (xf.ndim - 1) + [(pad, pad)]
    padded = np.pad(xf, widths, mode="constant", constant_values=fill)
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel_size, axis=-1)
    if pooling == "max":
        return np.asarray(windows.max(axis=-1), dtype=np.float32)
    return np.asarray(windows.sum(axis=-1) / np.float32(kernel_size), dtype=np.float32)


def observation_scores(q: FloatArray, k: FloatArray, *, window: int) -> NDArray[np.float32]:
    """Raw SnapKV scores, per *query* head, of every token before the observation window.

    ``scores[h, j] = sum_i softmax(Q[h, T-w+i] . K[h // group]^T / sqrt(d))[j]`` for the ``w``
    observation queries ``i``, computed in float32 as SnapKV does.  Observation query ``i`` sits
    at position ``T - w + i`` and, causally, sees keys ``0 .. T - w + i`` only (the causal mask
    on the last ``w x w`` block); the softmax is normalised over all of them, window keys
    included, but only the ``T - w`` tokens before the window are returned: they are the
    candidates.

    Returns an array of shape ``(n_q_heads, T - window)``.
    """
    n_q, n_kv, t, d = _check_qk(q, k)
    if not 1 <= window <= t:
        raise ValueError(f"window must be in [1, T={t}], got {window}")
    group = n_q // n_kv
    q_obs = np.asarray(q[:, t - window :, :], dtype=np.float32)  # (n_q, w, d)
    k_rep = np.repeat(np.asarray(k, dtype=np.float32), group, axis=0)  # (n_q, T, d)
    logits = (q_obs @ k_rep.transpose(0, 2, 1)) / np.float32(math.sqrt(d))  # (n_q, w, T)
    i = np.arange(window)[:, None]
    j = np.arange(t)[None, :]
    future = j > (t - window + i)  # (w, T): key j is after observation query i
    logits = np.where(future, np.float32(-np.inf), logits).astype(np.float32)
    logits = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(logits)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    summed = probs.sum(axis=1)  # (n_q, T): sum over the w observation queries
    return np.asarray(summed[:, : t - window], dtype=np.float32)


def snapkv_scores(
    q: FloatArray, k: FloatArray, *, kv: KVConfig, gqa: GQAMode = "group_mean"
) -> NDArray[np.float32]:
    """Pooled SnapKV scores of the candidates (tokens before the observation window of
    ``kv.observation_window`` queries).

    The raw scores of :func:`observation_scores` are pooled per query head with
    :func:`pool1d` (``kv.kernel_size``, ``kv.pooling``); with ``gqa="group_mean"`` the pooled
    scores are then averaged over the query heads of each GQA group (NVIDIA kvpress's choice:
    pool per query head, then mean per group), giving one score row per KV head; with
    ``gqa="repeat"`` (the original SnapKV code, which repeats K/V to the query heads) one row
    per query head is returned.

    Returns ``(n_kv_heads, T - window)`` for ``group_mean``, ``(n_q_heads, T - window)`` for
    ``repeat``.
    """
    n_q, n_kv, _, _ = _check_qk(q, k)
    raw = observation_scores(q, k, window=kv.observation_window)
    pooled = pool1d(raw, kv.kernel_size, kv.pooling)
    if gqa == "repeat":
        return pooled
    if gqa != "group_mean":
        raise ValueError(f"gqa must be 'group_mean' or 'repeat', got {gqa!r}")
    group = n_q // n_kv
    grouped = pooled.reshape(n_kv, group, pooled.shape[-1])
    return np.asarray(grouped.mean(axis=1), dtype=np.float32)


def topk_indices(scores: FloatArray, n: int) -> IntArray:
    """Indices of the ``n`` largest scores of each row, returned sorted ascending.

    Ties are broken deterministically: the lower index wins (a stable sort of the negated
    scores).  ``torch.topk`` does not guarantee an order among ties; fixing one makes the
    reference reproducible.  ``scores`` is ``(rows, L)``; the result is ``(rows, n)``.
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D (rows, L), got shape {scores.shape}")
    if not 0 <= n <= scores.shape[1]:
        raise ValueError(f"n must be in [0, {scores.shape[1]}], got {n}")
    order = np.argsort(-np.asarray(scores), axis=-1, kind="stable")[:, :n]
    return np.sort(order, axis=-1).astype(np.int64)


def snapkv_select(
    q: FloatArray,
    k: FloatArray,
    *,
    budget: int,
    kv: KVConfig,
    gqa: GQAMode = "group_mean",
) -> IntArray:
    """Token indices SnapKV keeps from a prompt, per KV head, sorted ascending.

    SnapKV runs once, at prefill, and only when the prompt is longer than the budget: if
    ``T <= budget`` nothing is compressed and every index ``0 .. T-1`` is returned.  Otherwise
    the ``budget - window`` best candidates by pooled score (:func:`snapkv_scores`; ties: lower
    index wins) are kept per head, and the last ``window`` tokens (the observation window) are
    always kept, so every row has exactly ``budget`` indices.

    GQA: ``q`` is ``(n_q_heads, T, d)`` and ``k`` is ``(n_kv_heads, T, d)``.  The default
    ``gqa="group_mean"`` averages the pooled scores over each GQA group so the selection is per
    KV head (kvpress's choice: the cache stays one entry per KV head, no K/V duplication);
    the result is ``(n_kv_heads, budget)``.  ``gqa="repeat"`` reproduces the original SnapKV
    code, which repeats K/V to the query heads and selects per query head; the result is then
    ``(n_q_heads, budget)`` and the cache would hold ``group`` copies of each KV head.

    ``kv`` gives the window, the pooling and its kernel (``observation_window``,
    ``pooling``, ``kernel_size``: the workload's ``kv``; their defaults are the config
    model's, SnapKV's LongBench configuration).

    ``budget == window`` is accepted: no top-K, the window alone kept (as
    :class:`SnapStreamCache` accepts ``topk=0``), the degenerate layout an ablation may ask
    for. The policies refuse it (``SnapKVPolicy`` a budget not above the window,
    ``SnapStreamPolicy`` one not above sinks + ring): a workload would pay the selection's
    scoring for no selected token, keeping what a policy without selection keeps.
    """
    n_q, n_kv, t, _ = _check_qk(q, k)
    if gqa not in ("group_mean", "repeat"):
        raise ValueError(f"gqa must be 'group_mean' or 'repeat', got {gqa!r}")
    window = kv.observation_window
    rows = n_kv if gqa == "group_mean" else n_q
    if budget < 1:
        raise ValueError(f"budget must be positive, got {budget}")
    if t <= budget:
        return np.tile(np.arange(t, dtype=np.int64), (rows, 1))
    if not 1 <= window <= budget:
        raise ValueError(f"window must be in [1, budget={budget}], got {window}")
    scores = snapkv_scores(q, k, kv=kv, gqa=gqa)
    selected = topk_indices(scores, budget - window)
    recent = np.tile(np.arange(t - window, t, dtype=np.int64), (rows, 1))
    return np.concatenate([selected, recent], axis=1)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def full_attention(
    q: FloatArray,
    k: FloatArray,
    v: FloatArray,
    *,
    key_mask: NDArray[np.bool_] | None = None,
) -> NDArray[np.float64]:
    """Plain softmax attention ``softmax(Q K^T / sqrt(d)) V`` in float64, with GQA.

    ``q`` is ``(n_q_heads, n, d)``, ``k`` and ``v`` are ``(n_kv_heads, S, d)``; every query
    attends to every key (no causal mask: callers pass exactly the keys a query may see).
    ``key_mask`` (broadcastable to ``(n_kv_heads, S)``, ``True`` = attend) hides keys, e.g. the
    empty slots of a static cache; every query must see at least one key.  Returns
    ``(n_q_heads, n, d)``.
    """
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError(f"q, k, v must be 3-D; got {q.shape}, {k.shape}, {v.shape}")
    n_q, _, d = q.shape
    n_kv, s, d_k = k.shape
    if d_k != d or v.shape[:2] != (n_kv, s):
        raise ValueError(f"incompatible shapes q {q.shape}, k {k.shape}, v {v.shape}")
    group = _gqa_group(n_q, n_kv)
    q64 = np.asarray(q, dtype=np.float64).reshape(n_kv, group * q.shape[1], d)
    k64 = np.asarray(k, dtype=np.float64)
    v64 = np.asarray(v, dtype=np.float64)
    logits = (q64 @ k64.transpose(0, 2, 1)) / math.sqrt(d)  # (n_kv, group*n, S)
    if key_mask is not None:
        mask = np.broadcast_to(np.asarray(key_mask, dtype=np.bool_), (n_kv, s))
        if not mask.any(axis=-1).all():
            raise ValueError("key_mask hides every key of some head")
        logits = np.where(mask[:, None, :], logits, -np.inf)
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    out = weights @ v64  # (n_kv, group*n, d_v)
    return np.asarray(out.reshape(n_q, q.shape[1], v.shape[2]), dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------


class KVCache(Protocol):
    """The interface shared by the caches, so ablations can swap policies."""

    def prefill(self, k: FloatArray, v: FloatArray, *, q: FloatArray | None = None) -> None:
        """Load a prompt's keys and values ``(n_kv_heads, T, d)`` (``q``: its queries)."""
        ...

    def append(self, k_new: FloatArray, v_new: FloatArray, position: int | None = None) -> None:
        """Add one decoded token's key and value, each ``(n_kv_heads, d)``."""
        ...

    def attend(self, q: FloatArray) -> NDArray[np.float64]:
        """Attention output ``(n_q_heads, d)`` of one query ``(n_q_heads, d)`` over the cache."""
        ...

    @property
    def positions(self) -> IntArray:
        """Original positions held, ``(n_kv_heads, slots)``; ``-1`` marks an empty slot."""
        ...


def _as_token(x: FloatArray, n_kv_heads: int, head_dim: int, name: str) -> NDArray[np.float64]:
    """Validate one decoded token's ``(n_kv_heads, d)`` key or value; return it in float64."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != (n_kv_heads, head_dim):
        raise ValueError(f"{name} must have shape {(n_kv_heads, head_dim)}, got {arr.shape}")
    return arr


def _as_prompt(
    k: FloatArray, v: FloatArray, n_kv_heads: int, head_dim: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validate a prompt's ``(n_kv_heads, T, d)`` keys and values; return them in float64."""
    k64 = np.asarray(k, dtype=np.float64)
    v64 = np.asarray(v, dtype=np.float64)
    if k64.ndim != 3 or k64.shape[0] != n_kv_heads or k64.shape[2] != head_dim:
        raise ValueError(f"k must be (n_kv_heads={n_kv_heads}, T, d={head_dim}), got {k64.shape}")
    if v64.shape != k64.shape:
        raise ValueError(f"v {v64.shape} must have the shape of k {k64.shape}")
    return k64, v64


class _StaticRingCache:
    """Fixed-shape cache of ``sinks + topk + ring`` slots per KV head (shared machinery).

    Slot layout (identical for every head, fixed for the life of the cache)::

        [0, sinks)                      attention sinks: the first ``sinks`` tokens
        [sinks, sinks + topk)           tokens selected at prefill (per head)
        [sinks + topk, capacity)        ring buffer of the most recent tokens

    Filling rule.  Until every slot holds a token nothing is evicted: tokens are written in
    position order into the free slots, sinks first, then the top-K slots, then the ring (so a
    sequence no longer than ``capacity`` is held exactly, like a full cache).  Once the cache is
    full, each new token overwrites the *oldest ring slot*, advancing a ring head modulo
    ``ring``.  A prefill longer than ``capacity`` fills everything at once (sinks, selected
    tokens from ``[sinks, T - ring)``, the last ``ring`` tokens in the ring, oldest in the first
    ring slot), after which the same decode rule applies.  Sink and top-K slots are therefore
    written exactly once and never move; the arrays never change shape.

    K and V are stored in float64 so that comparisons against full attention are exact; the
    static-shape property, not the storage dtype, is what this reference pins down.
    """

    def __init__(self, n_kv_heads: int, head_dim: int, *, sinks: int, topk: int, ring: int):
        if n_kv_heads < 1 or head_dim < 1:
            raise ValueError("n_kv_heads and head_dim must be positive")
        if sinks < 0 or topk < 0:
            raise ValueError(f"sinks ({sinks}) and topk ({topk}) must be >= 0")
        if ring < 1:
            raise ValueError(f"ring must be >= 1 (decoded tokens go there), got {ring}")
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.sinks = sinks
        self.topk = topk
        self.ring = ring
        self.capacity = sinks + topk + ring
        self.keys: NDArray[np.float64] = np.zeros((n_kv_heads, self.capacity, head_dim))
        self.values: NDArray[np.float64] = np.zeros((n_kv_heads, self.capacity, head_dim))
        self._positions: IntArray = np.full(
            (n_kv_heads, self.capacity), EMPTY_POSITION, dtype=np.int64
        )
        self._filled = 0  # slots written so far, in slot order (== capacity once full)
        self._ring_head = 0  # ring slot holding the oldest ring token once the cache is full
        self.length = 0  # uncompressed sequence length == position of the next token

    # -- layout -------------------------------------------------------------------------------

    @property
    def sink_slots(self) -> slice:
        """Slots of the attention sinks."""
        return slice(0, self.sinks)

    @property
    def topk_slots(self) -> slice:
        """Slots of the tokens selected at prefill."""
        return slice(self.sinks, self.sinks + self.topk)

    @property
    def ring_slots(self) -> slice:
        """Slots of the ring buffer of recent tokens."""
        return slice(self.sinks + self.topk, self.capacity)

    @property
    def positions(self) -> IntArray:
        """Original positions per slot, ``(n_kv_heads, capacity)``; ``-1`` = empty (a copy)."""
        return self._positions.copy()

    @property
    def valid(self) -> NDArray[np.bool_]:
        """Which slots hold a token, ``(n_kv_heads, capacity)``."""
        return np.not_equal(self._positions, EMPTY_POSITION)

    @property
    def full(self) -> bool:
        """Whether every slot holds a token (from now on appends evict ring tokens)."""
        return self._filled == self.capacity

    # -- writes -------------------------------------------------------------------------------

    def _load_prompt(self, k: FloatArray, v: FloatArray, selected: IntArray | None) -> None:
        """Write a prompt: in order if it fits, else sinks + ``selected`` + most recent."""
        if self.length != 0:
            raise RuntimeError("prefill must be called once, on an empty cache")
        k64, v64 = _as_prompt(k, v, self.n_kv_heads, self.head_dim)
        t = k64.shape[1]
        if t <= self.capacity:
            self.keys[:, :t] = k64
            self.values[:, :t] = v64
            self._positions[:, :t] = np.arange(t)
            self._filled = t
            self.length = t
            return
        if selected is None or selected.shape != (self.n_kv_heads, self.topk):
            got = None if selected is None else selected.shape
            raise ValueError(f"selected must be ({self.n_kv_heads}, {self.topk}), got {got}")
        if self.topk and (selected.min() < self.sinks or selected.max() >= t - self.ring):
            raise ValueError(f"selected positions must lie in [{self.sinks}, {t - self.ring})")
        slot_pos = np.empty((self.n_kv_heads, self.capacity), dtype=np.int64)
        slot_pos[:, self.sink_slots] = np.arange(self.sinks)
        slot_pos[:, self.topk_slots] = selected
        slot_pos[:, self.ring_slots] = np.arange(t - self.ring, t)
        self.keys[...] = np.take_along_axis(k64, slot_pos[:, :, None], axis=1)
        self.values[...] = np.take_along_axis(v64, slot_pos[:, :, None], axis=1)
        self._positions[...] = slot_pos
        self._filled = self.capacity
        self._ring_head = 0
        self.length = t

    def append(self, k_new: FloatArray, v_new: FloatArray, position: int | None = None) -> None:
        """Add one decoded token: fill the next free slot, else overwrite the oldest ring slot.

        ``k_new`` and ``v_new`` are ``(n_kv_heads, d)``.  ``position`` defaults to the
        uncompressed length (the next position); if given it must not be smaller, so positions
        stay strictly increasing.  Sinks and top-K slots are never touched once written.
        """
        kk = _as_token(k_new, self.n_kv_heads, self.head_dim, "k_new")
        vv = _as_token(v_new, self.n_kv_heads, self.head_dim, "v_new")
        pos = self.length if position is None else int(position)
        if pos < self.length:
            raise ValueError(f"position {pos} is before the next position {self.length}")
        if self._filled < self.capacity:
            slot = self._filled
            self._filled += 1
        else:
            slot = self.sinks + self.topk + self._ring_head
            self._ring_head = (self._ring_head + 1) % self.ring
        self.keys[:, slot] = kk
        self.values[:, slot] = vv
        self._positions[:, slot] = pos
        self.length = pos + 1

    # -- reads --------------------------------------------------------------------------------

    def attend(self, q: FloatArray) -> NDArray[np.float64]:
        """Attention of one query ``(n_q_heads, d)`` over the filled slots; ``(n_q_heads, d)``.

        Empty slots are masked out.  Slot order does not matter (softmax attention is
        permutation-invariant over keys), which is why a ring buffer can replace
        StreamingLLM's concatenation.
        """
        if self._filled == 0:
            raise RuntimeError("attend on an empty cache")
        qq = np.asarray(q, dtype=np.float64)
        if qq.ndim != 2 or qq.shape[1] != self.head_dim:
            raise ValueError(f"q must be (n_q_heads, {self.head_dim}), got {qq.shape}")
        out = full_attention(qq[:, None, :], self.keys, self.values, key_mask=self.valid)
        return out[:, 0, :]


class SnapStreamCache(_StaticRingCache):
    """SnapStream's static-shape compressed KV cache: sinks + SnapKV top-K + ring buffer.

    Capacity is ``sinks + topk + ring`` slots per KV head, allocated once.  At prefill of a
    prompt of ``T`` tokens:

    * ``T <= capacity``: nothing is compressed; the prompt is stored as is (see the filling
      rule of the layout below) and the cache equals a full cache until it fills up.
    * ``T > capacity``: the first ``sinks`` tokens go to the sink slots; the last ``ring``
      tokens go to the ring (the observation window, the last ``window <= ring`` tokens, lives
      in the ring, so it is always kept, as in SnapKV); SnapKV picks, per KV head, ``topk``
      tokens among the *remaining* middle tokens ``[sinks, T - ring)`` by their pooled
      observation-window scores (:func:`snapkv_scores` with ``gqa="group_mean"``, computed over
      the whole prompt so pooling sees real neighbours at the boundaries of the middle range).
      The three sets are disjoint, so every slot holds a distinct token.

    With ``sinks=0`` and ``ring=window`` this is exactly :func:`snapkv_select` with
    ``budget = topk + window``.  Decoding then proceeds StreamingLLM-style: each new token
    overwrites the oldest ring slot; sinks and selected tokens never move.

    Slot layout and filling rule (shared with :class:`StreamingLLMCache`)::

        [0, sinks) sinks | [sinks, sinks + topk) selected | [sinks + topk, capacity) ring

    While the cache has free slots, tokens are written in position order into the next free
    slot (sinks, then top-K slots, then ring); once it is full, a new token overwrites the
    oldest ring slot.
    """

    def __init__(
        self,
        n_kv_heads: int,
        head_dim: int,
        *,
        sinks: int,
        topk: int,
        ring: int,
        kv: KVConfig,
    ):
        super().__init__(n_kv_heads, head_dim, sinks=sinks, topk=topk, ring=ring)
        window = kv.observation_window
        if not 1 <= window <= ring:
            raise ValueError(
                f"window ({window}) must be in [1, ring={ring}]: the window lives in the ring"
            )
        self.kv = kv

    def select(self, q: FloatArray, k: FloatArray) -> IntArray:
        """Positions SnapKV picks for the top-K slots of a prompt longer than ``capacity``.

        Returns ``(n_kv_heads, topk)`` positions in ``[sinks, T - ring)``, sorted ascending.
        """
        _, n_kv, t, _ = _check_qk(q, k)
        if n_kv != self.n_kv_heads:
            raise ValueError(f"k has {n_kv} KV heads, cache has {self.n_kv_heads}")
        if t <= self.capacity:
            raise ValueError(f"no selection: prompt length {t} <= capacity {self.capacity}")
        scores = snapkv_scores(q, k, kv=self.kv, gqa="group_mean")
        middle = scores[:, self.sinks : t - self.ring]
        return topk_indices(middle, self.topk) + self.sinks

    def prefill(self, k: FloatArray, v: FloatArray, *, q: FloatArray | None = None) -> None:
        """Load a prompt; ``q`` (``(n_q_heads, T, d)``) is required when ``T > capacity``."""
        t = np.shape(k)[1] if np.ndim(k) == 3 else 0
        selected: IntArray | None = None
        if t > self.capacity:
            if q is None:
                raise ValueError("q is required to compress a prompt longer than the capacity")
            selected = self.select(q, k)
        self._load_prompt(k, v, selected)

    @classmethod
    def from_prompt(
        cls,
        q: FloatArray,
        k: FloatArray,
        v: FloatArray,
        *,
        sinks: int,
        topk: int,
        ring: int,
        kv: KVConfig,
    ) -> SnapStreamCache:
        """Build a cache sized for ``k`` and prefill it with the prompt ``(q, k, v)``."""
        _, n_kv, _, d = _check_qk(q, k)
        cache = cls(n_kv, d, sinks=sinks, topk=topk, ring=ring, kv=kv)
        cache.prefill(k, v, q=q)
        return cache


class StreamingLLMCache(_StaticRingCache):
    """StreamingLLM as a static-shape cache: ``sinks`` attention sinks + a ring of recent tokens.

    The same layout and filling rule as :class:`SnapStreamCache` with no top-K slots: a prompt
    longer than ``sinks + ring`` keeps its first ``sinks`` and last ``ring`` tokens; decoding
    overwrites the oldest ring slot (a ring buffer instead of the reference code's
    concatenation; attention is the same since slot order does not matter).  Positions are the
    original ones, unlike the reference code, which rotates cached keys by their positions
    inside the cache (RoPE): under RoPE the two give different attention; this reference
    applies no RoPE, so here the difference is bookkeeping only.
    """

    def __init__(self, n_kv_heads: int, head_dim: int, *, sinks: int, ring: int):
        super().__init__(n_kv_heads, head_dim, sinks=sinks, topk=0, ring=ring)

    def prefill(self, k: FloatArray, v: FloatArray, *, q: FloatArray | None = None) -> None:
        """Load a prompt; ``q`` is accepted for interface compatibility and ignored."""
        self._load_prompt(k, v, np.zeros((self.n_kv_heads, 0), dtype=np.int64))


class FullCache:
    """Uncompressed cache that grows by one slot per token: the reference for quality."""

    def __init__(self, n_kv_heads: int, head_dim: int):
        if n_kv_heads < 1 or head_dim < 1:
            raise ValueError("n_kv_heads and head_dim must be positive")
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.keys: NDArray[np.float64] = np.zeros((n_kv_heads, 0, head_dim))
        self.values: NDArray[np.float64] = np.zeros((n_kv_heads, 0, head_dim))
        self._positions: IntArray = np.zeros((n_kv_heads, 0), dtype=np.int64)
        self.length = 0

    @property
    def positions(self) -> IntArray:
        """Original positions per slot, ``(n_kv_heads, length)`` (a copy)."""
        return self._positions.copy()

    def prefill(self, k: FloatArray, v: FloatArray, *, q: FloatArray | None = None) -> None:
        """Store the whole prompt; ``q`` is accepted for interface compatibility and ignored."""
        if self.length != 0:
            raise RuntimeError("prefill must be called once, on an empty cache")
        k64, v64 = _as_prompt(k, v, self.n_kv_heads, self.head_dim)
        t = k64.shape[1]
        self.keys = k64.copy()
        self.values = v64.copy()
        self._positions = np.tile(np.arange(t, dtype=np.int64), (self.n_kv_heads, 1))
        self.length = t

    def append(self, k_new: FloatArray, v_new: FloatArray, position: int | None = None) -> None:
        """Append one token's ``(n_kv_heads, d)`` key and value (the cache grows)."""
        kk = _as_token(k_new, self.n_kv_heads, self.head_dim, "k_new")
        vv = _as_token(v_new, self.n_kv_heads, self.head_dim, "v_new")
        pos = self.length if position is None else int(position)
        if pos < self.length:
            raise ValueError(f"position {pos} is before the next position {self.length}")
        self.keys = np.concatenate([self.keys, kk[:, None, :]], axis=1)
        self.values = np.concatenate([self.values, vv[:, None, :]], axis=1)
        new_pos = np.full((self.n_kv_heads, 1), pos, dtype=np.int64)
        self._positions = np.concatenate([self._positions, new_pos], axis=1)
        self.length = pos + 1

    def attend(self, q: FloatArray) -> NDArray[np.float64]:
        """Attention of one query ``(n_q_heads, d)`` over every stored token."""
        if self.keys.shape[1] == 0:
            raise RuntimeError("attend on an empty cache")
        qq = np.asarray(q, dtype=np.float64)
        if qq.ndim != 2 or qq.shape[1] != self.head_dim:
            raise ValueError(f"q must be (n_q_heads, {self.head_dim}), got {qq.shape}")
        return full_attention(qq[:, None, :], self.keys, self.values)[:, 0, :]
