"""Metrics of a serving run, computed from the records the serving core emitted.

Definitions (docs/serving.md repeats them for users):

- ``ttft_s``: first output token - arrival (queueing + prefill; the prefill produces the
  first token). ``tpot_s``: (finish - first token) / (output - 1), over requests with more
  than one output token. ``queue_delay_s``: admission (first prefill step starts) - arrival.
  ``e2e_s``: finish - arrival. Each is ``{p50, p90, p99, mean}``.
- ``decode_tokens_per_s``: all output tokens / ``decode_span_s``, the span of decode
  activity: from the first first-token of the run to the last completion (prefill stalls in
  between count; the makespan's first arrival to that first token does not).
  It includes the ramp-up (all slots prefilling at once) and the drain (slots emptying one
  by one at the end), so a short run reports well below the rate with the slots kept full.
- ``steady_decode_tokens_per_s``, ``steady_window_s``: that rate with the slots kept full,
  over the whole turnovers from completion number ``batch_slots`` of a closed-loop run
  (``rdu_sim.serving.steady``; the calibration's figure); both None without a window.
- ``user_tokens_per_s``: per request, 1 / TPOT (the rate a user sees once tokens stream).
- ``requests_truncated``: requests whose prompt + output exceeded ``serving.max_context``,
  cut to fit a slot (``serving.requests.cut_to_context``); a lone run rejects none.
  ``prompt_tokens_truncated``, ``output_tokens_truncated``: the tokens those cuts took, asked
  for and never served (``output_tokens`` and the rates count only what was served).
  ``out_of_order_rows``: the replayed trace's rows that arrive before a row above them, which
  the run replays by arrival (0 without a trace replayed by arrival).
- ``makespan_s``: first arrival to last completion. ``utilization`` (``hbm``: HBM bytes moved
  over what the peak bandwidth could move; ``pcu``: PCU-time busy; ``flops``: matrix FLOPs
  over what the peak FLOP/s could do) is time-weighted over every step run, divided by the
  makespan (idle time counts as zero). A step reports the same three for itself
  (:meth:`Utilization.of_step`): one definition for ``run``, ``run --step`` and ``step``.
- ``load``: what was offered (arrival process and rate, length mixes and the run's mean
  lengths); ``dtypes``: the storage types the run used (model defaults resolved);
  ``throughput_bound``: ``offered_load`` when the slots stood mostly idle in an open loop
  and the queue did not grow (more load would raise the throughput: it measures the
  arrivals, not the machine), or when a closed loop's users or an ``all_at_once`` run's
  requests were fewer than the slots; else ``machine`` (a closed loop or ``all_at_once``
  that fills its slots, slots kept busy, or a machine that fell behind the arrivals:
  requests that waited longer to be admitted than serving them took, ``queue_grew``, or a
  request waiting whenever a slot stood empty until the last was admitted,
  ``machine_saturated``).
- ``occupancy``: time-weighted mean fraction of slots holding a request over the makespan;
  ``decode_slot_fill``: decoding slots / batch slots, averaged over the steps that decode
  (decode steps and mixed steps): how full the batch ran (a static decode graph pads the
  rest; a dynamic batch runs fewer rows).
- ``memory``: per tier, one socket's view (TP is symmetric: every socket holds the same);
  ``weights_placement``: the workload's ``memory.weights`` (which tier holds the weights),
  ``_spilled`` added when batch slots pushed some of the weights it pins to DDR
  (``hot_set_spilled``; ``hbm`` refuses such slots), or ``coe`` (experts in DDR, the
  active ones cached in HBM);
  ``warnings``: what the reader must know, e.g. batch slots that pushed weights out of HBM.
- ``decode_step``: the decode step the run ran most often: its batch, context and simulated
  ``step_s``, its bytes per tier, each resource's time (``report.bound``: ``compute_s`` the
  compute units' busy time, ``hbm_s``, ``ddr_s`` the tier's bytes at its sustained bandwidth,
  ``link_s`` the busiest link direction's (``link`` its class, the hardware's
  ``system.*`` field, or null), ``blocks_s`` a GPU's decode attention's thread
  blocks' streaming time, ``boundaries_s`` the kernels' launch and sync at their boundaries,
  ``launch_s`` a GPU host's kernel launches, ``loop_s`` SN40L's layer loop, ``host_link_s``
  the logits' trip to the host, ``host_s`` the serving stack's host time on the step's path)
  and ``bound``, the largest (a model served from DDR shows ``ddr``, a tensor-parallel
  step whose collectives outlast its reads ``link``, a batch whose host work outweighs the
  device ``host``); ``host_hidden_s`` the overlapped host time the device's step hid,
  ``unaccounted_s`` the step's time beyond all the resources' together (0 when within 1%);
  and ``runtime_s``, what the host added to the device's step; with
  pipeline stages ``pipeline_bubble``, the stages' idle share (``rdu-sim step``'s
  ``pipeline.bubble``; left out without a pipeline); None without a decode step.
- ``coe``: a Composition of Experts run's turns and switching (``serving.coe.CoEStats``):
  ``turns``, ``admitted_mid_turn`` (continuous batching within a turn), ``switch_policy``,
  ``model_switches``, ``switch_s`` (copy engine busy), ``switch_stall_s`` (the server
  waiting on copies), ``hbm_hit_rate``, ``bytes_copied`` (= switches x ``switch_bytes``),
  ``expert_weight_bytes``; and what CoE adds to TTFT inside the queueing delay
  (``report.coe.CoESummary``): ``misses``, ``router_prefill_s``, ``miss_stall_s``; None
  for one model.
- ``provenance``: the simulator (version, git commit when known), the workload and hardware
  files, the ``--set`` overrides and the resolved configuration (``rdu_sim.provenance``).

Floats are rounded to 12 significant digits, so the JSON is byte-identical across runs and
platforms for the same inputs.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim import __version__, human
from rdu_sim.compiler.placement import (
    WeightsSpilledWarning,
    capacity_words,
    coe_capacity_words,
    placement_warnings,
    smallest_request_pages,
    weights_placement,
)
from rdu_sim.compiler.program import TIERS, Placement
from rdu_sim.config.hardware_file import Hardware, device_noun
from rdu_sim.config.origins import predicted_words
from rdu_sim.config.workload import FixedLength, LognormalLength, UniformLength
from rdu_sim.engine.timing import StepTiming
from rdu_sim.kv.policies import KeptCounts, kept_counts
from rdu_sim.provenance import of_scenario
from rdu_sim.report.bound import bound_label, resource_times, step_bound
from rdu_sim.report.coe import CoESummary, coe_summary
from rdu_sim.report.energy import Energy, energy_of
from rdu_sim.report.percentiles import Percentiles, rounded, rounded_float
from rdu_sim.report.speculation import (
    SlowSpeculationWarning,
    SpeculationSummary,
    draft_devices,
    speculation_summary,
    speculation_warnings,
)
from rdu_sim.scenario import Scenario
from rdu_sim.serving.limits import UnchunkedPromptWarning, unchunked_words
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import (
    RequestSet,
    ShortTraceWarning,
    TruncatedRequestsWarning,
    short_trace_words,
    truncation_words,
)
from rdu_sim.serving.run import ServingRun
from rdu_sim.serving.steady import steady_state
from rdu_sim.serving.step_cache import PS_PER_S, StepCache, StepCost
from rdu_sim.shapes import StepShape
from rdu_sim.sim_warnings import RduSimWarning


def utilization(cache: StepCache, span: float, *others: StepCache) -> dict[str, float]:
    """``hbm``, ``pcu`` and ``flops`` (:class:`Utilization`) of the steps counted in
    ``cache`` (and ``others`` run on the same sockets: a shared draft's), time-weighted over
    those steps and divided by ``span`` seconds (idle time counts as zero)."""
    hbm = pcu = flops = 0.0
    for each in (cache, *others):
        for shape, count in each.steps.items():
            cost = each.cost(shape)
            busy = count * each.step_s(shape)
            hbm += busy * cost.hbm_util
            pcu += busy * cost.pcu_util
            flops += busy * cost.flops_util
    if span <= 0:
        return {"hbm": 0.0, "pcu": 0.0, "flops": 0.0}
    return {"hbm": hbm / span, "pcu": pcu / span, "flops": flops / span}


def steps_run(records: ServingRecords) -> dict[str, int]:
    """Prefill steps, decode steps and batched decode advances (simulation events)."""
    return {
        "prefill": records.prefill_steps,
        "decode": records.decode_steps,
        "decode_events": records.decode_runs,
    }


@dataclass(frozen=True)
class TierMemory:
    """One memory tier of one socket, in bytes."""

    capacity_bytes: int
    used_bytes: int
    weights_bytes: int
    kv_bytes: int
    activations_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class Utilization:
    """How busy the machine was, the one definition every command shows: ``hbm``, HBM bytes
    moved over what the peak bandwidth could move in the time; ``pcu``, the share of
    PCU-time busy; ``flops``, matrix FLOPs over what the peak FLOP/s could do. A run's are
    time-weighted over its steps and divided by the makespan (idle time counts as zero);
    a step's are its own (:meth:`of_step`)."""

    hbm: float
    pcu: float
    flops: float

    @classmethod
    def of_step(cls, cost: StepCost) -> Utilization:
        """One step's utilization (``rdu-sim step``, ``run --step``)."""
        return cls(hbm=cost.hbm_util, pcu=cost.pcu_util, flops=cost.flops_util)


UTILIZATION_LABELS = {
    "hbm": "HBM bandwidth used (of peak)",
    "pcu": "compute busy (PCUs or SMs, share of unit-time)",
    "flops": "matrix FLOP/s (of peak)",
}
"""The one label of each :class:`Utilization` figure, in every command and plot (the
definitions: its docstring and docs/serving.md)."""


OCCUPANCY_FULL = 0.9
"""Mean slot occupancy below which an open-loop run's throughput is set by its offered load
(slots stood idle waiting for requests) rather than by the machine."""


@dataclass(frozen=True)
class OfferedLoad:
    """What the run was asked to serve: ``arrival`` (``poisson``, ``closed_loop``,
    ``all_at_once``), ``rate_per_s`` (Poisson; None when a trace's times are replayed),
    ``concurrency`` (closed-loop users), ``trace`` (the file, as the workload names it),
    the length mixes in words and the run's mean lengths (tokens, after clipping to the
    context)."""

    arrival: str
    rate_per_s: float | None
    concurrency: int | None
    trace: str | None
    prompt_mix: str
    output_mix: str
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None

    @property
    def asked_tokens_per_s(self) -> float | None:
        """Output tokens asked for a second: a Poisson rate x the mean output (None for
        other arrivals and for a replayed trace)."""
        if self.rate_per_s is None or self.mean_output_tokens is None:
            return None
        return self.rate_per_s * self.mean_output_tokens


def describe_lengths(dist: FixedLength | UniformLength | LognormalLength) -> str:
    """A length distribution in words: ``fixed 1,024``, ``uniform 512-4,096``, ``lognormal
    (median 1,500, sigma 0.5) in 1-8,192``."""
    if isinstance(dist, FixedLength):
        return f"fixed {dist.value:,}"
    if isinstance(dist, UniformLength):
        return f"uniform {dist.low:,}-{dist.high:,}"
    return (
        f"lognormal (median {human.number(dist.median)}, sigma {human.number(dist.sigma)}) "
        f"in {dist.low:,}-{dist.high:,}"
    )


def offered_load(scenario: Scenario, requests: RequestSet) -> OfferedLoad:
    """The load of a run, from its workload and the requests it drew."""
    serving = scenario.workload.serving
    arrival = serving.arrival
    trace = serving.trace
    from_trace = "from the trace" if trace is not None else None

    def mean(values: NDArray[np.int64]) -> float | None:
        return rounded_float(float(values.mean())) if values.size else None

    replayed = trace is not None and arrival.process == "poisson"
    users = requests.concurrency  # a closed loop's users: never more than its requests
    return OfferedLoad(
        arrival=arrival.process,
        rate_per_s=None if replayed or arrival.process != "poisson" else arrival.rate,
        concurrency=None if users is None else min(users, len(requests.prompt_tokens)),
        trace=trace,
        prompt_mix=from_trace or describe_lengths(serving.prompt_tokens),
        output_mix=from_trace or describe_lengths(serving.output_tokens),
        mean_prompt_tokens=mean(requests.prompt_tokens),
        mean_output_tokens=mean(requests.output_tokens),
    )


def queue_grew(queue_delay_s: Percentiles, e2e_s: Percentiles) -> bool:
    """Whether the machine fell behind the arrivals: the requests waited longer to be
    admitted than the rest of ``e2e_s`` took (a run's end-to-end latency; a cluster's time
    to first token, ``report.cluster.cluster_bound``; means over the completed requests: by
    Little's law more requests were then waiting than being served, on average). Whatever its slots'
    occupancy: a Composition of Experts serves one expert's requests a turn, so its slots
    stand mostly empty while the other experts' requests queue. (A served rate below the
    asked one is no second sign: measured over the decode span it takes in the drain after
    the last arrival, and falls short in runs that kept up too.)"""
    waited, e2e = queue_delay_s.mean, e2e_s.mean
    return waited is not None and e2e is not None and waited > e2e - waited


def in_flight(load: OfferedLoad, requests: int) -> int | None:
    """The requests a run holds ready for the machine from the start: a closed loop's
    users (``load.concurrency``), or an ``all_at_once`` run's ``requests``, all arrived at
    once (while they outnumber the slots, the next one waits for a slot as a closed loop's
    does); None for arrivals at a rate or at a trace's times."""
    if load.arrival == "all_at_once":
        return requests
    return load.concurrency if load.arrival == "closed_loop" else None


def machine_saturated(records: ServingRecords, batch_slots: int, first_arrival: float) -> bool:
    """Whether the machine could take no more request for at least :data:`OCCUPANCY_FULL`
    of the time from the first arrival to the last admission: every batch slot held, or a
    request waiting to be admitted (it had arrived, so a slot stood empty only because the
    machine was busy, prefilling another one). Over that span only: after the last
    admission no request is left to offer, and the drain that follows, which every finite
    run has, says nothing of the load (a short run at 1,000 req/s drains to 63%
    occupancy). Never for fewer requests than slots: they cannot hold them all, and what
    they waited for was one another's prefill (``queue_grew`` tells when that was most
    of their time)."""
    done = records.completed
    if int(done.sum()) < batch_slots:
        return False
    last_admit = float(records.seconds(records.admit_ps[done].max(keepdims=True))[0])
    if last_admit <= first_arrival:
        return False
    counts = records.series.counts()
    full = ((counts[:, 0] > 0) | (counts[:, 1] + counts[:, 2] >= batch_slots)).astype(np.float64)
    times = records.series.times().astype(np.float64) / PS_PER_S
    return _time_average(times, full, first_arrival, last_admit) >= OCCUPANCY_FULL


def why_bound(
    closed_loop: bool,
    occupancy: float,
    queue_grew: bool,
    users: int | None = None,
    slots: int = 0,
    saturated: bool = False,
) -> str:
    """What set a run's throughput: ``few_users`` (a closed loop, or an ``all_at_once``
    run, of fewer ``users`` (:func:`in_flight`) than the ``slots``: it could never fill
    them), ``closed_loop`` (the machine always had the next request: a closed loop, or
    ``all_at_once`` requests waiting), ``slots_busy`` (occupied at least
    :data:`OCCUPANCY_FULL` of the time), ``queue_grew`` (:func:`queue_grew`, whatever the
    occupancy), ``saturated`` (:func:`machine_saturated`: requests kept waiting while slots stood
    empty, as the machine prefilled others), or ``slots_idle``: an open loop whose slots
    stood mostly idle with no request waiting, so more requests would have raised the
    throughput."""
    if closed_loop and users is not None and users < slots:
        return "few_users"
    if closed_loop:
        return "closed_loop"
    if occupancy >= OCCUPANCY_FULL:
        return "slots_busy"
    if queue_grew:
        return "queue_grew"
    return "saturated" if saturated else "slots_idle"


def throughput_bound(
    closed_loop: bool,
    occupancy: float,
    queue_grew: bool,
    users: int | None = None,
    slots: int = 0,
    saturated: bool = False,
) -> str:
    """``offered_load`` when the slots stood idle for want of requests (:func:`why_bound`
    ``slots_idle``, or fewer users than slots, ``few_users``): it measures the arrivals or
    the users; else ``machine``."""
    why = why_bound(closed_loop, occupancy, queue_grew, users, slots, saturated)
    return "offered_load" if why in ("slots_idle", "few_users") else "machine"


@dataclass(frozen=True)
class StepCacheStats:
    """How the step cache served the run: hits and misses counted per step, shapes
    simulated."""

    hits: int
    misses: int
    hit_rate: float
    shapes: int


@dataclass(frozen=True)
class WeightReplicas:
    """Weights the memory plan holds whole on every device beyond the slices the layout
    gives them (MLA's query and value weights, `compiler.placement.whole_queries`): their
    names and those extra bytes per device, inside ``memory.hbm.weights_bytes``."""

    names: list[str]
    bytes: int

    @classmethod
    def of(cls, placement: Placement) -> WeightReplicas | None:
        """``placement``'s replicas; None when it holds none."""
        if not placement.replicas:
            return None
        return cls(list(placement.replicas), placement.replica_bytes)


@dataclass(frozen=True)
class KVPoolSummary:
    """A paged KV cache's pool (``kv.paged``; one device's share of each page): its pages
    and their tokens and bytes, the pages the workload's smallest request reserves, and the
    pages the run's admissions held: the most at once and the time-weighted mean over the
    makespan (never more than ``pages``); under pages given on demand (the stack's
    ``kv_allocation: on_demand``) the requests preempted for a decode step's pages, a
    request once each time (absent from the JSON for a pool that reserves)."""

    page_tokens: int
    pages: int
    tokens: int
    bytes: int
    smallest_request_pages: int
    peak_pages: int
    mean_pages: float | None
    preemptions: int | None = None


def kv_pool_summary(run: ServingRun, makespan: float) -> KVPoolSummary | None:
    """The run's paged KV pool (None for static slots, a cluster's or a CoE node's)."""
    pool = run.placement.kv_pool
    if pool is None or run.coe is not None:
        return None
    counts = run.records.counts
    mean = counts.kv_page_ps / PS_PER_S / makespan if makespan > 0 else None
    return KVPoolSummary(
        page_tokens=pool.page_tokens,
        pages=pool.pages,
        tokens=pool.tokens,
        bytes=pool.pages * pool.page_bytes,
        smallest_request_pages=smallest_request_pages(run.scenario),
        peak_pages=counts.kv_pages_peak,
        mean_pages=rounded_float(mean),
        preemptions=counts.preemptions if pool.gives_on_demand(run.scenario.role) else None,
    )


@dataclass(frozen=True)
class StepCounts:
    """Steps the server ran: prefill steps, decode steps, and the decode advances (events)
    they were simulated in."""

    prefill: int
    decode: int
    decode_events: int


@dataclass(frozen=True)
class DecodeStepBound:
    """The decode step a run ran most often, against its bounds (one socket)."""

    batch: int
    context: int
    step_s: float
    bytes_by_tier: dict[str, float]
    hbm_s: float
    ddr_s: float
    compute_s: float
    bound: str
    runtime_s: float = 0.0
    link_s: float = 0.0
    host_s: float = 0.0
    blocks_s: float = 0.0
    boundaries_s: float = 0.0
    # a pipelined step's bubble (``report.bound.StepBound.bubble``); None, and left out of
    # the JSON, without a pipeline
    pipeline_bubble: float | None = None
    # a decode pipeline's estimate at fewer micro-batches when it is faster
    # (``report.bound.StepBound.fewer_micro_batches``); None, and left out of the JSON, else
    fewer_micro_batches: dict[str, float] | None = None
    launch_s: float = 0.0
    loop_s: float = 0.0
    host_link_s: float = 0.0
    host_hidden_s: float = 0.0
    unaccounted_s: float = 0.0
    # the link class whose busiest direction took longest (``report.bound.StepBound.link``);
    # None when no link was busy
    link: str | None = None
    pmu_s: float = 0.0
    # which part of that class's time is larger (``report.bound.StepBound.link_term``)
    link_term: str | None = None
    # whether ``bound`` binds the step (its time at least ``report.bound.BINDS_SHARE`` of
    # it: the step report's "bound by") or is only its largest part ("largest part")
    binds: bool = True

    def times(self) -> dict[str, float]:
        """Each resource's time, by name (``report.bound.RESOURCES``)."""
        return resource_times(self)


def decode_step_bound(run: ServingRun) -> DecodeStepBound | None:
    """The most frequent decode step of ``run`` with its HBM, DDR and compute bounds
    (``report.bound.step_bound``)."""
    cache = run.cache
    decodes = [(n, shape) for shape, n in cache.steps.items() if shape.phase == "decode"]
    if not decodes:
        return None
    shape = max(decodes, key=lambda item: (item[0], item[1].batch, item[1].cache_len))[1]
    detail = cache.cost(shape).detail
    if not isinstance(detail, StepTiming):
        return None
    return DecodeStepBound(**_bound_fields(shape, detail, run.scenario.hardware))


@dataclass(frozen=True)
class PrefillStepBound(DecodeStepBound):
    """The prefill step a run spent the most time in (its step time x the steps run of it)
    against its bounds, as the decode step's: its ``tokens`` (a prompt's, or a chunk's, a
    bucket's when padded) and ``busy_share``, the share of the run's step time (every
    shape's step time x the steps run of it) its prefill steps took."""

    tokens: int = 0
    busy_share: float = 0.0


def prefill_step_bound(run: ServingRun) -> PrefillStepBound | None:
    """The prefill step ``run`` spent the most time in, against its bounds
    (``report.bound.step_bound``), and the share of the run's step time in prefill (None
    when the run ran no prefill step)."""
    cache = run.cache
    time = {shape: n * cache.step_s(shape) for shape, n in cache.steps.items()}
    prefills = {shape: t for shape, t in time.items() if shape.phase == "prefill"}
    if not prefills:
        return None
    shape = max(prefills, key=lambda s: (prefills[s], s.batch, s.tokens, s.cache_len))
    detail = cache.cost(shape).detail
    if not isinstance(detail, StepTiming):
        return None
    return PrefillStepBound(
        **_bound_fields(shape, detail, run.scenario.hardware),
        tokens=shape.tokens,
        busy_share=sum(prefills.values()) / sum(time.values()),
    )


def _bound_fields(shape: StepShape, detail: StepTiming, hardware: Hardware) -> dict[str, Any]:
    """A step's `DecodeStepBound` fields: its shape, time and bytes, and each resource's
    time against ``hardware`` (``report.bound.step_bound``, the one reading of a bound)."""
    bound = step_bound(detail, hardware)
    return {
        "batch": shape.batch,
        "context": shape.cache_len,
        "step_s": detail.step_s,
        "bytes_by_tier": {t: b for t, b in detail.bytes_by_tier.items() if t in ("hbm", "ddr")},
        "hbm_s": bound.hbm_s,
        "ddr_s": bound.ddr_s,
        "compute_s": bound.compute_s,
        "bound": bound.bound,
        "runtime_s": bound.runtime_s,
        "link_s": bound.link_s,
        "host_s": bound.host_s,
        "blocks_s": bound.blocks_s,
        "boundaries_s": bound.boundaries_s,
        "pipeline_bubble": bound.bubble,
        "fewer_micro_batches": None
        if bound.fewer_micro_batches is None
        else dict(bound.fewer_micro_batches),
        "launch_s": bound.launch_s,
        "loop_s": bound.loop_s,
        "host_link_s": bound.host_link_s,
        "host_hidden_s": bound.host_hidden_s,
        "unaccounted_s": bound.unaccounted_s,
        "link": bound.link or None,
        "pmu_s": bound.pmu_s,
        "link_term": bound.link_term or None,
        "binds": bound_label(bound.limit_s, bound.step_s) == "bound by",
    }


@dataclass(frozen=True)
class RunSummary:
    """The metrics of one serving run, typed; :meth:`to_dict` is the JSON contract of
    ``rdu-sim run --json`` (docs/serving.md). Floats are already rounded as the JSON is, so
    an attribute and its JSON value are the same number."""

    model: str
    workload: str
    hardware: str
    stack: str  # the serving stack that ran (stacks/; 'none': the device alone, no host time)
    device: str  # what one device is: 'socket' (SN40L) or 'GPU'
    tp: int
    # the parallel degrees by their parallelism.* names (ParallelismConfig.layout)
    layout: dict[str, int]
    sockets: int
    seed: int
    max_context: int
    version: str
    kv_policy: str
    # what the policy's slot keeps (its layout in words), and how many of the run's
    # requests it cut: prompts compressed at prefill, slots whose decode wrapped the ring
    # (or, ``decode_evicts``, whose decode eviction dropped tokens)
    kv_kept: KeptCounts
    batching_policy: str  # serving.prefill_priority: the batching policy's registered name
    dtypes: dict[str, str]
    load: OfferedLoad
    throughput_bound: str
    batch_capacity: int
    # slots memory holds beside the weights; what bounds batch_capacity below it (memory,
    # the stack's max_batch_slots or batch_programs); both in words (`capacity_words`)
    memory_capacity: int
    capacity_limit: str
    capacity: str
    batch_slots: int
    kv_bytes_per_slot: int
    memory: dict[str, TierMemory]
    # the pipeline stage whose device `memory` is (the fullest); None without a pipeline
    memory_stage: int | None
    weights_placement: str
    warnings: list[str]
    decode_step: DecodeStepBound | None
    # the typical prompt's prefill step against its bounds, and prefill's share of the steps
    prefill_step: PrefillStepBound | None
    coe: CoESummary | None
    requests: int
    requests_completed: int
    requests_truncated: int
    prompt_tokens_truncated: int
    output_tokens_truncated: int
    output_tokens: int
    prefill_s: float | None
    ttft_s: Percentiles
    tpot_s: Percentiles
    queue_delay_s: Percentiles
    e2e_s: Percentiles
    decode_tokens_per_s: float | None
    decode_span_s: float | None  # what decode_tokens_per_s divides by: first token to last
    steady_decode_tokens_per_s: float | None
    steady_window_s: tuple[float | None, float | None] | None
    user_tokens_per_s: Percentiles
    makespan_s: float | None
    occupancy: float | None
    decode_slot_fill: float | None
    utilization: Utilization
    step_cache: StepCacheStats
    steps: StepCounts
    energy: Energy | None
    provenance: dict[str, Any]
    accepted_tokens_per_step: float | None = None  # speculative decoding: tokens per round
    speculation: SpeculationSummary | None = None
    kv_pool: KVPoolSummary | None = None  # a paged KV cache's pool (absent from the JSON else)
    # weights held whole on every device beyond their slices (absent from the JSON else)
    weight_replicas: WeightReplicas | None = None
    # a replayed trace's rows arriving before a row above them, replayed by arrival (0: none,
    # or no trace replayed; a leaf every result holds, as ``predicted``)
    out_of_order_rows: int = 0
    # hardware predicted, not measured (``config.origins.predicted_words``: its device
    # differs from the machine whose fitted values it keeps); None (JSON null) else, a leaf
    # every result holds (``sweep.run.full_names``)
    predicted: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: nested plain dicts, lists for pairs. The provenance is kept
        exact (a configuration rounded to 12 digits would not reproduce the run), and a copy,
        as the rest is: editing what this returns changes neither the summary nor a later call."""
        data: dict[str, Any] = rounded(asdict(replace(self, provenance={})))
        data["provenance"] = copy.deepcopy(self.provenance)
        for key in ("decode_step", "prefill_step"):
            step = data[key]
            if step is not None and step["pipeline_bubble"] is None:
                del step["pipeline_bubble"]  # only a pipeline has one (as step's ``pipeline``)
            if step is not None and step["fewer_micro_batches"] is None:
                del step["fewer_micro_batches"]  # only when fewer would be faster
        data["kv_kept"] = self.kv_kept.to_dict()
        pool = data["kv_pool"]
        if pool is None:
            del data["kv_pool"]  # only a paged KV cache has one
        elif pool["preemptions"] is None:
            del pool["preemptions"]  # only pages given on demand preempt
        if data["weight_replicas"] is None:
            del data["weight_replicas"]  # only a plan holding MLA's query weights whole
        return data


def memory_summary(placement: Placement) -> dict[str, TierMemory]:
    """Per tier: capacity, used, weights, KV, activations and free bytes (one socket)."""
    out: dict[str, TierMemory] = {}
    for tier in TIERS:
        usage = placement.tiers.get(tier)
        if usage is None:
            continue
        out[tier] = TierMemory(
            capacity_bytes=int(usage.capacity_bytes),
            used_bytes=int(usage.used_bytes),
            weights_bytes=int(usage.weights_bytes),
            kv_bytes=int(usage.kv_bytes),
            activations_bytes=int(usage.activations_bytes),
            free_bytes=int(usage.free_bytes),
        )
    return out


def request_columns(records: ServingRecords, rows: slice = slice(None)) -> dict[str, NDArray[Any]]:
    """Per-request columns (seconds), in request-id order; for CSV and plots. ``rows``: the
    requests ``rows.start`` to ``rows.stop`` only (a block of ``requests.csv``; every value
    is computed element by element, so a block's rows equal the whole table's)."""
    sec = records.seconds
    arrival, admit = sec(records.arrival_ps[rows]), sec(records.admit_ps[rows])
    first, finish = sec(records.first_token_ps[rows]), sec(records.finish_ps[rows])
    output = records.output_tokens[rows]
    decode_tokens = (output - 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (finish - first) / np.maximum(decode_tokens, 1), np.nan)
    columns = {
        "request": np.arange(len(records), dtype=np.int64)[rows],
        "prompt_tokens": records.prompt_tokens[rows],
        "output_tokens": output,
        "slot": records.slot[rows],
        "arrival_s": arrival,
        "admit_s": admit,
        "first_token_s": first,
        "finish_s": finish,
        "queue_delay_s": admit - arrival,
        "ttft_s": first - arrival,
        "tpot_s": tpot,
        "e2e_s": finish - arrival,
    }
    if records.coe:  # the expert asked for, hit or miss, and what CoE adds to queue_delay_s
        columns["expert"] = records.expert[rows]
        columns["expert_hit"] = records.expert_hit[rows]
        columns["router_s"] = sec(records.router_ps[rows])
        columns["copy_stall_s"] = sec(records.copy_stall_ps[rows])
    if records.speculation == "prefill":
        columns["kept_prompt_tokens"] = records.target_prompt_tokens[rows]
    if records.speculation == "decoding":
        if records.acceptance_rates is not None:
            columns["acceptance_rate"] = records.acceptance_rates[rows]
        rounds = records.rounds[rows]
        columns["rounds"] = rounds
        with np.errstate(divide="ignore", invalid="ignore"):
            columns["accepted_tokens_per_step"] = np.where(
                rounds > 0, decode_tokens / np.maximum(rounds, 1), np.nan
            )
    return columns


def series_columns(records: ServingRecords, batch_slots: int) -> dict[str, NDArray[Any]]:
    """The state-change time series: the state after each instant's changes (one row per
    instant: ``SeriesLog``)."""
    counts = records.series.counts()
    occupied = counts[:, 1] + counts[:, 2]
    return {
        "time_s": records.series.times().astype(np.float64) / PS_PER_S,
        "waiting": counts[:, 0],
        "prefilling": counts[:, 1],
        "decoding": counts[:, 2],
        "occupied": occupied,
        "occupancy": occupied / batch_slots,
        "decode_bucket": counts[:, 3],
    }


def _time_average(
    times: NDArray[np.float64], values: NDArray[Any], start: float, end: float
) -> float:
    """Mean over [start, end] of the step function (times[i] -> values[i]). In place where
    it can be (the same products, the same sum): two temporaries of the series' length."""
    if end <= start or times.size == 0:
        return 0.0
    edges = np.append(times, end)
    np.clip(edges, start, end, out=edges)
    widths = np.diff(edges)
    del edges
    widths *= values
    return float(widths.sum() / (end - start))


