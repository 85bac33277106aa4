"""``static``: static batching, what continuous batching replaced (FasterTransformer's; Orca,
OSDI 2022, measures against it).

A batch forms when the server is empty: waiting requests are admitted to the free slots and
prefilled back to back; once its first decode step runs, nothing joins it, and it decodes
until its last request completes, however early the others finish. Then the next batch
forms from the requests waiting. A request already admitted finishes its prefill even after
the batch's first decode step (chunked prefill on a stack that mixes: a chunk's step carries
the decode rows of the members already prefilled, so the batch decodes before its last member
has prefilled; it used to stall there, that member never given another chunk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdu_sim.serving.batching.base import NO_PREFILL, BatchingPolicy, oldest_work, register

if TYPE_CHECKING:
    from rdu_sim.serving.slots import Slots


class StaticBatching(BatchingPolicy):
    """One batch at a time (module docstring). The batch forms while no decode step has run
    since the server was last empty (``Slots.steps_done``, the decode steps run so far)."""

    def __init__(self) -> None:
        self.formed_from = 0  # the decode steps run when the forming batch began

    def _forming(self, slots: Slots) -> bool:
        if slots.occupied == 0:  # an empty server: a new batch begins
            self.formed_from = slots.steps_done
        return slots.steps_done == self.formed_from

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        """While the batch forms: the prefilling slot, else a waiting request if a slot is
        free; once it decodes, nothing."""
        if not self._forming(slots):
            order = slots.prefill_order  # a member still prefilling: its next chunk
            return order[0] if order else NO_PREFILL
        return oldest_work(slots, queued)

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        """Only while the batch forms, or a member still prefills."""
        return self._forming(slots) or bool(slots.prefill_order)

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        """Only for a member still prefilling: else a decoding batch runs to its end."""
        return bool(slots.prefill_order)


register("static", StaticBatching)
