"""How a server's decode runs advance its slots: the decode-rounds strategy.

:class:`DecodeRounds` itself is plain decoding: a decode step runs the static decode graph
over every slot at the run's bucket and each decoding slot gains one token, so a run of
``k`` steps is one shape run ``k`` times (its :class:`~rdu_sim.serving.step_cache.StepEntry`
kept per batch and bucket). A runtime that batches its live sequences dynamically (a paged
KV cache) runs only the decoding slots instead, their count rounded up the batch ladder
(``serving.buckets.decode_batch``), as its CUDA graphs pad a batch to a captured size; a
static runtime that picks its program by the queue's length (``decode_program: live``)
runs the smallest compiled batch that holds them (``serving.buckets.decode_rows``).
Speculative decoding's rounds (``serving.speculative.SpeculativeRounds``) override it: a
"step" is a round of the draft's steps and one verify step, and each slot advances by its
own accepted tokens.
"""

from __future__ import annotations

from rdu_sim.native import mypyc_attr
from rdu_sim.serving.buckets import decode_rows
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.step_cache import StepCache, StepEntry
from rdu_sim.shapes import DecodeRows, StepShape, batches_live


@mypyc_attr(allow_interpreted_subclasses=True)
class DecodeRounds:
    """Plain decoding, one token a slot a step (module docstring)."""

    def __init__(self, rows: DecodeRows = "slots") -> None:
        # (decode batch, bucket), as one int, -> its step's entry
        self._steps: dict[int, StepEntry] = {}
        self._rows: DecodeRows = rows
        self._dynamic = batches_live(rows)
        self._planned: StepEntry | None = None  # the entry of the run planned last

    def slots(self, n: int) -> Slots:
        """The ``n`` batch slots these rounds advance."""
        return Slots(n)

    def plan(self, slots: Slots, cache: StepCache, bucket: int) -> tuple[StepShape, int, int]:
        """A decode run's step at ``bucket`` (timed by ``cache``): its shape, its time (ps)
        and the tokens it emits (the slots decoding; 0 when each slot emits its own,
        counted at the run's end)."""
        key = self._batch(slots) << 40 | bucket
        entry = self._steps.get(key)
        if entry is None:
            entry = self._steps[key] = cache.entry(self.step_shape(slots, bucket))
        self._planned = entry
        return entry.shape, entry.step_ps, slots.decoding

    def ride_prefill(self) -> bool:
        """Whether a prefill step may carry these rounds' decode step (a mixed step, under
        the stack's ``mixed_batching``): plain decoding's may."""
        return True

    def per_sequence(self) -> bool:
        """Whether a decode step reads each sequence's own cache (a dynamic batch's pages:
        the bucket of the mean cache), not a static graph's bucket of the longest."""
        return self._dynamic

    def step_shape(self, slots: Slots, bucket: int) -> StepShape:
        """A decode step's shape at ``bucket``: the static graph over every slot, or the
        decoding slots of a dynamic batch (module docstring)."""
        return StepShape("decode", self._batch(slots), 1, bucket)

    def _batch(self, slots: Slots) -> int:
        """The rows a decode step runs now (module docstring)."""
        return decode_rows(self._rows, slots.decoding, slots.n)

    def done(self, cache: StepCache, bucket: int, steps: int) -> None:
        """Account a run of ``steps`` steps at ``bucket`` (planned by :meth:`plan`)."""
        entry = self._planned
        assert entry is not None  # (a run is planned before it is done)
        entry.run(steps)

    def start(
        self, slots: Slots, slot: int, request: int, prompt: int, output: int, first: int, cap: int
    ) -> None:
        """``slot``'s request starts decoding: ``prompt`` tokens cached (the target's),
        ``output`` tokens in all (the first done), its cache ``first`` at the first decode
        step and never more than ``cap``."""
        slots.start_decode(slot, first, cap, output - 1)
