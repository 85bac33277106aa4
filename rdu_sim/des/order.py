"""The same-instant order of every simulated event, stated once for both of des's loops.

An event is queued under the key (time, priority, id) and events are processed in key order:

- earlier time first;
- at one time, lower priority first: ``URGENT`` (a process starting, an interrupt), then
  ``NORMAL`` (a timeout, an event succeeded or failed, an arrival, a wake), then ``LATE``
  (a serving step's end: after everything else that happens at its instant, so a decision
  sees every arrival and hand-off of that instant);
- at one time and priority, in the order they were queued (the id counts queuings).

This is SimPy's order (``simpy.Environment`` keys its heap by (time, priority, event id),
its priorities ``URGENT`` 0 and ``NORMAL`` 1), so SimPy's own processes, resources and
conditions run unchanged in des's loops, and ``simpy.Environment`` is the oracle the tests
compare against (tests/test_counting_env.py, tests/test_des_processes.py,
tests/test_cluster_loop.py). The kernels' loop (``des.environment``, float seconds) and the
serving loop (``des.timeline``, integer picoseconds) both key their events this way.
"""

from __future__ import annotations

from typing import Final

from simpy import events

URGENT: Final[int] = events.URGENT
NORMAL: Final[int] = events.NORMAL
LATE: Final[int] = 2
