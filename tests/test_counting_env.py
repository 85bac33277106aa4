"""The engine's event loop (des.environment) processes events in SimPy's own order.

CountingEnvironment and its Event are compiled classes of their own, not SimPy's, that keep
the events due now in a queue beside the heap; every result of the engine rests on them
taking events in the order ``simpy.Environment`` would (time, priority, event id). Random
process networks with many same-time events (zero timeouts, succeeded events, SimPy's
conditions and ``all_of``, a SimPy ``Resource``, process ends, spawns) are run on both and
must log the same steps in the same order; so must the same networks with their processes
started by ``CountingEnvironment.start`` (the engine's stage processes) instead of
``env.process``, run by ``step`` one event at a time, or run to a time first.
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy
from simpy.core import EmptySchedule

from rdu_sim.des.environment import CountingEnvironment, EventLimitError

DELAYS = (0.0, 0.0, 0.5, 1.0, 1.5)  # few distinct delays: many events share an instant


def _network(
    env: simpy.Environment, seed: int, log: list[tuple[float, str]], quick: bool = False
) -> None:
    """Processes that time out, signal each other, wait on conditions and spawn children
    (started by ``CountingEnvironment.start`` if ``quick``)."""
    rng = np.random.default_rng(seed)
    spawn = env.start if quick and isinstance(env, CountingEnvironment) else env.process
    signals = [env.event() for _ in range(6)]
    desk = simpy.Resource(env, capacity=1)  # type: ignore[arg-type]

    def worker(name: str, steps: int, depth: int) -> Generator[simpy.Event, Any, None]:
        for step in range(steps):
            choice = int(rng.integers(6))
            if choice <= 1:
                yield env.timeout(float(rng.choice(DELAYS)))
            elif choice == 2:
                signal = signals[int(rng.integers(len(signals)))]
                if not signal.triggered:
                    signal.succeed(name)
                elif signal.processed:  # its value comes straight back, scheduling nothing
                    yield signal
                yield env.timeout(0)
            elif choice == 3:
                a, b = (
                    env.timeout(float(rng.choice(DELAYS))),
                    env.timeout(float(rng.choice(DELAYS))),
                )
                pick = int(rng.integers(3))
                yield (a & b) if pick == 0 else (a | b) if pick == 1 else env.all_of([a, b])
            elif choice == 4 and depth < 2:
                yield spawn(worker(f"{name}.{step}", int(rng.integers(1, 4)), depth + 1))
            elif choice == 4:  # a SimPy resource's requests wait in this environment too
                with desk.request() as turn:
                    yield turn
                    yield env.timeout(float(rng.choice(DELAYS)))
            else:
                waiter = env.event()
                waiter.callbacks.append(
                    lambda _e, n=name, s=step: log.append((env.now, f"cb {n} {s}"))
                )
                waiter.succeed()
                yield waiter
            log.append((float(env.now), f"{name} {step}"))

    for i in range(8):
        spawn(worker(f"w{i}", int(rng.integers(3, 9)), 0))
    for i, signal in enumerate(signals):
        signal.callbacks.append(
            lambda e, i=i: log.append((float(env.now), f"signal {i} {e.value}"))
        )


def _simpy_log(seed: int) -> list[tuple[float, str]]:
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
    _network(env, seed, log)
    env.run()
    return log


def _counting_log(
    seed: int, quick: bool = False, how: str = "loop"
) -> tuple[list[tuple[float, str]], int]:
    """The network run by ``run_until_pause`` (``how`` "loop"), ``step`` ("step"), or
    ``run`` to time 1.0 and then to the end ("run")."""
    env = CountingEnvironment(limit=10**6)
    log: list[tuple[float, str]] = []
    _network(env, seed, log, quick)
    if how == "run":
        env.run(until=1.0)
        assert env.now == 1.0
        log.append((env.now, "stopped"))
        env.run()
        return log, env.processed
    while True:
        try:
            if how == "step":
                env.step()
            else:
                env.run_until_pause()
        except EmptySchedule:
            return log, env.processed


@pytest.mark.parametrize("seed", range(40))
def test_same_order_as_simpy(seed: int) -> None:
    expected = _simpy_log(seed)
    got, processed = _counting_log(seed)
    assert len(expected) > 20 and processed > len(expected) // 2
    assert got == expected


@pytest.mark.parametrize("seed", range(20))
def test_step_and_run_until_take_the_same_order_as_simpy(seed: int) -> None:
    """``step`` (one event at a time) and ``run(until=...)`` match SimPy's own, which stops
    before the events due at that time (its stop event is URGENT)."""
    expected = _simpy_log(seed)
    assert _counting_log(seed, how="step")[0] == expected
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
    _network(env, seed, log)
    env.run(until=1.0)
    log.append((env.now, "stopped"))
    env.run()
    assert _counting_log(seed, how="run")[0] == log


def test_events_are_queued_in_key_order() -> None:
    """``Event.__lt__`` orders queued events by (time, priority, id), as SimPy's tuples."""
    rng = np.random.default_rng(7)
    env = CountingEnvironment()
    events = []
    for _ in range(300):
        event = env.event()
        event._at = float(rng.choice(DELAYS))
        event._priority = int(rng.integers(2))
        event._eid = int(rng.integers(50))
        events.append(event)
    keys = {id(e): (e._at, e._priority, e._eid) for e in events}
    for a in events[:50]:
        for b in events:
            assert (a < b) == (keys[id(a)] < keys[id(b)])