def _occupancy(records: ServingRecords, batch_slots: int, start: float, end: float) -> float:
    """Time-weighted slot occupancy over [start, end] (seconds): ``series_columns``'s
    ``occupancy`` column averaged, without building its other columns."""
    counts = records.series.counts()
    occupancy = (counts[:, 1] + counts[:, 2]) / batch_slots
    times = records.series.times().astype(np.float64) / PS_PER_S
    return _time_average(times, occupancy, start, end)


@dataclass(frozen=True)
class _Latencies:
    """What the summary reads of the per-request times, computed a column at a time over
    the completed requests, so a million-request run never holds ``request_columns``'s dozen
    full columns at once. Each value is the same float arithmetic on the same elements, in
    the same order, as the column it stands for: the figures are bit-identical."""

    first_arrival: float
    last_finish: float
    first_token: float
    ttft: Percentiles
    tpot: Percentiles
    queue_delay: Percentiles
    e2e: Percentiles
    user_tokens_per_s: Percentiles


def _latencies(records: ServingRecords) -> _Latencies:
    sec = records.seconds
    done = records.completed
    arrival = sec(records.arrival_ps[done])
    first = sec(records.first_token_ps[done])
    finish = sec(records.finish_ps[done])
    ttft = Percentiles.of(first - arrival)
    e2e = Percentiles.of(finish - arrival)
    queue_delay = Percentiles.of(sec(records.admit_ps[done]) - arrival)
    output = records.output_tokens[done]
    with np.errstate(divide="ignore", invalid="ignore"):
        decode_tokens = (output - 1).astype(np.float64)
        tpot = np.where(output > 1, (finish - first) / np.maximum(decode_tokens, 1), np.nan)
    tpot = tpot[np.isfinite(tpot)]
    # min and max commute with the monotone int -> seconds conversion: exact on the ints
    return _Latencies(
        first_arrival=float(sec(records.arrival_ps.min(keepdims=True))[0]) if len(records) else 0.0,
        last_finish=float(finish.max()) if finish.size else 0.0,
        first_token=float(first.min()) if first.size else 0.0,
        ttft=ttft,
        tpot=Percentiles.of(tpot),
        queue_delay=queue_delay,
        e2e=e2e,
        user_tokens_per_s=Percentiles.of(1.0 / tpot[tpot > 0]),
    )


