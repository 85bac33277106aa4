"""Prompt buckets: the static prefill shapes a server compiles, and which one a prompt uses.

A static-graph server cannot compile a prefill graph per prompt length, so a prompt is padded
up to a bucket. The rule bounds both the padding and the number of distinct shapes (each is
simulated once per run by the step cache):

- up to 1024 tokens: powers of two from 128 (128, 256, 512, 1024);
- above: multiples of ``max(1024, P/8)`` where ``P`` is the power of two just below the
  prompt: 2048, 3072, ... 16384 (steps of 1024), then 18432, 20480, ... (8 buckets per
  octave). Padding is at most 1023 tokens or 12.5%.

A bucket never exceeds ``max_context`` (a prompt never does). For 128k contexts this is 43
shapes in all (instead of 1024 for every multiple of 128).

A runtime that prefills ragged, unpadded prompts (``ragged``: a paged KV cache's,
TensorRT-LLM's and vLLM's packed tokens) pads nothing, so its buckets are only the
simulation's granularity, finer: multiples of 32 tokens up to 1024, then 32 per octave
(at most 31 tokens or 3.1% over; 256 shapes up to 128k).
"""

from __future__ import annotations

import bisect
import functools

from rdu_sim.shapes import DecodeRows, StepShape

MIN_BUCKET = 128
LINEAR_STEP = 1024
PER_OCTAVE = 8
SMALL_BATCHES = 4  # decode batches up to here are powers of two (1, 2, 4)
GRAPH_STEP = 8  # then multiples of 8 up to 16 of them (128)
RAGGED_STEP = 32  # a ragged runtime's prompts: multiples of 32 tokens up to LINEAR_STEP
RAGGED_PER_OCTAVE = 32  # then 32 buckets per octave


