"""A preemption policy from outside rdu-sim, its every answer checked as the scheduler takes it.

The scheduler trusts a policy's slot: an empty one, one past the slots, or a float would end
in an IndexError or a KeyError deep in the scheduler or the KV pool, or a silently wrong
run. Rdu-sim's own policies are tested and run unchecked; :func:`checked` wraps any other (a
plugin's, a notebook's subclass) so that an answer the contract refuses is a
PolicyAnswerError naming the policy, the method and what was wrong, at the preemption that
asked (``serving.batching.checked``'s rule for batching policies).
"""

from __future__ import annotations

from numbers import Integral

from rdu_sim.plugins import PolicyAnswerError, code_of
from rdu_sim.serving.batching.checked import _a
from rdu_sim.serving.preemption.base import PreemptionPolicy, RunningView


def checked(policy: PreemptionPolicy, name: str) -> PreemptionPolicy:
    """``policy`` itself when it is rdu-sim's own, else it wrapped in :class:`Checked`
    (``name``: its ``serving.preemption``, for the errors)."""
    if code_of(type(policy)) is None:
        return policy
    return Checked(policy, name)


class Checked(PreemptionPolicy):
    """``inner``'s answers, each checked against the contract (module docstring)."""

    def __init__(self, inner: PreemptionPolicy, name: str) -> None:
        self.inner = inner
        self.name = name

    def victim(self, running: RunningView) -> int:
        """The inner policy's slot, one holding a request."""
        answer = self.inner.victim(running)
        problem = None
        if isinstance(answer, bool) or not isinstance(answer, Integral):
            problem = f"{_a(answer)}, not an integer"
        elif not 0 <= answer < len(running):
            problem = f"no slot {answer} (slots 0..{len(running) - 1})"
        elif running.request(int(answer)) < 0:
            problem = f"slot {answer} is empty"
        if problem is None:
            return int(answer)
        held = [slot for slot in range(len(running)) if running.request(slot) >= 0]
        raise PolicyAnswerError(
            f"preemption policy {self.name!r} returned {answer!r} from victim: {problem}; "
            f"the running requests' slots are {held}"
        )
