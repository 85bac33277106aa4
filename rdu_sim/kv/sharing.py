"""Which prompts' KV a prefix cache may share between requests, under a KV policy.

A cached prefix block can stand in for another request's prefill of the same tokens only if
the cache holds those tokens' keys and values exactly as a fresh prefill of the new prompt
would: every prompt token kept, in position order, nothing selected or evicted. That is the
case when the policy stores the prompt whole (``cache_after_prefill(prompt) == prompt``) and
runs no selection:

- ``full``: always.
- ``snapstream``, ``snapkv``: only for prompts no longer than the budget. A compressed prompt
  keeps the top-K tokens chosen by the scores of its *own* observation window (its last
  tokens), so two prompts with the same prefix but different endings keep different tokens
  of that prefix; and the uncompressed prefix is discarded after the selection (keeping it
  would spend the memory compression saves).
- ``streamingllm``: only for prompts that fit the slot; a longer prompt is truncated to its
  sinks and last ``recent`` tokens, so its cache is not the prefix.
"""

from __future__ import annotations

from rdu_sim.kv.policy import KVPolicy


def shares_prefix(policy: KVPolicy, prompt_tokens: int) -> bool:
    """Whether this prompt's cache holds its prefix verbatim (a prefix cache may reuse it)."""
    if policy.compresses(prompt_tokens):
        return False
    return policy.cache_after_prefill(prompt_tokens) == prompt_tokens
