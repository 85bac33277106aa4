"""The interface every KV-cache policy implements, for the compiler and for serving.

Sizes are in tokens (per slot, all layers share them); bytes follow from the model's KV
bytes per token. Implementations live beside this file and register by name.
"""

from __future__ import annotations

from typing import Protocol


class KVPolicy(Protocol):
    """How a policy sizes, shapes and updates a slot's cache."""

    name: str

    def slot_tokens(self, max_context: int) -> int:
        """Tokens of cache allocated per batch slot (static, for max_context sequences)."""
        ...

    def compresses(self, prompt_tokens: int) -> bool:
        """Whether prefill of this prompt runs the SnapKV selection."""
        ...

    def cache_after_prefill(self, prompt_tokens: int) -> int:
        """Tokens in the slot's cache right after prefill of this prompt."""
        ...

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """Tokens a decode step attends to after `generated` output tokens."""
        ...

    def decode_bucket(self, longest_cache: int, max_context: int) -> int:
        """Static cache length the decode graph is compiled for, covering `longest_cache`."""
        ...

    def buckets(self, max_context: int) -> list[int]:
        """Every decode cache length a server compiles a graph for."""
        ...
