"""Composition of Experts (SN40L paper §VI-C, Fig. 9; Samba-CoE): the memory plan and the run.

Many expert models of the workload's architecture live in DDR; a router model's weights
and the batch slots' KV cache stay in HBM, and the rest of HBM is a region of whole expert
slots caching the active experts (``region_experts``). Every request is tagged with its
expert (Zipf popularity, seeded by ``serving.seed``, or the ``expert`` column of
``serving.trace``); ``serving.coe_server`` serves them in expert turns of continuous
batching, switching experts with copies on each socket's copy engine.

What a switch copies (``switch_weights``): every weight of the expert except its token
embedding table, which stays in DDR. A decode step gathers one row of it per slot (a few
KB per token) and a prefill one per prompt token, so reading the rows from DDR costs a
fraction of a microsecond to a fraction of a millisecond a step, while copying the table
(replicated on every socket under tensor parallelism) would add 1.05 GB per socket for
Llama 3.1 8B, 36% of the switch. So an expert's steps are compiled with the embedding in
DDR and everything else pinned in HBM (``expert_step_scenario``); a Llama-3.1-8B expert
(16.06 GB of weights) costs 1.88 GB of copies per socket at tp 8, 15.01 GB on the node
(the norms, replicated, are copied by every socket).

A request is an HBM *hit* when its expert was in HBM (its latest copy landed) when the
router named it and stayed there until the request was admitted: a request whose expert had
to be copied in after that, on demand or by a prefetch made for it, or was still being
copied, is a miss (a prefetch only hides the copy: ``switch_stall_s``).

Left out: the router's decision cost beyond its prefill (it prefills each prompt on the
same sockets when the request arrives, ``serving.coe_server``), and re-simulating a step's
pipeline under a copy (a step ends when both its simulated time and its traffic on the
shared channels are done).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
from numpy.typing import NDArray

from rdu_sim import human
from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.placement import (
    WeightTensor,
    activation_bytes,
    kv_bytes,
    most_slots,
    weight_inventory,
)
from rdu_sim.compiler.program import Placement, Tier, TierUsage
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.workload import CoEConfig
from rdu_sim.hw.copy_engine import DEFAULT_CHUNK_BYTES
from rdu_sim.models.figures import weight_bytes
from rdu_sim.scenario import Scenario, coe_router
from rdu_sim.serving.backend import Backend
from rdu_sim.serving.clock import PS_PER_S, to_ps
from rdu_sim.serving.coe_server import CoEServer, SwitchPolicy, Tiers
from rdu_sim.serving.expert_region import EVICTION, ExpertRegion
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.scheduler import Progress, ServerConfig
from rdu_sim.serving.simulate import arrivals_for
from rdu_sim.serving.step_cache import StepCache

__all__ = [
    "EVICTION",
    "CoEPlan",
    "CoERun",
    "CoEStats",
    "ExpertRegion",
    "check_popularity",
    "coe_capacity",
    "coe_placement",
    "coe_room",
    "expert_step_scenario",
    "expert_tags",
    "plan_coe",
    "region_experts",
    "router_scenario",
    "serve_coe",
    "switch_weights",
]

EMBEDDING_KERNEL = "embedding"
"""The kernel whose weight (the token embedding table) stays in DDR under CoE."""


def expert_tags(
    coe: CoEConfig, n: int, seed: int, column: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    """Each request's expert: Zipf popularity over ``coe.experts`` (expert 0 the most
    asked for), from its own seeded generator (the lengths' draws are unchanged), or the
    trace's ``column`` for ``{dist: trace}`` (checked by ``check_tags``)."""
    if coe.popularity.dist == "trace":
        if column is None:
            raise ValueError("popularity {dist: trace} needs the trace's expert column")
        return np.asarray(column[:n], dtype=np.int64)
    rng = np.random.default_rng([seed, 18])
    ranks = np.arange(1, coe.experts + 1, dtype=np.float64)
    weights = ranks**-coe.popularity.exponent
    return rng.choice(coe.experts, size=n, p=weights / weights.sum()).astype(np.int64)


def check_popularity(scenario: Scenario, column: NDArray[np.int64] | None) -> None:
    """ConfigError (at ``coe.popularity.dist``) when the popularity reads the expert column
    of a trace that has none (``column``: the trace's, None without one); each row's expert
    is checked against ``coe.experts`` where the trace is read, at its line
    (``serving.requests.trace_experts``)."""
    coe, serving = scenario.workload.coe, scenario.workload.serving
    assert coe is not None
    if coe.popularity.dist != "trace" or column is not None:
        return
    raise ConfigError.single(
        scenario.workload_file,
        "coe.popularity.dist",
        f"{{dist: trace}} reads the expert column of serving.trace {serving.trace!r}, "
        "which has none"
        if serving.trace
        else "{dist: trace} needs a serving.trace",
        scenario.lines.get(("coe", "popularity", "dist")),
    )


def router_scenario(scenario: Scenario, coe: CoEConfig) -> Scenario:
    """The scenario of the router model: the workload with its model replaced."""
    workload = scenario.workload.model_copy(update={"model": coe.router, "coe": None})
    router = coe_router(scenario.workload, scenario.workload_file, {})  # checked at load
    return replace(scenario, workload=workload, model=router)


def _weights(scenario: Scenario) -> int:
    """Every weight byte of one socket (the embedding table replicated on each)."""
    return sum(w.bytes for w in weight_inventory(scenario))


def switch_weights(scenario: Scenario) -> list[WeightTensor]:
    """The weights one socket copies when an expert is switched in: all of the expert's
    but its embedding table, which stays in DDR (module docstring)."""
    return [w for w in weight_inventory(scenario) if w.key.split("/", 1)[0] != EMBEDDING_KERNEL]


def _expert_hbm(scenario: Scenario) -> int:
    """One expert's bytes in the HBM region of one socket (what a switch copies)."""
    return sum(w.bytes for w in switch_weights(scenario))


def switch_chunks(scenario: Scenario) -> int:
    """Chunks one switch copies on each socket (the copy engine's transfer unit)."""
    return math.ceil(_expert_hbm(scenario) / DEFAULT_CHUNK_BYTES)


def expert_step_scenario(scenario: Scenario) -> Scenario:
    """The expert as its steps run: its embedding table read from DDR, every other weight
    pinned in HBM (``memory.weights: hot_set`` pinning exactly those bytes: the table, of
    the least bandwidth need per byte, is the one weight the plan leaves in DDR)."""
    hbm = scenario.hardware.hbm.capacity
    memory = scenario.workload.memory.model_copy(
        update={"weights": "hot_set", "hot_set_fraction": (_expert_hbm(scenario) + 0.5) / hbm}
    )
    workload = scenario.workload.model_copy(update={"memory": memory})
    return replace(scenario, workload=workload)


def _fixed_hbm(scenario: Scenario, router: Scenario, slots: int) -> int:
    """HBM bytes per socket outside the expert region: the router's weights, the slots' KV
    cache and the larger of the two models' activations."""
    return (
        _weights(router)
        + kv_bytes(scenario, slots)
        + max(activation_bytes(scenario, slots), activation_bytes(router, slots))
    )


def coe_room(scenario: Scenario, router: Scenario) -> int:
    """Most batch slots that still leave the HBM region room for one expert (a CoE's
    ``room for``: more slots take the region's HBM for KV cache): the slots' KV cache within
    the room the stack gives it (`StackConfig.kv_room`) beside the router's weights, one
    expert and the activations. What memory holds, whether or not the stack runs it."""
    hbm = scenario.hardware.hbm.capacity
    held = _weights(router) + _expert_hbm(scenario)

    def fits(slots: int) -> bool:
        activations = max(activation_bytes(scenario, slots), activation_bytes(router, slots))
        return kv_bytes(scenario, slots) <= scenario.stack.kv_room(hbm, held, activations)

    return most_slots(fits)


def coe_capacity(scenario: Scenario, router: Scenario) -> int:
    """The batch capacity of a CoE: of the slots its room holds (`coe_room`), the most the
    stack runs (`StackConfig.runnable_batch`)."""
    return scenario.stack.runnable_batch(coe_room(scenario, router))


def _no_region(scenario: Scenario, router: Scenario, slots: int) -> CapacityError:
    """Why not one expert fits the HBM region, at the field to change: ``coe.router`` when
    the router alone, or the router and one expert before any KV cache, fill HBM (no
    number of slots helps); else ``serving.batch_slots``."""
    hbm = scenario.hardware.hbm.capacity
    held, expert = _weights(router), _expert_hbm(scenario)
    name = router.model.name
    tp = f"parallelism.tp (now {scenario.tp})"
    if held >= hbm:
        field, problem = (
            "coe.router",
            (
                f"the router ({name}) alone does not fit: its weights take "
                f"{human.size(held, 4)} of the {human.size(hbm, 4)} HBM per socket (they stay in "
                f"HBM beside the experts' region); use a smaller router or raise {tp}"
            ),
        )
    elif held + expert > hbm:
        field, problem = (
            "coe.router",
            (
                f"the router ({name}, {human.size(held, 4)}) leaves no room for one expert "
                f"({human.size(expert, 4)}) in the {human.size(hbm, 4)} HBM per socket, before "
                f"any KV cache; use a smaller router or raise {tp}"
            ),
        )
    else:
        field, problem = (
            "serving.batch_slots",
            (
                f"no expert fits the HBM region: the router ({human.size(held, 4)}), the KV "
                f"cache of {slots} slots and the activations take "
                f"{human.size(_fixed_hbm(scenario, router, slots), 4)} of the "
                f"{human.size(hbm, 4)} HBM per socket and one expert needs "
                f"{human.size(expert, 4)}; lower serving.batch_slots, reduce serving.max_context, "
                f"or raise parallelism.tp (now {scenario.tp})"
            ),
        )
    return CapacityError(scenario.at_field(field, problem))


def region_experts(scenario: Scenario, router: Scenario, slots: int) -> int:
    """Expert slots of the HBM region on each socket: what HBM leaves after the router's
    weights, the slots' KV cache and the activations, in whole experts, and never more than
    ``coe.experts`` (a region with room for every expert holds them all; the rest of HBM
    stays free); CapacityError naming the field to change if not one fits."""
    coe = scenario.workload.coe
    assert coe is not None
    hbm = scenario.hardware.hbm.capacity
    fixed = _fixed_hbm(scenario, router, slots)
    expert = _expert_hbm(scenario)
    room = (hbm - fixed) // expert if hbm > fixed else 0
    count = min(room, coe.experts)
    if count < 1:
        raise _no_region(scenario, router, slots)
    return int(count)


def coe_placement(scenario: Scenario, router: Scenario, slots: int, region: int) -> Placement:
    """One socket's memory plan: HBM holds the router, the region's experts (without their
    embedding tables), the KV cache and activations; DDR holds every expert whole
    (CapacityError at ``coe.experts`` when it cannot)."""
    hardware, coe = scenario.hardware, scenario.workload.coe
    assert isinstance(hardware, HardwareConfig) and coe is not None
    expert = _weights(scenario)
    kv = kv_bytes(scenario, slots)
    act = max(activation_bytes(scenario, slots), activation_bytes(router, slots))
    socket = hardware.socket
    experts = coe.experts
    tiers: dict[Tier, TierUsage] = {
        "sram": TierUsage(capacity_bytes=socket.sram_bytes),
        "hbm": TierUsage(
            capacity_bytes=socket.hbm.capacity,
            weights_bytes=_weights(router) + region * _expert_hbm(scenario),
            kv_bytes=kv,
            activations_bytes=act,
        ),
        "ddr": TierUsage(capacity_bytes=socket.ddr.capacity, weights_bytes=experts * expert),
    }
    if experts * expert > socket.ddr.capacity:
        fit = socket.ddr.capacity // expert
        raise CapacityError(
            scenario.at_field(
                "coe.experts",
                f"{experts:,} experts of {human.size(expert, 4)} per socket need "
                f"{human.size(experts * expert, 4)} of DDR, more than its "
                f"{human.size(socket.ddr.capacity, 4)} (it holds {fit:,}); lower coe.experts "
                f"or raise parallelism.tp (now {scenario.tp})",
            )
        )
    return Placement(batch_slots=slots, tiers=tiers, tensors=())


@dataclass(frozen=True)
class CoEPlan:
    """What a CoE run decides before it simulates (``serving.run.plan_run``): the router's
    scenario, the batch capacity (``coe_capacity``), the region's experts, the memory
    plan of ``slots`` batch slots and the slots memory holds (``coe_room``, at least the
    capacity)."""

    router: Scenario
    capacity: int
    region: int
    placement: Placement
    room: int


def plan_coe(scenario: Scenario, slots: int) -> CoEPlan:
    """The memory plan of a CoE run of ``slots`` slots; CapacityError at the field to change
    when not one expert fits the HBM region or the experts do not fit DDR. No step is
    simulated (``rdu-sim check`` and a sweep's dry run call it through ``plan_run``)."""
    coe = scenario.workload.coe
    assert coe is not None
    router = router_scenario(scenario, coe)
    region = region_experts(scenario, router, slots)
    placement = coe_placement(scenario, router, slots, region)
    room = coe_room(scenario, router)
    return CoEPlan(router, scenario.stack.runnable_batch(room), region, placement, room)


@dataclass(frozen=True)
class CoEStats:
    """What switching cost a CoE run (per node; copy bytes summed over its sockets)."""

    experts: int
    region_experts: int
    eviction: str
    prefetch: bool
    switch_policy: str  # coe.switch
    turn_s: float | None  # coe.turn_s under switch 'bounded'
    model_switches: int
    switch_s: float  # the copy engines' busy time (copies of one socket; all run alike)
    switch_stall_s: float  # time the server waited for a copy (not hidden behind steps)
    hbm_hit_rate: float  # requests whose expert was in HBM when routed (and till admitted)
    bytes_copied: float
    switch_bytes: float  # what one switch copies on the node: the expert without its embedding
    expert_weight_bytes: float  # one expert's weights (the model's, each counted once)
    turns: int  # times the sockets went to an expert
    admitted_mid_turn: int  # requests admitted after their turn's first step
    requests_per_turn: float  # mean requests a turn served
    longest_turn_s: float
    router_s: float  # time the router's prefills took


@dataclass(frozen=True)
class CoERun:
    """A CoE serving run: capacity, memory plan, records, switching, the expert's steps."""

    capacity: int
    placement: Placement
    records: ServingRecords
    stats: CoEStats
    cache: StepCache


def _tiers(hardware: HardwareConfig) -> Tiers:
    socket = hardware.socket
    hbm, ddr = socket.hbm, socket.ddr
    return Tiers(
        hbm.bandwidth,
        hbm.latency,
        hbm.efficiency,
        ddr.bandwidth,
        ddr.latency,
        ddr.efficiency,
        socket.ddr_to_hbm_bandwidth,
    )


def serve_coe(
    scenario: Scenario,
    backend: Backend,
    requests: RequestSet,
    plan: CoEPlan,
    progress: Progress | None = None,
) -> CoERun:
    """Serve ``requests`` as a Composition of Experts on the slots of ``plan`` (``plan_coe``)."""
    coe, serving = scenario.workload.coe, scenario.workload.serving
    hardware = scenario.hardware
    assert coe is not None and isinstance(hardware, HardwareConfig)
    router, capacity, region, placement = plan.router, plan.capacity, plan.region, plan.placement
    slots = placement.batch_slots
    check_popularity(scenario, requests.trace_expert)
    tags = expert_tags(coe, len(requests), serving.seed, requests.trace_expert)
    expert = expert_step_scenario(scenario)
    switch_bytes = _expert_hbm(scenario)
    server = CoEServer(
        scenario.kv_policy,
        ServerConfig(
            slots,
            serving.max_context,
            serving.prefill_priority,
            serving.prefill_chunk_tokens,
            prefill_batch_tokens=scenario.stack.prefill_batch_tokens,
            mixed_batching=scenario.stack.mixed_batching,
            decode_rows=scenario.stack.decode_rows,
            preemption=serving.preemption,
        ),
        SwitchPolicy(coe.switch, to_ps(coe.turn_s), coe.prefetch),
        _tiers(hardware),
        ExpertRegion(region, coe.eviction),
        tags,
        requests.prompt_tokens.copy(),
        requests.output_tokens.copy(),
        arrivals_for(requests, slots),
        float(switch_bytes),
        partial(backend.step_cost, expert),  # (picklable, as the run's result must be)
        partial(backend.step_cost, router),
        progress=progress,
    )
    server.simulate()
    counts, tp = server.counts, scenario.tp
    stats = CoEStats(
        experts=coe.experts,
        region_experts=region,
        eviction=coe.eviction,
        prefetch=coe.prefetch,
        switch_policy=coe.switch,
        turn_s=coe.turn_s if coe.switch == "bounded" else None,
        model_switches=counts.switches,
        switch_s=server.tiers.busy_ps / PS_PER_S,
        switch_stall_s=counts.stall_ps / PS_PER_S,
        hbm_hit_rate=counts.hits / len(requests) if len(requests) else 0.0,
        bytes_copied=server.tiers.bytes_copied * tp,
        switch_bytes=float(switch_bytes * tp),
        expert_weight_bytes=float(
            weight_bytes(scenario.model, scenario.weight_dtype_bytes, scenario.expert_dtype_bytes)
        ),
        turns=counts.turns,
        admitted_mid_turn=counts.admitted_mid_turn,
        requests_per_turn=len(requests) / counts.turns if counts.turns else 0.0,
        longest_turn_s=counts.longest_turn_ps / PS_PER_S,
        router_s=counts.router_ps / PS_PER_S,
    )
    return CoERun(capacity, placement, server.records, stats, server.cache)
