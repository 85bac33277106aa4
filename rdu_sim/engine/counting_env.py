"""A SimPy environment that counts the events it processes.

``StepTiming.events`` must be the events actually processed, not an estimate, so that the
event budget (``engine.max_events``) and the speed benchmarks measure the real cost. Counting
in ``step`` is the one place every processed event passes through; the counter lives on the
environment (one per run), never in a global.
"""

from __future__ import annotations

import simpy


class CountingEnvironment(simpy.Environment):
    """``simpy.Environment`` whose ``processed`` counts calls of :meth:`step`."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.processed = 0

    def step(self) -> None:
        """Process the next event and count it."""
        self.processed += 1
        super().step()
