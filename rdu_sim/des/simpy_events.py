"""The two operations on SimPy's own events and processes that SimPy has no public call for,
kept here so that no module outside ``rdu_sim.des`` touches SimPy's private attributes.

- :func:`scheduled`: an event that has its value and is queued ``delay`` from now at a
  chosen ``priority`` (SimPy's ``Timeout`` is always ``NORMAL``; a server's step end is
  ``LATE``, after every arrival at its instant).
- :func:`redirect`: a running process that waits on one event waits on another instead, as
  SimPy's own ``Interruption`` moves it, but without an event of its own (an arrival that
  cuts a decode run moves the run's end earlier).

Both work in ``simpy.Environment`` and in :class:`~rdu_sim.des.environment.CountingEnvironment`
(whose events keep SimPy's attribute names). A SimPy release that renames these attributes
breaks the tests of this module (tests/test_des_processes.py), not a run silently.
"""

from __future__ import annotations

from typing import Any

import simpy

from rdu_sim.des.environment import CountingEnvironment, Event


def scheduled(env: Any, delay: float, priority: int, value: Any = None) -> Any:
    """An event of ``env`` that succeeds with ``value`` ``delay`` from now at ``priority``
    (``simpy.events.URGENT``, ``NORMAL`` or a later one); its key is (now + delay,
    priority, the next event id), as every event's."""
    event: Any = Event(env) if isinstance(env, CountingEnvironment) else simpy.Event(env)
    event._ok = True
    event._value = value
    env.schedule(event, priority, delay)
    return event


def redirect(process: simpy.Process, old: Any, new: Any) -> None:
    """``process``, waiting on ``old``, waits on ``new`` instead: it resumes when ``new`` is
    processed (with its value) and no longer when ``old`` is."""
    if process._target is not old:
        raise ValueError(f"{process} waits on {process._target}, not on {old}")
    resume = process._resume
    old.callbacks.remove(resume)
    new.callbacks.append(resume)
    process._target = new
