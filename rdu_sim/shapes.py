"""Value types several rooms share: a step's static shape, its phase, a GEMM's shape, the
kind of a collective and where an experts' all-to-all sends. Defined once here, imported everywhere.

This module imports nothing from ``rdu_sim`` (like ``rdu_sim.systolic``), so every layer may
use it: the graph builds a layer for a :class:`StepShape`, the compiler keys its Programs by
it, serving memoizes step times by it, and none of them has to import the others (or
the graph builders) to name a shape.

The attention-length convention lives with :class:`StepShape`, once:

- each new token attends to the ``cache_len`` cached tokens plus the new tokens up to and
  including itself (causal). A decode step (``tokens`` = 1) at cache length c therefore
  attends to c + 1 tokens: ``rdu_sim.models.decode_flops_per_token(arch, c + 1)`` is its
  FLOPs per token;
- a prefill of t tokens on top of c cached ones scores t*c + t*(t+1)/2 (query, key) pairs
  per head and slot (masked pairs are skipped, as flash-style kernels do);
- in a sliding-window layer a token attends to at most `window` keys, itself included
  (`attended_keys`, `attended_pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any, ClassVar, Literal, get_args

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")
DecodeRows = Literal["slots", "ladder", "programs", "live"]
"""How many rows a decode step runs (``StackConfig.decode_rows``, applied by
``serving.buckets.decode_rows``): every batch slot, the decoding sequences rounded up the
CUDA-graph ladder (a paged cache), rounded up to a compiled program's batch
(``powers_of_two``), or exactly the decoding sequences."""


def batches_live(rows: DecodeRows) -> bool:
    """Whether a runtime with this decode-rows rule batches its live sequences per step (a
    paged KV cache, ``StackConfig.decode_rows``'s ladder): its decode steps read each
    sequence's own cache and its prefill steps unpadded prompts."""
    return rows == "ladder"


CollectiveKind = Literal["allreduce", "allgather", "reduce_scatter", "alltoall"]


@dataclass(frozen=True)
class AllToAllSpec:
    """Where an expert all-to-all sends a device's tokens, from the routing: ``copies`` of a
    token each device receives when every expert's copy is sent (the experts per token over
    the group's devices), and ``needs``, for blocks of consecutive devices (one device, a
    node, ...), the probability that a token has an expert in the block: (devices in the
    block, probability), one entry per divisor of the group. How it sends (``mode``:
    ``direct``, every expert's copy straight to its device; ``hierarchical``, once per node
    over the network, then on inside it) and which way (``dispatch`` out to the experts,
    ``combine`` back). ``choose``: ``mode`` is only the convention (``all_to_all: auto``), and
    the engine runs whichever form is faster beside the kernel's other all-to-alls on the
    ports they share, ties to ``mode`` (``engine.collective_port.plan_all_to_alls``)."""

    mode: Literal["direct", "hierarchical"]
    direction: Literal["dispatch", "combine"]
    copies: float
    needs: tuple[tuple[int, float], ...]
    choose: bool = False

    def need(self, devices: int) -> float:
        """The probability a token needs a block of ``devices`` consecutive devices."""
        for size, probability in self.needs:
            if size == devices:
                return probability
        raise ValueError(f"no routing figure for blocks of {devices} devices: {self.needs}")


@dataclass(frozen=True, repr=False)
class StepShape:
    """The static shape a step is compiled for; a step's time depends only on this."""

    phase: Phase
    batch: int  # batch slots the step runs (prefill: prompts prefilled together)
    tokens: int  # new tokens per slot: the prompt (or chunk) in prefill, 1 in decode
    cache_len: int  # cached tokens each slot attends to besides the new ones (a bucket)
    # Prefill only: whether this step runs the SnapKV selection (the "snapkv_*" kernels).
    # None lets the compiler decide from the KV policy for a prompt of cache_len + tokens
    # tokens; False for a non-final chunk of a chunked prefill.
    select: bool | None = None
    # Under data-parallel attention, the tokens every rank of the step sends its experts,
    # together, when the ranks run different shapes (serving.lockstep); 0: every rank runs
    # this one (batch x tokens a rank).
    joint_tokens: int = 0
    # A mixed step (prefill only): the decode rows it also carries, one new token for each
    # of ``decode_batch`` slots at ``decode_cache_len`` cached tokens (the decode step's own
    # shape, `decode_part`), as runtimes that batch prompts with generating sequences in one
    # forward pass run them; 0: a prefill step alone.
    decode_batch: int = 0
    decode_cache_len: int = 0

    # The fields' hash, computed once (not a field): serving looks a shape up twice a step,
    # and a frozen dataclass's own hash builds and hashes the fields' tuple every time.
    _hash: ClassVar[int]

    def __post_init__(self) -> None:
        joint = self.joint_tokens
        if (
            self.batch < 1
            or self.tokens < 1
            or self.cache_len < 0
            or not (joint == 0 or joint >= self.rows)
        ):
            raise ValueError(
                "need batch >= 1, tokens >= 1, cache_len >= 0, joint_tokens 0 or at least "
                f"the step's rows; got {self}"
            )
        if (
            self.decode_batch < 0
            or self.decode_cache_len < 0
            or (self.decode_batch == 0 and self.decode_cache_len)
            or (self.decode_batch and self.phase != "prefill")
        ):
            raise ValueError(
                "decode rows (decode_batch >= 1, decode_cache_len >= 0) ride only on a "
                f"prefill step; got {self}"
            )
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple[Phase, int, int, int, bool | None, int, int, int]:
        return (
            self.phase,
            self.batch,
            self.tokens,
            self.cache_len,
            self.select,
            self.joint_tokens,
            self.decode_batch,
            self.decode_cache_len,
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(
        self,
    ) -> tuple[type[StepShape], tuple[Phase, int, int, int, bool | None, int, int, int]]:
        """Pickled as its fields, so another process (another string-hash seed) rehashes."""
        return (StepShape, self._fields())

    def __repr__(self) -> str:
        """The fields, ``joint_tokens`` only when the ranks run different shapes and the
        decode rows only on a mixed step."""
        joint = f", joint_tokens={self.joint_tokens}" if self.joint_tokens else ""
        if self.decode_batch:
            joint += f", decode_batch={self.decode_batch}, decode_cache_len={self.decode_cache_len}"
        return (
            f"StepShape(phase={self.phase!r}, batch={self.batch}, tokens={self.tokens}, "
            f"cache_len={self.cache_len}, select={self.select!r}{joint})"
        )

    @property
    def rows(self) -> int:
        """Token rows a projection processes: batch x tokens, plus a mixed step's decode rows."""
        return self.batch * self.tokens + self.decode_batch

    @property
    def sequences(self) -> int:
        """Sequences the step gives a token or a chunk: its batch and its decode rows."""
        return self.batch + self.decode_batch

    @property
    def mixed(self) -> bool:
        """A prefill step that carries decode rows."""
        return self.decode_batch > 0

    def prefill_part(self) -> StepShape:
        """The prompts' part of a mixed step (the step itself when it carries no decode)."""
        return replace(self, decode_batch=0, decode_cache_len=0) if self.decode_batch else self

    def decode_part(self) -> StepShape:
        """The decode step a mixed step's decode rows are: one token for each slot."""
        if not self.decode_batch:
            raise ValueError(f"{self} carries no decode rows")
        return StepShape("decode", self.decode_batch, 1, self.decode_cache_len)

    def with_decode(self, decode: StepShape) -> StepShape:
        """This prefill step carrying ``decode``'s rows (a decode step's shape)."""
        if decode.phase != "decode" or decode.tokens != 1:
            raise ValueError(f"{decode} is not a decode step of one token a slot")
        return replace(self, decode_batch=decode.batch, decode_cache_len=decode.cache_len)

    def distinct_joint(self, ranks: int) -> int:
        """``joint_tokens`` where they tell this step from every one of ``ranks`` ranks
        running it; 0 where they are every rank's copy of its rows (the symmetric step)."""
        return 0 if self.joint_tokens == self.rows * ranks else self.joint_tokens

    def part(self, **changes: Any) -> StepShape:
        """A part of this step (a micro-batch): ``changes`` applied (``decode_batch=0``: none
        of the decode rows), and the ranks' joint tokens, if any, scaled to its share of the
        rows (every rank cuts its batch alike)."""
        if changes.get("decode_batch") == 0:
            changes["decode_cache_len"] = 0
        part = replace(self, **changes)
        if not self.joint_tokens:
            return part
        joint = (self.joint_tokens * part.rows + self.rows // 2) // self.rows
        return replace(part, joint_tokens=max(part.rows, joint))

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
class Gemm:
    """The (m, n, k) of a matrix product, with ``batch`` independent products (heads,
    experts): an operator's product in the graph, a stage's on one socket in the Program."""

    m: int  # rows of the output: tokens (times heads for attention products)
    n: int  # columns of the output
    k: int  # reduction length
    batch: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch


Pooling = Literal["max", "avg"]
"""How a selection pools its scores along the sequence (``kv.pooling``)."""
POOLINGS: tuple[Pooling, ...] = get_args(Pooling)


class SelectionError(ValueError):
    """A :class:`Selection` whose fields cannot describe a selection; ``field`` names the
    one at fault (``kept``, ``topk``, ``window``...), so whoever built it can be told."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Selection:
    """Shape of a SnapKV-style selection over the tokens a slot's layer holds: what the KV
    policy decides, what the graph's selection operators cost. A prefill runs it over the
    prompt (``KVPolicy.selection``); a decode step over the slot's cache, when the policy
    evicts by scores (``KVPolicy.decode_selection``).

    The `window` queries (the observation window at prefill; the step's new token at
    decode) are scored against `scored_keys` of the `prompt_tokens` tokens it selects from
    (QK^T in float32 outside the fused attention, causal mask on the window block, softmax,
    sum over the window), pooled along the sequence with `kernel_size`/`pooling`; the top
    `topk` of the `candidates` tokens are gathered per KV head; the compaction copies `kept`
    tokens into the slot (sinks + top-K + ring for SnapStream, top-K + window for SnapKV).

    Built only consistent (:class:`SelectionError` naming the field): 1 <= window,
    1 <= scored_keys <= prompt_tokens, 1 <= topk < candidates <= scored_keys (a top-K that
    keeps every candidate drops nothing: no selection), topk <= kept <= prompt_tokens, an
    odd kernel_size >= 1 (padded k // 2 each side) and a pooling of ``POOLINGS``.
    """

    prompt_tokens: int  # the tokens it selects from: the prompt, or the layer's cache
    window: int
    scored_keys: int
    candidates: int
    topk: int
    kept: int
    kernel_size: int
    pooling: str

    def __post_init__(self) -> None:
        bounds = (  # field, its value, its least (and what it is), its most (and what it is)
            ("prompt_tokens", self.prompt_tokens, 1, "1", None, ""),
            ("window", self.window, 1, "1", None, ""),
            ("scored_keys", self.scored_keys, 1, "1", self.prompt_tokens, "prompt_tokens"),
            ("candidates", self.candidates, 2, "2", self.scored_keys, "scored_keys"),
            ("topk", self.topk, 1, "1", self.candidates - 1, "candidates - 1"),
            ("kept", self.kept, self.topk, "topk", self.prompt_tokens, "prompt_tokens"),
            ("kernel_size", self.kernel_size, 1, "1", None, ""),
        )
        for field, value, low, low_words, high, high_words in bounds:
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise SelectionError(field, f"{field} must be an integer, got {value!r}")
            if value < low or (high is not None and value > high):
                least = low_words if low_words == str(low) else f"{low_words} ({low})"
                most = "" if high is None else f" and <= {high_words} ({high})"
                raise SelectionError(field, f"{field} must be >= {least}{most}, got {value}")
        if self.kernel_size % 2 == 0:
            raise SelectionError(
                "kernel_size", f"kernel_size must be odd (padded k // 2), got {self.kernel_size}"
            )
        if self.pooling not in POOLINGS:
            raise SelectionError(
                "pooling", f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}"
            )
