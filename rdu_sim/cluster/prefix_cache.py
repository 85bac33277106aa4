"""A replica's prefix cache: prompt KV blocks keyed by Mooncake-style block hashes, LRU.

A prompt is cut into blocks of ``block_tokens`` tokens; block ``i`` is named by a hash of
the prompt's first ``i + 1`` blocks (Mooncake's ``hash_ids``: equal ids mean equal
prefixes), so a prompt can reuse its leading blocks that the cache holds, and only those
(block ``i`` without block ``i - 1`` is useless: attention needs the whole prefix).

The blocks are read in place by the requests that use them (a block table, as paged
attention does), so a block a running request uses is pinned: it cannot be evicted until
that request leaves the replica. Unpinned blocks are evicted least recently used first when
a new block needs room; when every block is pinned the new block is simply not cached.
Capacity is a number of blocks (``api_cluster`` turns HBM bytes into blocks).

Static slots: the cache has HBM of its own beside the slots, ``capacity`` blocks. A paged KV
pool: the blocks live in the pool's pages (``serving.kv_pool`` states how a request's pages
and the cached blocks relate), ``capacity`` is at most the pool (or an optional cap), and the
pool evicts idle blocks for an admission's pages (:meth:`PrefixCache.evict_for_room`),
seeing the cache as :class:`PooledBlocks`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from rdu_sim.cluster.prefix_index import PrefixIndex


class PrefixCache:
    """At most ``capacity`` blocks; pinned while in use, LRU among the rest."""

    def __init__(self, capacity: int, index: PrefixIndex | None = None, member: int = 0) -> None:
        """``index``: where to report the blocks held, as member ``member`` of a router's
        group (``prefix_index``)."""
        if capacity < 0:
            raise ValueError(f"prefix cache capacity must be >= 0 blocks, got {capacity}")
        self.capacity = capacity
        self._index = index
        self._member = member
        self._refs: dict[int, int] = {}  # every cached block -> requests using it
        self._idle: OrderedDict[int, None] = OrderedDict()  # unpinned blocks, LRU first
        self._held: dict[int, list[int]] = {}  # request -> blocks it pins
        self.lookups = 0  # blocks looked up at admissions
        self.hits = 0  # of those, found (leading blocks only)
        self.inserted = 0
        self.evicted = 0  # every eviction: for a new block, or for an admission's pages
        self.evicted_for_room = 0  # of those, for an admission's pages (a paged pool's)
        self.not_cached = 0  # blocks that found no room (everything pinned)

    def __len__(self) -> int:
        return len(self._refs)

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` are cached (no side effect: a router asks)."""
        refs = self._refs
        count = 0
        for block in hashes:
            if block not in refs:
                break
            count += 1
        return count

    def would_pin(self, hashes: Sequence[int]) -> tuple[int, int]:
        """How many leading blocks of ``hashes`` are cached, and how many of those are idle
        (no side effect: a paged pool asks before an admission)."""
        refs = self._refs
        count = idle = 0
        for block in hashes:
            users = refs.get(block)
            if users is None:
                break
            count += 1
            if not users:
                idle += 1
        return count, idle

    def pinned(self, request: int) -> int:
        """Blocks ``request`` pins now."""
        held = self._held.get(request)
        return 0 if held is None else len(held)

    @property
    def idle(self) -> int:
        """Blocks cached that no request pins."""
        return len(self._idle)

    def evict_for_room(self) -> None:
        """Evict the least recently used idle block: a paged pool's admission needs its
        pages (ValueError when every block is pinned: the pool asks :attr:`idle` first)."""
        if not self._evict_one():
            raise ValueError("no idle prefix-cache block to evict")
        self.evicted_for_room += 1

    def acquire(self, request: int, hashes: Sequence[int], counted: bool = True) -> int:
        """A request starts its prefill: pin and return its cached leading blocks; counted
        in ``lookups`` and ``hits`` unless not ``counted`` (a preempted request readmitted:
        its prompt was looked up at its first admission, and its own blocks are no hit)."""
        found = self.match(hashes)
        if counted:
            self.lookups += len(hashes)
            self.hits += found
        held = self._held.setdefault(request, [])
        for block in hashes[:found]:
            self._pin(block)
            held.append(block)
        return found

    def insert(self, request: int, hashes: Sequence[int]) -> None:
        """A request's prefill ended: cache (and pin) its blocks that are not cached yet."""
        held = self._held.setdefault(request, [])
        mine = set(held)
        refs, index = self._refs, self._index
        for block in hashes:
            if block in mine:
                continue
            if block in refs:
                self._pin(block)
            elif len(refs) < self.capacity or self._evict_one():
                refs[block] = 1
                self.inserted += 1
                if index is not None:
                    index.add(block, self._member)
            else:
                self.not_cached += 1
                continue
            held.append(block)
            mine.add(block)

    def release(self, request: int) -> None:
        """A request left the replica: unpin its blocks (they stay cached, most recent last),
        its last block first, so LRU evicts a prompt's tail before its head (as vLLM frees
        them): a leading block evicted first would leave the blocks after it unusable."""
        for block in reversed(self._held.pop(request, ())):
            refs = self._refs[block] - 1
            self._refs[block] = refs
            if refs == 0:
                self._idle[block] = None

    def _pin(self, block: int) -> None:
        refs = self._refs[block]
        if refs == 0:
            del self._idle[block]
        self._refs[block] = refs + 1

    def _evict_one(self) -> bool:
        if not self._idle:
            return False
        block, _ = self._idle.popitem(last=False)
        del self._refs[block]
        self.evicted += 1
        if self._index is not None:
            self._index.remove(block, self._member)
        return True


class PooledBlocks:
    """A prefix cache as the paged KV pool holding its blocks sees it
    (``serving.kv_pool.PoolBlocks``): blocks of ``block_pages`` pages each, and
    ``blocks_of(request)``, the hashes of the request's prompt blocks the cache may share."""

    def __init__(
        self, cache: PrefixCache, block_pages: int, blocks_of: Callable[[int], Sequence[int]]
    ) -> None:
        self.cache = cache
        self.block_pages = block_pages
        self.blocks_of = blocks_of

    def sharable(self, request: int) -> tuple[int, int]:
        """The cached leading blocks ``request``'s admission would pin, and the idle ones."""
        return self.cache.would_pin(self.blocks_of(request))

    def pinned(self, request: int) -> int:
        """Blocks ``request`` pins."""
        return self.cache.pinned(request)

    def cached(self) -> int:
        """Blocks cached."""
        return len(self.cache)

    def idle(self) -> int:
        """Cached blocks no request pins."""
        return self.cache.idle

    def evict(self) -> None:
        """Evict the least recently used idle block for an admission's pages."""
        self.cache.evict_for_room()
