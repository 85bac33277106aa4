"""The compiler's choice of how a sequence-split MLA step gets every head's queries
(`compiler.mla_queries`): gather them, or make them on every socket from q_b_proj and
kv_b_proj held whole (which also projects the partial outputs through W_UV before combining
them).

Two questions, each answered in one place. Whether a memory plan for S slots holds the
weights whole (`placement.whole_queries`; the batch capacity and its words follow it) is
asked before any Program exists, so it is estimated (`replicates`, of the plan's largest
decode step). Whether a step on a plan holding them whole makes or gathers its queries is
timed (`choose_queries`): the compiler compiles the step both ways and keeps the faster on
the scenario's engine, as it does a static MoE step's expert schedule (`expert_schedule`;
its ``ProgramTimer``), so the step's time is the lesser of the two forms'. The estimate
picked the slower form where the two are close or where what it leaves out matters
(DeepSeek-R1 SnapStream on SN40L-16 at 8 slots: 13.02 ms gathering against 12.35
replicating; on a DGX H200 at tp=8, batch 4: 15.43 against 15.40). A compiler with no
engine (``compile_program``) keeps the estimate's form, as does a plan of the slices (which
can only gather).

The estimate: the step both ways on this hardware, one socket, each resource at its
sustained rate: the HBM's bytes (weights and KV cache read and written) at its bandwidth x
efficiency, the collectives at their bounds on the links (`collective_bound_s`), the matrix
FLOPs at peak. The resources' times compose as the device composes its step
(`StepEstimate.time_s`, the one rule): on SN40L a kernel's stages stream concurrently and its
collectives run chunk by chunk inside it, so the step takes its busiest resource's time (a
roofline: the chain of a batch-1 step is left out, and it charges the gather, not the
replication); a GPU runs its kernels one after another, the collectives as kernels of their
own, so its step is each operator's busier of HBM and compute, one after another, plus the
collectives, each with the device time at its kernel's boundary (``gpu.kernel.sync``; a
fusion level that keeps them inside the layer's kernel, ``full``, adds none)
(`engine.gpu`). Replicating wins only when its extra reads cost the step less than the link
time it saves (the gather, and three quarters of the combine's bytes) does: on SN40L where
the links bind, not where the HBM does; on a GPU, whose collectives never hide, wherever the
link time saved outweighs the extra reads. Never for a plan that does not hold the weights
whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rdu_sim.compiler.expert_schedule import ProgramTimer
from rdu_sim.compiler.fusion import fusion_level
from rdu_sim.compiler.layout import ShardPlan
from rdu_sim.compiler.mla_queries import query_operators
from rdu_sim.compiler.program import Program
from rdu_sim.compiler.sharding import shard_graph
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.config.wiring import peer_levels
from rdu_sim.graph import GraphGroup, operators
from rdu_sim.input_errors import InputError
from rdu_sim.scenario import Scenario


def collective_bound_s(system: SystemConfig, kind: str, nbytes: float, group: int) -> float:
    """Least time a collective of ``kind`` over ``group`` consecutive sockets takes on
    ``system``'s links, ``nbytes`` its tensor (NCCL's N): each socket receives the (group -
    1) / group of it it lacks (an all-gather, a reduce-scatter), or twice that (an
    all-reduce: reduce its share, then gather the rest), at best through all its links at
    once (a switch port per link class, within the node, between nodes and between racks;
    both ring neighbours; a link per peer fully connected; when the network is reached
    through the in-node port, ``network_through_node_port``, every send through it too), after one
    hop. On one switched
    node that is the one-shot all-gather's and reduce-scatter's estimate
    (``hw.collective_choice``), and the two-shot all-reduce's when its bytes keep the port
    busy."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    phases = 2 if kind == "allreduce" else 1
    shard = phases * nbytes / group
    links = {
        "node": system.intra_node_link,
        "rack": system.inter_node_link,
        "racks": system.inter_rack_link or system.inter_node_link,
    }
    levels = peer_levels(group, system.sockets_per_node, system.sockets_per_rack)
    classes = [(peers, links[level]) for peers, level in levels]
    if system.topology == "ring":
        slowest = min(link.bandwidth for _, link in classes)
        latency = max(link.latency for _, link in classes)
        return (group - 1) * shard / (min(2, group - 1) * slowest) + latency
    per_peer = system.topology == "fully_connected"
    ports = max(
        peers * shard / ((peers if per_peer else 1) * link.bandwidth) + link.latency
        for peers, link in classes
    )
    if system.network_through_node_port:
        # every send, to another node too, leaves through the in-node port (hw.collectives)
        node = system.intra_node_link
        peers = sum(count for count, _ in classes)
        return max(ports, peers * shard / node.bandwidth + node.latency)
    return ports


