"""Which prompt tokens' KV a prefix cache may share between requests, under a KV policy.

A cached prefix block can stand in for another request's prefill of the same tokens only if
the cache holds those tokens' keys and values exactly as a fresh prefill of the new prompt
would (every prompt token kept, in position order, nothing selected or evicted), and keeps
holding them while the request runs: the blocks are read in place (a block table), so a
slot that overwrites a block's positions would overwrite the cached copy. Hence one rule,
:func:`shared_prefix_tokens`, asked per request with the output tokens the server caches
for it (``kv.paged.held_output``: a prefill-role server only the first):

- The prompt must be stored whole (``cache_after_prefill(prompt) == prompt``, no
  selection). ``full``: always. ``snapstream``, ``snapkv``: only prompts no longer than the
  budget (a compressed prompt keeps the top-K tokens chosen by its *own* observation
  window, so two prompts with the same prefix keep different tokens of it, and the
  uncompressed prefix is discarded after the selection). ``streamingllm``: only prompts
  that fit the slot (a longer one is truncated to its sinks and last tokens).
- A request whose decode outgrows its slot (``kv.policies.slot_wraps``: StreamingLLM's and
  SnapStream's ring overwrites its oldest tokens) shares only the prompt tokens that stay in
  place (``kv.policies.wrap_keeps``: the sinks, and SnapStream's selected positions); the
  ring's positions are overwritten as decode proceeds, so a block there is neither looked
  up (no hit counted for tokens the ring will not hold) nor cached for others.
"""

from __future__ import annotations

from rdu_sim.kv.policies import slot_wraps, wrap_keeps
from rdu_sim.kv.policy import KVPolicy


def shares_prefix(policy: KVPolicy, prompt_tokens: int) -> bool:
    """Whether this prompt's cache after prefill holds the prompt verbatim."""
    if policy.compresses(prompt_tokens):
        return False
    return policy.cache_after_prefill(prompt_tokens) == prompt_tokens


def shared_prefix_tokens(policy: KVPolicy, prompt_tokens: int, output_tokens: int) -> int:
    """The leading prompt tokens a prefix cache may share for a request of ``prompt_tokens``
    whose server caches ``output_tokens`` of its output (module docstring): the whole
    prompt, the part a wrapping slot keeps in place, or none."""
    if not shares_prefix(policy, prompt_tokens):
        return 0
    if not slot_wraps(policy, prompt_tokens, output_tokens):
        return prompt_tokens
    sinks, selected = wrap_keeps(policy)
    return min(prompt_tokens, sinks + selected)
