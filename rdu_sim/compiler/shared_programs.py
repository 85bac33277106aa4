"""Compiled kernels and memory plans shared between runs in one process: sweep points whose
compiler inputs are equal; and the memo and the sharing scope the engine's shared steps use.

A sweep point compiles its ~30 step shapes again although most swept knobs (the links, the
serving knobs, the arrival seed) are never read by the compiler. Inside :func:`sharing`
(``api.share_steps``, which a sweep's worker wraps every point in) `Compiler` keeps what it
computes per process, keyed by `view.compile_view`'s digest (every scenario field the
compiler can read) plus the call's own arguments (the shape, the slot count planned for,
the placement's HBM shares and KV tier). Outside it (a single run, a test) every Compiler
computes afresh.

The scope is the caller's own (a ``contextvars`` variable: a thread, an asyncio task): a
thread that never entered :func:`sharing` computes afresh although another thread is inside
it. The memos are per process, shared by every thread inside a block, each lookup and
insertion under a lock (the computing is not: two threads may compute one key, the same
value).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_depth: ContextVar[int] = ContextVar("rdu_sim_sharing_depth", default=0)
"""How many :func:`sharing` blocks the current thread (or task) is inside."""


@contextmanager
def sharing() -> Iterator[None]:
    """Share compiled programs and step results while inside (re-entrant); the memos
    outlive the block, so the next point a worker evaluates finds what the previous ones
    computed. Only the caller's thread (or task) shares (module docstring)."""
    token = _depth.set(_depth.get() + 1)
    try:
        yield
    finally:
        _depth.reset(token)


def active() -> bool:
    """Whether results are being shared now, in the caller's thread (or task)."""
    return _depth.get() > 0


class Memo(Generic[T]):
    """Results by key, kept per process while :func:`sharing` (least recently used dropped
    beyond ``size``); outside it every lookup computes. An error is raised, never kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()  # threads sharing at once: no lookup sees a half-trim
        self.stats = {"hits": 0, "misses": 0}
        """Lookups answered from the memo and computed, since the process started."""

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, remembered under ``key`` while sharing."""
        if not active():
            return compute()
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.stats["hits"] += 1
                return self._items[key]
        value = compute()  # (not under the lock: a step takes milliseconds)
        with self._lock:
            self.stats["misses"] += 1
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._items.clear()
            self.stats.update(hits=0, misses=0)


MAX_SHARED = 512
"""Compiled results kept per process: a DeepSeek-R1 step's kernels are ~40 kB (the 20-point
slice's peak RSS grew 12 MB for 290 of them), and a sweep's worker needs ~33 at a time (one
compile group's shapes, plans and capacity: ``sweep.worker.sibling_batches``), so this
keeps the last ~15 groups in ~20 MB."""

_compiled: Memo[Any] = Memo(MAX_SHARED)
stats = _compiled.stats
"""Compiled results shared and computed, since the process started."""


def shared(table: str, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, remembered under (``table``, ``key``) while sharing."""
    value: T = _compiled.get((table, key), compute)
    return value


def clear() -> None:
    """Forget every shared compiled result (tests)."""
    _compiled.clear()
