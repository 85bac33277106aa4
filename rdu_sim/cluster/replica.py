"""One replica of a cluster: a serving ``Server`` and what the cluster adds around it.

The replica is the server's ``hooks`` (``serving.hooks``): it looks the prompt up in its
prefix cache when a slot is given (cached blocks skip prefill work), caches the prompt's
blocks when the prefill ends, and, on a prefill replica, hands the request to the cluster
for decoding elsewhere. On a paged KV pool the cache's blocks live in the pool's pages
(``cluster.prefix_cache.PooledBlocks``: what the pool sees of the cache). A mixed
replica without a prefix cache has nothing to do there: its server runs without hooks
(three calls fewer a request). A router reads its load (``serving.load``) from its pool's
board (``load_board``), and what its cache holds for a request from its group's prefix
index (``prefix_index``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from simpy.events import Event

from rdu_sim.cluster.prefix_cache import PooledBlocks, PrefixCache
from rdu_sim.cluster.prefix_index import PrefixIndex
from rdu_sim.cluster.records import ClusterRecords
from rdu_sim.des.timeline import Loop
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.models import Architecture
from rdu_sim.serving.buckets import reusable_prefix
from rdu_sim.serving.load import Counters
from rdu_sim.serving.prompt_facts import PromptFacts
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.server import Server, ServerConfig
from rdu_sim.serving.step_cache import StepCache, StepTimes


class ClusterSide(Protocol):
    """What a replica asks of the cluster around it (``cluster.simulate.Cluster``): its
    loop, its prefix-cache block size and per-request columns, the blocks a prompt may
    share, and the KV hand-offs between pools."""

    @property
    def loop(self) -> Loop:
        """The serving loop every replica runs on."""

    @property
    def block_tokens(self) -> int:
        """Tokens of a prefix-cache block (0: no prefix caches)."""

    @property
    def records(self) -> ClusterRecords:
        """The cluster's per-request columns."""

    def shared_blocks(self, request: int, policy: KVPolicy, role: str) -> Sequence[int]:
        """The hashes of the prompt's whole blocks a prefix cache may share under ``policy``
        on a server of ``role`` (``kv.sharing.shared_prefix_tokens``)."""

    def to_decode(self, request: int, source: int) -> Event:
        """Hand a prefilled ``request`` to the decode pool; fires when its cache has left."""

    def transfer_kv(self, request: int, target: int) -> Event:
        """Move ``request``'s KV cache to the decode replica ``target``; fires on arrival."""


@dataclass(frozen=True)
class PoolRuntime:
    """What every replica of one pool runs with (built by the API from the pool's scenario)."""

    name: str
    replicas: int  # servers: the pool's replicas times their attention ranks
    config: ServerConfig  # batch slots, context, scheduling policy and role
    policy: KVPolicy
    step_times: StepTimes  # each shape's cost and time, shared by pools of equal workloads
    model: Architecture  # for a sequence's KV bytes (models.kv_bytes: windows included)
    kv_dtype_bytes: float
    prefix_blocks: int  # prefix cache capacity of one replica, in blocks (0: no cache)
    sockets: int  # sockets of one replica (its tensor-parallel group)
    ranks: int = 1  # attention ranks of a replica: consecutive servers stepping together
    # pages of one prefix-cache block in the replica's paged KV pool, whose pages the cache
    # shares (``kv.paged.block_pages``); 0: no cache there, or static slots
    block_pages: int = 0

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.replicas % self.ranks:
            raise ValueError(
                f"pool {self.name!r}: {self.replicas} servers are not whole replicas of "
                f"{self.ranks} attention ranks"
            )

    @cached_property
    def facts(self) -> PromptFacts:
        """The answers about prompts, one memo for all the pool's replicas."""
        config = self.config
        return PromptFacts(
            self.policy, config.max_context, config.prefill_chunk_tokens, config.dynamic_batch
        )


class Replica:
    """A server plus its prefix cache; the server's hooks and a router's candidate."""

    def __init__(
        self,
        index: int,
        runtime: PoolRuntime,
        cluster: ClusterSide,
        records: ServingRecords,
        progress: Callable[[int, int], None] | None,
        load: Counters,
        prefix_index: PrefixIndex,
        member: int,
    ) -> None:
        """``load``: its row of its group's load board; ``prefix_index``: where its prefix
        cache reports its blocks, as ``member`` of its group."""
        self.index = index
        self.runtime = runtime
        self.cluster = cluster
        self.prompts = records.prompt_tokens
        self.outputs = records.output_tokens
        self.block_tokens = cluster.block_tokens
        prefills = runtime.config.role != "decode"
        self.prefix = (
            PrefixCache(runtime.prefix_blocks, prefix_index, member)
            if cluster.block_tokens and prefills
            else None
        )
        self.cache = StepCache(runtime.step_times)
        self.records = records
        # a block's pages in its paged KV pool, whose pages the cache shares (0: static
        # slots, or no cache), and the cache as that pool sees it
        self.block_pages = runtime.block_pages if self.prefix is not None else 0
        blocks = None
        if self.prefix is not None and self.block_pages:
            blocks = PooledBlocks(self.prefix, self.block_pages, self.shared_blocks)
        self.server = Server(
            cluster.loop,
            runtime.config,
            runtime.policy,
            self.cache,
            records,
            progress,
            hooks=self if self.prefix is not None or runtime.config.role != "mixed" else None,
            forever=True,
            load=load,
            facts=runtime.facts,
            rank=runtime.ranks > 1,
            blocks=blocks,
        )
        self.taken = 0  # requests routed here

    # --- the server's hooks --------------------------------------------------------------------
    def admitted(self, request: int, prompt: int) -> int:
        """Pin the cached leading blocks; the prefill skips what the static shapes allow. A
        preempted request readmitted (pages on demand) pins them again, neither counted as
        a lookup nor changing its ``cached_tokens`` (its first admission's)."""
        blocks = self.shared_blocks(request)
        if self.prefix is None or not blocks:
            return 0
        first = not self.records.preemptions[request]
        skipped = self.reusable_tokens(request, self.prefix.acquire(request, blocks, first))
        if first:
            self.cluster.records.cached_tokens[request] = skipped
        return skipped

    def prefilled(self, request: int) -> Event | None:
        """Cache the prompt's blocks; on a prefill replica, send the request to decode."""
        blocks = self.shared_blocks(request)
        if self.prefix is not None and blocks:
            self.prefix.insert(request, blocks)
        if self.runtime.config.role == "prefill" and self.outputs[request] > 1:
            return self.cluster.to_decode(request, self.index)
        return None

    def receive(self, request: int) -> Event:
        """A slot here is reserved for ``request``: its KV cache starts moving here."""
        return self.cluster.transfer_kv(request, self.index)

    def left(self, request: int) -> None:
        """Unpin the request's cached blocks."""
        if self.prefix is not None:
            self.prefix.release(request)

    # --- what the hooks and a router ask ---------------------------------------------------
    def shared_blocks(self, request: int) -> Sequence[int]:
        """The hashes of the prompt's whole blocks, if its cache may be shared here."""
        if self.prefix is None:
            return ()
        return self.cluster.shared_blocks(request, self.runtime.policy, self.runtime.config.role)

    def reusable_tokens(self, request: int, blocks: int) -> int:
        """Prompt tokens a prefill here skips when the prompt's first ``blocks`` blocks are
        cached (``serving.buckets.reusable_prefix``)."""
        config = self.runtime.config
        return reusable_prefix(
            blocks * self.block_tokens,
            int(self.prompts[request]),
            config.max_context,
            config.prefill_chunk_tokens,
            config.dynamic_batch,
        )
