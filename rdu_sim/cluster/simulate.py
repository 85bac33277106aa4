"""Run a cluster: replicas' servers, the router and the KV link on des's serving loop
(``des.timeline``: integer picoseconds, ``des.order``'s same-instant order). Every replica's
server is a driver of the loop (``serving.driver``: its step ends and wakes, no event
objects), fed by its router; a replica of data-parallel attention ranks is one driver, its
ranks stepping in lockstep (``serving.lockstep``); the KV link's transfers and the hand-offs
are SimPy events on the same loop.

One process replays the arrivals; at each arrival instant the router picks a replica of the
front pool (mixed, or prefill when disaggregated) from the replicas' state at that instant,
and that replica's server takes the request. When serving is disaggregated, the prefill
replica's hooks hand each prefilled request (more than one output token) to the decode pool's
router; the chosen decode replica queues it, reserves a slot when one frees, and only then
pulls the KV cache over the link (``kv_link``), while the prefill replica holds the cache in
its slot. Everything is in integer picoseconds, event order is SimPy's (deterministic).

After the run every accepted request must have completed exactly once and been routed exactly
once; a rejected request (over the context limit) never reaches a router. Anything else is a
bug, raised as such. A router's answer is checked as it is used (``routed``): an index outside
the pool (-1 would be Python's last replica) or not an integer is the router's PolicyAnswerError,
naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from numbers import Integral
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray
from simpy.events import Event

from rdu_sim.cluster.kv_link import KVLink
from rdu_sim.cluster.load_board import LoadBoard, PublishedBoard
from rdu_sim.cluster.prefix_index import PrefixIndex
from rdu_sim.cluster.records import REJECTED, SERVED, ClusterRecords
from rdu_sim.cluster.replica import PoolRuntime, Replica
from rdu_sim.cluster.routers import make_router
from rdu_sim.cluster.traffic import ClusterRequests, ContextFit
from rdu_sim.config.cluster import KVTransferConfig
from rdu_sim.des.order import NORMAL
from rdu_sim.des.timeline import Loop, Timeline
from rdu_sim.kv.paged import held_output
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.kv.sharing import shared_prefix_tokens
from rdu_sim.models import kv_bytes
from rdu_sim.plugins import PolicyAnswerError
from rdu_sim.serving.batching.checked import Checked
from rdu_sim.serving.clock import arrivals_ps
from rdu_sim.serving.lockstep import Ranks, drive_in_lockstep
from rdu_sim.serving.records import ServingRecords

Progress = Callable[[int, int], None]


_queued_tokens = attrgetter("queued_tokens")
_occupied = attrgetter("occupied")


@dataclass(frozen=True)
class CachingPool:
    """A pool of a group whose replicas keep prefix caches: one of them (they answer alike
    for a request) and the bitmask of its members in the group."""

    first: Replica
    members: int


@dataclass(frozen=True)
class Handing:
    """A prefilled request on its way to a decode replica: the prefill replica holding its
    KV cache, and the event that fires once the cache has left it."""

    source: int
    sent: Event


@dataclass(frozen=True)
class PromptBlocks:
    """The last answer of :meth:`Cluster.shared_blocks`: a request's shareable block hashes
    under a KV policy."""

    request: int
    policy: KVPolicy
    role: str
    blocks: Sequence[int]


class ReplicaGroup:
    """The replicas one router chooses among (``routers.PoolState``): the front pools (mixed
    or prefill) or the decode pools."""

    def __init__(
        self,
        loop: Loop,
        replicas: list[Replica],
        board: LoadBoard,
        prefixes: PrefixIndex,
        serving: ServingRecords,
    ) -> None:
        """``board`` and ``prefixes``: where the replicas' servers and prefix caches report
        (the replica at position ``i`` as member ``i``); ``serving``: the run's records (each
        request's prompt and output lengths)."""
        self.loop = loop
        self.replicas = replicas
        self.board = board
        # what the queue and slot views read, in member order: each replica's scheduler (its
        # queue's tokens), queue and slots, the objects that track them (made once, kept)
        self._schedulers = [replica.server.scheduler for replica in replicas]
        self._queues = [scheduler.queue for scheduler in self._schedulers]
        self._slots = [scheduler.slots for scheduler in self._schedulers]
        self._slot_counts = np.array([slots.n for slots in self._slots], dtype=np.int64)
        self._prompts = serving.prompt_tokens.data
        self._outputs = serving.output_tokens.data
        self._published = isinstance(board, PublishedBoard)
        self.prefixes = prefixes
        pools: dict[int, CachingPool] = {}  # by the pool's runtime
        for member, replica in enumerate(replicas):
            if replica.prefix is not None:
                pool = pools.get(id(replica.runtime), CachingPool(replica, 0))
                pools[id(replica.runtime)] = CachingPool(pool.first, pool.members | 1 << member)
        self._caching_pools = list(pools.values())

    def __len__(self) -> int:
        return len(self.replicas)

    def outstanding_tokens(self) -> NDArray[np.int64]:
        """Every replica's load now, in tokens (one vectorised rule, ``serving.load``)."""
        return self.board.tokens(self.loop.now)

    def queued_tokens(self) -> NDArray[np.int64]:
        """Every replica's waiting requests' prompt tokens now (``Scheduler.queued_tokens``)."""
        return np.fromiter(map(_queued_tokens, self._schedulers), np.int64, len(self.replicas))

    def queue_lengths(self) -> NDArray[np.int64]:
        """Every replica's requests waiting for a slot now (its scheduler's queue)."""
        return np.fromiter(map(len, self._queues), np.int64, len(self.replicas))

    def running_slots(self) -> NDArray[np.int64]:
        """Every replica's slots holding a request now (``Slots.occupied``)."""
        return np.fromiter(map(_occupied, self._slots), np.int64, len(self.replicas))

    def free_slots(self) -> NDArray[np.int64]:
        """Every replica's slots free now."""
        return self._slot_counts - self.running_slots()

    def prompt_tokens(self, request: int) -> int:
        """``request``'s prompt tokens."""
        prompt: int = self._prompts[request]
        return prompt

    def output_tokens(self, request: int) -> int:
        """``request``'s output tokens (the trace's: an oracle no production router has)."""
        output: int = self._outputs[request]
        return output

    def sent(self, member: int, request: int) -> None:
        """The router sent ``request`` to ``member``: the tokens its server will count on
        queueing it (its prompt, and the token it arrives with from a prefill pool), which
        a router reading published load adds until the next publication."""
        if not self._published:  # an exact board counts it from the server's own count
            return
        self.board.sent(member, self.replicas[member].server.scheduler.arrival_tokens(request))

    def cached_tokens(self, request: int) -> NDArray[np.int64]:
        """Prompt tokens of ``request`` each replica's prefix cache would spare: its leading
        blocks cached there (``prefix_index``, one walk for the whole group), rounded down to
        what a prefill there can skip (``Replica.reusable_tokens``)."""
        tokens = np.zeros(len(self.replicas), dtype=np.int64)
        for pool in self._caching_pools:
            replica = pool.first
            blocks = replica.shared_blocks(request)
            if not blocks:
                continue
            spared: dict[int, int] = {}  # leading blocks cached -> tokens skipped
            for member, found in self.prefixes.matches(blocks, pool.members):
                skipped = spared.get(found)
                if skipped is None:
                    skipped = spared[found] = replica.reusable_tokens(request, found)
                tokens[member] = skipped
        return tokens


