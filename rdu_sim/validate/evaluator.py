"""Simulating a calibration's units at parameter values: through the evaluation cache, in this
process or a pool of worker processes (the same results either way).

Each unit is simulated with exactly the overrides that reach it (``Problem.unit_overrides``)
and its result goes to the cache (``rdu_sim.validate.evaluation_cache``) the moment it ends,
so a signal (``rdu_sim.interrupts.Interrupted``, raised in this process between two units,
inside one's simulation or out of the wait for a worker) leaves every finished unit in the
cache and none half-written. The workers start with Ctrl-C ignored (the terminal sends it to
the whole process group: the parent decides, and terminates them when it stops; a unit a
worker was simulating is lost, never half-kept). A unit's rdu-sim warnings come back with its
result and are said here (``sim_warnings.kept``), so a worker's print as this process's do.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdu_sim import interrupts
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.sim_warnings import RduSimWarning, kept, say
from rdu_sim.validate.calibration_problem import Problem
from rdu_sim.validate.evaluation_cache import EvaluationCache
from rdu_sim.validate.targets import Evaluated, Unit

Outcome = tuple[int, Evaluated | list[ConfigIssue], list[RduSimWarning]]
"""A unit's index, its result or the issues that stopped it, and the warnings it raised."""


def _run(task: tuple[int, Unit, list[list[str]]]) -> Outcome:
    """A unit's simulation in a worker process: its result, or the issues of the input
    error that stopped it (a ConfigError does not cross processes whole), and the rdu-sim
    warnings it raised, which the parent says (``sim_warnings.kept``: printed raw in the
    worker otherwise)."""
    index, unit, overrides = task
    result, found = kept(_simulated, unit, overrides)
    return index, result, found


def _simulated(unit: Unit, overrides: list[list[str]]) -> Evaluated | list[ConfigIssue]:
    """A unit's result, or the issues of the input error that stopped it."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.engine import EventBudgetError
    from rdu_sim.engine.shared_steps import sharing

    try:
        with sharing():  # units at the same values meet each other's steps (a sweep's rule)
            return unit.run(overrides)
    except ConfigError as exc:
        return list(exc.issues)
    except (CapacityError, EventBudgetError) as exc:
        return [ConfigIssue(unit.name, "", str(exc))]


def _quiet_worker(owner: tuple[int, str]) -> None:
    """A worker's start: Ctrl-C reaches the whole process group; the parent decides (it
    terminates its workers when it stops; killed outright, its workers leave:
    ``interrupts.leave_with``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupts.leave_with(owner)


@contextlib.contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    """SIGINT ignored while inside (in the main thread; elsewhere signals never arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class Evaluator:
    """Simulates units at parameter values, through the cache, in this process or a pool."""

    problem: Problem
    cache: EvaluationCache
    workers: int = 1
    simulated: int = 0
    cached: int = 0
    _pool: Any = field(default=None, repr=False)

    def evaluate(
        self, values: Sequence[float | None], units: Sequence[int]
    ) -> dict[int, Evaluated]:
        """Each of ``units``' results at ``values`` (None: that parameter not applied)."""
        found: dict[int, Evaluated] = {}
        todo: list[tuple[int, str, list[list[str]]]] = []
        for index in units:
            unit = self.problem.units[index]
            overrides = self.problem.unit_overrides(index, values)
            key = unit.key(overrides)
            hit = self.cache.get(key, unit.kind, unit.size)
            if hit is None:
                todo.append((index, key, overrides))
            else:
                found[index] = hit
                self.cached += 1
        keys = {index: key for index, key, _ in todo}
        for index, result in self._simulate(todo):
            unit = self.problem.units[index]
            with interrupts.deferred():  # kept and counted together: a stop says what is kept
                self.cache.put(keys[index], unit.kind, unit.name, result)  # kept as it ends
                self.simulated += 1
            found[index] = result
            interrupts.raise_lost()  # a stop a library swallowed: after the unit it landed in
        return found

    def _simulate(
        self, todo: list[tuple[int, str, list[list[str]]]]
    ) -> Iterator[tuple[int, Evaluated]]:
        """Each unit's result as it ends (an input error stops everything)."""
        tasks = [(index, self.problem.units[index], overrides) for index, _, overrides in todo]
        if self.workers <= 1 or len(tasks) <= 1:
            for index, unit, overrides in tasks:  # its warnings raised here, as they come
                yield _checked((index, _simulated(unit, overrides), []))
            return
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            # the workers start with Ctrl-C ignored (an ignored signal stays ignored across
            # exec), so the terminal's signal to the whole group cannot reach one before its
            # initializer runs
            with _ignoring_interrupts():
                self._pool = context.Pool(
                    self.workers, initializer=_quiet_worker, initargs=(interrupts.pool_owner(),)
                )
        for outcome in self._pool.imap_unordered(_run, tasks):
            yield _checked(outcome)

    def close(self) -> None:
        """Stop the workers at once (a unit still simulating is lost, never half-kept)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        self.cache.close()


def _checked(outcome: Outcome) -> tuple[int, Evaluated]:
    """A unit's result, its warnings said here (once each, as this process's own are)."""
    index, result, found = outcome
    say(found)
    if isinstance(result, list):
        raise ConfigError(result)
    return index, result
