"""How a stage's collective chunk reaches the links: one socket's chain, or all sockets.

A stage with a ``CollectiveSpec`` hands each finished chunk of its output to a port, which
starts the chunk's collective on the run's ``Topology`` with the algorithm chosen for the
stage's message size and the wiring (``plan_stages``, once per kernel: ``hw.collective_choice``
for each stage, a kernel's expert all-to-alls by the ports they share), and returns the event
that fires when the chunk has been reduced/gathered everywhere.
Each port keeps when each call's pieces started and finished (``spans``), for the step's
per-collective report (``CollectiveTiming``).

* :class:`SymmetricPort` (one simulated socket): every socket of the group reaches the chunk at
  the same instant, so the hw collectives' symmetric shortcut (one rotational period of the
  ring: socket 0's chain for identical links, one node's sockets and outgoing links for a ring
  over several nodes; socket 0's sends for the direct forms; exact either way) gives the
  chunk's completion.
* :class:`RendezvousPort` (all sockets simulated): the collective starts when the last socket
  of the group has produced the chunk (a socket cannot forward a partial sum it does not yet
  have), and then every hop of every socket is simulated. With identical sockets they all
  arrive together, which is why both ports give the same step time.

Groups are consecutive sockets: socket ``s`` belongs to group ``s // spec.group``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from rdu_sim.compiler.program import CollectiveSpec, KernelProgram, StageProgram
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.all_to_all import MODES, AllToAll, all_to_all
from rdu_sim.hw.all_to_all import estimate as all_to_all_estimate
from rdu_sim.hw.all_to_all import sent_bytes as all_to_all_sent
from rdu_sim.hw.collective_choice import TIE_RTOL, CollectivePlan, Estimate, Wiring, choose
from rdu_sim.hw.collective_run import start_collective
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective, Topology
from rdu_sim.pickled import Reduced, by_fields
from rdu_sim.shapes import AllToAllSpec

HW_KINDS = {"allreduce": ALL_REDUCE, "allgather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER}
"""A Program's collective kinds by their hw names."""


def wiring_of(system: SystemConfig) -> Wiring:
    """The hardware's wiring as the collective chooser sees it."""
    return Wiring(
        system.topology,
        system.sockets_per_node,
        (system.intra_node_link.bandwidth, system.intra_node_link.latency),
        (system.inter_node_link.bandwidth, system.inter_node_link.latency),
        system.sockets_per_rack,
        None
        if system.inter_rack_link is None
        else (system.inter_rack_link.bandwidth, system.inter_rack_link.latency),
        system.network_through_node_port,
    )


def plan_collective(spec: CollectiveSpec, system: SystemConfig) -> CollectivePlan:
    """The algorithm a stage's collective runs, the stage alone (:func:`plan_stages` plans a
    kernel's all-to-alls together): chosen (or forced) by the hardware's
    ``collective_algorithm`` for the stage's whole tensor, ``spec.bytes`` in
    ``collective_chunks`` pieces, over the group's wiring (the pieces leave as the tiles that
    feed them finish; the estimate takes them all at once, the bandwidth-bound case)."""
    if spec.exchange is not None:
        return plan_all_to_alls(((spec.exchange, spec.bytes),), spec.group, system)[0]
    kind = HW_KINDS.get(spec.kind)
    if kind is None:
        raise ValueError(
            f"unknown collective kind {spec.kind!r}; valid: allreduce, allgather, reduce_scatter"
        )
    return choose(
        kind,
        spec.bytes,
        spec.group,
        wiring_of(system),
        system.collective_algorithm,
        pieces=system.collective_chunks,
    )


def plan_stages(kernel: KernelProgram, system: SystemConfig) -> dict[str, CollectivePlan]:
    """The plan of each stage of ``kernel`` with a collective over more than one socket, by
    stage name: the all-to-alls of a group together (:func:`plan_all_to_alls`: they stream
    through the same ports, layer after layer, at the kernel's ``pace_s``), any other
    collective on its own."""
    plans: dict[str, CollectivePlan] = {}
    exchanges: dict[int, list[StageProgram]] = {}
    for stage in kernel.stages:
        spec = stage.collective
        if spec is None or spec.group <= 1:
            continue
        if spec.exchange is None:
            plans[stage.name] = plan_collective(spec, system)
        else:
            exchanges.setdefault(spec.group, []).append(stage)
    for group, members in exchanges.items():
        calls = tuple(_exchange_call(s) for s in members)
        chosen = plan_all_to_alls(calls, group, system, kernel.pace_s)
        for stage, plan in zip(members, chosen, strict=True):
            plans[stage.name] = plan
    return plans


