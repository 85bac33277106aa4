"""Run the serving simulation: requests in, per-request records out.

This wires the pieces without knowing where step times come from: ``step_cache`` wraps any
``shape -> StepCost`` function (the engine in production, a formula in tests). A server alone
knows its arrivals, so its driver lands them itself (``serving.driver.KnownArrivals``): it is
the one driver of its serving loop (``des.timeline``), resumed at each step's end, without
event objects.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from rdu_sim.des.timeline import Timeline
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.plugins import PolicyAnswerError
from rdu_sim.serving.arrivals import Arrivals, ClosedLoop, OpenLoop
from rdu_sim.serving.batching.checked import Checked
from rdu_sim.serving.clock import arrivals_ps
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import Progress, Server, ServerConfig
from rdu_sim.serving.speculative import Speculation
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.speculation import target_prompts


def serve(
    requests: RequestSet,
    policy: KVPolicy,
    step_cache: StepCache,
    config: ServerConfig,
    progress: Progress | None = None,
    speculation: Speculation | None = None,
) -> ServingRecords:
    """Simulate serving ``requests`` until every one completes; return the records.
    ``speculation``: a draft's work (``serving.speculative``)."""
    if config.batch_slots < 1:
        raise ValueError(f"batch_slots must be >= 1, got {config.batch_slots}")
    prompts = _read_only(requests.prompt_tokens)
    target, kind, rates = None, "", None
    if speculation is not None:
        kind = "decoding" if speculation.config.decoding is not None else "prefill"
        target = target_prompts(speculation.config, prompts)
        rates = speculation.rates
    records = ServingRecords(
        prompts, _read_only(requests.output_tokens), target, kind, acceptance_rates=rates
    )
    total = len(requests)
    timeline = Timeline()
    server = Server(
        timeline,
        config,
        policy,
        step_cache,
        records,
        progress,
        speculation=speculation,
        arrivals=arrivals_for(requests, config.batch_slots),
    )
    timeline.run()
    if server.completed != total:
        batching = server.scheduler.batching
        if isinstance(batching, Checked):  # an outside policy's stall: its defect, named
            raise PolicyAnswerError(
                f"batching policy {batching.name!r} stopped serving with {server.completed} "
                f"of {total} requests completed: its next_prefill answered NO_PREFILL while "
                "requests waited and no slot decoded, and nothing arrived after to ask again"
            )
        raise RuntimeError(
            f"serving stopped with {server.completed} of {total} requests completed (scheduler bug)"
        )
    return records


def arrivals_for(requests: RequestSet, batch_slots: int) -> Arrivals:
    """Where a server alone (or a CoE node) gets its requests: the open loop's times, or
    closed-loop users (``requests.concurrency``, else one a batch slot)."""
    if requests.arrival_s is None:
        return ClosedLoop(requests.concurrency or batch_slots, len(requests))
    return OpenLoop(arrivals_ps(requests.arrival_s))


def _read_only(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """The request set's lengths as the records' (a view numpy refuses writes to, not a copy:
    16 MB fewer at a million requests; nothing in a run changes a request's lengths)."""
    view = lengths.view()
    view.flags.writeable = False
    return view
