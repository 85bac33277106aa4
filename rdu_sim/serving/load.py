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

from typing import Any, Protocol, TypeVar

import numpy as np

T = TypeVar("T", int, "np.ndarray[Any, Any]")


def outstanding_at(now: int, outstanding: T, start: T, end: T, step: T, decoding: T) -> T:
    """Tokens still to process at ``now`` (see the module docstring); works elementwise."""
    done = (np.minimum(now, end) - start) // step * decoding
    left: T = outstanding - done
    return left


class Counters(Protocol):
    """Where a server keeps its outstanding-work counters."""

    outstanding: int
    run_start: int
    run_end: int
    run_step: int
    run_decoding: int


class Load:
    """One server's own counters (a cluster gives its servers rows of a shared board)."""

    __slots__ = ("outstanding", "run_decoding", "run_end", "run_start", "run_step")

    def __init__(self) -> None:
        self.outstanding = 0
        self.run_start = 0
        self.run_end = 0
        self.run_step = 1
        self.run_decoding = 0
