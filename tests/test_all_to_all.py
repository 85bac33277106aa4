"""The experts' all-to-all (`hw.all_to_all`): bytes conserved against a token-by-token
reference (every token's hidden state reaches the devices of its experts and its results
come back the same way), the symmetric shortcut equal to simulating every socket, the
estimate equal to the simulation on idle links, and the routing figures against sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.graph.moe import token_hit_probability
from rdu_sim.hw import Topology
from rdu_sim.hw.all_to_all import AllToAll, all_to_all, estimate, sent_bytes
from rdu_sim.hw.collective_choice import Wiring
from rdu_sim.shapes import AllToAllSpec

NVLINK, NETWORK = (370e9, 0.5e-6), (50e9, 2.7e-6)
E, K, GROUPS, PICKED = 64, 4, 8, 2  # a small group-limited router: 8 groups of 8, 2 a token


def spec(mode: str, direction: str, devices: int) -> AllToAllSpec:
    per = E // devices
    needs = tuple(
        (size, token_hit_probability(size * per, E, K, GROUPS, PICKED))
        for size in range(1, devices + 1)
        if devices % size == 0
    )
    return AllToAllSpec(mode, direction, K / devices, needs)  # type: ignore[arg-type]


def simulate(
    mode: str, direction: str, p: int, per_node: int, nbytes: float, chunks: int, symmetric: bool
) -> tuple[float, Topology]:
    env = CountingEnvironment()
    topo = Topology(env, p, per_node, *NVLINK, *NETWORK, switched=True)
    call = AllToAll(spec(mode, direction, p), nbytes, chunks, symmetric, tuple(range(p)))
    done = all_to_all(topo, call)
    env.run()
    assert done.triggered
    return float(env.now), topo


def link_bytes(topo: Topology) -> dict[int, float]:
    """Bytes sent per link class (0 within a node, 1 between nodes), all sockets."""
    out = {0: 0.0, 1: 0.0}
    for (_, kind), port in topo.ports.items():
        out[kind] += port.bytes[0].total
    return out


def routed(rng: np.random.Generator, tokens: int) -> np.ndarray:
    """Each token's experts under the group limit: ``PICKED`` groups, then ``K`` experts."""
    size = E // GROUPS
    out = np.empty((tokens, K), dtype=int)
    for t in range(tokens):
        groups = rng.choice(GROUPS, PICKED, replace=False)
        pool = np.concatenate([np.arange(g * size, (g + 1) * size) for g in groups])
        out[t] = rng.choice(pool, K, replace=False)
    return out