def run_warnings(run: ServingRun, speculation: SpeculationSummary | None) -> list[RduSimWarning]:
    """What a reader of the run must be told, each as the warning of its kind (a class a
    script can filter): weights pushed to DDR, speculation slower than plain decoding,
    prompts past the stack's token budget. The one rule for both: a run's report and JSON
    say their words (``warnings``), and ``api.run`` emits them (``RunResult.warn``); and
    ``serving.requests`` past the rows of the run's trace, and a large share of requests cut
    to the context (``serving.requests.truncation_words``)."""
    scenario = run.scenario
    found: list[RduSimWarning] = []
    if not run.coe:  # a CoE plan keeps its experts in DDR and caches them in HBM by design
        found += [WeightsSpilledWarning(w) for w in placement_warnings(scenario, run.placement)]
    found += [SlowSpeculationWarning(w) for w in speculation_warnings(speculation)]
    unchunked = unchunked_words(scenario, run.requests_in.prompt_tokens)
    if unchunked is not None:
        found.append(UnchunkedPromptWarning(unchunked))
    short = short_trace_words(scenario.workload.serving, len(run.requests_in.prompt_tokens))
    if short is not None:
        found.append(ShortTraceWarning(short))
    truncated = truncation_words(run.requests_in, scenario.workload.serving.max_context)
    if truncated is not None:
        found.append(TruncatedRequestsWarning(truncated))
    return found


