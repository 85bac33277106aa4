"""Composition of Experts serving (SN40L paper §VI-C, Fig. 9; Samba-CoE).

Many expert models of the workload's architecture live in DDR; a router model's weights
and the batch slots' KV cache stay in HBM, and the rest of HBM is a region of whole expert
slots caching the active experts (``region_experts``). The node serves one expert at a
time, all sockets tensor-parallel, in a SimPy simulation (one process, float seconds):

- every request is tagged with its expert (Zipf popularity, seeded by ``serving.seed``, or
  the ``expert`` column of ``serving.trace``);
- the server takes the oldest waiting request's expert and up to ``batch_slots`` of the
  queued requests for it (oldest first) as a batch;
- if that expert is not in the region it is *switched in*: a victim chosen by the eviction
  policy (``EVICTION``) leaves the region and the expert's weights are copied from DDR to
  HBM on each socket's ``hw.CopyEngine``; the server waits for the copy (switch stall);
- with ``coe.prefetch`` the next queued expert that is not resident is copied in while the
  current batch runs (never evicting the running expert). During a copy every step also
  puts its own HBM and DDR bytes on the same channels the copy uses, so the copy and the
  steps share them and the step ends when both its time and its traffic are done;
- a batch: per request the router prefills the prompt, then the expert prefills it (first
  token, with the SnapKV selection when the KV policy compresses the prompt); then static
  decode steps of ``batch_slots`` slots at the cache bucket of the batch's longest final
  cache (what the KV policy keeps), each request finishing after its ``output - 1`` steps.

Step times come from the step cache (the compiled and simulated steps, one expert's
scenario and the router's). A request is an HBM *hit* when its expert was in the region
before it was asked for: a batch whose expert had to be copied in, on demand or by a
prefetch made for it, is a miss (the prefetch only hides the copy: ``switch_stall_s``).

Left out: continuous batching across experts (a batch runs to its end), requests joining
a running batch, the router's decision cost beyond its prefill, and
re-simulating a step's pipeline under a copy: a step ends when both its simulated time and
its traffic on the shared channels are done, so a copy delays it only when that traffic
outlasts the step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim import human
from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.placement import (
    activation_bytes,
    kv_bytes,
    most_slots,
    weight_inventory,
)
from rdu_sim.compiler.program import Placement, Tier, TierUsage
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.workload import CoEConfig
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.engine.timing import StepTiming
from rdu_sim.hw.copy_engine import CopyEngine
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.models import get_model
from rdu_sim.scenario import Scenario
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.serving.clock import PS_PER_S
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import Progress
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape

__all__ = [
    "EVICTION",
    "CoEStats",
    "ExpertRegion",
    "coe_capacity",
    "coe_placement",
    "expert_tags",
    "region_experts",
    "router_scenario",
    "serve_coe",
]


@dataclass
class _Entry:
    admitted_s: float
    last_used_s: float
    uses: int


Victim = Callable[[dict[int, _Entry]], int]
"""An eviction policy: the expert to evict among the candidates (ties: lowest id)."""

EVICTION: dict[str, Victim] = {
    "lru": lambda c: min(c, key=lambda e: (c[e].last_used_s, e)),
    "lfu": lambda c: min(c, key=lambda e: (c[e].uses, c[e].last_used_s, e)),
    "fifo": lambda c: min(c, key=lambda e: (c[e].admitted_s, e)),
}
"""Eviction policies by ``coe.eviction`` name: least recently used, least often used (ties
to the least recently used), least recently admitted."""


class ExpertRegion:
    """The HBM region of ``capacity`` expert slots and the policy that picks a victim."""

    def __init__(self, capacity: int, eviction: str) -> None:
        if capacity < 1:
            raise ValueError(f"the region needs at least one expert slot, got {capacity}")
        self.capacity = capacity
        self.victim = EVICTION[eviction]
        self.resident: dict[int, _Entry] = {}

    def __contains__(self, expert: int) -> bool:
        return expert in self.resident

    def use(self, expert: int, now: float) -> None:
        """Count a use of a resident expert."""
        entry = self.resident[expert]
        entry.last_used_s, entry.uses = now, entry.uses + 1

    def admit(self, expert: int, now: float, keep: set[int]) -> int | None:
        """Give ``expert`` a slot (it is being copied in), evicting a victim not in ``keep``
        when the region is full; returns the evicted expert (None: a free slot)."""
        evicted = None
        if len(self.resident) >= self.capacity:
            candidates = {e: v for e, v in self.resident.items() if e not in keep}
            evicted = self.victim(candidates)
            del self.resident[evicted]
        self.resident[expert] = _Entry(now, now, 0)
        return evicted

    def can_admit(self, keep: set[int]) -> bool:
        """Whether a slot is free or held by an expert outside ``keep``."""
        return len(self.resident) < self.capacity or any(e not in keep for e in self.resident)


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


def check_tags(scenario: Scenario, requests: RequestSet) -> None:
    """ConfigError when ``coe.popularity`` reads a trace column the trace lacks, or names
    an expert beyond ``coe.experts``."""
    coe, serving = scenario.workload.coe, scenario.workload.serving
    assert coe is not None
    if coe.popularity.dist != "trace":
        return
    column = requests.trace_expert
    if column is None:
        raise ConfigError.single(
            scenario.workload_file,
            "coe.popularity",
            f"{{dist: trace}} reads the expert column of serving.trace {serving.trace!r}, "
            "which has none"
            if serving.trace
            else "{dist: trace} needs a serving.trace",
        )
    if column.size and int(column.max()) >= coe.experts:
        raise ConfigError.single(
            scenario.workload_file,
            "coe.experts",
            f"serving.trace {serving.trace!r} asks for expert {int(column.max())}, but "
            f"coe.experts is {coe.experts} (experts count from 0)",
        )


def router_scenario(scenario: Scenario, coe: CoEConfig) -> Scenario:
    """The scenario of the router model: the workload with its model replaced."""
    workload = scenario.workload.model_copy(update={"model": coe.router, "coe": None})
    return replace(scenario, workload=workload, model=get_model(coe.router))


def _weights(scenario: Scenario) -> int:
    return sum(w.bytes for w in weight_inventory(scenario))


def _fixed_hbm(scenario: Scenario, router: Scenario, slots: int) -> int:
    """HBM bytes per socket outside the expert region: the router's weights, the slots' KV
    cache and the larger of the two models' activations."""
    return (
        _weights(router)
        + kv_bytes(scenario, slots)
        + max(activation_bytes(scenario, slots), activation_bytes(router, slots))
    )