def reference(experts: np.ndarray, p: int, per_node: int, mode: str) -> dict[int, float]:
    """Token by token: the copies each link class carries for one source socket's tokens,
    checking that each token reaches exactly the devices of its experts (source socket 0)."""
    per_device = E // p
    carried = {0: 0.0, 1: 0.0}
    for token in experts:
        devices = set((token // per_device).tolist())
        reached = {0} & devices  # its own device keeps what it needs
        if mode == "direct":  # a copy per expert straight to its device
            for expert in token:
                device = int(expert) // per_device
                if device != 0:
                    carried[0 if device < per_node else 1] += 1
                    reached.add(device)
        else:  # once per node over the network (to the rail socket), then on inside
            for node in {d // per_node for d in devices}:
                rail = node * per_node  # socket 0's slot in that node
                if node != 0:
                    carried[1] += 1
                if rail in devices:
                    reached.add(rail)
                for device in devices:
                    if device // per_node == node and device != rail:
                        carried[0] += 1
                        reached.add(device)
        assert reached == devices  # every token's hidden state reaches its experts
    return carried


@pytest.mark.parametrize("mode", ["direct", "hierarchical"])
def test_every_token_reaches_its_experts_and_returns_bytes_conserved(mode: str) -> None:
    p, per_node, tokens = 16, 4, 4000
    rng = np.random.default_rng(3)
    sampled = reference(routed(rng, tokens), p, per_node, mode)
    # the simulated all-to-all (every socket) carries, per socket, what the tokens need
    _, topo = simulate(mode, "dispatch", p, per_node, float(tokens), 1, symmetric=False)
    carried = {kind: total / p for kind, total in link_bytes(topo).items()}
    for kind in (0, 1):
        assert carried[kind] == pytest.approx(sampled[kind], rel=0.03)
    # and the combine brings every copy back the same way (bytes per class equal)
    _, back = simulate(mode, "combine", p, per_node, float(tokens), 1, symmetric=False)
    assert link_bytes(back) == pytest.approx(link_bytes(topo), rel=1e-12)


CASES = list(itertools.product(["direct", "hierarchical"], ["dispatch", "combine"]))


@pytest.mark.parametrize(("mode", "direction"), CASES)
@pytest.mark.parametrize(("p", "per_node"), [(8, 8), (16, 4), (32, 8)])
@pytest.mark.parametrize("chunks", [1, 3])
def test_symmetric_shortcut_equals_every_socket(
    mode: str, direction: str, p: int, per_node: int, chunks: int
) -> None:
    full, _ = simulate(mode, direction, p, per_node, 2e6, chunks, symmetric=False)
    sym, topo = simulate(mode, direction, p, per_node, 2e6, chunks, symmetric=True)
    assert sym == pytest.approx(full, rel=1e-12)
    assert {socket for socket, _ in topo.ports} == {0}  # only socket 0's ports


SN40L_RACKS = (33.53e9, 1e-6), (2e9, 5e-6)  # in-node P2P; a slow network behind it


def overlapping_ends(
    symmetric: bool, series: bool, mode: str, first: str, p: int, per_node: int, gap: float
) -> list[float]:
    """When each of two calls ends, the second (the other direction) issued ``gap`` after
    the first: the later call's pieces are younger, so the port queues let the first call's
    second hops overtake them (``hw.port_queue``). ``series``: the network behind the node's
    P2P ports (SN40L racks) rather than beside them."""
    env = CountingEnvironment()
    node, network = (SN40L_RACKS[0], SN40L_RACKS[1]) if series else (NVLINK, NETWORK)
    topo = Topology(
        env, p, per_node, *node, *network, switched=True, network_through_node_port=series
    )
    ends: list[float] = []

    def start(direction: str) -> None:
        call = AllToAll(spec(mode, direction, p), 2e6, 3, symmetric, tuple(range(p)))
        all_to_all(topo, call).add_callback(lambda _e: ends.append(float(env.now)))

    second = "combine" if first == "dispatch" else "dispatch"
    env.timeout(0).add_callback(lambda _e: start(first))
    env.timeout(gap).add_callback(lambda _e: start(second))
    env.run()
    return ends


@pytest.mark.parametrize(("mode", "first"), CASES)
@pytest.mark.parametrize("series", [False, True])
def test_symmetric_shortcut_equals_every_socket_across_overlapping_calls(
    mode: str, first: str, series: bool
) -> None:
    """Two calls in flight at once share the ports' queues, each port serving the oldest
    piece first: the symmetric shortcut still times both calls as simulating every socket."""
    for (p, per_node), gap in itertools.product([(16, 4), (32, 8)], [0.0, 1e-5, 1e-4]):
        full = overlapping_ends(False, series, mode, first, p, per_node, gap)
        sym = overlapping_ends(True, series, mode, first, p, per_node, gap)
        assert len(full) == 2 and sym == pytest.approx(full, rel=1e-12), (p, per_node, gap)


@pytest.mark.parametrize(("mode", "direction"), CASES)
@pytest.mark.parametrize(("p", "per_node"), [(8, 8), (16, 4), (32, 8)])
@pytest.mark.parametrize("pieces", [1, 4])
@pytest.mark.parametrize("series", [False, True])
def test_estimate_is_the_idle_link_time_of_every_socket(
    mode: str, direction: str, p: int, per_node: int, pieces: int, series: bool
) -> None:
    """The estimate is the call's time with every socket simulated on otherwise idle links,
    in the engine's pieces, on an H100-like wiring and an SN40L-like one (the network
    reached through the in-node port): the same copies over the network, and a piece's
    second hop beside the next piece's first (the one-piece walk it replaced put the hops in
    sequence: 13-27% high for the hierarchical form in 4 pieces). Its terms add up, the
    bandwidth term the binding port's bytes at its bandwidth."""
    links = SN40L_RACKS if series else (NVLINK, NETWORK)
    env = CountingEnvironment()
    topo = Topology(
        env, p, per_node, *links[0], *links[1], switched=True, network_through_node_port=series
    )
    call = AllToAll(spec(mode, direction, p), 3e6, pieces, False, tuple(range(p)))
    done = all_to_all(topo, call)
    env.run()
    assert done.triggered
    wiring = Wiring("switched", per_node, *links, network_through_node_port=series)
    est = estimate(spec(mode, direction, p), 3e6, p, wiring, pieces)
    assert est.time_s == pytest.approx(float(env.now), rel=1e-9)
    assert est.time_s == est.latency_s + est.bandwidth_s
    bound = max(port.bytes[0].total / port.bandwidth for port in topo.ports.values())
    assert est.bandwidth_s == pytest.approx(bound, rel=1e-9)
    assert 0 <= est.latency_s < est.time_s
    hierarchical = mode == "hierarchical" and p > per_node
    assert est.hops == (2 if hierarchical else 1)


@pytest.mark.parametrize(("mode", "direction"), CASES)
@pytest.mark.parametrize(("p", "per_node"), [(8, 8), (16, 4), (32, 8)])
def test_sent_bytes_are_what_every_socket_puts_on_its_ports(
    mode: str, direction: str, p: int, per_node: int
) -> None:
    """``sent_bytes`` (the step report's): what each socket's ports carry in the simulation
    of every socket, every copy and hop, far above the ``nbytes`` it holds."""
    _, topo = simulate(mode, direction, p, per_node, 3e6, 3, symmetric=False)
    sent = sent_bytes(spec(mode, direction, p), 3e6, p, per_node)
    for socket in range(p):
        ports = [port for (s, _), port in topo.ports.items() if s == socket]
        assert sum(port.bytes[0].total for port in ports) == pytest.approx(sent, rel=1e-12)
    assert sent > 3e6
    assert sent_bytes(spec(mode, direction, p), 3e6, 1, per_node) == 0.0


def test_throughput_form_sends_a_token_once_per_node_over_the_network() -> None:
    _, direct = simulate("direct", "dispatch", 32, 8, 1e6, 1, symmetric=True)
    _, once = simulate("hierarchical", "dispatch", 32, 8, 1e6, 1, symmetric=True)
    network = {name: link_bytes(t)[1] for name, t in (("direct", direct), ("once", once))}
    assert network["once"] < network["direct"]  # fewer bytes cross the network
    assert link_bytes(once)[0] > link_bytes(direct)[0]  # the node forwards the rest


def test_routing_figures_against_sampling() -> None:
    rng = np.random.default_rng(11)
    experts = routed(rng, 20_000)
    for block in (1, 2, 8, 16, 32):
        hit = np.mean(np.any(experts // block == 0, axis=1))
        assert token_hit_probability(block, E, K, GROUPS, PICKED) == pytest.approx(hit, abs=0.01)


def test_direct_sends_to_other_nodes_first_keep_both_ports_busy() -> None:
    """Two nodes of two sockets, a send to the other node crossing the in-node port first
    (SN40L): socket 0 sends ``b`` to each of 3 peers. The other node's sends go first, so the
    network port starts at once and the in-node send drains beside it: done when the
    network's two sends have (2b at its rate), not one in-node send later (b/B0 + 2b/B1
    when the in-node peer went first). The estimate walks the same order: equal."""
    b, fast, slow = 1e6, (100e9, 1e-6), (10e9, 4e-6)
    one = AllToAllSpec("direct", "dispatch", 1.0, ((1, 1.0), (2, 1.0), (4, 1.0)))
    times = []
    for symmetric in (True, False):
        env = CountingEnvironment()
        topo = Topology(env, 4, 2, *fast, *slow, switched=True, network_through_node_port=True)
        done = all_to_all(topo, AllToAll(one, b, 1, symmetric, (0, 1, 2, 3)))
        env.run()
        assert done.triggered
        times.append(float(env.now))
    assert times[0] == pytest.approx(times[1], rel=1e-12)
    assert times[0] == pytest.approx(2 * b / slow[0] + slow[1], rel=1e-12)
    wiring = Wiring("switched", 2, fast, slow, network_through_node_port=True)
    assert estimate(one, b, 4, wiring).time_s == pytest.approx(times[0], rel=1e-12)
