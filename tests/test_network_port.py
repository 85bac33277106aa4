"""A device whose traffic to other nodes leaves through its in-node port
(``system.network_via_intra_node_port``, SN40L's AGCU): two FIFO ports in series, the same in
the event-per-transfer path and the link chains, the chooser's estimates following it, and
splitting a node never speeding up a tensor-parallel step. Off (a GPU with its own NIC), the
network port is the device's own."""

from __future__ import annotations

import itertools

import pytest

from rdu_sim import api
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import Collective, Topology
from rdu_sim.hw.collective_choice import Wiring, choose, estimate
from rdu_sim.hw.collective_run import start_collective
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from rdu_sim.hw.p2p_link import P2PLink

NODE = (33.53e9, 1e-6)
TP16 = "workloads/llama3.1-70b-decode.yaml"


def test_two_ports_in_series_exact_times() -> None:
    env = CountingEnvironment()
    node, slow, fast = P2PLink(env, 10e9, 1e-6), P2PLink(env, 5e9, 3e-6), P2PLink(env, 20e9, 3e-6)
    local = node.transfer(10e3)  # the node port: [0, 1 us]
    behind = slow.transfer_via(node, 10e3)  # node [1, 2 us]; network [1, 3 us] at 5 GB/s
    again = slow.transfer_via(node, 10e3)  # node [2, 3 us]; network queued: [3, 5 us]
    quick = fast.transfer_via(node, 10e3)  # node [3, 4 us]; its network port waits for it
    env.run()
    assert local.value == pytest.approx(2e-6)
    assert behind.value == pytest.approx(3e-6 + 3e-6)
    assert again.value == pytest.approx(5e-6 + 3e-6)
    assert quick.value == pytest.approx(4e-6 + 3e-6)  # ends with its first stage, not before
    assert node.bytes[0].total == 40e3 and slow.bytes[0].total == 20e3
    assert node.busy_time(0) == pytest.approx(4e-6)
    assert slow.busy_time(0) == pytest.approx(4e-6) and fast.busy_time(0) == pytest.approx(1e-6)


@pytest.mark.parametrize("via", [False, True])
def test_a_send_to_another_node_queues_behind_in_node_traffic_only_through_the_port(
    via: bool,
) -> None:
    env = CountingEnvironment()
    topo = Topology(env, 4, 2, 10e9, 1e-6, 50e9, 3e-6, True, network_through_node_port=via)
    inside = topo.send(0, 1, 10e3)  # 1 us on the node port
    across = topo.send(0, 2, 10e3)  # 0.2 us on the network port
    env.run()
    assert inside.value == pytest.approx(2e-6)
    # through the node port it waits for the first send and then runs at 10 GB/s
    assert across.value == pytest.approx((2e-6 if via else 0.2e-6) + 3e-6)
    assert topo.bytes_sent(0) == 20e3  # each byte once, through one port or two
    assert topo.ports[(0, 0)].bytes[0].total == (20e3 if via else 10e3)


def simulate(
    algorithm: str,
    kind: str,
    p: int,
    spn: int,
    inter: tuple[float, float],
    pieces: int,
    symmetric: bool,
    fast: bool,
    sends: tuple[tuple[float, int, int, float], ...] = (),
) -> tuple[float, Topology]:
    """Two collectives started 2 us apart on the same ports, plus plain ``sends`` (delay,
    source, destination, bytes), through the node port; when the last is done."""
    env = CountingEnvironment()
    topo = Topology(env, p, spn, *NODE, *inter, True, network_through_node_port=True)
    topo.fast_chains = fast
    for delay, nbytes in ((0.0, 3e6), (2e-6, 1e6)):
        env.timeout(delay).callbacks.append(
            lambda _e, b=nbytes: start_collective(
                topo, Collective(kind, b, pieces, symmetric), algorithm
            ).callbacks.append(lambda _a: None)
        )
    for delay, src, dst, nbytes in sends:
        env.timeout(delay).callbacks.append(
            lambda _e, s=src, d=dst, b=nbytes: topo.send(s, d, b).callbacks.append(lambda _a: 0)
        )
    env.run()
    return float(env.now), topo