def prompt_bucket(tokens: int, max_context: int, ragged: bool = False) -> int:
    """The padded prompt length (static prefill shape) for a prompt of ``tokens`` tokens;
    ``ragged``: the length a runtime that pads nothing is simulated at (module docstring)."""
    if tokens < 1:
        raise ValueError(f"prompt tokens must be >= 1, got {tokens}")
    if ragged and tokens <= LINEAR_STEP:
        bucket = -(-tokens // RAGGED_STEP) * RAGGED_STEP
    elif tokens <= LINEAR_STEP:
        bucket = MIN_BUCKET
        while bucket < tokens:
            bucket *= 2
    else:
        below = 1 << ((tokens - 1).bit_length() - 1)  # largest power of two < tokens
        step = below // RAGGED_PER_OCTAVE if ragged else max(LINEAR_STEP, below // PER_OCTAVE)
        bucket = -(-tokens // step) * step
    return min(bucket, max(max_context, tokens))


def decode_batch(sequences: int) -> int:
    """The batch a dynamic runtime's decode step of ``sequences`` live sequences is timed
    at, as its CUDA graphs captured at a ladder of batch sizes pad a batch up to the next
    one: 1, 2, 4, then multiples of 8 up to 128 (TensorRT-LLM's padded capture sizes, vLLM's
    and SGLang's alike), then 8 sizes per octave (144, 160, ...; 288, 320, ...: at most
    12.5% over). It also bounds the distinct decode shapes a run simulates."""
    if sequences < 1:
        raise ValueError(f"a decode step runs at least one sequence, got {sequences}")
    if sequences <= SMALL_BATCHES:
        return 1 << (sequences - 1).bit_length()
    if sequences <= GRAPH_STEP * 16:
        return -(-sequences // GRAPH_STEP) * GRAPH_STEP
    return octave_rung(sequences)


def decode_rows(rule: DecodeRows, decoding: int, slots: int) -> int:
    """The rows a decode step of ``decoding`` live sequences runs over ``slots`` batch slots
    under the stack's ``rule`` (``StackConfig.decode_rows``): every slot; the ladder a
    paged runtime's CUDA graphs pad to (``decode_batch``); the smallest power-of-two
    program that holds them; or exactly them. Never more than the slots."""
    if rule == "slots":
        return slots
    live = decoding if decoding > 1 else 1
    if rule == "ladder":
        rows = decode_batch(live)
    elif rule == "programs":
        rows = 1 << (live - 1).bit_length()
    else:
        rows = live
    return rows if rows < slots else slots


def program_rows(rule: DecodeRows, slots: int) -> int:
    """How many row counts decode steps take over ``slots`` slots under ``rule``: one
    (every slot), the powers of two below the slots and the slots (``programs``), every
    count (``live``), or the CUDA-graph ladder's rungs up to the slots (``ladder``)."""
    if rule == "programs":
        return (slots - 1).bit_length() + 1 if slots > 1 else 1
    if rule == "ladder":  # the rungs below the slots, then the slots (which cap the rest)
        rungs, rung = 1, decode_batch(1)
        while rung < slots:
            rungs += 1
            rung = decode_batch(rung + 1)
        return rungs
    return slots if rule == "live" else 1


def octave_rung(count: int) -> int:
    """``count`` rounded up to 8 values per octave (every count up to 8; 16: 18, 20, ...):
    at most 12.5% over, the ladder that bounds how many distinct shapes a run simulates."""
    if count <= PER_OCTAVE:
        return count
    step = (1 << ((count - 1).bit_length() - 1)) // PER_OCTAVE
    return -(-count // step) * step


def prompt_buckets(max_context: int, ragged: bool = False) -> list[int]:
    """Every prompt bucket up to ``max_context``, ascending."""
    return list(_buckets(max_context, ragged))


@functools.lru_cache(maxsize=64)
def _buckets(max_context: int, ragged: bool = False) -> tuple[int, ...]:
    """The buckets, computed once per context (a pure function of it)."""
    out: list[int] = []
    tokens = 1
    while tokens <= max_context:
        bucket = prompt_bucket(tokens, max_context, ragged)
        out.append(bucket)
        tokens = bucket + 1
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def prefill_step(
    prompt: int,
    prefilled: int,
    max_context: int,
    chunk: int | None,
    compresses: bool = False,
    ragged: bool = False,
) -> tuple[StepShape, int]:
    """The next prefill step of a prompt with ``prefilled`` tokens done: (shape, new done).

    Without chunking (or for a prompt no longer than a chunk) one step prefills the whole
    prompt padded to its bucket. With chunks of ``chunk`` tokens, each step is ``chunk`` new
    tokens (the last one padded to ``chunk``; a ragged runtime's to its bucket: ``ragged``,
    module docstring) attending to the ``prefilled`` tokens before.
    ``select`` is set explicitly: the step that completes the prompt runs the SnapKV
    selection iff the policy compresses the (unpadded) prompt; earlier chunks never do.
    A pure function, memoised: equal steps share one shape object (of every prompt padded
    to the same bucket too), so the step cache finds it by identity, never comparing fields.
    """
    if chunk is not None and prompt > chunk:
        done = min(prompt, prefilled + chunk)
        tokens = chunk
        if ragged and done - prefilled < chunk:  # the last chunk, unpadded
            tokens = prompt_bucket(done - prefilled, chunk, ragged)
        shape = StepShape("prefill", 1, tokens, prefilled, select=compresses and done == prompt)
    elif prefilled:  # a cached prefix (``reusable_prefix``): the rest in one step attending to it
        rest = prompt_bucket(prompt - prefilled, max_context - prefilled, ragged)
        shape, done = StepShape("prefill", 1, rest, prefilled, select=compresses), prompt
    else:
        bucket = prompt_bucket(prompt, max_context, ragged)
        shape, done = StepShape("prefill", 1, bucket, 0, select=compresses), prompt
    found = _PREFILL_SHAPES.get(shape)
    if found is None:
        if len(_PREFILL_SHAPES) >= MAX_PREFILL_SHAPES:  # a long-lived process (a sweep worker)
            _PREFILL_SHAPES.clear()
        found = _PREFILL_SHAPES[shape] = shape
    return found, done


_PREFILL_SHAPES: dict[StepShape, StepShape] = {}
"""One object per distinct prefill shape (a few dozen in a run; immutable, so shared: the step
cache then finds a shape by identity). Results never depend on it, only lookups' speed."""

MAX_PREFILL_SHAPES = 4096
"""Shapes kept in ``_PREFILL_SHAPES`` before it starts over (bounded across the runs of a
process)."""


def reusable_prefix(
    cached: int, prompt: int, max_context: int, chunk: int | None, ragged: bool = False
) -> int:
    """Prompt tokens a prefill can skip when its first ``cached`` tokens are in a prefix cache.

    On a static-graph server the skipped prefix becomes the step's ``cache_len``, a dimension
    of the compiled shape, so it is rounded down to a value the server compiles: a multiple
    of the chunk when the prompt is chunked (the chunks that follow are the ordinary ones),
    else a prompt bucket (:func:`prompt_buckets`, so cached prefixes add at most as many
    shapes as prompts do). A ``ragged`` runtime (TensorRT-LLM, vLLM) starts the prefill at
    the reused length and chunks from there, chunked or not: its skip is only rounded down
    to the simulation's fine ragged buckets (exact for whole blocks of up to 512 tokens below
    16k). At least one prompt token is always computed: its logits give the first output token.
    """
    usable = min(cached, prompt - 1)
    if usable <= 0:
        return 0
    if chunk is not None and prompt > chunk and not ragged:
        return usable // chunk * chunk
    buckets = _buckets(max_context, ragged)
    below = bisect.bisect_right(buckets, usable)  # buckets[:below] are <= usable
    return buckets[below - 1] if below else 0


def prefill_steps(
    prompt: int, max_context: int, chunk: int | None, compresses: bool = False, ragged: bool = False
) -> list[StepShape]:
    """Every prefill step of one prompt, in order."""
    shapes: list[StepShape] = []
    done = 0
    while done < prompt:
        shape, done = prefill_step(prompt, done, max_context, chunk, compresses, ragged)
        shapes.append(shape)
    return shapes
