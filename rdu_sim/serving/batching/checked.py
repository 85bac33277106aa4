"""A batching policy from outside rdu-sim, its every answer checked as the scheduler takes it.

The scheduler trusts a policy's answers: ``ADMIT`` with nobody waiting or no free slot, a slot
that is not prefilling, an index past the slots or a float would end in an IndexError deep in
the scheduler, a stall, or a silently wrong run. Rdu-sim's own policies are tested and run
unchecked (the compiled scheduler calls them directly); :func:`checked` wraps any other (a
plugin's, a notebook's subclass) so that an answer its contract refuses is a PolicyAnswerError
naming the policy, the method and what was wrong, at the decision that gave it. This module
is not compiled: the wrapper receives what the policy returned as any Python object, where a
compiled caller would only see mypyc's "int object expected". The cost is one Python call per
answer, for outside policies only (which already cost one).
"""

from __future__ import annotations

from numbers import Integral
from typing import TYPE_CHECKING

from rdu_sim.plugins import PolicyAnswerError, code_of
from rdu_sim.serving.batching.base import ADMIT, NO_PREFILL, BatchingPolicy, QueueView
from rdu_sim.serving.slots import DECODING, EMPTY, PREFILLING, WAITING

if TYPE_CHECKING:
    from rdu_sim.serving.slots import Slots

_PHASES = {
    EMPTY: "empty",
    PREFILLING: "prefilling",
    DECODING: "decoding",
    WAITING: "waiting for its KV cache",
}
"""A slot's phase (``serving.slots``) as an error says it."""


def _a(answer: object) -> str:
    """``a float``, ``an int``: the answer's type, as an error says it."""
    name = type(answer).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def checked(policy: BatchingPolicy, name: str) -> BatchingPolicy:
    """``policy`` itself when it is rdu-sim's own, else it wrapped in :class:`Checked`
    (``name``: its ``serving.prefill_priority``, for the errors)."""
    if code_of(type(policy)) is None:
        return policy
    return Checked(policy, name)


class Checked(BatchingPolicy):
    """``inner``'s answers, each checked against the contract (module docstring)."""

    def __init__(self, inner: BatchingPolicy, name: str) -> None:
        self.inner = inner
        self.name = name

    def _refuse(self, method: str, answer: object, problem: str) -> PolicyAnswerError:
        return PolicyAnswerError(
            f"batching policy {self.name!r} returned {answer!r} from {method}: {problem}"
        )

    def _integer(self, method: str, answer: object) -> int:
        if isinstance(answer, bool) or not isinstance(answer, Integral):
            raise self._refuse(method, answer, f"{_a(answer)}, not an integer")
        return int(answer)

    def _bool(self, method: str, answer: object) -> bool:
        if not isinstance(answer, bool):
            raise self._refuse(method, answer, f"{_a(answer)}, not a bool (wrap it in bool())")
        return answer

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        """The inner policy's prefill work, if it can run: ``ADMIT`` needs a waiting request
        and a free slot, a slot must be in ``slots.prefill_order``."""
        answer = self.inner.next_prefill(slots, queued, after_prefill)
        work = self._integer("next_prefill", answer)
        if work == NO_PREFILL:
            return work
        if work == ADMIT:
            if queued == 0:
                raise self._refuse("next_prefill", answer, "ADMIT with no request waiting")
            if slots.occupied >= slots.n:
                raise self._refuse("next_prefill", answer, f"ADMIT with all {slots.n} slots taken")
            return work
        order = slots.prefill_order
        if work in order:
            return work
        prefilling = f"the prefilling slots are {list(order)}" if order else "none prefills"
        if 0 <= work < slots.n:
            problem = f"slot {work} is {_PHASES[int(slots.phase[work])]}, not prefilling"
        elif work < 0:
            problem = f"not a slot, ADMIT ({ADMIT}) or NO_PREFILL ({NO_PREFILL})"
        else:
            problem = f"no slot {work} (slots 0..{slots.n - 1})"
        raise self._refuse("next_prefill", answer, f"{problem}; {prefilling}")

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        """The inner policy's answer, a bool."""
        return self._bool("prefill_may_run", self.inner.prefill_may_run(slots, after_prefill))

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        """The inner policy's answer, a bool."""
        return self._bool("prefill_waits", self.inner.prefill_waits(slots, queued))

    def admit_from(self, queue: QueueView) -> int:
        """The inner policy's position, one of the queue's."""
        answer = self.inner.admit_from(queue)
        position = self._integer("admit_from", answer)
        if not 0 <= position < len(queue):
            raise self._refuse(
                "admit_from",
                answer,
                f"not a position of the {len(queue)} waiting requests (0..{len(queue) - 1})",
            )
        return position
