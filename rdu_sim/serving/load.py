"""A server's load as a router can know it: the tokens of the requests it holds, exact at any
instant.

A request counts its prompt plus the output tokens generated so far, from the instant it is
queued here until it leaves (completed, or its KV cache sent on): its prompt tokens still to
prefill, and the KV cache it holds once admitted (the prefilled prompt, a prefix cache's
blocks included, and its tokens so far). That is what a production router sees, not what
it would have to guess: NVIDIA Dynamo's KV router costs a worker by its active prefill
tokens plus its active KV blocks (docs.nvidia.com/dynamo, router "Routing Concepts": prefill
blocks + decode blocks, each tracked from the tokens routed and generated); llm-d's
scheduler scores queue depth and KV-cache utilisation. The output lengths still to come are
not counted: no router knows them before the tokens are generated. (A queued prompt counts
once, as prefill work: its KV is not held until it takes a slot. The tokens are the
sequences', not what a KV policy keeps of them: a router counts what it sent and what
streamed back.)

A batched decode run's tokens are settled when the run ends. Mid-run, the steps already
finished are known from the run's start, step time and decoding slots, so the count at
``now`` is

    outstanding + (min(now, run_end) - run_start) // run_step * run_decoding

(``run_decoding`` is 0 outside a run). :func:`outstanding_at` is that one rule, for one
server (ints) or a whole pool at once (NumPy arrays, ``rdu_sim.cluster.load_board``); the
scheduler's accounting of what adds and what leaves is the other half
(``Scheduler.enqueue``, ``Scheduler.leaves``).
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
    """The tokens of the requests held at ``now`` (see the module docstring), for one server
    (ints: a NumPy integer) or elementwise for a pool (arrays). ``out``: an array to compute a
    pool's counts in without allocating (a router reads the whole pool at every arrival; the
    five temporaries cost as much as the arithmetic)."""
    done = np.minimum(now, end, out=out)
    done = np.subtract(done, start, out=out)
    done = np.floor_divide(done, step, out=out)
    done = np.multiply(done, decoding, out=out)
    return np.add(outstanding, done, out=out)


class Counters(Protocol):
    """Where a server keeps its load counters (written a change at a time: a
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
        """The run ended, its ``emitted`` tokens generated (``outstanding += emitted``)."""
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
        """The run ended, its ``emitted`` tokens generated."""
        self.run_decoding = 0
        self.outstanding += emitted
