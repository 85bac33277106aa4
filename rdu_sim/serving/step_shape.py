"""The one rule for "a step of this workload" when the caller does not give every dimension:
what `rdu-sim step`, `rdu-sim inspect graph`, `api.step` and the plots' decode steps run.

Decode: ``batch`` slots (default: the batch slots the workload runs), ``tokens`` new tokens
each (default 1), the longest sequence of the batch ``context`` tokens long (default: the
longest the KV policy keeps, ``serving.max_context`` for full attention). The step attends to
what the policy keeps of that sequence, at most its slot (a SnapStream slot holds its
budget, whatever the context), rounded up to the policy's decode bucket: a server runs
exactly that static shape. The context counts the step's first new token, so its last
one ends the sequence at ``context + tokens - 1`` tokens, at most ``serving.max_context``.

Prefill: ``batch`` prompts (default 1) of ``tokens`` tokens on top of ``context`` cached
tokens (default 0, a whole prompt). Without ``tokens``: the workload's typical prompt as a
server runs it (``typical_prefill``: padded to its bucket, or its first chunk), the one
prompt a run's ``prefill_s`` and compare's prefill row time too. A compressing policy's
longer prompts (and so the SnapKV selection kernels) are a ``tokens`` away: ``long_prompts``
says which, and how many requests they are.

A shape the workload cannot run (a context, a prompt on its cache or a decode's new tokens on
its sequence beyond ``serving.max_context``, a batch below 1) is a :class:`StepShapeError`
naming the option, not a traceback and not a silent cap; a dimension that is not an integer
(``batch="4"``) a TypeError naming it (:func:`dimension`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from numbers import Integral

from rdu_sim.input_errors import InputError
from rdu_sim.scenario import Scenario
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.shapes import Phase, StepShape

__all__ = [
    "DecodeCache",
    "LongPrompts",
    "StepShapeError",
    "TypicalPrefill",
    "context_note",
    "decode_cache",
    "default_step_shape",
    "dimension",
    "long_prompts",
    "served_prefill_steps",
    "typical_prefill",
    "typical_prefill_prompt",
]


class StepShapeError(ValueError, InputError):
    """A step dimension the workload cannot run; ``option`` is the dimension (``context``,
    ``tokens``, ``batch``, ``phase``) the message is about. Bad input (``InputError``): a
    script's ``except rdu_sim.InputError`` catches it, the CLI says ``--OPTION: ...``."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[type[StepShapeError], tuple[str, str]]:
        """Pickled with its option (an exception's default pickle passes ``args``, the
        message alone): it crosses a process boundary as itself."""
        return StepShapeError, (self.option, str(self))


def dimension(option: str, value: object, low: int) -> int | None:
    """A step dimension as given (``batch``, ``tokens``, ``context``; None: not given,
    the default): an integer of at least ``low`` (a NumPy integer too), else a TypeError
    for one that is not an integer (``"4"``, ``4.0``, ``True``) or a StepShapeError for
    one below ``low``, each naming the option. The one check: ``0`` is not "not given"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(
            f"{option} must be an integer or None, not {type(value).__name__} {value!r}"
        )
    if value < low:
        raise StepShapeError(option, f"{option} must be >= {low}, got {value}")
    return int(value)


@dataclass(frozen=True)
class DecodeCache:
    """How a decode step's cache follows from a sequence length (for reports to say so)."""

    context: int  # tokens of the longest sequence in the batch
    kept: int  # tokens the KV policy keeps of them (at most its slot)
    bucket: int  # the static cache length the step runs (the policy's decode bucket)


def decode_cache(scenario: Scenario, context: int | None = None) -> DecodeCache:
    """The cache a decode step attends to when its longest sequence is ``context`` tokens
    (default: the longest the KV policy keeps)."""
    policy = scenario.kv_policy
    slot = policy.slot_tokens()
    context = dimension("context", context, 0)
    if context is None:
        context = slot
    if context > policy.max_context:
        raise StepShapeError(
            "context",
            f"a sequence of {context} tokens exceeds serving.max_context "
            f"({policy.max_context}); give a shorter context or raise serving.max_context",
        )
    kept = min(context, slot)
    return DecodeCache(context, kept, policy.decode_bucket(kept))


def context_note(scenario: Scenario, context: int | None) -> str | None:
    """What a decode step makes of ``context`` when it does not attend to exactly that many
    tokens (the KV policy keeps fewer, or the bucket is larger), and what it takes when the
    context alone does not fix the cache (``KVPolicy.decode_words``: SnapKV above its
    budget attends to the whole context, the worst case; said at the default context too),
    for reports to say so; None when there is nothing to say."""
    cache = decode_cache(scenario, context)
    lines = []
    if context is not None and cache.bucket != context:
        parts = []
        if cache.kept < context:
            parts.append(f"the {scenario.kv_policy.name} slot keeps {cache.kept:,} of them")
        if cache.bucket != cache.kept:
            parts.append(f"rounded up to the decode bucket of {cache.bucket:,}")
        lines.append(f"context {context:,} tokens: {', '.join(parts)}")
    worst = scenario.kv_policy.decode_words(cache.context)
    if worst is not None:
        lines.append(worst)
    return "\n".join(lines) or None


def typical_prefill_prompt(scenario: Scenario) -> int:
    """The workload's typical prompt (``serving.requests.typical_prompt``): the one a run's
    ``prefill_s``, compare's prefill row and a default prefill step time."""
    import numpy as np  # here: a decode step (the CLI's `step`) samples no requests

    from rdu_sim.serving.requests import make_requests, typical_prompt

    serving = scenario.workload.serving
    if serving.trace is None:
        return typical_prompt(serving, np.zeros(0, dtype=np.int64))
    requests = make_requests(
        serving, 1, scenario.base_dir, scenario.workload_file, scenario.overrides
    )
    return typical_prompt(serving, requests.prompt_tokens)


