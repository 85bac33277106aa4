"""How a server's decode runs advance its slots: the decode-rounds strategy.

:class:`DecodeRounds` itself is plain decoding: a decode step runs the static decode graph
over every slot at the run's bucket and each decoding slot gains one token, so a run of
``k`` steps is one shape run ``k`` times (its :class:`~rdu_sim.serving.step_cache.StepEntry`
kept per bucket). Speculative decoding's rounds (``serving.speculative.SpeculativeRounds``)
override it: a "step" is a round of the draft's steps and one verify step, and each slot
advances by its own accepted tokens.
"""

from __future__ import annotations

from rdu_sim.native import mypyc_attr
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.step_cache import StepCache, StepEntry
from rdu_sim.shapes import StepShape


@mypyc_attr(allow_interpreted_subclasses=True)
class DecodeRounds:
    """Plain decoding, one token a slot a step (module docstring)."""

    def __init__(self) -> None:
        self._steps: dict[int, StepEntry] = {}  # decode bucket -> its step's entry

    def slots(self, n: int) -> Slots:
        """The ``n`` batch slots these rounds advance."""
        return Slots(n)

    def plan(self, slots: Slots, cache: StepCache, bucket: int) -> tuple[StepShape, int, int]:
        """A decode run's step at ``bucket`` (timed by ``cache``): its shape, its time (ps)
        and the tokens it emits (the slots decoding; 0 when each slot emits its own,
        counted at the run's end)."""
        entry = self._steps.get(bucket)
        if entry is None:
            entry = self._steps[bucket] = cache.entry(StepShape("decode", slots.n, 1, bucket))
        return entry.shape, entry.step_ps, slots.decoding

    def done(self, cache: StepCache, bucket: int, steps: int) -> None:
        """Account a run of ``steps`` steps at ``bucket`` (planned by :meth:`plan`)."""
        self._steps[bucket].run(steps)

    def start(
        self, slots: Slots, slot: int, request: int, prompt: int, output: int, first: int, cap: int
    ) -> None:
        """``slot``'s request starts decoding: ``prompt`` tokens cached (the target's),
        ``output`` tokens in all (the first done), its cache ``first`` at the first decode
        step and never more than ``cap``."""
        slots.start_decode(slot, first, cap, output - 1)