CASES = [
    ("ring", ALL_REDUCE),
    ("ring", ALL_GATHER),
    ("bidirectional_ring", REDUCE_SCATTER),
    ("one_shot", ALL_GATHER),
    ("one_shot", ALL_REDUCE),
    ("two_shot", ALL_REDUCE),
    ("hierarchical", ALL_REDUCE),
]


@pytest.mark.parametrize(("algorithm", "kind"), CASES)
@pytest.mark.parametrize(("p", "spn"), [(16, 8), (12, 4)])
@pytest.mark.parametrize("network", [12.5e9, 100e9])
@pytest.mark.parametrize("pieces", [1, 3])
def test_chains_equal_one_event_per_transfer_and_the_full_simulation(
    algorithm: str, kind: str, p: int, spn: int, network: float, pieces: int
) -> None:
    inter = (network, 3e-6)
    # plain transfers on socket 0's node port, in the node and across, mid-collective
    sends = ((1e-6, 0, 1, 2e5), (5e-6, 0, spn, 4e5), (9e-6, 0, p - 1, 1e5))
    fast, topo_fast = simulate(algorithm, kind, p, spn, inter, pieces, True, True, sends)
    slow, topo_slow = simulate(algorithm, kind, p, spn, inter, pieces, True, False, sends)
    assert fast == pytest.approx(slow, rel=1e-12)
    assert topo_fast.ports.keys() == topo_slow.ports.keys()
    for key, port in topo_fast.ports.items():
        other = topo_slow.ports[key]
        assert port.bytes[0].total == pytest.approx(other.bytes[0].total, rel=1e-12)
        assert port.busy_time(0) == pytest.approx(other.busy_time(0), rel=1e-12)
        assert port.free_at[0] == pytest.approx(other.free_at[0], rel=1e-12)
    # the symmetric shortcut is exact (alone: the plain sends break the symmetry), both ways
    # round too: the reverse ring's simulated sockets are the forward ring's, so a port both
    # halves use is shared in the shortcut as in the whole ring (it was not: 2x too fast)
    alone, _ = simulate(algorithm, kind, p, spn, inter, pieces, True, True)
    full, _ = simulate(algorithm, kind, p, spn, inter, pieces, False, False)
    assert alone == pytest.approx(full, rel=1e-12)


def idle(
    algorithm: str, kind: str, n: float, p: int, inter: tuple[float, float], pieces: int = 1
) -> float:
    """The collective alone on idle ports, 8 sockets a node, through the node port."""
    env = CountingEnvironment()
    topo = Topology(env, p, 8, *NODE, *inter, True, network_through_node_port=True)
    start_collective(topo, Collective(kind, n, pieces, True), algorithm)
    env.run()
    return float(env.now)


@pytest.mark.parametrize(
    ("algorithm", "kind"),
    [("one_shot", ALL_GATHER), ("one_shot", ALL_REDUCE), ("two_shot", ALL_REDUCE)],
)
@pytest.mark.parametrize("network", [12.5e9, 25e9, 50e9])
@pytest.mark.parametrize("p", [16, 32])
def test_direct_estimates_are_the_idle_time_of_one_piece(
    algorithm: str, kind: str, network: float, p: int
) -> None:
    inter = (network, 3e-6)
    wiring = Wiring("switched", 8, NODE, inter, network_through_node_port=True)
    est = estimate(kind, algorithm, 3.3e7, p, wiring)
    assert est.time_s == pytest.approx(idle(algorithm, kind, 3.3e7, p, inter), rel=1e-9)
    # the node port carries everything socket 0 sends, the network port what leaves the
    # node; the binding one (its bytes at its bandwidth the longest) is the bandwidth term
    phases = 2 if algorithm == "two_shot" else 1
    shard = 3.3e7 if (algorithm, kind) == ("one_shot", ALL_REDUCE) else 3.3e7 / p
    ports = [(phases * (p - 1) * shard, NODE[0]), (phases * (p - 8) * shard, network)]
    binding = max(ports, key=lambda port: port[0] / port[1])
    assert est.bytes_per_link == pytest.approx(binding[0])
    assert est.bandwidth_s == pytest.approx(binding[0] / binding[1])
    assert est.latency_s + est.bandwidth_s == est.time_s


