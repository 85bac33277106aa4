"""Kernel launch through the AGCU, with and without kernel looping.

Every kernel call goes through the AGCU: program load, argument load, kernel
execute, and a host/AGCU synchronization at the kernel boundary [SN §IV-D].
Kernel looping [KL] turns L consecutive calls of the repeated decoder-layer
kernel into one call with a pipelined outer loop over the layers, so it pays
one load, one argument load and one sync instead of L of each.

The socket runs one kernel at a time (a fused decoder layer uses ~90% of the
PCUs and PMUs, SN §VI-C), so calls serialize on the AGCU, modelled as a
``simpy.Resource`` of capacity 1 held for the whole call.

The costs are not public; they are plain-seconds parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.stats import BusyTracker

Body = Callable[[int], Generator[Event, Any, Any]]
"""A kernel body: a generator function of the iteration (layer) index."""


class KernelLauncher:
    """Launches kernels on one socket and accounts the launch/sync overheads.

    Args:
        env: the SimPy environment.
        program_load: seconds to load the kernel's program (configuration).
        argument_load: seconds to load its arguments (addresses, scalars).
        sync: seconds of host/AGCU synchronization at each kernel boundary.
        name: label for reports.
    """

    def __init__(
        self,
        env: CountingEnvironment,
        program_load: float,
        argument_load: float,
        sync: float,
        name: str = "agcu",
    ) -> None:
        for field, value in (
            ("program_load", program_load),
            ("argument_load", argument_load),
            ("sync", sync),
        ):
            if value < 0:
                raise ValueError(f"{name}.{field} must be >= 0 s, got {value}")
        self.env = env
        self.name = name
        self.program_load = float(program_load)
        self.argument_load = float(argument_load)
        self.sync = float(sync)
        self.launches = 0
        self.syncs = 0
        self.iterations = 0
        self.overhead_time = 0.0
        self.execute_time = 0.0
        self.busy = BusyTracker(name)
        self._agcu = simpy.Resource(env, capacity=1)  # type: ignore[arg-type]

    @property
    def launch_time(self) -> float:
        """Seconds one launch costs before the body runs (program + arguments)."""
        return self.program_load + self.argument_load

    def call(self, body: Body | None = None, iterations: int = 1, looped: bool = True) -> Any:
        """Run ``body(i)`` for i in range(iterations) as kernel call(s).

        ``looped=True``: one call covering all iterations (load + arguments +
        body x L + one sync). ``looped=False``: L separate calls, each paying
        load + arguments + body + sync. The process returns its elapsed time.
        """
        if iterations < 0:
            raise ValueError(f"{self.name}: iterations must be >= 0, got {iterations}")
        return self.env.process(self._run(body, iterations, looped))

    def _run(self, body: Body | None, iterations: int, looped: bool) -> Generator[Any, Any, float]:
        t0 = float(self.env.now)
        with self._agcu.request() as grant:
            yield grant
            start = float(self.env.now)
            calls = 1 if looped else iterations
            per_call = iterations if looped else 1
            for c in range(calls):
                yield from self._overhead(self.launch_time)
                self.launches += 1
                for j in range(per_call):
                    t = float(self.env.now)
                    if body is not None:
                        yield from body(c * per_call + j)
                    self.execute_time += float(self.env.now) - t
                    self.iterations += 1
                yield from self._overhead(self.sync)
                self.syncs += 1
            self.busy.add(start, float(self.env.now))
        return float(self.env.now) - t0

    def _overhead(self, seconds: float) -> Generator[Event, Any, None]:
        if seconds > 0:
            yield self.env.timeout(seconds)
        self.overhead_time += seconds
