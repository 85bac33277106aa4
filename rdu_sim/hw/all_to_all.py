"""The experts' all-to-all (dispatch and combine) as link transfers, in DeepEP's two forms.

A socket holds ``nbytes`` (one copy of each of its tokens) for the sockets of its group, each
holding whole experts; which of them a token needs is the routing's (``AllToAllSpec``):
``copies`` of a token per socket when every expert's copy is sent, ``need(b)`` the
probability that a token needs a block of ``b`` consecutive sockets (one socket, one node).

* ``direct`` (DeepEP's low-latency kernels): every expert's copy goes straight to the socket
  holding the expert, ``nbytes x copies`` to each peer, through the port of the peer's link
  class: one hop, every byte on its own;
* ``hierarchical`` (DeepEP's normal kernels, for throughput): a token crosses the network
  once per node it needs, to the socket of the same local index there (its rail peer,
  ``nbytes x need(node)`` to each), which forwards it inside its node to each socket that
  needs it. Socket 0 so sends ``nbytes x need(1)`` of its own tokens to each socket of its
  node and, once its rail peers' tokens have arrived, forwards ``(nodes - 1) x nbytes x
  need(1)`` more to each. Two hops, a token once per node on the network. The combine runs
  the other way: the partial results of a node's sockets meet at the rail socket (inside the
  node first), then cross the network once per node.

Within one node both forms send a token to each socket once (``direct``: once per expert).
The traffic is balanced: the routing's figures are the same for every socket (the busiest
socket's larger combine is in its ``nbytes``, ``compiler.expert_exchange``). Pieces are sent
one after another, all queued at the start (the hierarchical second hop of a piece once its
first has arrived), in the direct collectives' send order (``send_order``: no socket receives
from two peers at once), except that the direct form sends to the other nodes before its own
node's sockets, as DeepEP's kernels keep the RDMA and NVLink sends going together: where a
send to another node crosses the in-node port first (SN40L), in-node sends queued ahead of it
would leave the slower network port idle while they drain (the same rotation for every
socket, so the peers at each position are still a permutation). ``symmetric=True``
simulates socket 0's sends: by the relabelling symmetry every socket does the same at the
same instants, so socket 0 holds its rail peers' tokens (its peers' partial results) exactly
when its own sends of that phase have arrived. Exact against all sockets (tests). Every
send waits for its first port through ``Topology.send_by_age``: a piece's second hop, issued
once its first has arrived, goes ahead of younger pieces still waiting there
(``hw.port_queue``; under a bare FIFO a faster network could queue it behind them). A send to
another node goes through the ports ``Topology.send`` gives it (through the in-node port first
when the network is reached through it), and :func:`estimate` simulates the same sends, in
the same pieces, alone on idle links.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from rdu_sim.des.environment import Event
from rdu_sim.hw.collective_choice import Estimate, Wiring, idle_topology, split
from rdu_sim.hw.collectives import Countdown, Topology
from rdu_sim.hw.direct_collectives import send_order
from rdu_sim.shapes import AllToAllSpec

MODES = ("direct", "hierarchical")


@dataclass(frozen=True)
class AllToAll:
    """One all-to-all call: its routing (``spec``), ``nbytes`` (one copy of each of a
    socket's tokens) in ``chunks`` pieces, over ``sockets`` (consecutive ids), simulated whole
    or by the ``symmetric`` shortcut."""

    spec: AllToAllSpec
    nbytes: float
    chunks: int = 1
    symmetric: bool = False
    sockets: tuple[int, ...] = ()
    tag: str | None = None

    def __post_init__(self) -> None:
        if self.spec.mode not in MODES:
            raise ValueError(f"unknown all-to-all mode {self.spec.mode!r}; valid: {MODES}")
        if self.chunks < 1 or self.nbytes < 0:
            raise ValueError(f"chunks must be >= 1 and nbytes >= 0: {self.chunks}, {self.nbytes}")


@dataclass(frozen=True)
class _Plan:
    """What the socket at a position sends per piece: (peer position, bytes) now, then
    after its first hop has arrived."""

    first: tuple[tuple[int, float], ...]
    second: tuple[tuple[int, float], ...]


def _plan(call: AllToAll, position: int, node_size: int) -> _Plan:
    """The sends of the socket at ``position`` for one piece (module docstring)."""
    p = len(call.sockets)
    local = min(p, node_size)
    nodes = p // local
    size, spec = call.nbytes / call.chunks, call.spec
    order = send_order(position, p, node_size)
    peers, remote = order[: local - 1], order[local - 1 :]
    if spec.mode == "direct":  # the other nodes' first (module docstring), then its own
        return _Plan(tuple((j, size * spec.copies) for j in remote + peers), ())
    own = size * spec.need(1)
    if nodes == 1:
        return _Plan(tuple((j, own) for j in peers), ())
    slot = position % local
    rails = [j for j in remote if j % local == slot]
    network = tuple((j, size * spec.need(local)) for j in rails)
    forwarded = tuple((j, (nodes - 1) * own) for j in peers)
    direct = tuple((j, own) for j in peers)
    if spec.direction == "dispatch":  # over the network first, then on inside the node
        return _Plan(network + direct, forwarded)
    # combine: the node's partial results meet at the rail socket, then cross the network
    inside = tuple((j, a + b) for (j, a), (_, b) in zip(direct, forwarded, strict=True))
    return _Plan(inside, network)


def all_to_all(topo: Topology, call: AllToAll) -> Event:
    """Start ``call`` on ``topo``'s links; fires when every socket has what it waits for."""
    ids = call.sockets or tuple(range(topo.n_sockets))
    call = AllToAll(call.spec, call.nbytes, call.chunks, call.symmetric, ids, call.tag)
    p, env = len(ids), topo.env
    if p == 1 or call.nbytes == 0:
        return Countdown(env, 0).done
    if p % min(p, topo.sockets_per_node):
        raise ValueError(f"a group of {p} sockets is not whole nodes of {topo.sockets_per_node}")
    senders = [0] if call.symmetric else list(range(p))
    plans = {r: _plan(call, r, topo.sockets_per_node) for r in senders}
    sends = sum(len(plan.first) + len(plan.second) for plan in plans.values())
    finished = Countdown(env, call.chunks * sends)
    # full simulation: a socket's second hop waits for what it receives in the first
    first_in = {r: 0 for r in range(p)}
    if not call.symmetric:
        for r in senders:
            for j, _ in plans[r].first:
                first_in[j] += 1

    age = float(env.now)  # every hop of this call's pieces: when they were handed over

    def send(r: int, j: int, nbytes: float) -> Event:
        event = topo.send_by_age(ids[r], ids[j], nbytes, age, call.tag)
        event.add_callback(lambda _e: finished.tick())
        return event

    def second(r: int) -> Callable[[Event], None]:
        """Socket ``r``'s second hop, to start once its first-hop arrivals are in."""

        def start(_event: Event) -> None:
            for j, nbytes in plans[r].second:
                send(r, j, nbytes)

        return start

    def ticks(countdown: Countdown) -> Callable[[Event], None]:
        return lambda _event: countdown.tick()

    for _ in range(call.chunks):
        if call.symmetric:  # socket 0's first hop arrived: so has everyone's to socket 0
            waiting = Countdown(env, len(plans[0].first))
            for j, nbytes in plans[0].first:
                send(0, j, nbytes).add_callback(ticks(waiting))
            waiting.done.add_callback(second(0))
            continue
        arrivals = {r: Countdown(env, first_in[r]) for r in range(p)}
        for r in senders:
            arrivals[r].done.add_callback(second(r))
        for r in senders:
            for j, nbytes in plans[r].first:
                send(r, j, nbytes).add_callback(ticks(arrivals[j]))
    return finished.done


def sent_bytes(spec: AllToAllSpec, nbytes: float, group: int, node_size: int) -> float:
    """What one socket sends in one call, every copy and both hops (the hierarchical form's
    forwarding of its rail peers' tokens too), beside the ``nbytes`` it holds: the same for
    every socket (the traffic is balanced, module docstring)."""
    if group == 1 or nbytes == 0:
        return 0.0
    plan = _plan(AllToAll(spec, nbytes, 1, True, tuple(range(group))), 0, node_size)
    return sum(b for _, b in plan.first + plan.second)


@functools.lru_cache(maxsize=4096)
def estimate(
    spec: AllToAllSpec, nbytes: float, group: int, wiring: Wiring, pieces: int = 1
) -> Estimate:
    """The all-to-all's time alone on idle links in ``pieces`` pieces, all queued at once: the
    same transfers the engine's ports run (the symmetric shortcut, exact), simulated on an
    idle copy of the wiring (``collective_choice.alone``'s rule), so the estimate counts the
    copies the simulation sends and the overlap of one piece's second hop with the next
    piece's first. ``hops`` 2 for the hierarchical form across nodes; the terms split by
    ``collective_choice.split``. Memoized: every step of a shape asks again."""
    if group == 1 or nbytes == 0:
        return Estimate(spec.mode, 0, 0.0, 0.0, 0.0)
    topo = idle_topology(wiring, group)
    call = AllToAll(spec, nbytes, pieces, True, tuple(range(group)))
    done = all_to_all(topo, call)
    topo.env.run()
    assert done.triggered
    hops = 2 if _plan(call, 0, wiring.sockets_per_node).second else 1
    return split(spec.mode, hops, topo, float(topo.env.now))