class Cluster:
    """The replicas, the routers of the front and decode pools, and the KV link."""

    def __init__(
        self,
        loop: Loop,
        requests: ClusterRequests,
        pools: Sequence[PoolRuntime],
        router: str,
        block_tokens: int | None,
        kv_transfer: KVTransferConfig | None,
        progress: Progress | None = None,
        seed: int = 0,
        load_refresh_ps: int = 0,
    ) -> None:
        """``seed``: the routers' (``ClusterConfig.router_seed``), for one that takes it (the
        decode pool's router gets ``seed + 1``: the two draw apart); ``load_refresh_ps``:
        how often the replicas publish their load to the routers (0: read exact,
        ``router.load_refresh``)."""
        self.loop = loop
        self.load_refresh_ps = load_refresh_ps
        self.requests = requests
        self.block_tokens = block_tokens or 0
        self.serving = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
        self.records = ClusterRecords(len(requests))
        self.completed = 0
        self._progress = progress
        self.replicas: list[Replica] = []
        self.lockstep: list[tuple[str, Ranks]] = []  # each replica of ranks, by its pool
        front = [p for p in pools if p.config.role != "decode"]
        back = [p for p in pools if p.config.role == "decode"]
        self.front = self._group(front, progress)
        self.back = self._group(back, progress)
        self.router = router
        self.front_router = make_router(router, seed)
        self.back_router = make_router(router, seed + 1)
        self.link: KVLink | None = None
        if back:
            link = kv_transfer or KVTransferConfig()
            self.link = KVLink(loop, len(self.replicas), link.bandwidth, link.latency)
        self._sending: dict[int, Handing] = {}  # by request
        self._blocks_of: PromptBlocks | None = None

    def shared_blocks(self, request: int, policy: KVPolicy, role: str) -> Sequence[int]:
        """The block hashes of the request's whole prompt blocks a prefix cache may share
        under ``policy`` on a server of ``role`` (``kv.sharing.shared_prefix_tokens``, with
        the output tokens that server caches); the router asks every replica about the same
        request in a row, so the last answer is kept."""
        last = self._blocks_of
        if (
            last is not None
            and last.request == request
            and last.policy is policy
            and last.role == role
        ):
            return last.blocks
        prompt = int(self.serving.prompt_tokens[request])
        output = held_output(int(self.serving.output_tokens[request]), role)
        blocks: Sequence[int] = ()
        shared = shared_prefix_tokens(policy, prompt, output)
        if shared:
            blocks = self.requests.hashes(request)[: shared // self.block_tokens]
        self._blocks_of = PromptBlocks(request, policy, role, blocks)
        return blocks

    def _group(self, pools: Sequence[PoolRuntime], progress: Progress | None) -> ReplicaGroup:
        """The replicas of these pools, in pool order, sharing one load board (published
        every ``load_refresh_ps``, or read exact)."""
        servers = sum(p.replicas for p in pools)
        loop = self.loop
        board = (
            PublishedBoard(servers, self.load_refresh_ps, lambda: loop.now)
            if self.load_refresh_ps
            else LoadBoard(servers)
        )
        prefixes = PrefixIndex()
        members: list[Replica] = []
        for runtime in pools:
            ranks: list[Replica] = []  # of the replica being built (data-parallel attention)
            for _ in range(runtime.replicas):
                replica = Replica(
                    len(self.replicas),
                    runtime,
                    self,
                    self.serving.replica_view(),
                    self._completed if progress is not None else None,
                    board.row(len(members)),
                    prefixes,
                    len(members),
                )
                self.replicas.append(replica)
                members.append(replica)
                if runtime.ranks > 1:
                    ranks.append(replica)
                    if len(ranks) == runtime.ranks:
                        self._lockstep(ranks)
                        ranks = []
        return ReplicaGroup(self.loop, members, board, prefixes, self.serving)

    def _lockstep(self, ranks: Sequence[Replica]) -> None:
        """One replica's attention ranks step together (``serving.lockstep``)."""
        servers = [rank.server for rank in ranks]
        settles = any(server.settles for server in servers)
        together = drive_in_lockstep(self.loop, [server.scheduler for server in servers], settles)
        self.lockstep.append((ranks[0].runtime.name, together))

    def _completed(self, _done: int, _total: int) -> None:
        self.completed += 1
        if self._progress is not None:
            self._progress(self.completed, len(self.requests))

    # --- routing -------------------------------------------------------------------------------
    def dispatch(self, request: int) -> None:
        """A request arrives now: the front router picks its replica."""
        front = self.front
        chosen = self.front_router.choose(request, front)
        if type(chosen) is not int or not 0 <= chosen < len(front.replicas):
            chosen = routed(self.router, chosen, request, len(front.replicas), "")
        replica = front.replicas[chosen]
        front.sent(chosen, request)
        self.records.routed[request] += 1
        self.records.replica[request] = replica.index
        replica.taken += 1
        replica.server.submit(request)

    def to_decode(self, request: int, source: int) -> Event:
        """A prefill replica finished ``request``: the decode router picks where it decodes;
        the returned event fires once its KV cache has left ``source``."""
        back = self.back
        chosen = self.back_router.choose(request, back)
        if type(chosen) is not int or not 0 <= chosen < len(back.replicas):
            chosen = routed(self.router, chosen, request, len(back.replicas), "decode ")
        replica = back.replicas[chosen]
        back.sent(chosen, request)
        self.records.decode_replica[request] = replica.index
        replica.taken += 1
        sent = self.loop.event()
        self._sending[request] = Handing(source, sent)
        replica.server.enqueue(request)
        return sent

    def transfer_kv(self, request: int, target: int) -> Event:
        """A decode slot is reserved for ``request``: move its KV cache to ``target``."""
        assert self.link is not None
        handing = self._sending.pop(request)
        source, sent = handing.source, handing.sent
        runtime = self.replicas[source].runtime
        prompt = int(self.serving.prompt_tokens[request])
        cached = runtime.policy.cache_after_prefill(prompt)  # compressed under SnapStream
        nbytes = kv_bytes(runtime.model, cached, runtime.kv_dtype_bytes)
        records = self.records
        records.kv_bytes[request] = nbytes
        records.kv_start_ps[request] = self.loop.now
        arrived = self.link.transfer(source, target, nbytes)

        def done(_event: Event) -> None:
            records.kv_end_ps[request] = self.loop.now
            sent.succeed()

        arrived.callbacks.append(done)
        return arrived


def routed(router: str, chosen: object, request: int, replicas: int, pool: str) -> int:
    """A router's answer that is not a plain ``int`` in the pool (checked by the caller
    first, two comparisons): a NumPy integer in range as an int; anything else the router's
    PolicyAnswerError (``pool``: ``"decode "`` for the decode pool's router)."""
    if isinstance(chosen, bool) or not isinstance(chosen, Integral):
        name = type(chosen).__name__
        problem = f"{'an' if name[:1] in 'aeiou' else 'a'} {name}, not an integer"
    else:
        index = int(chosen)
        if 0 <= index < replicas:
            return index
        problem = f"outside the {pool}pool's replicas 0..{replicas - 1}"
    raise PolicyAnswerError(
        f"router {router!r} returned {chosen!r} for request {request}: {problem} "
        "(choose returns the index of a replica in the pool it is given)"
    )


def _arrivals(
    loop: Loop, arrival_ps: list[int], arrive: Callable[[int], None]
) -> Generator[int, None, None]:
    """Call ``arrive(i)`` at ``arrival_ps[i]`` (sorted): a driver of the loop, resumed at
    NORMAL priority at each arrival instant (as SimPy's timeouts would resume a process)."""
    for request, at in enumerate(arrival_ps):
        if at > loop.now:
            yield at
        arrive(request)


@dataclass
class ClusterRun:
    """What a cluster run produced: the cluster and its records."""

    cluster: Cluster
    fit: ContextFit
    end_ps: int  # when the last event happened

    @property
    def serving(self) -> ServingRecords:
        return self.cluster.serving

    @property
    def records(self) -> ClusterRecords:
        return self.cluster.records


def simulate_cluster(
    fit: ContextFit,
    pools: Sequence[PoolRuntime],
    router: str,
    block_tokens: int | None = None,
    kv_transfer: KVTransferConfig | None = None,
    progress: Progress | None = None,
    *,
    loop: Loop | None = None,
    seed: int = 0,
    load_refresh_ps: int = 0,
) -> ClusterRun:
    """Serve every accepted request of ``fit`` on the pools' replicas; check none is lost.
    ``loop``: the serving loop to run on (default a fresh ``Timeline``; the tests pass an
    adapter onto ``simpy.Environment``, the oracle: tests/test_cluster_loop.py); ``seed``:
    the routers' (``ClusterConfig.router_seed``), for one that draws; ``load_refresh_ps``:
    how often the replicas publish their load to the routers (``Cluster``)."""
    requests = fit.requests
    arrival_ps = arrivals_ps(requests.arrival_s, "traffic").tolist()
    loop = Timeline() if loop is None else loop
    cluster = Cluster(
        loop, requests, pools, router, block_tokens, kv_transfer, progress, seed, load_refresh_ps
    )
    loop.start(_arrivals(loop, arrival_ps, _arrive(cluster, fit.rejected)), NORMAL)
    end = loop.run()
    _check(cluster, fit)
    return ClusterRun(cluster, fit, end)


def _arrive(cluster: Cluster, rejected: NDArray[Any]) -> Callable[[int], None]:
    """What happens when request ``i`` arrives, on either loop: a request over
    the context limit is only stamped, any other is routed."""
    refused = rejected.tolist()
    arrivals = cluster.serving.arrival_ps

    def arrive(request: int) -> None:
        if refused[request]:
            arrivals[request] = cluster.loop.now
        else:
            cluster.dispatch(request)

    return arrive


def _check(cluster: Cluster, fit: ContextFit) -> None:
    """Every accepted request routed once and completed once; rejected ones untouched."""
    records, serving = cluster.records, cluster.serving
    accepted = ~fit.rejected
    bad_route = np.flatnonzero(records.routed != accepted.astype(np.int64))
    bad_done = np.flatnonzero(serving.completions != accepted.astype(np.int64))
    if bad_route.size or bad_done.size:
        request = int(np.concatenate([bad_route, bad_done])[0])
        outside = sorted(
            {
                batching.name
                for replica in cluster.replicas
                if isinstance(batching := replica.server.scheduler.batching, Checked)
            }
        )
        if bad_done.size and not bad_route.size and outside:  # a plugin's stall, named
            raise PolicyAnswerError(
                f"batching policy {outside[0]!r} left request {request} (and "
                f"{bad_done.size - 1} more) unserved: a policy whose next_prefill answers "
                "NO_PREFILL while requests wait and no slot decodes stalls its replica"
            )
        raise RuntimeError(
            f"cluster lost or duplicated requests (scheduler bug): request {request} routed "
            f"{int(records.routed[request])} time(s), completed "
            f"{int(serving.completions[request])} time(s)"
        )
    records.status[accepted] = SERVED
    records.status[fit.rejected] = REJECTED