def _exchange_call(stage: StageProgram) -> tuple[AllToAllSpec, float]:
    spec = stage.collective
    assert spec is not None and spec.exchange is not None
    return spec.exchange, spec.bytes


def together_s(estimates: Sequence[Estimate], pace_s: float = 0.0) -> float:
    """The least time all-to-alls streamed through the same ports take (each estimate's
    ``busy_s``: its seconds on each port or link direction alone) when their pieces are
    produced by a pipeline taking ``pace_s`` a call: their busiest shared port's total busy
    seconds, or the slowest one's own time on idle links, or the pipeline's pace, whichever
    is longest. Alone a call's estimate; together, what one leaves a port idle for (a second
    hop's wait for its first) the others' pieces fill. A load under the pace does not queue
    the pieces (the ports drain each before the pipeline hands out the next, the calls only
    interleave): it is no cost, and the choice falls to each call's own time."""
    load: dict[str, float] = {}
    for est in estimates:
        for port, seconds in est.busy_s:
            load[port] = load.get(port, 0.0) + seconds
    slowest = max((e.time_s for e in estimates), default=0.0)
    return max(max(load.values(), default=0.0), slowest, pace_s)


MAX_JOINT_CALLS = 8
"""The most all-to-alls of a kernel chosen together (2^8 pairs of forms scored); a kernel
with more (none today: a fused layer has its dispatch and combine) has each chosen alone."""


def plan_all_to_alls(
    calls: Sequence[tuple[AllToAllSpec, float]],
    group: int,
    system: SystemConfig,
    pace_s: float = 0.0,
) -> tuple[CollectivePlan, ...]:
    """The forms a kernel's expert all-to-alls over ``group`` sockets run, one plan each of
    ``calls`` (routing, bytes): the workload's (``parallelism.all_to_all``), or under
    ``auto`` (``exchange.choose``) the forms, taken together, whose :func:`together_s` (over
    each form's estimate: its time alone on idle links, in the engine's pieces,
    ``all_to_all.estimate``; ``pace_s`` the kernel's pipeline time a call) is smallest, as a
    compiler holding both kernels would pick per call: a step streams a layer's dispatch and
    combine, and the next layer's, through the same ports, so where their load binds (above
    the pace: the pieces queue) a form that loads the busiest port more loses even where its
    time alone is shorter. Equal ones (every pair under the pace among them) go to the
    smaller sum of the estimates (each call's own time: the pieces interleave on idle
    ports), then to DeepEP's convention (``exchange.mode``). Each plan's policy says which
    rule chose (``auto`` or the forced form), its candidates every form's estimate."""
    wiring, pieces = wiring_of(system), system.collective_chunks
    options: list[tuple[Estimate, ...]] = []
    for exchange, nbytes in calls:
        other: Literal["direct", "hierarchical"] = (
            "hierarchical" if exchange.mode == "direct" else "direct"
        )
        modes = (exchange.mode, other) if exchange.choose else (exchange.mode,)
        options.append(
            tuple(
                all_to_all_estimate(replace(exchange, mode=m), nbytes, group, wiring, pieces)
                for m in modes
            )
        )
    if len(calls) > MAX_JOINT_CALLS:  # 2^n pairs of forms: each call chosen alone instead
        alone = (plan_all_to_alls((call,), group, system, pace_s) for call in calls)
        return tuple(plan for plans in alone for plan in plans)
    scored = [(together_s(c, pace_s), c) for c in itertools.product(*options)]  # conventions 1st
    best = min(score for score, _ in scored)
    combos = [c for score, c in scored if score <= best * (1 + TIE_RTOL)]
    least = min(sum(e.time_s for e in c) for c in combos)
    chosen = next(c for c in combos if sum(e.time_s for e in c) <= least * (1 + TIE_RTOL))
    return tuple(
        CollectivePlan(
            "alltoall",
            group,
            nbytes,
            "auto" if exchange.choose else exchange.mode,
            est,
            tuple(sorted(ests, key=lambda e: MODES.index(e.algorithm))),
        )
        for (exchange, nbytes), est, ests in zip(calls, chosen, options, strict=True)
    )


def run_exchange(spec: CollectiveSpec, plan: CollectivePlan) -> AllToAllSpec | None:
    """The all-to-all ``spec`` runs under ``plan`` (its form the plan's), or None."""
    exchange = spec.exchange
    if exchange is None:
        return None
    mode: Literal["direct", "hierarchical"] = (
        "hierarchical" if plan.algorithm == "hierarchical" else "direct"
    )
    return replace(exchange, mode=mode, choose=False)


