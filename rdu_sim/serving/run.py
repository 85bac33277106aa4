"""A whole serving run of a scenario: batch slots, memory plan, requests, the simulation.

:func:`serve_scenario` is what ``rdu_sim.api.run`` does once the workload is loaded: resolve
the batch slots (``auto`` = the batch capacity), plan memory, generate the requests from the
workload's seed, refuse an absurdly large run before simulating it (``serving.limits``),
then simulate continuous batching with every distinct step shape compiled and simulated
once (the step cache). The result is plain data, :class:`ServingRun`; ``rdu_sim.report`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.compiler.program import Placement
from rdu_sim.config.errors import ConfigError
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.scenario import Scenario
from rdu_sim.serving.backend import Backend, resolve_batch_slots
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.serving.clock import SimulatedTimeError
from rdu_sim.serving.limits import check_run
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet, make_requests, typical_prompt
from rdu_sim.serving.server import Progress, ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache

__all__ = ["ServingRun", "serve_scenario"]


@dataclass(frozen=True)
class ServingRun:
    """Everything a serving run produced: its slots and memory plan, the requests it was
    given, the per-request records, the step cache (every shape it simulated and how often),
    and the prefill time of the workload's typical prompt (``prefill_s``)."""

    scenario: Scenario
    batch_capacity: int
    batch_slots: int
    placement: Placement
    requests_in: RequestSet
    records: ServingRecords
    cache: StepCache
    prefill_s: float

    @property
    def policy(self) -> KVPolicy:
        """The KV policy the run served with (the scenario's)."""
        return self.scenario.kv_policy

    def prefill_time(self, prompt: int) -> float:
        """Prefill time of ``prompt`` as this run serves it (its own step cache)."""
        return prefill_seconds(self.cache, self.scenario, prompt)


def prefill_seconds(cache: StepCache, scenario: Scenario, prompt: int) -> float:
    """Prefill time of ``prompt`` as the server runs it (bucketed or chunked, with the SnapKV
    selection when the policy compresses it), from the step cache."""
    serving = scenario.workload.serving
    steps = prefill_steps(
        prompt,
        serving.max_context,
        serving.prefill_chunk_tokens,
        scenario.kv_policy.compresses(prompt),
    )
    return float(sum(cache.step_s(shape) for shape in steps))


def serve_scenario(
    scenario: Scenario, backend: Backend, progress: Progress | None = None
) -> ServingRun:
    """Simulate serving ``scenario``; ``progress(done, total)`` is called as requests finish."""
    serving = scenario.workload.serving
    capacity, slots = resolve_batch_slots(scenario, backend)
    placement = backend.plan_memory(scenario, slots)
    requests = make_requests(serving, slots, scenario.base_dir, scenario.workload_file)
    check_run(scenario, slots, requests)  # refuse absurd runs before simulating
    cache = StepCache(lambda shape: backend.step_cost(scenario, shape))
    config = ServerConfig(
        slots, serving.max_context, serving.prefill_priority, serving.prefill_chunk_tokens
    )
    prompt = typical_prompt(serving, requests.prompt_tokens)
    try:
        records = serve(requests, scenario.kv_policy, cache, config, progress)
        prefill_s = prefill_seconds(cache, scenario, prompt)
    except SimulatedTimeError as exc:  # the input's fault: name the workload
        raise ConfigError.single(scenario.workload_file, "serving", str(exc)) from None
    return ServingRun(scenario, capacity, slots, placement, requests, records, cache, prefill_s)
