"""Direct collectives, for wirings where any socket reaches any other in one hop (a switched
fabric, or a link per pair), built from P2P link transfers like the ring's.

* one-shot all-reduce: every socket sends its whole ``nbytes`` vector to every other socket
  and reduces what it receives: 1 hop in sequence, (p - 1) x nbytes through a switched port;
* one-shot all-gather / reduce-scatter: every socket sends a shard of nbytes / p (all-gather:
  its own; reduce-scatter: the one that peer owns) straight to every other socket: 1 hop;
* two-shot all-reduce: a one-shot reduce-scatter, then, once a socket holds its reduced
  shard, a one-shot all-gather of it: 2 hops and 2 (p - 1) / p x nbytes through a port, the
  ring's bytes in 2 hops instead of 2 (p - 1).

Send order: each socket sends to the sockets of its own node at local offsets 1, 2, ...,
then to the other nodes' sockets by node offset, then local offset. At every position of
that sequence the receivers are a permutation of the senders, so no socket receives from
two peers at once, and every socket's schedule is the same up to relabelling. ``chunks``
pieces are sent one after another, all queued at the start (two-shot: a piece's second
phase is queued when the socket holds all of that piece's shards).

``symmetric=True`` simulates socket 0's sends only: by the relabelling symmetry socket 0
receives each peer's piece exactly when its own send in the same position arrives, so the
collective is done when socket 0's last send has arrived (two-shot: a piece's second phase
starts when its first-phase sends have all arrived). Exact against the full simulation (the
tests). Reduction arithmetic is not charged here: it is fused into the consuming stage.
"""

from __future__ import annotations

from collections.abc import Sequence

from rdu_sim.des.environment import Event
from rdu_sim.hw.collectives import ALL_REDUCE, Collective, Countdown, Topology


def send_order(position: int, group: int, node_size: int) -> list[int]:
    """Positions (in the group) that the socket at ``position`` sends to, in order."""
    local = min(group, node_size)
    if group % local:
        raise ValueError(f"a group of {group} sockets is not whole nodes of {node_size}")
    nodes = group // local
    node, slot = divmod(position, local)
    order = [node * local + (slot + m) % local for m in range(1, local)]
    for a in range(1, nodes):
        order += [((node + a) % nodes) * local + (slot + m) % local for m in range(local)]
    return order


def _exchange(
    topo: Topology,
    ids: Sequence[int],
    size: float,
    symmetric: bool,
    tag: str | None,
) -> Event:
    """Every socket of ``ids`` (symmetric: socket 0 only) sends ``size`` bytes to every
    other, now; the event fires when all have arrived."""
    p, env = len(ids), topo.env
    senders = [0] if symmetric else list(range(p))
    orders = {r: send_order(r, p, topo.sockets_per_node) for r in senders}
    if symmetric and topo.fast_chains:
        hops = [topo.hop(ids[0], ids[j]) for j in orders[0]]
        return topo.chains.start(hops, 1, size, list(range(p - 1)), tag)
    count = Countdown(env, len(senders) * (p - 1))
    for r in senders:
        for j in orders[r]:
            topo.send(ids[r], ids[j], size, tag).add_callback(lambda _e: count.tick())
    return count.done


def one_shot(topo: Topology, call: Collective) -> Event:
    """One-shot ``call`` (all-reduce: whole vectors; all-gather and reduce-scatter: shards of
    ``nbytes / p``) in ``chunks`` pieces; fires when every socket has everything."""
    ids = call.ids(topo)
    p = len(ids)
    if p == 1 or call.nbytes == 0:
        return Countdown(topo.env, 0).done
    size = call.nbytes / call.chunks / (1 if call.kind == ALL_REDUCE else p)
    pieces = [_exchange(topo, ids, size, call.symmetric, call.tag) for _ in range(call.chunks)]
    return topo.env.all_of(pieces)


def two_shot(topo: Topology, call: Collective) -> Event:
    """Two-shot all-reduce of an ``nbytes`` vector: one-shot reduce-scatter, then one-shot
    all-gather of each reduced piece as soon as it is complete."""
    if call.kind != ALL_REDUCE:
        raise ValueError(f"two-shot runs all-reduce only, not {call.kind!r}")
    ids = call.ids(topo)
    p, env, chunks, tag = len(ids), topo.env, call.chunks, call.tag
    if p == 1 or call.nbytes == 0:
        return Countdown(env, 0).done
    size = call.nbytes / chunks / p
    if call.symmetric:
        done = Countdown(env, chunks)

        def gather(_event: Event) -> None:
            _exchange(topo, ids, size, True, tag).add_callback(lambda _e: done.tick())

        for _ in range(chunks):
            _exchange(topo, ids, size, True, tag).add_callback(gather)
        return done.done
    # all sockets: each starts a piece's all-gather when it holds its reduced shard
    held = [[0] * chunks for _ in range(p)]
    finished = Countdown(env, chunks * p * (p - 1))

    def reduced(r: int, k: int) -> None:
        held[r][k] += 1
        if held[r][k] < p - 1:
            return
        for j in send_order(r, p, topo.sockets_per_node):
            topo.send(ids[r], ids[j], size, tag).add_callback(lambda _e: finished.tick())

    def arrives(ev: Event, r: int, k: int) -> None:
        ev.add_callback(lambda _e: reduced(r, k))

    for k in range(chunks):
        for r in range(p):
            for j in send_order(r, p, topo.sockets_per_node):
                arrives(topo.send(ids[r], ids[j], size, tag), j, k)
    return finished.done
