"""Compiled kernels and memory plans shared between runs in one process: sweep points whose
compiler inputs are equal.

A sweep point compiles its ~30 step shapes again although most swept knobs (the links, the
serving knobs, the arrival seed) are never read by the compiler. Inside :func:`sharing`
(``engine.shared_steps.sharing``, which a sweep's worker wraps every point in, enters it)
`Compiler` keeps what it computes per process, keyed by `view.compile_view`'s digest (every
scenario field the compiler can read) plus the call's own arguments (the shape, the slot
count planned for, the placement's HBM shares and KV tier). Outside it (a single run, a
test) every Compiler computes afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

MAX_SHARED = 512
"""Entries kept per table (least recently used dropped first): a DeepSeek-R1 step's kernels
are ~40 kB (the 20-point slice's peak RSS grew 12 MB for 290 of them), and a sweep's
worker needs ~30 at a time (the shapes of the compile group it is on:
``sweep.worker.sibling_batches``), so this keeps the last ~17 groups in ~20 MB."""

T = TypeVar("T")

_tables: dict[str, OrderedDict[Hashable, object]] = {}
_depth = 0
stats = {"hits": 0, "misses": 0}
"""Lookups answered from the tables and computed, since the process started."""


@contextmanager
def sharing() -> Iterator[None]:
    """Share compiled results while inside (re-entrant); the tables outlive the block."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def active() -> bool:
    """Whether compiled results are being shared now."""
    return _depth > 0


def shared(table: str, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, remembered in ``table`` under ``key`` while sharing (an error is
    raised, never remembered)."""
    if not active():
        return compute()
    memo = _tables.setdefault(table, OrderedDict())
    if key in memo:
        memo.move_to_end(key)
        stats["hits"] += 1
        return memo[key]  # type: ignore[return-value]
    value = compute()
    stats["misses"] += 1
    memo[key] = value
    if len(memo) > MAX_SHARED:
        memo.popitem(last=False)
    return value


def clear() -> None:
    """Forget every shared result (tests)."""
    _tables.clear()
    stats.update(hits=0, misses=0)