def summarize(run: ServingRun) -> RunSummary:
    """The metrics of a serving run, from the records its serving simulation emitted."""
    scenario, records, cache, batch_slots = run.scenario, run.records, run.cache, run.batch_slots
    done = records.completed
    output_tokens = int(records.tokens_generated)
    latencies = _latencies(records)
    first_arrival, last_finish = latencies.first_arrival, latencies.last_finish
    makespan = last_finish - first_arrival
    decode_span = last_finish - latencies.first_token
    occupancy = rounded_float(_occupancy(records, batch_slots, first_arrival, last_finish))
    # slot-steps that decoded: one per decode token, or per round when a step is a
    # speculative round (which emits several tokens for a slot)
    decoded = (
        int(records.rounds[done].sum())
        if records.speculation == "decoding"
        else output_tokens - int(done.sum())
    )
    decoding_steps = records.decode_steps + records.mixed_steps  # every step that decoded
    decode_fill = decoded / (decoding_steps * batch_slots) if decoding_steps else 0.0
    kv_total = sum(u.kv_bytes for u in run.placement.tiers.values())
    steady = steady_state(records, batch_slots, run.requests_in.closed_loop)
    speculation = speculation_summary(run)
    load = offered_load(scenario, run.requests_in)
    users = in_flight(load, len(records))
    decode_tokens_per_s = rounded_float(output_tokens / decode_span if decode_span > 0 else 0.0)
    shared = (
        (run.speculation.draft_cache,)
        if run.speculation is not None and speculation and speculation.placement == "shared"
        else ()
    )
    dtypes = scenario.workload.dtypes
    return RunSummary(
        model=scenario.model.name,
        workload=scenario.workload.name,
        hardware=scenario.hardware.name,
        stack=scenario.stack.name,
        device=device_noun(scenario.hardware),
        tp=scenario.tp,
        layout=scenario.workload.parallelism.layout(),
        sockets=scenario.hardware.system.sockets,
        seed=scenario.workload.serving.seed,
        max_context=scenario.workload.serving.max_context,
        version=__version__,
        kv_policy=scenario.kv_policy.name,
        kv_kept=kept_counts(  # the prompts the target prefills (speculative prefill's kept)
            scenario.kv_policy, records.target_prompt_tokens, records.output_tokens
        ),
        batching_policy=scenario.workload.serving.prefill_priority,
        dtypes={
            "weights": scenario.weight_dtype,
            "experts": scenario.expert_dtype,
            "kv": dtypes.kv,
            "activations": dtypes.activations,
        },
        load=load,
        throughput_bound=throughput_bound(
            users is not None,
            occupancy or 0.0,
            queue_grew(latencies.queue_delay, latencies.e2e),
            users,
            batch_slots,
            users is None and machine_saturated(records, batch_slots, first_arrival),
        ),
        batch_capacity=run.batch_capacity,
        memory_capacity=run.memory_capacity,
        capacity_limit="coe" if run.coe else scenario.stack.batch_limit(run.memory_capacity),
        capacity=(coe_capacity_words if run.coe else capacity_words)(
            scenario, run.memory_capacity, run.batch_capacity, batch_slots
        ),
        batch_slots=batch_slots,
        kv_bytes_per_slot=int(kv_total // batch_slots) if batch_slots else 0,
        memory=memory_summary(run.placement),
        memory_stage=run.placement.pipeline_stage if run.placement.pipeline_stage >= 0 else None,
        weights_placement="coe" if run.coe else weights_placement(scenario, run.placement),
        warnings=[str(said) for said in run_warnings(run, speculation)],
        decode_step=decode_step_bound(run),
        prefill_step=prefill_step_bound(run),
        coe=coe_summary(run.coe, records) if run.coe is not None else None,
        requests=len(records),
        requests_completed=int(done.sum()),
        requests_truncated=run.requests_in.truncated,
        prompt_tokens_truncated=run.requests_in.prompt_tokens_cut,
        output_tokens_truncated=run.requests_in.output_tokens_cut,
        output_tokens=output_tokens,
        prefill_s=rounded_float(run.prefill_s),
        ttft_s=latencies.ttft,
        tpot_s=latencies.tpot,
        queue_delay_s=latencies.queue_delay,
        e2e_s=latencies.e2e,
        decode_tokens_per_s=decode_tokens_per_s,
        decode_span_s=rounded_float(decode_span),
        steady_decode_tokens_per_s=rounded_float(steady.tokens_per_s)
        if steady is not None
        else None,
        steady_window_s=(rounded_float(steady.start_s), rounded_float(steady.end_s))
        if steady is not None
        else None,
        user_tokens_per_s=latencies.user_tokens_per_s,
        makespan_s=rounded_float(makespan),
        occupancy=occupancy,
        decode_slot_fill=rounded_float(decode_fill),
        utilization=Utilization(
            **{
                key: rounded_float(value) or 0.0
                for key, value in utilization(cache, makespan, *shared).items()
            }
        ),
        step_cache=StepCacheStats(
            hits=cache.hits,
            misses=cache.misses,
            hit_rate=rounded_float(cache.hit_rate) or 0.0,
            shapes=len(cache.shapes),
        ),
        steps=StepCounts(**steps_run(records)),
        energy=energy_of(
            scenario.hardware.power,
            scenario.hardware.cost,
            # the replica's devices and a separate draft's; the idle rest of the machine is a
            # cluster's other replicas (as a cluster run counts its pools)
            scenario.workload.parallelism.devices + draft_devices(speculation),
            scenario.hardware.system.sockets_per_node,
            makespan,
            output_tokens,
        ),
        provenance=of_scenario(scenario),
        accepted_tokens_per_step=rounded_float(
            speculation.decoding.accepted_tokens_per_step
            if speculation is not None and speculation.decoding is not None
            else None
        ),
        speculation=speculation,
        kv_pool=kv_pool_summary(run, makespan),
        weight_replicas=WeightReplicas.of(run.placement),
        out_of_order_rows=run.requests_in.out_of_order,
        predicted=predicted_words(scenario.hardware_file),
    )