@dataclass(frozen=True)
class StepEstimate:
    """One socket's step, each resource's time at its sustained rate (seconds), and how the
    device composes them."""

    hbm_s: float
    link_s: float
    compute_s: float
    operators_s: float  # each operator's busier of HBM and compute, one after another
    boundaries_s: float  # the collectives' own kernels' boundaries (a GPU's)
    serial: bool  # the device runs its kernels one after another (a GPU)

    @property
    def time_s(self) -> float:
        """The step as the device composes it: a GPU's operators one after another and its
        collectives' kernels after them (nothing hides under another kernel); SN40L's
        busiest resource (its kernels stream every resource at once)."""
        if self.serial:
            return self.operators_s + self.link_s + self.boundaries_s
        return max(self.hbm_s, self.link_s, self.compute_s)


def wiring_key(system: SystemConfig) -> tuple[object, ...]:
    """What `collective_bound_s` reads of ``system`` (a memo key: the compiler's view leaves
    the links out)."""
    classes = (system.intra_node_link, system.inter_node_link, system.inter_rack_link)
    links = tuple(None if link is None else (link.bandwidth, link.latency) for link in classes)
    return (
        system.topology,
        system.network_through_node_port,
        system.sockets_per_node,
        system.sockets_per_rack,
        *links,
    )


def step_estimate(
    scenario: Scenario, groups: Sequence[GraphGroup], plan: ShardPlan, system: SystemConfig
) -> StepEstimate:
    """The step of ``groups`` (its unsharded graphs and their calls) sharded on ``plan``,
    its collectives on ``system``'s links."""
    hardware = scenario.hardware
    bandwidth = hardware.hbm.bandwidth * hardware.hbm.efficiency
    # a GPU's collective is a kernel of its own unless the layer is one kernel
    boundary = (
        hardware.gpu.kernel.sync
        if isinstance(hardware, GpuHardwareConfig) and fusion_level(scenario) != "full"
        else 0.0
    )
    hbm = link = compute = each = boundaries = 0.0
    for group in groups:
        for node in operators(shard_graph(group.graph, plan)):
            read = (node.weight_read_bytes + node.kv_read_bytes + node.kv_write_bytes) / bandwidth
            flops = node.flops / hardware.peak_flops
            hbm += group.count * read
            compute += group.count * flops
            each += group.count * max(read, flops)
            if node.collective is not None:
                bound = collective_bound_s(
                    system, node.collective, node.collective_bytes, node.group
                )
                link += group.count * bound
                boundaries += group.count * boundary
    serial = isinstance(hardware, GpuHardwareConfig)
    return StepEstimate(hbm, link, compute, each, boundaries, serial)


def replicates(
    scenario: Scenario, groups: Sequence[GraphGroup], plan: ShardPlan, system: SystemConfig
) -> bool:
    """Whether the step of ``groups`` makes every head's queries on every socket: ``plan``
    holds their weights whole, a socket can make them, and the step's estimate on
    ``system``'s links, composed as the device composes its step, is shorter that way than
    gathering them."""
    if not plan.whole_queries or not makes_queries(groups, plan):
        return False
    gather = step_estimate(scenario, groups, replace(plan, replicate_queries=False), system)
    replicate = step_estimate(scenario, groups, replace(plan, replicate_queries=True), system)
    return replicate.time_s < gather.time_s


def makes_queries(groups: Sequence[GraphGroup], plan: ShardPlan) -> bool:
    """Whether a step of ``groups`` on ``plan`` has every head's queries to make, so could
    make them on every socket when the plan holds their weights whole."""
    return any(query_operators(g.graph, replace(plan, whole_queries=True)) for g in groups)


def choose_queries(build: Callable[[bool | None], Program], timer: ProgramTimer | None) -> Program:
    """The Program of a step whose memory plan holds MLA's query weights whole and that has
    queries to make, ``build(replicate)`` compiling it making them on every socket (True) or
    gathering them (False): the faster of the two by ``timer`` (the scenario's engine, as
    for the expert schedule: `expert_schedule`), a tie keeping the gather (fewer bytes); a
    candidate over ``engine.max_events`` loses to the gather. Without a timer,
    ``build(None)``: each part of the step in the form `replicates` estimates faster."""
    if timer is None:
        return build(None)
    gather = build(False)
    replicate = build(True)
    try:
        faster = timer(replicate) < timer(gather)
    except InputError:  # the candidate is over the event budget: the gather stands alone
        faster = False
    return replicate if faster else gather
