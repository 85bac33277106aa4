"""The rules of speculation that several rooms share, each stated once.

A workload's ``speculation`` section (``config.workload.SpeculationConfig``) makes its
``Scenario`` carry a draft (``Scenario.draft``). From it follow:

- the verify step: the target checks the k drafted tokens and the last accepted one in one
  static decode step of ``verify_tokens = k + 1`` new tokens per slot (a graph compiled per
  k; the compiler sizes activations for it, serving runs it);
- rollback: a verify step writes k + 1 tokens' keys and values before it knows how many it
  keeps, so a slot holds ``rollback_tokens = k`` positions beyond what its policy keeps
  (the compiler's KV sizes); rejected ones are rolled back (serving advances the cache by
  the accepted tokens plus the target's own);
- the draft's first step of a round reads ``DRAFT_CATCH_UP`` tokens: the target's token of
  the last round and, when all k drafts were accepted, the last draft, which the draft never
  read (a static graph covers the worst case);
- a shared draft (``placement: shared``) lives in the target's memory plan and runs on its
  sockets; a separate one has its own (``shared_draft``); a draft that shares the target's
  embedding table and LM head holds neither again (``shared_weights``);
- speculative prefill keeps whole chunks of the prompt (``kept_tokens``), and the target
  caches only them (``target_prompt``): what a request reserves of a paged KV pool, which
  the compiler's capacity, ``check_pool`` and the scheduler all count.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rdu_sim.config.workload import SpeculationConfig
from rdu_sim.scenario import Scenario

if TYPE_CHECKING:  # numpy is loaded by a run's arrays only: a step runs without it
    import numpy as np
    from numpy.typing import NDArray

DRAFT_CATCH_UP = 2
"""New tokens per slot in a draft round's first step (see the module docstring)."""


def verify_tokens(scenario: Scenario) -> int:
    """New tokens per slot in the target's decode step: k + 1 with speculative decoding,
    else 1."""
    spec = scenario.workload.speculation
    if spec is None or spec.decoding is None:
        return 1
    return spec.decoding.draft_tokens + 1


def rollback_tokens(scenario: Scenario) -> int:
    """KV positions a slot holds beyond its policy's slot for a verify step's rejected
    tokens: k with speculative decoding, else 0."""
    return verify_tokens(scenario) - 1


def shared_draft(scenario: Scenario) -> Scenario | None:
    """The draft when it shares the target's sockets and memory, else None."""
    spec = scenario.workload.speculation
    if spec is None or spec.placement != "shared":
        return None
    return scenario.draft


EMBEDDING_WEIGHTS = ("embedding/embed.gather", "lm_head/")
"""The weights (``<kernel>/<weight>`` keys; one ending in "/" is every weight of that
kernel) a draft with ``shares_embeddings`` reads from the target's: the embedding table
(``graph.heads.EMBEDDING``) and the LM head kernel's, not the input projection and norms of
an MTP module beside the gather in its embedding kernel, which are its own."""


def shared_weights(scenario: Scenario) -> tuple[str, ...]:
    """Weight keys (prefixes, ``EMBEDDING_WEIGHTS``) of the draft whose weights are the
    target's: none unless the draft shares the embedding table and LM head, as DeepSeek's
    multi-token-prediction module does."""
    spec = scenario.workload.speculation
    return EMBEDDING_WEIGHTS if spec is not None and spec.shares_embeddings else ()


def kept_tokens(prompt: int, keep_ratio: float, chunk_tokens: int) -> int:
    """Prompt tokens the target prefills under speculative prefill: as many whole chunks of
    ``chunk_tokens`` as cover ``keep_ratio`` of the prompt (at least one), never more than
    the prompt. The draft's scores decide which chunks, not how many: the count is this
    rule's alone."""
    wanted = math.ceil(prompt * keep_ratio - 1e-9)  # 1e-9: 0.3 x 320 is 96, not 97
    return min(prompt, max(1, -(-wanted // chunk_tokens)) * chunk_tokens)


def target_prompt(spec: SpeculationConfig | None, prompt: int) -> int:
    """Prompt tokens the target prefills and caches of a ``prompt``-token prompt under a
    workload's ``speculation`` (``spec``): the kept tokens under speculative prefill
    (``kept_tokens``), else all of them."""
    prefill = spec.prefill if spec is not None else None
    if prefill is None:
        return prompt
    return kept_tokens(prompt, prefill.keep_ratio, prefill.chunk_tokens)


def target_prompts(spec: SpeculationConfig | None, prompts: NDArray[np.int64]) -> NDArray[np.int64]:
    """:func:`target_prompt` of each of ``prompts`` (each length once), a new array: what a
    run's requests reserve of a paged pool (``serving.limits.check_pool``) and what the
    scheduler prefills and caches of each (``serving.simulate.serve``)."""
    import numpy as np

    lengths, at = np.unique(prompts, return_inverse=True)
    kept = np.asarray([target_prompt(spec, int(p)) for p in lengths.tolist()], dtype=np.int64)
    result: NDArray[np.int64] = kept[at].reshape(np.shape(prompts))
    return result
