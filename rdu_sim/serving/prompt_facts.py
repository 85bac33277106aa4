"""What a server needs to know about a prompt of a given length, asked once per length.

A million requests asked the KV policy and the bucket rules a few questions each for a few
thousand distinct lengths (at most ``max_context`` of them), so the answers are memoised
here by length: whether the policy compresses the prompt and its first prefill step (shape
and the prompt tokens done after it), one :class:`PromptFact` a length, and its cache at its
first decode step. Each is asked only when needed, as the policy itself would be: a request
that ends at its first token never asks for a decode cache (which need not fit its slot).
The servers of one policy and serving setup share one :class:`PromptFacts` (a cluster pool's
replicas: one each would hold the same answers 1,024 times); the steps a server runs are
counted in its own step cache (``serving.step_cache``).
"""

from __future__ import annotations

from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.buckets import prefill_step, prompt_bucket
from rdu_sim.shapes import StepShape

UNKNOWN = -1
"""``PromptFact.first_cache`` before it is asked."""


class PromptFact:
    """A prompt length's answers (:class:`PromptFacts`)."""

    def __init__(
        self,
        prompt: int,
        compresses: bool,
        first_step: StepShape,
        first_done: int,
        pack_bucket: int = 0,
    ) -> None:
        self.prompt = prompt
        self.compresses = compresses
        self.first_step = first_step  # the prompt's first prefill step
        self.first_done = first_done  # prompt tokens done after it (all, unless chunked)
        self.first_cache = UNKNOWN  # the cache at its first decode step, once asked
        # a ragged runtime's prompts of one static bucket pack into one step (0: static)
        self.pack_bucket = pack_bucket


class PromptFacts:
    """The answers for every prompt length met, for one KV policy at one ``max_context``
    and prefill chunk, padded or ragged (the servers sharing it must serve with those)."""

    def __init__(
        self, policy: KVPolicy, max_context: int, chunk: int | None, ragged: bool = False
    ) -> None:
        self.policy = policy
        self.max_context = max_context
        self.chunk = chunk
        self.ragged = ragged  # prompts unpadded (``buckets.prefill_step``)
        self.slot_tokens = policy.slot_tokens()
        self._facts: dict[int, PromptFact] = {}
        self._first_cache: dict[int, int] = {}  # of prompts received to decode

    def __len__(self) -> int:
        """Prompt lengths met."""
        return len(self._facts)

    def of(self, prompt: int) -> PromptFact:
        """The answers for a prompt of ``prompt`` tokens (made the first time)."""
        fact = self._facts.get(prompt)
        if fact is None:
            compresses = self.policy.compresses(prompt)
            shape, done = prefill_step(
                prompt, 0, self.max_context, self.chunk, compresses, self.ragged
            )
            group = prompt_bucket(prompt, self.max_context) if self.ragged else 0
            fact = self._facts[prompt] = PromptFact(prompt, compresses, shape, done, group)
        return fact

    def next_step(self, prompt: int, before: int) -> tuple[StepShape, int]:
        """The prefill step of ``prompt`` after ``before`` tokens are done: its shape and
        the tokens done after it."""
        if not before:
            fact = self.of(prompt)
            return fact.first_step, fact.first_done
        compresses = self.of(prompt).compresses
        return prefill_step(prompt, before, self.max_context, self.chunk, compresses, self.ragged)

    def first_cache(self, prompt: int, fact: PromptFact | None = None) -> int:
        """The prompt's cache at its first decode step (after one generated token), kept in
        its ``fact`` when the caller has it (a prompt prefilled here), else by length (a
        request received to decode: its prefill ran elsewhere)."""
        if fact is not None:
            if fact.first_cache == UNKNOWN:
                fact.first_cache = self.policy.cache_at(prompt, 1)
            return fact.first_cache
        known = self._first_cache.get(prompt)
        if known is None:
            known = self._first_cache[prompt] = self.policy.cache_at(prompt, 1)
        return known

    def last_cache(self, prompt: int, first: int, steps: int) -> int:
        """The prompt's cache after ``steps`` generated tokens, given its ``first``
        (:meth:`first_cache`): one token more a step (``serving.slots``' model of every
        policy) while that stays within the slot; the policy answers beyond (its cache
        saturates at the slot, or it raises), and for no step at all."""
        cache = first + steps - 1
        if steps > 0 and cache <= self.slot_tokens:
            return cache
        return self.policy.cache_at(prompt, steps)