@pytest.mark.parametrize("network", [12.5e9, 25e9, 33.53e9, 50e9, 400e9])
def test_two_nodes_are_no_faster_than_one_in_the_estimate_and_the_simulation(
    network: float,
) -> None:
    # a prefill-sized all-reduce over 16 sockets in 4 pieces (the defect's 33.5 MB): in one
    # node, or in two of 8, where the chooser picks two-shot or the hierarchical form
    inter, n = (network, 3e-6), 33.5e6
    two = Wiring("switched", 8, NODE, inter, network_through_node_port=True)
    one = Wiring("switched", 16, NODE, inter, network_through_node_port=True)
    plan = choose(ALL_REDUCE, n, 16, two, pieces=4)
    alone = estimate(ALL_REDUCE, "two_shot", n, 16, one, 4)
    assert plan.chosen.time_s >= alone.time_s
    env = CountingEnvironment()
    in_one = Topology(env, 16, 16, *NODE, *inter, True, network_through_node_port=True)
    start_collective(in_one, Collective(ALL_REDUCE, n, 4, True), "two_shot")
    env.run()
    # (the hierarchical form through the node port takes the one node's time, to rounding)
    assert idle(plan.algorithm, ALL_REDUCE, n, 16, inter, 4) >= float(env.now) * (1 - 1e-12)
    if network < NODE[0] / 2:  # a network much slower than the node: both take the hierarchy
        two_shot = idle("two_shot", ALL_REDUCE, n, 16, inter, 4)
        assert plan.algorithm == "hierarchical"
        assert idle("hierarchical", ALL_REDUCE, n, 16, inter, 4) < two_shot


def link_and_step(sets: dict[str, object], phase: str) -> tuple[float, float]:
    cost = api.step(TP16, {"hardware": "sn40l-16", "parallelism.tp": 16, **sets}, phase=phase,
                    tokens=1024 if phase == "prefill" else None)  # fmt: skip
    return cost.detail.busy_s["link"], cost.step_s


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_splitting_a_node_never_speeds_up_tensor_parallelism(phase: str) -> None:
    one_link, one_step = link_and_step({}, phase)
    for network in ("12.5 GB/s", "33.53 GB/s", "50 GB/s", "200 GB/s"):
        sets = {"hw.system.sockets_per_node": 8, "hw.system.inter_node_link.bandwidth": network}
        link, step = link_and_step(sets, phase)
        assert link >= one_link * (1 - 1e-12) and step >= one_step * (1 - 1e-12), network


def test_without_the_shared_port_the_network_adds_bandwidth() -> None:
    # what a GPU with its own NIC does (and what SN40L did before its port was shared): the
    # in-node port's traffic halves when half of the peers sit behind their own network port
    one_link, _ = link_and_step({}, "decode")
    split = {"hw.system.sockets_per_node": 8, "hw.system.network_via_intra_node_port": False}
    link, _ = link_and_step(split, "decode")
    assert link < 0.6 * one_link
    dgx = api.load("workloads/llama3.1-8b-8socket.yaml", {"hardware": "dgx-h100-2nodes"})
    assert dgx.hardware.system.network_via_intra_node_port is False


