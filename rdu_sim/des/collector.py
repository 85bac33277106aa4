"""Python's cyclic garbage collector paused while one step is compiled and simulated.

A step allocates hundreds of thousands of objects (the compiler's graphs, the engine's
events and processes) that nearly all die by reference counting when it ends. With the
collector running, every ~700 allocations start a young collection, which promotes what is
alive at that instant (the step's own graphs, half built) to the older generations; those
promotions then trigger full collections, each walking every object a long run keeps (its
Programs, step timings, requests). cluster-h100-lockstep made 43 full collections, ~25% of
its CPU time; with each step paused, 8. Paused, the collector sees only what outlives a
step; the cycles a step leaves (an environment and its processes) wait for the next young
collection after it. The results are the same either way (nothing runs in a finalizer).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside (as ``CountingEnvironment.run_until_pause`` does
    for its loop); its state is restored on leaving (already paused: left paused).
    ``run_until_pause`` keeps its own copy of these lines rather than entering this: it is
    compiled and called once a pause, many times in a kernel's simulation, where entering
    this would add a generator frame and two calls to each pause."""
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
