"""``aging_spf``: ``prefill_first``'s timing, each admission taking the shortest waiting
prompt once its wait is counted against its length (shortest prompt first with aging).

Shortest prompt first lowers the mean TTFT of an overloaded server but can starve a long
prompt while shorter ones keep arriving. Aging bounds the wait: a waiting request scores its
prompt tokens less :data:`AGING_TOKENS_PER_S` for each second it has waited (``queue.now``
less its ``queue.arrival_ps``), and an admission takes the lowest score (ties: the oldest).
As every waiting request ages at the same rate, request A (prompt ``P_A``, arrived at
``t_A``) goes before a later B exactly when ``P_A - P_B < rate * (t_B - t_A)``, whenever they
are compared: a prompt of ``P`` tokens is passed only by requests arriving less than
``(P - 1) / rate`` seconds after it, so it is never starved. A rate of 0 is shortest prompt
first; a very large one, FIFO. A variant with another rate is a subclass registered under
another name (policies take no parameters: docs/architecture.md, "Where to add a batching
policy").
"""

from __future__ import annotations

from typing import Final

from rdu_sim.serving.batching.base import QueueView, register
from rdu_sim.serving.batching.prefill_first import PrefillFirst
from rdu_sim.serving.clock import PS_PER_S

AGING_TOKENS_PER_S: Final = 1000
"""Prompt tokens a second of waiting is worth: a 4,000-token prompt is passed only by
requests arriving within 4 s after it."""


@register("aging_spf")
class AgingShortestPromptFirst(PrefillFirst):
    """``prefill_first``, admitting the lowest prompt-less-wait score (module docstring)."""

    rate = AGING_TOKENS_PER_S

    def admit_from(self, queue: QueueView) -> int:
        """The position of the lowest score, the oldest among equals (integer arithmetic in
        picoseconds: exact)."""
        now, rate = queue.now, self.rate
        best, best_score = 0, 0
        for position in range(len(queue)):
            waited = now - queue.arrival_ps(position)
            score = queue.prompt_tokens(position) * PS_PER_S - rate * waited
            if position == 0 or score < best_score:
                best, best_score = position, score
        return best
