"""The one rule for "a step of this workload" when the caller does not give every dimension:
what `rdu-sim step`, `rdu-sim inspect graph`, `api.step` and the plots' decode steps run.

Decode: ``batch`` slots (default: the batch slots the workload runs), ``tokens`` new tokens
each (default 1), the longest sequence of the batch ``context`` tokens long (default: the
longest the KV policy keeps, ``serving.max_context`` for full attention). The step attends to
what the policy keeps of that sequence, at most its slot (a SnapStream slot holds its
budget, whatever the context), rounded up to the policy's decode bucket: a server runs
exactly that static shape.

Prefill: ``batch`` prompts (default 1) of ``tokens`` tokens (default: the workload's typical
prompt; with a compressing policy, its typical compressed prompt, so the SnapKV selection
shows as its own kernel) on top of ``context`` cached tokens (default 0, a whole prompt).

A shape the workload cannot run (a context beyond ``serving.max_context``) is a
:class:`StepShapeError` naming the option, not a traceback and not a silent cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rdu_sim.scenario import Scenario
from rdu_sim.shapes import Phase, StepShape

__all__ = [
    "DecodeCache",
    "StepShapeError",
    "context_note",
    "decode_cache",
    "default_step_shape",
    "typical_prefill_prompt",
]


class StepShapeError(ValueError):
    """A step dimension the workload cannot run; ``option`` is the dimension (``context``,
    ``tokens``, ``phase``) the message is about."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


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
    if context is None:
        context = slot
    if context < 0:
        raise StepShapeError("context", f"context must be >= 0 tokens, got {context}")
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
    """The prompt a default prefill step runs: the typical compressed prompt when the KV
    policy compresses some prompt the workload sends, else its typical prompt (the one the
    run report's ``prefill_s`` times)."""
    import numpy as np  # here: a decode step (the CLI's `step`) samples no requests

    from rdu_sim.serving.requests import make_requests, typical_compressed_length, typical_prompt

    serving, policy = scenario.workload.serving, scenario.kv_policy
    if policy.compresses(serving.max_context - 1 or 1):
        prompt = typical_compressed_length(
            serving, policy.slot_tokens(), scenario.base_dir, scenario.workload_file
        )
        if prompt is not None:
            return prompt
    if serving.trace is None:
        return typical_prompt(serving, np.zeros(0, dtype=np.int64))
    requests = make_requests(
        serving, 1, scenario.base_dir, scenario.workload_file, scenario.overrides
    )
    return typical_prompt(serving, requests.prompt_tokens)


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
    when a decode step's ``batch`` is not given."""
    if phase == "decode":
        cache = decode_cache(scenario, context)
        return StepShape("decode", batch or batch_slots(), tokens or 1, cache.bucket)
    if phase == "prefill":
        prompt = tokens if tokens is not None else typical_prefill_prompt(scenario)
        cached = context or 0
        max_context = scenario.workload.serving.max_context
        if prompt + cached > max_context:
            raise StepShapeError(
                "tokens" if tokens is not None else "context",
                f"a prompt of {prompt} tokens after {cached} cached exceeds "
                f"serving.max_context ({max_context})",
            )
        return StepShape("prefill", batch or 1, prompt, cached)
    raise StepShapeError("phase", f"phase must be 'decode' or 'prefill', got {phase!r}")
