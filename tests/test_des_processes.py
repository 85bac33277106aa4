"""SimPy's processes that fail, are interrupted or wait on conditions, run in des's event loop
(``CountingEnvironment``) exactly as in ``simpy.Environment``, the oracle; and the two
operations on SimPy's events that only ``rdu_sim.des`` performs (``des.simpy_events``).

Each scenario is run in both environments and must log the same steps at the same times,
end at the same time and end the same way (the same error, or none).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
import simpy
from simpy.events import NORMAL, URGENT

import rdu_sim
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.des.simpy_events import redirect, scheduled

Log = list[tuple[float, str]]
Scenario = Callable[[Any, Log], None]
LATE = 2


def _failing_child_caught(env: Any, log: Log) -> None:
    """A child fails; its parent catches the error it is thrown; a sibling waiting on a
    condition over the failed child sees the condition fail too."""

    def child() -> Generator[Any, Any, None]:
        yield env.timeout(1)
        log.append((env.now, "child fails"))
        raise ValueError("child broke")

    def parent(proc: Any) -> Generator[Any, Any, None]:
        try:
            yield proc
        except ValueError as error:
            log.append((env.now, f"parent caught {error}"))
        yield env.timeout(2)
        log.append((env.now, "parent done"))

    def sibling(proc: Any) -> Generator[Any, Any, None]:
        try:
            yield proc & env.timeout(5)
        except ValueError as error:
            log.append((env.now, f"condition failed: {error}"))

    proc = env.process(child())
    env.process(parent(proc))
    env.process(sibling(proc))


def _failing_uncaught(env: Any, log: Log) -> None:
    """A process fails and nobody waits on it: the run ends with its error at that time."""

    def worker() -> Generator[Any, Any, None]:
        yield env.timeout(3)
        log.append((env.now, "about to fail"))
        raise KeyError("nobody listens")

    def bystander() -> Generator[Any, Any, None]:
        for _ in range(5):
            yield env.timeout(1)
            log.append((env.now, "tick"))

    env.process(worker())
    env.process(bystander())


def _interrupts(env: Any, log: Log) -> None:
    """A sleeper is interrupted twice (handled, then again while it waits on a condition);
    the interrupting process sees who is active; an interrupt of a dead process is refused."""

    def sleeper() -> Generator[Any, Any, str]:
        for round_ in range(3):
            try:
                if round_ == 1:
                    yield env.timeout(10) | env.timeout(20)
                else:
                    yield env.timeout(10)
                log.append((env.now, f"slept {round_}"))
            except simpy.Interrupt as interrupt:
                log.append((env.now, f"interrupted {round_} by {interrupt.cause}"))
        return "rested"

    def alarm(target: Any) -> Generator[Any, Any, None]:
        yield env.timeout(2)
        target.interrupt("alarm")
        log.append((env.now, f"active is alarm: {env.active_process is me[0]}"))
        yield env.timeout(0)
        target.interrupt("again")
        value = yield target
        log.append((env.now, f"target returned {value}"))
        try:
            target.interrupt("too late")
        except RuntimeError as error:
            log.append((env.now, f"refused: {error}"))

    target = env.process(sleeper())
    me = [env.process(alarm(target))]


def _conditions(env: Any, log: Log) -> None:
    """All-of and any-of over timeouts, events and a process, with values read back, and a
    condition over events already processed."""

    def child() -> Generator[Any, Any, int]:
        yield env.timeout(4)
        return 7

    def watcher() -> Generator[Any, Any, None]:
        a, b = env.timeout(1, value="a"), env.timeout(3, value="b")
        got = yield a & b
        log.append((env.now, f"all {sorted(v for v in got.values())}"))
        signal = env.event()
        proc = env.process(child())
        env.timeout(2).callbacks.append(lambda _e: signal.succeed("signal"))
        got = yield signal | proc
        log.append((env.now, f"any {list(got.values())}"))
        got = yield env.all_of([proc, signal])
        log.append((env.now, f"all of {list(got.values())}"))
        got = yield signal & a  # both long processed: fires now
        log.append((env.now, f"processed ones {list(got.values())}"))
        got = yield env.any_of([])
        log.append((env.now, f"empty any {dict(got)}"))

    env.process(watcher())


SCENARIOS: dict[str, Scenario] = {
    "failing child caught": _failing_child_caught,
    "failing uncaught": _failing_uncaught,
    "interrupts": _interrupts,
    "conditions": _conditions,
}


def _run(env: Any, scenario: Scenario) -> tuple[Log, float, str]:
    log: Log = []
    scenario(env, log)
    try:
        env.run()
        ending = "ran dry"
    except Exception as error:  # the run ends with a process's error, as SimPy's does
        ending = f"{type(error).__name__}: {error} (cause {type(error.__cause__).__name__})"
    # a process's name in a message carries its address: the same text without it
    log = [(t, re.sub(r" at 0x[0-9a-f]+", "", what)) for t, what in log]
    return [(float(t), what) for t, what in log], float(env.now), ending


@pytest.mark.parametrize("name", SCENARIOS)
def test_processes_fail_interrupt_and_wait_as_in_simpy(name: str) -> None:
    expected = _run(simpy.Environment(), SCENARIOS[name])
    got = _run(CountingEnvironment(limit=10_000), SCENARIOS[name])
    assert got == expected
    assert len(expected[0]) >= 3


def test_the_scenarios_reach_what_they_test() -> None:
    """The oracle's logs show each mechanism happened (a scenario that tests nothing fails)."""
    logs = {name: _run(simpy.Environment(), scenario) for name, scenario in SCENARIOS.items()}
    assert (1.0, "parent caught child broke") in logs["failing child caught"][0]
    assert (1.0, "condition failed: child broke") in logs["failing child caught"][0]
    assert logs["failing uncaught"][1:] == (3.0, "KeyError: 'nobody listens' (cause KeyError)")
    interrupts = [what for _, what in logs["interrupts"][0]]
    assert "interrupted 0 by alarm" in interrupts and "interrupted 1 by again" in interrupts
    assert "active is alarm: True" in interrupts and "target returned rested" in interrupts
    assert any(what.startswith("refused:") for what in interrupts)
    assert (5.0, "any ['signal']") in logs["conditions"][0]
    assert (7.0, "all of [7, 'signal']") in logs["conditions"][0]


