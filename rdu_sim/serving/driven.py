"""What the one driver (``serving.driver``) drives: the decisions and accounting of a step
boundary, whoever takes them.

A :class:`Driven` is asked, at each step boundary, for an :class:`Action` and then for the
step's delays or decode run, and told when the step has ended; it decides and accounts, it
never waits. Two kinds implement it: a server's scheduler (``serving.scheduler``), and the
data-parallel attention ranks of one replica stepping together (``serving.lockstep``), so
the one driver serves either unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Final

from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape


class Action(Enum):
    """What a decision asks the driver to do next."""

    ADMIT = "admit"  # a prefill step admitting a waiting request
    PREFILL = "prefill"  # a prefill step of a prompt already admitted (its next chunk)
    DECODE = "decode"  # a decode run
    IDLE = "idle"  # nothing: wait for an arrival


FOREVER: Final = 2**63
"""``Driven.until`` of what serves until the simulation runs out of events (a replica)."""


def _nothing() -> None:
    """No driver to tell (until one sets ``Driven.poke``)."""


class Driven:
    """The step-boundary contract between a driver and what it drives (module docstring).
    ``cache``: the step times (the clock's range error names its longest step);
    ``until``: completions that end the drive."""

    def __init__(self, cache: StepCache, until: int) -> None:
        self.cache = cache
        self.until = until
        self.completed = 0
        self.prefill_shape: StepShape | None = None  # the prefill step in flight, if any
        self.poke: Callable[[], None] = _nothing  # the driver: something arrived now

    def at_boundary(self) -> None:
        """A step boundary, before deciding (the KV hand-offs that ended take effect)."""
        raise NotImplementedError

    def prefill_may_run(self) -> bool:
        """Whether prefill work of the driver's source may take the next step."""
        raise NotImplementedError

    def prefill_ran_elsewhere(self) -> None:
        """A prefill step of the source's own work ran."""
        raise NotImplementedError

    def decide(self, now: int) -> Action:
        """The action to take at ``now``."""
        raise NotImplementedError

    def begin_prefill(self) -> tuple[int, ...]:
        """Start the prefill step :meth:`decide` chose; the delays (ps) before
        :meth:`end_prefill`."""
        raise NotImplementedError

    def end_prefill(self) -> None:
        """The prefill step begun by :meth:`begin_prefill` ended now."""
        raise NotImplementedError

    def decode_plan(self) -> tuple[StepShape, int, int, int]:
        """The next decode run from now: its shape, bucket, steps and step time (ps)."""
        raise NotImplementedError

    def cuttable(self, steps: int) -> bool:
        """Whether an arrival during a decode run of ``steps`` could end it early."""
        raise NotImplementedError

    def cut(self, start: int, steps: int, step: int, arrival: int) -> int:
        """Steps of a decode run from ``start`` that an arrival at ``arrival`` leaves."""
        raise NotImplementedError

    def decode_done(self, shape: StepShape, bucket: int, steps: int) -> None:
        """Account a decode run of ``steps`` steps that ended now."""
        raise NotImplementedError

    def record(self, now: int) -> None:
        """A time-series row of the state at ``now`` (if kept)."""
        raise NotImplementedError