def group_of(socket: int, group: int) -> tuple[int, ...]:
    """The sockets of ``socket``'s collective group (consecutive ids)."""
    first = (socket // group) * group
    return tuple(range(first, first + group))


class _Port:
    """A stage's collective on the links: its plan, and when each call's pieces ran."""

    def __init__(self, topo: Topology, spec: CollectiveSpec, plan: CollectivePlan) -> None:
        self.topo, self.spec, self.plan = topo, spec, plan
        self.exchange = run_exchange(spec, plan)  # an all-to-all's, in its chosen form
        # per layer call (socket 0's group): [first piece started, last piece done]
        self.spans: dict[int, list[float]] = {}
        self._sent: dict[tuple[int, float, int], float] = {}  # (position, bytes, pieces)

    def sent_bytes(self, socket: int, nbytes: float, chunks: int) -> float:
        """Bytes ``socket`` sends on its links for a chunk of ``nbytes`` in ``chunks``
        pieces, each once (``Topology.bytes_sent``): what the step's ``p2p`` bytes count,
        for the trace. An all-to-all's by its plan (``all_to_all.sent_bytes``, the same on
        every socket); another collective's by running it alone over every socket of a
        group on idle links of the same wiring (its bytes do not depend on the timing).
        Memoized; the run's own links are not touched."""
        group = self.spec.group
        key = (socket % group, nbytes, chunks)
        sent = self._sent.get(key)
        if sent is None:
            sent = self._sent[key] = self._sent_alone(key[0], nbytes, chunks)
        return sent

    def _sent_alone(self, position: int, nbytes: float, chunks: int) -> float:
        group, topo, exchange = self.spec.group, self.topo, self.exchange
        if exchange is not None:
            return all_to_all_sent(exchange, nbytes, group, topo.sockets_per_node)
        if group == 1 or nbytes == 0:
            return 0.0
        env = CountingEnvironment()
        alone = Topology(
            env,
            group,
            topo.sockets_per_node,
            *topo.intra,
            *topo.inter,
            switched=topo.switched,
            sockets_per_rack=min(topo.sockets_per_rack, group)
            if group % topo.sockets_per_node == 0
            else None,
            rack_bandwidth=topo.rack[0],
            rack_latency=topo.rack[1],
            network_through_node_port=topo.series,
        )
        call = Collective(self.plan.kind, nbytes, chunks, False, tuple(range(group)))
        start_collective(alone, call, self.plan.algorithm)
        env.run()
        alone.chains.flush()
        return alone.bytes_sent(position)

    def _run(
        self, nbytes: float, chunks: int, symmetric: bool, sockets: tuple[int, ...], layer: int
    ) -> Event:
        env = self.topo.env
        exchange = self.exchange
        if exchange is not None:
            done = all_to_all(self.topo, AllToAll(exchange, nbytes, chunks, symmetric, sockets))
        else:
            call = Collective(self.plan.kind, nbytes, chunks, symmetric, sockets)
            done = start_collective(self.topo, call, self.plan.algorithm)
        if sockets[0] == 0:
            span = self.spans.setdefault(layer, [float(env.now), float(env.now)])

            def finished(_event: Event) -> None:
                span[1] = max(span[1], float(env.now))

            done.add_callback(finished)
        return done


class SymmetricPort(_Port):
    """One simulated socket: run the symmetric shortcut of the collective (exact)."""

    def start(self, socket: int, key: int, nbytes: float, chunks: int, layer: int) -> Event:
        """Chunk ``key`` of ``nbytes`` (of layer call ``layer``) is ready on ``socket``
        (always 0 here)."""
        return self._run(nbytes, chunks, True, group_of(0, self.spec.group), layer)


class RendezvousPort(_Port):
    """All sockets simulated: start each chunk's collective when its whole group is ready."""

    def __init__(self, topo: Topology, spec: CollectiveSpec, plan: CollectivePlan) -> None:
        super().__init__(topo, spec, plan)
        self._waiting: dict[tuple[int, int], tuple[int, Event]] = {}

    def start(self, socket: int, key: int, nbytes: float, chunks: int, layer: int) -> Event:
        """Chunk ``key`` of ``nbytes`` (of layer call ``layer``) is ready on ``socket``; fires
        when the group is done."""
        group = self.spec.group
        slot = (socket // group, key)
        arrived, done = self._waiting.get(slot, (0, self.topo.env.event()))
        arrived += 1
        if arrived < group:
            self._waiting[slot] = (arrived, done)
            return done
        self._waiting.pop(slot, None)
        finished = self._run(nbytes, chunks, False, group_of(socket, group), layer)
        if finished.triggered:
            done.succeed()
        else:
            finished.add_callback(lambda _ev: _succeed(done))
        return done


def _succeed(event: Event) -> None:
    event.succeed()


CollectivePort = SymmetricPort | RendezvousPort


@dataclass(frozen=True)
class CollectiveTiming:
    """One stage's collective in a step, per call of its kernel (the stage's whole tensor, sent
    in ``collective_chunks`` pieces as the tiles feeding them finish): the algorithm chosen,
    every candidate's estimate with the latency and bandwidth terms apart, and what the
    simulation measured."""

    kernel: str
    stage: str
    kind: str  # allreduce, allgather, reduce_scatter
    group: int  # sockets taking part
    policy: str  # the hardware's collective_algorithm
    algorithm: str  # what ran
    # per call, all pieces, per socket (not per link): the collective's tensor on each
    # socket (NCCL's N: the all-reduce vector, the all-gather output, the reduce-scatter
    # input); for an all-to-all the socket's own tokens, one copy each, not what it sends
    # (``sent_bytes``)
    bytes: float
    pieces: int  # collective_chunks
    calls_per_step: int  # the kernel's calls (layers)
    hops: int  # link hops in sequence
    # per call, through the binding link direction or port: the one whose bytes take the
    # longest at its bandwidth (a slower class's port may carry fewer bytes and bind)
    bytes_per_link: float
    # the estimate (all pieces at once, idle links) split so the terms add up:
    # bandwidth_s = bytes_per_link over that direction's bandwidth, latency_s the rest (the
    # hops' latencies, the pipeline's fill, waits for a port behind another, less what the
    # pieces overlap: not hops x per-hop latency)
    latency_s: float
    bandwidth_s: float
    candidates: Mapping[str, float]  # algorithm -> estimated seconds per call
    simulated_calls: int  # calls simulated (the rest were fast-forwarded)
    simulated_mean_s: float | None  # per simulated call: first piece started to last done
    # an all-to-all's bytes one device sends per call, every copy and hop (all_to_all.sent_bytes);
    # None for the other kinds
    sent_bytes: float | None = None

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    @property
    def estimate_s(self) -> float:
        """Estimated time of one call on idle links, all pieces at once."""
        return self.latency_s + self.bandwidth_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (a contract of ``rdu-sim step --json``): ``sent_bytes`` and
        ``sent_bytes_per_step`` only for an all-to-all."""
        data: dict[str, Any] = {
            "kernel": self.kernel,
            "stage": self.stage,
            "kind": self.kind,
            "group": self.group,
            "policy": self.policy,
            "algorithm": self.algorithm,
            "bytes": self.bytes,
            "pieces": self.pieces,
            "calls_per_step": self.calls_per_step,
            "bytes_per_step": self.bytes * self.calls_per_step,
            "hops": self.hops,
            "bytes_per_link": self.bytes_per_link,
            "latency_s": self.latency_s,
            "bandwidth_s": self.bandwidth_s,
            "estimate_s": self.estimate_s,
            "candidates": dict(self.candidates),
            "simulated_calls": self.simulated_calls,
            "simulated_mean_s": self.simulated_mean_s,
        }
        if self.sent_bytes is not None:
            data["sent_bytes"] = self.sent_bytes
            data["sent_bytes_per_step"] = self.sent_bytes * self.calls_per_step
        return data


def collective_timings(
    kernel: KernelProgram, spans: Mapping[str, Sequence[float]], system: SystemConfig
) -> list[CollectiveTiming]:
    """The report of each collective stage of ``kernel`` (those with a group above 1), from
    its plan and the call times its port measured (``spans``: seconds per simulated call)."""
    out: list[CollectiveTiming] = []
    plans = plan_stages(kernel, system)
    for stage in kernel.stages:
        spec = stage.collective
        if spec is None or spec.group <= 1:
            continue
        plan = plans[stage.name]
        est = plan.chosen
        exchange = run_exchange(spec, plan)
        seen = spans.get(stage.name, ())
        out.append(
            CollectiveTiming(
                kernel=kernel.name,
                stage=stage.name,
                kind=spec.kind,
                group=spec.group,
                policy=plan.policy,
                algorithm=plan.algorithm,
                bytes=spec.bytes,
                pieces=system.collective_chunks,
                calls_per_step=kernel.calls,
                hops=est.hops,
                bytes_per_link=est.bytes_per_link,
                latency_s=est.latency_s,
                bandwidth_s=est.bandwidth_s,
                candidates={e.algorithm: e.time_s for e in plan.candidates},
                simulated_calls=len(seen),
                simulated_mean_s=sum(seen) / len(seen) if seen else None,
                sent_bytes=None
                if exchange is None
                else all_to_all_sent(exchange, spec.bytes, spec.group, system.sockets_per_node),
            )
        )
    return out
