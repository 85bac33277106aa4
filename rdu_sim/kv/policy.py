"""The interface every KV-cache policy implements, for the compiler and for serving.

Sizes are in tokens per slot, the same for every full-attention layer; a sliding-window
layer holds at most its ring (`layer_slot_tokens`); bytes follow from the model's KV bytes
per token. Implementations live beside this file (rdu_sim/kv/policies.py) and register by
name; `rdu_sim.kv.make_policy(kv, max_context)` builds one. A workload's policy is built
once, when its Scenario is loaded (`Scenario.kv_policy`), for the workload's
`serving.max_context`: every size and bucket below is for that context.
"""

from __future__ import annotations

from typing import Any, Protocol

from rdu_sim.shapes import Selection

__all__ = ["KVPolicy", "Selection"]


class KVPolicy(Protocol):
    """How a policy sizes, shapes and updates a slot's cache."""

    name: str
    max_context: int
    """The longest sequence (prompt + output) the policy was built for."""

    def slot_tokens(self) -> int:
        """Tokens of cache allocated per batch slot (static, for max_context sequences)."""
        ...

    def compresses(self, prompt_tokens: int) -> bool:
        """Whether prefill of this prompt runs the SnapKV selection."""
        ...

    def cache_after_prefill(self, prompt_tokens: int) -> int:
        """Tokens in the slot's cache right after prefill of this prompt."""
        ...

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """Tokens a decode step attends to after `generated` output tokens: one more a token
        until the slot is full, then the slot (or ValueError past it). The scheduler counts
        a decode run's caches on from the first by that rule (``PromptFacts.last_cache``)."""
        ...

    def decode_bucket(self, longest_cache: int) -> int:
        """Static cache length the decode graph is compiled for, covering `longest_cache`."""
        ...

    def buckets(self) -> list[int]:
        """Every decode cache length a server compiles a graph for."""
        ...

    # Extensions (rdu_sim/kv/policies.py implements them for every policy).

    def slot_bytes(self, kv_bytes_per_token: float) -> int:
        """Bytes of one slot's cache: slot_tokens x kv_bytes_per_token."""
        ...

    def max_generated(self, prompt_tokens: int) -> int | None:
        """Most output tokens the slot can take after this prompt; None means unbounded."""
        ...

    def selection(self, prompt_tokens: int) -> Selection | None:
        """The SnapKV selection this prefill runs (its shape), or None."""
        ...

    def layer_slot_tokens(self, window: int | None) -> int:
        """Tokens of one layer's cache per slot: the slot, or less for a sliding-window
        layer (its ring of window - 1 tokens, `rdu_sim.models.window_tokens`)."""
        ...

    def layer_selection(self, prompt_tokens: int, window: int | None) -> Selection | None:
        """The selection a layer with this attention window runs at prefill, or None."""
        ...

    def decode_selection(self, cache_tokens: int) -> Selection | None:
        """The selection a decode step runs over each slot's cache of ``cache_tokens`` tokens
        (an eviction policy scoring its cache to choose what to drop), or None."""
        ...

    def layer_decode_selection(self, cache_tokens: int, window: int | None) -> Selection | None:
        """The decode selection of a layer with this attention window: the policy's over
        what that layer holds of ``cache_tokens`` (a sliding-window layer: its ring), or None."""
        ...

    def layout(self) -> str:
        """What a slot keeps, in words (``4 sinks + 30,716 selected + 2,048 ring = 32,768
        tokens a slot``), for reports."""
        ...

    def decode_words(self, context: int) -> str | None:
        """What a decode step at this longest sequence takes as its cache, when the context
        alone does not fix it (SnapKV's worst case), or None."""
        ...

    def describe(self) -> dict[str, Any]:
        """Resolved parameters, for reports."""
        ...
