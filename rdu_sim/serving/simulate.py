"""Run the serving simulation: requests in, per-request records out.

This wires the pieces without knowing where step times come from: ``step_cache`` wraps any
``shape -> StepCost`` function (the engine in production, a formula in tests).
"""

from __future__ import annotations

import numpy as np
import simpy

from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import ClosedLoop, open_loop
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import Progress, Server, ServerConfig
from rdu_sim.serving.step_cache import PS_PER_S, StepCache


def serve(
    requests: RequestSet,
    policy: KVPolicy,
    step_cache: StepCache,
    config: ServerConfig,
    progress: Progress | None = None,
) -> ServingRecords:
    """Simulate serving ``requests`` until every one completes; return the records."""
    if config.batch_slots < 1:
        raise ValueError(f"batch_slots must be >= 1, got {config.batch_slots}")
    env = simpy.Environment()
    records = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
    server = Server(env, config, policy, step_cache, records, progress)
    total = len(requests)
    if requests.arrival_s is None:
        ClosedLoop(env, server, requests.concurrency or config.batch_slots, total)
    else:
        arrival_ps = np.rint(requests.arrival_s * PS_PER_S).astype(np.int64)
        env.process(open_loop(env, server, arrival_ps))
    env.run()
    if server.completed != total:
        raise RuntimeError(
            f"serving stopped with {server.completed} of {total} requests completed (scheduler bug)"
        )
    return records
