"""``prefill_first``: before each decode step, all prefill work runs.

Every free slot with a waiting request is prefilled before the next decode step; with
chunked prompts, each prefilling slot (and each new admission), oldest first, advances by
one chunk per decode step. With no slot decoding, prefill steps run back to back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdu_sim.native import mypyc_attr
from rdu_sim.serving.batching.base import (
    ADMIT,
    NO_PREFILL,
    BatchingPolicy,
    can_admit,
    has_work,
    register,
)

if TYPE_CHECKING:
    from rdu_sim.serving.slots import Slots


@mypyc_attr(allow_interpreted_subclasses=True)  # a plugin may subclass it
class PrefillFirst(BatchingPolicy):
    """Prefill work first (module docstring)."""

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        """The oldest prefilling slot not yet advanced since the last decode step (any, when
        none decodes), else a waiting request if a slot is free."""
        order = slots.prefill_order
        if order:
            if slots.decoding == 0:
                return order[0]
            advanced = slots.chunked_this_round
            for slot in order:
                if slot not in advanced:
                    return slot
        return ADMIT if can_admit(slots, queued) else NO_PREFILL

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        """Always."""
        return True

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        """A slot is prefilling, or a request waits and a slot is free."""
        return has_work(slots, queued)


register("prefill_first", PrefillFirst)
