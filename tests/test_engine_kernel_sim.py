"""The kernel simulation object and its environment: pausing at a layer boundary changes
nothing, the event limit is exact, and a run is driven boundary by boundary."""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from test_engine_programs import hardware, kernel, llama_like_program, stage

from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import CountingEnvironment, EventLimitError
from rdu_sim.engine.kernel_sim import KernelSim, tile_works

DEFAULT = hardware(zero=False)


def test_a_pause_returns_after_the_callback_and_the_rest_run_first_on_resume() -> None:
    env = CountingEnvironment(limit=100)
    log: list[str] = []
    first = env.timeout(1.0)
    first.callbacks += [
        lambda _e: log.append("a"),
        lambda _e: (log.append("b"), env.pause()),
        lambda _e: log.append("c"),
    ]
    later = env.timeout(1.0)  # same time, scheduled after: processed after all of first's
    later.callbacks.append(lambda _e: (log.append("d"), env.pause()))
    env.run_until_pause()
    assert log == ["a", "b"] and env.processed == 1 and env.now == 1.0
    env.run_until_pause()
    assert log == ["a", "b", "c", "d"] and env.processed == 2  # each event counted once
    with pytest.raises(simpy.core.EmptySchedule):
        env.run_until_pause()


def test_the_event_limit_is_exact_and_failures_still_crash_the_run() -> None:
    env = CountingEnvironment(limit=3)
    for delay in (1.0, 2.0, 3.0, 4.0):
        env.timeout(delay)
    with pytest.raises(EventLimitError):
        env.run_until_pause()
    assert env.processed == 3 and env.now == 3.0  # the fourth event was never processed
    failing = CountingEnvironment(limit=10)
    failing.event().fail(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        failing.run_until_pause()


def _sim(layers: int, **config: Any) -> KernelSim:
    p = llama_like_program(tp=4, batch=8, layers=24)
    k = next(k for k in p.kernels if k.looped)
    return KernelSim(
        k,
        DEFAULT,
        p.tp,
        EngineConfig(**config),
        tile_works(k, 8, DEFAULT.socket),
        layers=layers,
        looped=True,
        max_events=10**7,
        record=True,
    )


@pytest.mark.parametrize("all_sockets", [False, True])
def test_running_boundary_by_boundary_equals_running_straight_through(all_sockets: bool) -> None:
    stepped = _sim(24, all_sockets=all_sockets)
    seen = []
    while (boundary := stepped.run_to_boundary()) is not None:
        seen.append(boundary)
        assert stepped.events > 0 and stepped.safe >= len(seen) + 1
    a = stepped.finish()
    b = _sim(24, all_sockets=all_sockets).finish()
    assert len(seen) == 24 and tuple(seen) == a.boundaries == b.boundaries
    assert a.stats == b.stats and a.events == b.events
    assert a.recorder is not None and b.recorder is not None
    assert a.recorder.slices == b.recorder.slices and a.recorder.counters == b.recorder.counters
    times = [x.end_s for x in a.boundaries]
    assert times == sorted(times) and a.stats.time_s > times[-1]


def test_a_cut_below_the_safe_layer_count_is_refused() -> None:
    sim = _sim(24)
    for _ in range(5):
        sim.run_to_boundary()
    with pytest.raises(ValueError, match="cannot cut a run of 24 layers"):
        sim.cut(sim.safe - 1)
    n = sim.safe
    sim.cut(n)
    assert len(sim.finish().boundaries) == n


def test_an_unlooped_run_has_no_boundaries() -> None:
    k = kernel("k", [stage("s", hbm=1e8)], calls=3)
    works = tile_works(k, 8, DEFAULT.socket)
    sim = KernelSim(k, DEFAULT, 1, EngineConfig(), works, layers=3, looped=False, max_events=10**4)
    assert sim.run_to_boundary() is None
    run = sim.finish()
    assert run.boundaries == () and run.events == sim.events > 0
