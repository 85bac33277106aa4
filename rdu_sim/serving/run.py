"""A whole serving run of a scenario: batch slots, memory plan, requests, the simulation.

:func:`serve_scenario` is what ``rdu_sim.api.run`` does once the workload is loaded: resolve
the batch slots (``auto`` = the batch capacity), plan memory, generate the requests from the
workload's seed, refuse an absurdly large run before simulating it (``serving.limits``),
then simulate continuous batching with every distinct step shape compiled and simulated
once (the step cache). The result is plain data, :class:`ServingRun`; ``rdu_sim.report`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from rdu_sim.compiler.errors import SlotsCapacityError, at_slots
from rdu_sim.compiler.program import Placement, with_sram
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import overridden
from rdu_sim.engine.timing import StepTiming
from rdu_sim.graph.shape import INDEX
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.scenario import Scenario
from rdu_sim.serving.acceptance import request_rates
from rdu_sim.serving.backend import Backend, resolve_batch_slots
from rdu_sim.serving.clock import SimulatedTimeError, to_s
from rdu_sim.serving.coe import CoEPlan, CoEStats, plan_coe, serve_coe
from rdu_sim.serving.limits import check_pool, check_run
from rdu_sim.serving.named_policies import check_named, field_line
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet, make_requests, typical_prompt
from rdu_sim.serving.server import Progress, ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.speculative import DraftLink, PrefillSaving, Speculation, prefill_saving
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.serving.step_shape import served_prefill_steps

__all__ = [
    "ServingRun",
    "plan_capacity",
    "plan_run",
    "prefill_seconds",
    "serve_scenario",
    "served_prefill_steps",
]


@dataclass(frozen=True, eq=False)
class ServingRun:
    """Everything a serving run produced: its slots and memory plan, the requests it was
    given, the per-request records, the step cache (every shape it simulated and how often),
    and the prefill time of the workload's typical prompt (``prefill_s``).

    Compared and hashed by identity (``eq=False``): field by field, its NumPy records made
    ``==`` raise and its dicts made ``hash`` raise although it is frozen. Two runs' results
    compare by their JSON (``RunResult.to_json``); a run can key a dict."""

    scenario: Scenario
    batch_capacity: int
    batch_slots: int
    memory_capacity: int  # slots memory holds beside the weights (>= batch_capacity)
    placement: Placement
    requests_in: RequestSet
    records: ServingRecords
    cache: StepCache
    prefill_s: float
    speculation: Speculation | None = None  # the draft's work and step cache, if any
    draft_placement: Placement | None = None  # a separate draft's own memory plan
    prefill_saving: PrefillSaving | None = None  # speculative prefill of the typical prompt
    coe: CoEStats | None = None  # a Composition of Experts run's switching (serving.coe)

    @property
    def policy(self) -> KVPolicy:
        """The KV policy the run served with (the scenario's)."""
        return self.scenario.kv_policy

    def prefill_time(self, prompt: int) -> float:
        """Prefill time of ``prompt`` as this run serves it (its own step caches)."""
        return prefill_seconds(self.cache, self.scenario, prompt, self.speculation)


def prefill_seconds(
    cache: StepCache, scenario: Scenario, prompt: int, speculation: Speculation | None = None
) -> float:
    """Prefill time of ``prompt`` as the server runs it (bucketed or chunked, with the SnapKV
    selection when the policy compresses it; with a draft's part under speculation), from
    the step caches."""
    target = prompt if speculation is None else speculation.target_prompt(prompt)
    steps = served_prefill_steps(scenario, target)
    if speculation is None:
        return float(sum(cache.step_s(shape) for shape in steps))
    parts = [speculation.prefill_ps(cache.step_ps(s), s, count=False) for s in steps]
    if speculation.config.prefill is not None:
        parts.insert(0, speculation.selection_ps(prompt, count=False))
    return float(sum(to_s(part) for part in parts))


def _speculation(scenario: Scenario, backend: Backend, requests: RequestSet) -> Speculation | None:
    """The draft's part of the run (its step cache, the requests' acceptance rates, the link
    of a separate draft); None without one (a separate draft's memory plan: ``plan_run``)."""
    spec, draft = scenario.workload.speculation, scenario.draft
    if spec is None or draft is None:
        return None
    serving = scenario.workload.serving
    rates = None
    if spec.decoding is not None:
        acceptance = spec.decoding.acceptance
        if acceptance.dist == "trace" and requests.trace_acceptance is None:
            raise ConfigError.single(
                scenario.workload_file,
                "speculation.decoding.acceptance",
                f"{{dist: trace}} reads the acceptance column of serving.trace "
                f"{serving.trace!r}, which has none",
            )
        rates = request_rates(acceptance, len(requests), serving.seed, requests.trace_acceptance)
    speculation = Speculation(
        config=spec,
        draft_cache=StepCache(partial(backend.step_cost, draft)),
        policy=scenario.kv_policy,
        max_context=serving.max_context,
        chunk=serving.prefill_chunk_tokens,
        seed=serving.seed,
        rates=rates,
        link=draft_link(scenario) if spec.placement == "separate" else None,
        one_program=scenario.stack.speculative_rounds == "one_program",
        ragged=scenario.stack.dynamic_batch,
    )
    return speculation


def draft_link(scenario: Scenario) -> DraftLink:
    """A separate draft's link to the target's sockets: each round, k token ids per row to
    the target's sockets, then each row's accepted count and the target's token back; over
    the node's links when both TP groups fit in one node, else between nodes (through the
    in-node port too where the network is reached through it: the slower port's rate)."""
    spec, draft = scenario.workload.speculation, scenario.draft
    assert spec is not None and spec.decoding is not None and draft is not None
    system = scenario.hardware.system
    same_node = scenario.tp + draft.tp <= system.sockets_per_node
    link = system.intra_node_link if same_node else system.inter_node_link
    bandwidth = link.bandwidth
    if not same_node and system.network_through_node_port:
        bandwidth = min(bandwidth, system.intra_node_link.bandwidth)
    return DraftLink(link.latency, bandwidth, (spec.decoding.draft_tokens + 2) * INDEX)


def scenario_requests(scenario: Scenario, slots: int) -> RequestSet:
    """The requests a run of ``scenario`` on ``slots`` batch slots serves (drawn, or read
    from its trace): what ``rdu-sim check`` holds against a paged pool too."""
    return make_requests(
        scenario.workload.serving,
        slots,
        scenario.base_dir,
        scenario.workload_file,
        scenario.overrides,
        scenario.workload.coe,
    )


def serve_scenario(
    scenario: Scenario, backend: Backend, progress: Progress | None = None
) -> ServingRun:
    """Simulate serving ``scenario``; ``progress(done, total)`` is called as requests finish."""
    serving = scenario.workload.serving
    capacity, slots, placement, draft_placement, coe_plan = _plan(scenario, backend)
    requests = scenario_requests(scenario, slots)
    check_run(scenario, slots, requests)  # refuse absurd runs before simulating
    # a partial, not a closure: the result (holding its cache) must pickle (``api`` docstring)
    cache = StepCache(partial(backend.step_cost, scenario))
    speculation = _speculation(scenario, backend, requests)
    config = ServerConfig(
        slots,
        serving.max_context,
        serving.prefill_priority,
        serving.prefill_chunk_tokens,
        prefill_batch_tokens=scenario.stack.prefill_batch_tokens,
        mixed_batching=scenario.stack.mixed_batching,
        decode_rows=scenario.stack.decode_rows,
        kv_pool=placement.kv_pool,
        preemption=serving.preemption,
    )
    # a request the pool never holds
    check_pool(scenario, placement.kv_pool, requests.prompt_tokens, requests.output_tokens)
    prompt = typical_prompt(serving, requests.prompt_tokens)
    coe = scenario.workload.coe
    stats = None
    try:
        saving = None
        if coe is None:
            records = serve(requests, scenario.kv_policy, cache, config, progress, speculation)
            if speculation is not None and speculation.config.prefill is not None:
                saving = prefill_saving(speculation, cache, scenario.kv_policy, prompt)
        else:
            assert coe_plan is not None  # (``_plan`` makes one for a Composition of Experts)
            served = serve_coe(scenario, backend, requests, coe_plan, progress)
            capacity, placement, records = served.capacity, served.placement, served.records
            stats, cache = served.stats, served.cache
        prefill_s = prefill_seconds(cache, scenario, prompt, speculation)
    except SimulatedTimeError as exc:  # the input's fault: name the workload
        raise ConfigError.single(scenario.workload_file, "serving", str(exc)) from None
    placement = with_sram(placement, peak_sram(cache))
    # a Composition of Experts counts its own room (slots beside one cached expert)
    holds = coe_plan.room if coe_plan is not None else backend.memory_capacity(scenario)
    return ServingRun(
        scenario,
        capacity,
        slots,
        holds,
        placement,
        requests,
        records,
        cache,
        prefill_s,
        speculation,
        draft_placement,
        saving,
        stats,
    )


def plan_run(scenario: Scenario, backend: Backend) -> tuple[int, int, Placement, Placement | None]:
    """What a run decides before it makes requests (``_plan``, without a Composition of
    Experts' own plan)."""
    return _plan(scenario, backend)[:4]


def _plan(
    scenario: Scenario, backend: Backend
) -> tuple[int, int, Placement, Placement | None, CoEPlan | None]:
    """What a run decides before it makes requests: its batch capacity, batch slots, memory
    plan and a separate draft's memory plan (None without one); a Composition of Experts'
    are its own (``serving.coe.plan_coe``: the router, the expert region, every expert in
    DDR; returned last, for the run to serve by, None for any other). A CapacityError (or
    the ConfigError of a layout a lone run cannot serve) in the words the run fails with.
    Cheap beside the run (one memory plan, no step simulated): a sweep's dry run calls it to
    mark the points that would fail so (``sweep.evaluators``), and ``rdu-sim check`` on a
    Composition of Experts' workload."""
    ranks = scenario.workload.parallelism.dp_attention
    if ranks > 1:
        field = "parallelism.dp_attention"
        refused = ConfigError.single(
            scenario.workload_file,
            field,
            f"a replica of {ranks} attention ranks serves its requests on a server per rank, "
            "which a cluster runs (a pool of it: docs/parallelism.md); a lone run, or a "
            "sweep's point, serves one server. rdu-sim step times a rank's step; to search "
            "layouts, rdu-sim plan, or runs of a cluster file with --set "
            "pools.NAME.set.parallelism.* (docs/sweeps.md)",
            scenario.lines.get(tuple(field.split("."))),
        )  # at the field's line, or the --set that gave it (as the scenario's rules are)
        raise overridden(refused, scenario.workload_file, scenario.overrides)
    return plan_capacity(scenario, backend)


def plan_capacity(
    scenario: Scenario, backend: Backend
) -> tuple[int, int, Placement, Placement | None, CoEPlan | None]:
    """``_plan`` but for its layout's rule (a lone run serves one attention rank): the batch
    capacity, batch slots and memory plans, in the run's words. ``rdu-sim check`` calls it
    on every workload, so it refuses what a run would refuse for memory before simulating,
    and still passes a workload of attention ranks (a cluster's pool, or ``rdu-sim step``'s)."""
    serving = scenario.workload.serving
    try:
        check_named(serving, scenario.workload_file, field_line(scenario.lines.get))
    except ConfigError as exc:  # a name a --set gave says so, as the scenario's rules do
        raise overridden(exc, scenario.workload_file, scenario.overrides) from None
    if scenario.workload.coe is not None:  # its own plan: router, expert region, DDR
        slots = serving.batch_slots
        assert isinstance(slots, int)  # ``auto`` is refused at load (scenario._check_coe)
        plan = plan_coe(scenario, slots)
        return plan.capacity, slots, plan.placement, None, plan
    capacity, slots = resolve_batch_slots(scenario, backend)
    try:
        placement = backend.plan_memory(scenario, slots)
    except SlotsCapacityError as exc:  # the slots the workload set: its file and field
        raise at_slots(scenario, slots, exc) from None  # (the compiler's did: said once)
    spec, draft = scenario.workload.speculation, scenario.draft
    draft_placement = None
    if spec is not None and draft is not None and spec.placement == "separate":
        draft_placement = backend.plan_memory(draft, slots)
    return capacity, slots, placement, draft_placement, None


def peak_sram(cache: StepCache) -> float:
    """The most PMU SRAM any step the run simulated held (its largest kernel's,
    ``StepTiming.sram_bytes``, what ``rdu-sim step`` reports); 0 for steps without the
    engine's detail."""
    return max(
        (
            c.detail.sram_bytes
            for c in map(cache.cost, cache.shapes)
            if isinstance(c.detail, StepTiming)
        ),
        default=0.0,
    )