def coe_capacity(scenario: Scenario, router: Scenario) -> int:
    """Most batch slots that still leave the HBM region room for one expert (a CoE's
    ``room for``: more slots take the region's HBM for KV cache)."""
    room = scenario.hardware.hbm.capacity - _weights(scenario)
    return most_slots(lambda slots: _fixed_hbm(scenario, router, slots) <= room)


def region_experts(scenario: Scenario, router: Scenario, slots: int) -> int:
    """Expert slots of the HBM region on each socket: what HBM leaves after the router's
    weights, the slots' KV cache and the activations, in whole experts (CapacityError if
    not one fits)."""
    hbm = scenario.hardware.hbm.capacity
    fixed = _fixed_hbm(scenario, router, slots)
    expert = _weights(scenario)
    count = (hbm - fixed) // expert if hbm > fixed else 0
    if count < 1:
        raise CapacityError(
            f"{scenario.workload_file}: no expert fits the HBM region: the router "
            f"({human.size(_weights(router), 4)}), the KV cache of {slots} slots and the "
            f"activations take {human.size(fixed, 4)} of the {human.size(hbm, 4)} HBM per socket "
            f"and one expert needs {human.size(expert, 4)}; lower serving.batch_slots, reduce "
            f"serving.max_context, or raise parallelism.tp (now {scenario.tp})"
        )
    return int(count)