@pytest.mark.parametrize("seed", range(40))
def test_started_processes_run_as_simpy_processes(seed: int) -> None:
    """``start`` draws the same event ids, at the same priorities, as ``env.process``: the
    same steps in the same order, and the same number of events processed."""
    expected = _simpy_log(seed)
    got, processed = _counting_log(seed, quick=True)
    assert got == expected
    assert processed == _counting_log(seed)[1]


def test_a_started_process_returns_its_value_and_raises_its_error() -> None:
    env = CountingEnvironment(limit=100)

    def child() -> Generator[simpy.Event, Any, str]:
        yield env.timeout(1.0)
        return "done"

    def parent(log: list[Any]) -> Generator[simpy.Event, Any, None]:
        log.append((yield env.start(child())))
        raise ValueError("parent failed")

    log: list[Any] = []
    env.start(parent(log))
    with pytest.raises(ValueError, match="parent failed"):
        env.run_until_pause()
    assert log == ["done"] and env.now == 1.0

    failing = CountingEnvironment(limit=100)
    broken = failing.event()

    def waiter() -> Generator[simpy.Event, Any, None]:
        yield broken

    failing.start(waiter())
    failing.timeout(0.5).callbacks.append(lambda _e: broken.fail(KeyError("lost")))
    with pytest.raises(KeyError, match="lost"):  # the failed event it waited on ends the run
        failing.run_until_pause()
    assert failing.now == 0.5


def test_the_limit_is_exact() -> None:
    """Exactly ``limit`` events are processed before the error."""
    _, processed = _counting_log(3)
    env = CountingEnvironment(limit=processed - 1)
    _network(env, 3, [])
    with pytest.raises(EventLimitError):
        while True:
            env.run_until_pause()
    assert env.processed == processed - 1


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_paused_while_events_run(enabled: bool) -> None:
    """The loop runs without cyclic collection and leaves the collector as it found it,
    also when it stops by an error."""
    seen: list[bool] = []
    env = CountingEnvironment(limit=3)
    for _ in range(5):
        env.timeout(1.0).callbacks.append(lambda _ev: seen.append(gc.isenabled()))
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(EventLimitError):
            env.run_until_pause()
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False, False]


def test_peek_sees_the_events_due_now() -> None:
    """SimPy's ``peek`` reads only the heap; the events due now wait beside it."""
    env = CountingEnvironment(limit=10)
    assert env.peek() == simpy.core.Infinity
    env.timeout(2.0)
    assert env.peek() == 2.0
    env.timeout(0.0)
    assert env.peek() == 0.0 and sorted(env.scheduled_times()) == [0.0, 2.0]


def test_run_until_a_failed_event_raises_its_error_as_simpy() -> None:
    """SimPy's ``run(until=event)`` raises the error of an ``until`` that fails."""
    for env in (simpy.Environment(), CountingEnvironment()):
        until = env.event()
        env.timeout(1.0).callbacks.append(lambda _e, u=until: u.fail(KeyError("boom")))
        with pytest.raises(KeyError, match="boom"):
            env.run(until=until)
        assert env.now == 1.0


def test_peek_after_a_pause_is_now_until_its_callbacks_have_run() -> None:
    """``run(until=t)`` pauses inside the stop event's callbacks; the rest run at the next
    ``step``, so the environment is not empty until then (SimPy queues the stop again)."""
    env = CountingEnvironment()
    seen: list[float] = []
    env.timeout(2.0).callbacks.append(lambda _e: seen.append(env.now))
    env.run(until=1.0)
    assert env.peek() == 1.0
    while env.peek() < simpy.core.Infinity:
        env.step()
    assert seen == [2.0] and env.now == 2.0


def test_what_the_queue_cannot_follow_is_refused() -> None:
    """A delay into the past would break the FIFO's key order; the limit is a keyword (the
    first positional argument of ``simpy.Environment`` is its start time)."""
    env = CountingEnvironment()
    with pytest.raises(ValueError, match="Negative delay"):
        env.schedule(env.event(), delay=-1.0)
    with pytest.raises(TypeError):
        CountingEnvironment(5)  # type: ignore[misc]
    pending = env.event()
    with pytest.raises(AttributeError):
        _ = pending.ok