@pytest.mark.parametrize("make", [simpy.Environment, CountingEnvironment])
def test_scheduled_takes_its_place_by_priority(make: Callable[[], Any]) -> None:
    """``scheduled`` events at one instant run by priority, then in the order made; a
    process waiting on one gets its value."""
    env = make()
    order: list[str] = []
    for name, priority in (("late", LATE), ("normal", NORMAL), ("urgent", URGENT)):
        event = scheduled(env, 5, priority, value=name)
        event.callbacks.append(lambda e: order.append(e.value))
    env.timeout(5).callbacks.append(lambda _e: order.append("timeout"))
    second_late = scheduled(env, 5, LATE, value="late 2")
    second_late.callbacks.append(lambda e: order.append(e.value))

    def waiter() -> Generator[Any, Any, None]:
        order.append((yield scheduled(env, 1, LATE, value="woken")))

    env.process(waiter())
    env.run()
    assert order == ["woken", "urgent", "normal", "timeout", "late", "late 2"]
    assert env.now == 5


def test_redirect_moves_a_waiting_process_to_another_event() -> None:
    """The process resumes on the new event, at its time and with its value; the old event
    still fires (the clock passes it) with no one resuming."""
    env = simpy.Environment()
    log: Log = []

    def sleeper() -> Generator[Any, Any, None]:
        value = yield first
        log.append((env.now, f"woke with {value}"))

    first = scheduled(env, 10, LATE, value="first")
    first.callbacks.append(lambda _e: log.append((env.now, "first fired")))
    proc = env.process(sleeper())

    def cutter() -> Generator[Any, Any, None]:
        yield env.timeout(2)
        earlier = scheduled(env, 3, LATE, value="earlier")
        redirect(proc, first, earlier)
        with pytest.raises(ValueError, match="not on"):
            redirect(proc, first, earlier)  # it no longer waits on ``first``

    env.process(cutter())
    env.run()
    assert log == [(5, "woke with earlier"), (10, "first fired")]


def test_no_module_outside_des_touches_simpys_private_attributes() -> None:
    """SimPy's private protocol (what a release may change) is used only in rdu_sim/des/."""
    root = Path(rdu_sim.__file__).parent
    # an attribute, or its name in quotes (getattr): not any name ending in one (by_target)
    private = re.compile(
        r"\._(ok|value|resume|target|active_proc|defused)\b"
        r"|[\"']_(ok|value|resume|target|active_proc|defused)[\"']"
    )
    hits = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "des"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert hits == []
    assert private.search((root / "des" / "simpy_events.py").read_text())  # the rule can fire