def coe_placement(scenario: Scenario, router: Scenario, slots: int, region: int) -> Placement:
    """One socket's memory plan: HBM holds the router, the region's experts, the KV cache
    and activations; DDR holds every expert."""
    hardware = scenario.hardware
    assert isinstance(hardware, HardwareConfig)
    expert = _weights(scenario)
    kv = kv_bytes(scenario, slots)
    act = max(activation_bytes(scenario, slots), activation_bytes(router, slots))
    socket = hardware.socket
    experts = scenario.workload.coe.experts if scenario.workload.coe else 1
    tiers: dict[Tier, TierUsage] = {
        "sram": TierUsage(capacity_bytes=socket.sram_bytes),
        "hbm": TierUsage(
            capacity_bytes=socket.hbm.capacity,
            weights_bytes=_weights(router) + region * expert,
            kv_bytes=kv,
            activations_bytes=act,
        ),
        "ddr": TierUsage(capacity_bytes=socket.ddr.capacity, weights_bytes=experts * expert),
    }
    if experts * expert > socket.ddr.capacity:
        raise CapacityError(
            f"{scenario.workload_file}: {experts} experts of {human.size(expert, 4)} per socket "
            f"need {human.size(experts * expert, 4)} of DDR, more than its "
            f"{human.size(socket.ddr.capacity, 4)}; lower coe.experts or raise "
            f"parallelism.tp (now {scenario.tp})"
        )
    return Placement(batch_slots=slots, tiers=tiers, tensors=())


@dataclass(frozen=True)
class CoEStats:
    """What switching cost a CoE run (per node; copy bytes summed over its sockets)."""

    experts: int
    region_experts: int
    eviction: str
    prefetch: bool
    model_switches: int
    switch_s: float  # the copy engines' busy time (copies of one socket; all run alike)
    switch_stall_s: float  # time the server waited for a copy (not hidden behind steps)
    hbm_hit_rate: float  # requests whose expert was resident when their batch was formed
    bytes_copied: float
    expert_weight_bytes: float  # one expert's weights on the whole node
    batches: int
    router_s: float  # time the router's prefills took


@dataclass
class _Run:
    """The CoE server's moving parts (one socket's view; every socket does the same)."""

    env: CountingEnvironment
    ddr: MemoryChannel
    hbm: MemoryChannel
    copier: CopyEngine
    region: ExpertRegion
    in_flight: dict[int, Any]