def served_prefill_steps(scenario: Scenario, prompt: int) -> list[StepShape]:
    """The prefill steps a server runs for one ``prompt`` of the scenario: padded up to its
    compiled prompt bucket (a paged runtime's unpadded), or cut into
    ``serving.prefill_chunk_tokens`` chunks, the last one running the SnapKV selection when
    the policy compresses the prompt (``serving.buckets.prefill_steps``). What a run's
    ``prefill_s`` times, compare's prefill row, and a default prefill step (its first)."""
    serving = scenario.workload.serving
    return prefill_steps(
        prompt,
        serving.max_context,
        serving.prefill_chunk_tokens,
        scenario.kv_policy.compresses(prompt),
        scenario.stack.dynamic_batch,
    )


@dataclass(frozen=True)
class TypicalPrefill:
    """The typical prompt's prefill, the one rule step, run and compare share: ``prompt``
    tokens run as ``steps`` (its bucket, or chunks); ``compressed`` when the KV policy keeps
    fewer of its tokens than it prefills."""

    prompt: int
    steps: tuple[StepShape, ...]
    compressed: bool

    def words(self) -> str:
        """Which prompt, run how: "the workload's typical prompt, 2,304 tokens, run at its
        bucket of 3,072"."""
        first = self.steps[0]
        how = ""
        if len(self.steps) > 1:
            how = f", the first of its {len(self.steps)} chunks of {first.tokens:,} tokens"
        elif first.tokens != self.prompt:
            how = f", run at its bucket of {first.tokens:,}"
        kept = ", compressed by the KV policy" if self.compressed else ""
        return f"the workload's typical prompt (its median), {self.prompt:,} tokens{how}{kept}"


def typical_prefill(scenario: Scenario) -> TypicalPrefill:
    """The workload's typical prompt and the prefill steps a server runs for it."""
    prompt = typical_prefill_prompt(scenario)
    steps = tuple(served_prefill_steps(scenario, prompt))
    return TypicalPrefill(prompt, steps, scenario.kv_policy.compresses(prompt))


@dataclass(frozen=True)
class LongPrompts:
    """A compressing policy's long prompts: those past its slot of ``slot`` tokens, their
    median ``median`` and their ``share`` of the workload's prompts."""

    slot: int
    median: int
    share: float

    def words(self) -> str:
        """ "prompts past the 32,768-token budget: 0.5% of requests, median 39,717 tokens"."""
        return (
            f"prompts past the {self.slot:,}-token budget: {self.share:.1%} of requests, "
            f"median {self.median:,} tokens"
        )


def long_prompts(scenario: Scenario) -> LongPrompts | None:
    """The prompts the KV policy compresses (``serving.requests.prompts_past``), None when
    it compresses none the workload sends."""
    from rdu_sim.serving.requests import prompts_past

    serving, policy = scenario.workload.serving, scenario.kv_policy
    if not policy.compresses(serving.max_context - 1 or 1):
        return None
    slot = policy.slot_tokens()
    past = prompts_past(serving, slot, scenario.base_dir, scenario.workload_file)
    return None if past is None else LongPrompts(slot, past[0], past[1])


def _within_context(scenario: Scenario, option: str, step: str, longest: int) -> None:
    """A step whose longest sequence would hold ``longest`` tokens is refused past
    ``serving.max_context`` (as a server never runs it), naming ``option``: one rule for a
    prefill's prompt on its cache and a decode's new tokens on its sequence."""
    max_context = scenario.workload.serving.max_context
    if longest > max_context:
        raise StepShapeError(option, f"{step} exceeds serving.max_context ({max_context})")


def default_step_shape(
    scenario: Scenario,
    batch_slots: Callable[[], int],
    phase: Phase | str = "decode",
    *,
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
) -> StepShape:
    """The static shape of one step (module docstring); ``batch_slots()`` is what the
    workload runs (``serving.batch_slots``, or the batch capacity for ``auto``), asked only
    when a decode step's ``batch`` is not given. A dimension given is used as given: 0 is
    refused (:func:`dimension`), never read as "the default"."""
    batch = dimension("batch", batch, 1)
    tokens = dimension("tokens", tokens, 1)
    context = dimension("context", context, 0)
    blamed = "tokens" if tokens is not None else "context"
    if phase == "decode":
        cache = decode_cache(scenario, context)
        slots = batch_slots() if batch is None else batch
        new = 1 if tokens is None else tokens
        # the longest sequence's context counts the step's first new token: one more each
        longest = cache.context + new - 1
        _within_context(
            scenario,
            blamed,
            f"a decode of {new} new tokens a slot on a sequence of {cache.context} tokens (its "
            f"last token the first new one: {longest} in all)",
            longest,
        )
        return StepShape("decode", slots, new, cache.bucket)
    if phase == "prefill":
        if tokens is None and context is None:
            first = typical_prefill(scenario).steps[0]  # as a server runs it
            return first if batch is None else replace(first, batch=batch)
        prompt = tokens if tokens is not None else typical_prefill_prompt(scenario)
        cached = 0 if context is None else context
        _within_context(
            scenario, blamed, f"a prompt of {prompt} tokens after {cached} cached", prompt + cached
        )
        return StepShape("prefill", 1 if batch is None else batch, prompt, cached)
    raise StepShapeError("phase", f"phase must be 'decode' or 'prefill', got {phase!r}")
