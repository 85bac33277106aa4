"""``decode_first``: at most one prefill step between two decode steps.

A prefill step (a whole prompt, or one chunk of the oldest prefilling slot) may run only
when the step before was not prefill work, or no slot decodes (then prefill steps run back
to back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdu_sim.native import mypyc_attr
from rdu_sim.serving.batching.base import (
    NO_PREFILL,
    BatchingPolicy,
    has_work,
    oldest_work,
    register,
)

if TYPE_CHECKING:
    from rdu_sim.serving.slots import Slots


@mypyc_attr(allow_interpreted_subclasses=True)  # a plugin may subclass it
class DecodeFirst(BatchingPolicy):
    """One prefill step at most between decode steps (module docstring)."""

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        """Nothing right after prefill work while slots decode; else the oldest prefilling
        slot, else a waiting request if a slot is free."""
        if after_prefill and slots.decoding > 0:
            return NO_PREFILL
        return oldest_work(slots, queued)

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        """Not right after prefill work while slots decode."""
        return not (after_prefill and slots.decoding > 0)

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        """A slot is prefilling, or a request waits and a slot is free."""
        return has_work(slots, queued)


register("decode_first", DecodeFirst)