class CoEServer:
    """The SimPy process serving tagged requests one expert batch at a time."""

    def __init__(
        self,
        scenario: Scenario,
        requests: RequestSet,
        experts: NDArray[np.int64],
        slots: int,
        region: int,
        expert_cache: StepCache,
        router_cache: StepCache,
        progress: Progress | None = None,
    ) -> None:
        hardware = scenario.hardware
        assert isinstance(hardware, HardwareConfig) and scenario.workload.coe is not None
        socket, self.coe = hardware.socket, scenario.workload.coe
        env = CountingEnvironment()
        ddr = MemoryChannel(env, socket.ddr.bandwidth, socket.ddr.latency, socket.ddr.efficiency)
        hbm = MemoryChannel(env, socket.hbm.bandwidth, socket.hbm.latency, socket.hbm.efficiency)
        self.run = _Run(
            env,
            ddr,
            hbm,
            CopyEngine(env, ddr, hbm, socket.ddr_to_hbm_bandwidth),
            ExpertRegion(region, self.coe.eviction),
            {},
        )
        self.scenario, self.requests, self.experts, self.slots = scenario, requests, experts, slots
        self.expert_cache, self.router_cache, self.progress = expert_cache, router_cache, progress
        self.expert_bytes = float(_weights(scenario))
        self.records = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
        self.queue: deque[int] = deque()
        self._arrival = env.event()
        self.completed = self.switches = self.hits = self.batches = 0
        self.stall_s = self.router_s = 0.0
        self._next_user_request = 0  # closed loop: the request the next completion submits
        self._prefetched: set[int] = set()  # copied ahead and not yet asked for

    # --- arrivals -----------------------------------------------------------------------
    def _submit(self, request: int) -> None:
        self.records.arrival_ps[request] = self._ps()
        self.queue.append(request)
        if not self._arrival.triggered:
            self._arrival.succeed()

    def _arrivals(self) -> Generator[Any, Any, None]:
        arrival = self.requests.arrival_s
        assert arrival is not None
        for request, at in enumerate(arrival):
            yield self.run.env.timeout(max(0.0, float(at) - self.run.env.now))
            self._submit(request)

    def _ps(self) -> int:
        return round(self.run.env.now * PS_PER_S)

    # --- switching ----------------------------------------------------------------------
    def _switch_in(self, expert: int, keep: set[int]) -> Any:
        """Evict a victim (not in ``keep``) and copy ``expert``'s weights into the region."""
        run = self.run
        evicted = run.region.admit(expert, run.env.now, keep)
        self._prefetched.discard(evicted if evicted is not None else -1)
        self.switches += 1
        copy = run.copier.copy(self.expert_bytes)
        run.in_flight[expert] = copy
        copy.callbacks.append(lambda _e: self._landed(expert))
        return copy

    def _landed(self, expert: int) -> None:
        self.run.in_flight.pop(expert, None)

    def _prefetch(self, running: int) -> None:
        """Start copying the next queued expert that is neither resident nor arriving."""
        run = self.run
        for request in self.queue:
            expert = int(self.experts[request])
            if expert in run.region:
                continue
            keep = {running, *run.in_flight}
            if run.region.can_admit(keep):
                self._switch_in(expert, keep)
                self._prefetched.add(expert)
            return

    # --- steps --------------------------------------------------------------------------
    def _step(self, cache: StepCache, shape: StepShape, count: int = 1) -> Any:
        """``count`` steps of ``shape``; while a copy is in flight each also puts its HBM and
        DDR bytes on the channels the copy shares (it ends when both are done)."""
        env = self.run.env
        seconds = cache.run(shape, count) / PS_PER_S
        if not self.run.copier.busy:
            return env.timeout(count * seconds)
        return env.process(self._shared_steps(cache.cost(shape).detail, seconds, count))

    def _shared_steps(
        self, detail: object, seconds: float, count: int
    ) -> Generator[Any, Any, None]:
        env, run = self.run.env, self.run
        tiers = detail.bytes_by_tier if isinstance(detail, StepTiming) else {}
        for _ in range(count):
            if not run.copier.busy:
                yield env.timeout(seconds)
                continue
            yield env.all_of(
                [
                    env.timeout(seconds),
                    run.hbm.read(tiers.get("hbm", 0.0), tag="step"),
                    run.ddr.read(tiers.get("ddr", 0.0), tag="step"),
                ]
            )

    # --- the server ---------------------------------------------------------------------
    def serve(self) -> Generator[Any, Any, None]:
        """Form a batch per expert, switch it in if needed, run it; until all complete."""
        run, total = self.run, len(self.requests)
        while self.completed < total:
            if not self.queue:
                self._arrival = run.env.event()
                yield self._arrival
                continue
            expert = int(self.experts[self.queue[0]])
            batch = [r for r in self.queue if self.experts[r] == expert][: self.slots]
            for request in batch:
                self.queue.remove(request)
            if expert in run.region and expert not in self._prefetched:
                self.hits += len(batch)
            self._prefetched.discard(expert)
            if expert not in run.region:
                self._switch_in(expert, set(run.in_flight))
            if expert in run.in_flight:
                waited = run.env.now
                yield run.in_flight[expert]
                self.stall_s += run.env.now - waited
            run.region.use(expert, run.env.now)
            if self.coe.prefetch:
                self._prefetch(expert)
            self.batches += 1
            yield from self._batch(batch)

    def _batch(self, batch: list[int]) -> Generator[Any, Any, None]:
        env, records, serving = self.run.env, self.records, self.scenario.workload.serving
        policy = self.scenario.kv_policy
        records.series.append(self._ps(), len(self.queue), len(batch), 0, 0)
        for slot, request in enumerate(batch):
            records.admit_ps[request] = self._ps()
            records.slot[request] = slot
            prompt = int(self.requests.prompt_tokens[request])
            steps = prefill_steps(
                prompt, serving.max_context, serving.prefill_chunk_tokens, policy.compresses(prompt)
            )
            started = env.now
            for shape in steps:
                yield self._step(self.router_cache, shape)
            self.router_s += env.now - started
            for shape in steps:
                yield self._step(self.expert_cache, shape)
            records.prefill_steps += len(steps)
            records.first_token_ps[request] = self._ps()
            records.tokens_generated += 1
        output = self.requests.output_tokens
        prompts = self.requests.prompt_tokens
        longest = max(policy.cache_at(int(prompts[r]), int(output[r]) - 1) for r in batch)
        bucket = policy.decode_bucket(longest)
        shape = StepShape("decode", self.slots, 1, bucket)
        records.series.append(self._ps(), len(self.queue), 0, len(batch), bucket)
        done = 0
        for request in sorted(batch, key=lambda r: (int(output[r]), r)):
            left = int(output[request]) - 1 - done
            if left > 0:
                yield self._step(self.expert_cache, shape, left)
                records.decode_steps += left
                records.decode_runs += 1
                done += left
            self._finish(request)
        records.tokens_generated += sum(int(output[r]) - 1 for r in batch)
        records.series.append(self._ps(), len(self.queue), 0, 0, bucket)

    def _finish(self, request: int) -> None:
        self.records.finish_ps[request] = self._ps()
        self.records.completions[request] += 1
        self.completed += 1
        if self.progress is not None:
            self.progress(self.completed, len(self.requests))
        nxt = self._next_user_request
        if nxt < len(self.requests) and self.requests.arrival_s is None:
            self._next_user_request += 1
            self._submit(nxt)

    def simulate(self) -> None:
        """Run the whole simulation."""
        env, requests = self.run.env, self.requests
        if requests.arrival_s is None:  # closed loop: each user resubmits on completion
            users = min(requests.concurrency or self.slots, len(requests))
            for request in range(users):
                self._submit(request)
            self._next_user_request = users
        else:
            env.process(self._arrivals())
        env.process(self.serve())
        env.run()
        if self.completed != len(requests):
            raise RuntimeError(
                f"CoE serving stopped with {self.completed} of {len(requests)} completed"
            )

    def stats(self) -> CoEStats:
        """The switching metrics of the run."""
        tp = self.scenario.tp
        assert self.coe is not None
        return CoEStats(
            experts=self.coe.experts,
            region_experts=self.run.region.capacity,
            eviction=self.coe.eviction,
            prefetch=self.coe.prefetch,
            model_switches=self.switches,
            switch_s=self.run.copier.busy_s,
            switch_stall_s=self.stall_s,
            hbm_hit_rate=self.hits / len(self.requests) if len(self.requests) else 0.0,
            bytes_copied=self.run.copier.bytes_copied * tp,
            expert_weight_bytes=self.expert_bytes * tp,
            batches=self.batches,
            router_s=self.router_s,
        )


def serve_coe(
    scenario: Scenario,
    requests: RequestSet,
    slots: int,
    expert_cache: StepCache,
    router_cache: StepCache,
    progress: Progress | None = None,
) -> tuple[ServingRecords, CoEStats]:
    """Serve ``requests`` as a Composition of Experts; the records and switching stats."""
    coe = scenario.workload.coe
    assert coe is not None
    router = router_scenario(scenario, coe)
    region = region_experts(scenario, router, slots)
    check_tags(scenario, requests)
    tags = expert_tags(coe, len(requests), scenario.workload.serving.seed, requests.trace_expert)
    server = CoEServer(
        scenario, requests, tags, slots, region, expert_cache, router_cache, progress
    )
    server.simulate()
    return server.records, server.stats()
