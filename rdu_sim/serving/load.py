"""A server's outstanding work: what a router balances, exact at any instant.

A server counts the prompt tokens it still has to prefill and the output tokens it still
has to generate, over its queued and admitted requests (``outstanding``), and settles a
batched decode run's tokens when the run ends. Mid-run, the steps already finished are
known from the run's start, step time and decoding slots, so the count at ``now`` is

    outstanding - (min(now, run_end) - run_start) // run_step * run_decoding

(``run_decoding`` is 0 outside a run). :func:`outstanding_at` is that one rule, for one
server (ints) or a whole pool at once (NumPy arrays, ``rdu_sim.cluster.load_board``).
"""

from __future__ import annotations

from typing import Protocol, TypeAlias, overload

import numpy as np
from numpy.typing import NDArray

Column: TypeAlias = NDArray[np.int64]
"""A pool's column of counts (an alias even where NumPy's types are not read: mypyc's build)."""


@overload
def outstanding_at(
    now: int, outstanding: int, start: int, end: int, step: int, decoding: int
) -> np.int64: ...


@overload
def outstanding_at(
    now: int,
    outstanding: Column,
    start: Column,
    end: Column,
    step: Column,
    decoding: Column,
    out: Column | None = None,
) -> Column: ...


def outstanding_at(
    now: int,
    outstanding: int | Column,
    start: int | Column,
    end: int | Column,
    step: int | Column,
    decoding: int | Column,
    out: Column | None = None,
) -> np.int64 | Column:
    """Tokens still to process at ``now`` (see the module docstring), for one server (ints:
    a NumPy integer) or elementwise for a pool (arrays). ``out``: an array to compute a
    pool's counts in without allocating (a router reads the whole pool at every arrival; the
    five temporaries cost as much as the arithmetic)."""
    done = np.minimum(now, end, out=out)
    done = np.subtract(done, start, out=out)
    done = np.floor_divide(done, step, out=out)
    done = np.multiply(done, decoding, out=out)
    return np.subtract(outstanding, done, out=out)


class Counters(Protocol):
    """Where a server keeps its outstanding-work counters (written a change at a time: a
    cluster's rows live in NumPy arrays, where each field written costs a call)."""

    outstanding: int
    run_start: int
    run_end: int
    run_step: int
    run_decoding: int

    def add(self, tokens: int) -> None:
        """``outstanding += tokens``."""
        ...

    def begin_run(self, start: int, end: int, step: int, decoding: int) -> None:
        """A decode run of ``decoding`` slots from ``start`` to ``end``, ``step`` ps a step."""
        ...

    def end_run(self, emitted: int) -> None:
        """The run ended, its ``emitted`` tokens done."""
        ...


class Load:
    """One server's own counters (a cluster gives its servers rows of a shared board)."""

    __slots__ = ("outstanding", "run_decoding", "run_end", "run_start", "run_step")

    def __init__(self) -> None:
        self.outstanding = 0
        self.run_start = 0
        self.run_end = 0
        self.run_step = 1
        self.run_decoding = 0

    def add(self, tokens: int) -> None:
        """``outstanding += tokens``."""
        self.outstanding += tokens

    def begin_run(self, start: int, end: int, step: int, decoding: int) -> None:
        """A decode run starts (see :class:`Counters`)."""
        self.run_start, self.run_end, self.run_step, self.run_decoding = start, end, step, decoding

    def end_run(self, emitted: int) -> None:
        """The run ended, its ``emitted`` tokens done."""
        self.run_decoding = 0
        self.outstanding -= emitted
