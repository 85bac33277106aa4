"""des's serving loop (``des.timeline.Timeline``) keeps ``des.order``'s same-instant order.

Random networks of drivers (resumed at LATE times, idling until woken, their resumptions
moved) and SimPy processes (timeouts, events succeeded) run on a Timeline and, with every
driver a SimPy process that waits on ``scheduled`` LATE events, on ``simpy.Environment``,
the oracle: the logs must be the same. Then the order rule itself on a hand-made instant,
and what the loop refuses.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from rdu_sim.des import timeline as timeline_module
from rdu_sim.des.order import LATE, NORMAL
from rdu_sim.des.simpy_events import redirect, scheduled
from rdu_sim.des.timeline import IDLE, Timeline

DELAYS = (0, 0, 5, 10)  # picoseconds; few distinct: many entries share an instant


class _World:
    """A random network, run on a Timeline (``oracle`` False) or on SimPy's environment."""

    def __init__(self, seed: int, oracle: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.oracle = oracle
        self.env: Any = simpy.Environment() if oracle else Timeline()
        self.log: list[tuple[int, str]] = []
        self.drivers = 5
        self.idle = [False] * self.drivers
        self.waits: list[Any] = [None] * self.drivers  # SimPy: what each driver waits on
        self.due: list[int | None] = [None] * self.drivers  # when a sleeping one resumes
        self.handles: list[Any] = []
        for name in range(self.drivers):
            work = self._driver(name, int(self.rng.integers(4, 12)))
            if oracle:
                self.handles.append(self.env.process(self._as_process(work, name)))
            else:
                self.handles.append(self.env.start(work, LATE))
        for name in range(3):
            self.env.process(self._helper(name))

    def _driver(self, name: int, steps: int) -> Generator[Any, None, None]:
        rng, env = self.rng, self.env
        for step in range(steps):
            self.log.append((int(env.now), f"d{name} {step}"))
            choice = int(rng.integers(5))
            other = int(rng.integers(self.drivers))
            if choice == 1 and other != name:
                self._wake(other)
            elif choice == 2 and other != name and self.due[other] is not None:
                self._move(other, int(env.now) + int(rng.choice(DELAYS)))
            if choice == 3:
                self.idle[name] = True
                self.due[name] = None
                yield IDLE
                continue
            at = int(env.now) + int(rng.choice(DELAYS))
            self.due[name] = at
            yield at
            self.due[name] = None
        self.log.append((int(env.now), f"d{name} ends"))

    def _as_process(self, work: Generator[Any, None, None], name: int) -> Generator[Any, Any, None]:
        """A driver as the oracle runs it: a SimPy process waiting on LATE events."""
        for wants in work:
            if wants is IDLE:
                self.waits[name] = self.env.event()
            else:
                self.waits[name] = scheduled(self.env, wants - int(self.env.now), LATE)
            yield self.waits[name]

    def _wake(self, who: int) -> None:
        if not self.idle[who]:
            return
        self.idle[who] = False
        self.log.append((int(self.env.now), f"wake d{who}"))
        if self.oracle:
            self.waits[who].succeed()
        else:
            self.env.wake(self.handles[who])

    def _move(self, who: int, at: int) -> None:
        self.log.append((int(self.env.now), f"move d{who} to {at}"))
        self.due[who] = at
        if self.oracle:
            new = scheduled(self.env, at - int(self.env.now), LATE)
            redirect(self.handles[who], self.waits[who], new)
            self.waits[who] = new
        else:
            self.env.move(self.handles[who], at)

    def _helper(self, name: int) -> Generator[Any, Any, None]:
        """A SimPy process on either loop: timeouts, an event it succeeds, wakes."""
        rng, env = self.rng, self.env
        for step in range(int(rng.integers(3, 8))):
            if rng.random() < 0.3:
                signal = env.event()
                signal.callbacks.append(
                    lambda _e, s=step: self.log.append((int(env.now), f"h{name} signal {s}"))
                )
                signal.succeed()
                yield signal
            else:
                yield env.timeout(int(rng.choice(DELAYS)))
            self.log.append((int(env.now), f"h{name} {step}"))
            self._wake(int(rng.integers(self.drivers)))

    def run(self) -> tuple[list[tuple[int, str]], int]:
        self.env.run()
        return self.log, int(self.env.now)


@pytest.mark.parametrize("seed", range(40))
def test_drivers_and_simpy_processes_run_in_simpys_order(seed: int) -> None:
    expected = _World(seed, oracle=True).run()
    got = _World(seed, oracle=False).run()
    assert got == expected
    assert len(expected[0]) > 20


def test_the_random_networks_wake_and_move_drivers() -> None:
    """The networks above do wake idle drivers and move sleeping ones (else those paths
    would go untested)."""
    text = [what for seed in range(40) for _, what in _World(seed, oracle=True).run()[0]]
    assert sum(what.startswith("wake") for what in text) > 20
    assert sum(what.startswith("move") for what in text) > 20


def test_an_instant_is_ordered_as_simpy_orders_it() -> None:
    """Drivers start in order (URGENT), then at an instant: arrivals (a NORMAL driver started
    after the servers), wakes (NORMAL), step ends (LATE) in the order queued; a moved step
    end leaves a stale entry the clock still passes."""
    log: list[tuple[int, str]] = []
    line = Timeline()

    def server(name: str, ends: list[int]) -> Generator[Any, None, None]:
        yield 0  # the settle at time 0
        for end in ends:
            log.append((line.now, name))
            yield end
        while True:
            log.append((line.now, name))
            yield IDLE

    a = line.start(server("a", [10, 20]), LATE, endless=True)
    b = line.start(server("b", [10]), LATE, endless=True)

    def arrivals() -> Generator[int, None, None]:
        for request, at in enumerate([0, 10, 10, 15, 15]):
            if at > line.now:
                yield at
            log.append((line.now, f"arrival {request}"))
            if request == 3:
                line.move(a, 15)
            if request == 4:
                line.wake(b)

    line.start(arrivals(), NORMAL)
    assert line.run() == 20
    assert log == [
        (0, "arrival 0"),
        (0, "a"),
        (0, "b"),
        (10, "arrival 1"),
        (10, "arrival 2"),
        (10, "a"),
        (10, "b"),
        (15, "arrival 3"),
        (15, "arrival 4"),
        (15, "b"),  # woken (NORMAL) at 15: before a step end there queued earlier
        (15, "a"),  # its end moved from 20 to 15; the entry at 20 is stale
    ]


@pytest.mark.parametrize(
    ("yields", "endless", "error"),
    [
        ([np.int64(10)], False, TypeError),  # a NumPy integer is not a time the loop keeps
        ([1.5], False, TypeError),  # nor a float
        ([10], True, RuntimeError),  # a driver that must serve until the end ended
    ],
)
def test_the_loop_refuses_what_would_lose_a_driver(
    yields: list[Any], endless: bool, error: type[Exception]
) -> None:
    line = Timeline()

    def driver() -> Generator[Any, None, None]:
        yield from yields

    line.start(driver(), LATE, endless=endless)
    with pytest.raises(error):
        line.run()


def test_a_driver_may_end_and_simpy_delays_are_picoseconds() -> None:
    line = Timeline()

    def driver() -> Generator[int, None, None]:
        yield 2**62  # far beyond a float's exact integers
        yield 2**62 + 1

    line.start(driver(), LATE)
    assert line.run() == 2**62 + 1
    with pytest.raises(ValueError, match="int >= 0 ps"):
        line.timeout(0.5)  # type: ignore[arg-type]


def test_the_loop_refuses_more_queuings_than_its_keys_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queuing counts past ``SEQ_BITS`` would spill into the time and reorder entries."""
    monkeypatch.setattr(timeline_module, "SEQ_BITS", 2)
    line = Timeline()
    for _ in range(3):  # queuings 1, 2, 3 fit in two bits
        line.timeout(1)
    with pytest.raises(OverflowError, match="2\\*\\*2 queuings"):
        line.timeout(1)


def test_peek_is_the_next_entry_s_time_a_stale_one_included() -> None:
    timeline = Timeline()
    assert timeline.peek() is None
    seen: list[int | None] = []

    def driver() -> Generator[Any, None, None]:
        seen.append(timeline.peek())  # the SimPy event at 70 ps
        yield 50
        seen.append(timeline.peek())
        yield 100

    who = timeline.start(driver(), NORMAL)
    timeline.timeout(70)
    assert timeline.peek() == 0  # the driver's start
    timeline.run()
    assert seen == [70, 70] and timeline.peek() is None
    timeline.move(who, 5)  # an ended driver's entry: stale, skipped, but due first
    assert timeline.peek() == 5
