"""Step results shared between runs in one process: sweep points whose engine inputs are equal.

A sweep over hardware and serving knobs compiles and simulates the same step again and
again: points that differ only in what the engine never reads (the serving knobs, the
request count, the arrival seed, the hardware file's name) ask for steps whose program,
socket, system and engine settings are equal, and so are their results (the engine is
deterministic). Inside :func:`sharing` (the sweep's worker wraps every point in it) the
SN40L engine's results are memoized per process (so per worker, on a local pool or on
Dask) under :func:`step_key`: a digest of exactly what ``Engine.simulate_step`` reads (the
program's shape, TP degree and kernels; the hardware's socket and system; the engine
settings). Anything that changes one of them changes the key, so a shared result is never
stale; a field outside them (the hardware's name, the placement's bookkeeping) does not.
Runs that record a trace are never shared (their records are the point), nor is anything
outside :func:`sharing`: a single run, a test, a notebook simulate as before. Inside it the
compiler shares its programs too (``compiler.shared_programs``: keyed by what it reads).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rdu_sim.compiler import shared_programs
from rdu_sim.compiler.program import Program
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine.timing import StepTiming

MAX_SHARED_STEPS = 4096
"""Results kept per process (least recently used dropped first): a DeepSeek-R1 step's
timing is a few kB, so this is tens of MB at most, while a 1,000-point sweep asks for
~35 shapes a point."""

_memo: OrderedDict[str, StepTiming] = OrderedDict()
_depth = 0
stats = {"hits": 0, "misses": 0}
"""Lookups answered from the memo and simulated, since the process started."""


@contextmanager
def sharing() -> Iterator[None]:
    """Share step results and compiled programs while inside (re-entrant); the memos
    outlive the block, so the next point a worker evaluates finds what the previous ones
    compiled and simulated."""
    global _depth
    _depth += 1
    try:
        with shared_programs.sharing():
            yield
    finally:
        _depth -= 1


def active() -> bool:
    """Whether results are being shared now."""
    return _depth > 0


def step_key(program: Program, hardware: HardwareConfig, config: EngineConfig) -> str:
    """A digest of everything ``Engine.simulate_step`` reads for ``program``."""
    text = "\n".join(
        (
            repr(program.shape),
            repr(program.tp),
            repr(program.kernels),
            hardware.socket.model_dump_json(),
            hardware.system.model_dump_json(),
            config.model_dump_json(),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def shared_step(key: str, simulate: Callable[[], StepTiming]) -> StepTiming:
    """The result under ``key``: remembered when sharing, else (or on a miss) simulated."""
    if not active():
        return simulate()
    found = _memo.get(key)
    if found is not None:
        _memo.move_to_end(key)
        stats["hits"] += 1
        return found
    timing = simulate()
    stats["misses"] += 1
    _memo[key] = timing
    if len(_memo) > MAX_SHARED_STEPS:
        _memo.popitem(last=False)
    return timing


def clear() -> None:
    """Forget every shared result, compiled programs too (tests)."""
    _memo.clear()
    shared_programs.clear()
    stats.update(hits=0, misses=0)