def test_the_mla_query_choice_sees_the_shared_port() -> None:
    # SnapStream's 128-slot step over two 8-socket nodes: the compiler's MLA query choice
    # (compiler.query_choice) reading a 50 GB/s network as faster than the 33.53 GB/s node
    # port gathered the queries, a plan whose collectives bound the step at 76.6 ms; every
    # send leaves through the node port, so a faster network never changes the plan
    path = "workloads/deepseek-r1-128k-snapstream.yaml"
    steps = []
    for network in ("25 GB/s", "33.53 GB/s", "50 GB/s", "200 GB/s"):
        sets = {"hw.system.sockets_per_node": 8, "hw.system.inter_node_link.bandwidth": network}
        steps.append(api.step(path, sets).step_s)
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in itertools.pairwise(steps))
    assert steps[-1] <= 1.01 * api.step(path).step_s  # no slower than one node's


@pytest.mark.parametrize("network", ["25 GB/s", "50 GB/s", "200 GB/s"])
def test_a_pipeline_hand_off_estimate_crosses_the_node_port_too(network: str) -> None:
    # one send on idle ports: the estimate is the simulated send, the node port binding once
    # the network is faster (it read the network alone: 87 us at 200 GB/s against 503 us)
    sets = {
        "hardware": "sn40l-16",
        "hw.system.sockets_per_node": 8,
        "hw.system.inter_node_link.bandwidth": network,
        "parallelism.tp": 8,
        "parallelism.pp": 2,
    }
    cost = api.step("workloads/llama3.1-70b-decode.yaml", sets, phase="prefill", tokens=1024)
    (hand_off,) = cost.detail.pipeline["hand_offs"]
    assert hand_off["sends"] == 1
    assert hand_off["estimate_s"] == pytest.approx(hand_off["simulated_mean_s"], rel=1e-12)
    node = api.load("workloads/llama3.1-70b-decode.yaml", sets).hardware.system.intra_node_link
    assert hand_off["estimate_s"] >= hand_off["bytes"] / node.bandwidth


def test_a_separate_draft_in_another_node_sends_through_the_node_port() -> None:
    # the draft's token ids cross to the target's node: at the slower of the two ports
    from rdu_sim.serving.run import draft_link

    path = "workloads/speculative/llama3.1-70b-16socket-specdec.yaml"
    sets = {
        "hardware": "sn40l-16",
        "hw.system.sockets_per_node": 8,
        "hw.system.inter_node_link.bandwidth": "400 GB/s",
        "parallelism.tp": 8,
        "speculation.placement": "separate",
        "speculation.draft_tp": 8,
    }
    shared = api.load(path, sets)
    own = api.load(path, {**sets, "hw.system.network_via_intra_node_port": False})
    system = shared.hardware.system
    assert system.network_through_node_port and not own.hardware.system.network_through_node_port
    k = shared.workload.speculation.decoding.draft_tokens
    sent = 16 * (k + 2) * 4  # 16 slots' k ids out, two back, 4-byte ids
    latency = 2 * system.inter_node_link.latency
    node, network = system.intra_node_link.bandwidth, system.inter_node_link.bandwidth
    assert draft_link(shared).round_ps(16) == round((latency + sent / node) * 1e12)
    assert draft_link(own).round_ps(16) == round((latency + sent / network) * 1e12)


def test_the_in_node_port_to_the_network_needs_a_switch() -> None:
    """The rule (switched wiring with ``network_via_intra_node_port``) lives in the
    hardware config; the links and the estimates take its resolved value and refuse it
    without a switch, so no caller can restate the rule differently."""
    env = CountingEnvironment()
    with pytest.raises(ValueError, match="only when switched"):
        Topology(env, 4, 2, *NODE, *NODE, False, network_through_node_port=True)
    with pytest.raises(ValueError, match="only when switched"):
        Wiring("ring", 2, NODE, NODE, network_through_node_port=True)
    ring = api.load(TP16, {"hw.system.topology": "ring"}).hardware.system
    assert ring.network_via_intra_node_port and not ring.network_through_node_port
