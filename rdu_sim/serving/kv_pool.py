"""What a request's KV cache takes of memory when it is admitted: the scheduler asks here.

Static slots (SambaNova's programs, any stack without ``kv_page_tokens``): each slot already
holds a whole ``max_context`` sequence, so a free slot is all an admission needs
(:class:`SlotKV`: every request fits, nothing is counted). A paged KV cache
(:class:`PagedPool`, the stack's ``kv_page_tokens``): one pool of pages, a request admitted
only when its reservation (``kv.paged.PagedKV.request_pages``: prompt plus output tokens,
rounded up to pages; a prefill-role server's prompt plus its first token) fits the free
pages, the pages returned when it leaves. The pool keeps its peak and its time-weighted
pages in use, for the run's report.

A cluster replica's prefix cache lives in the same pages (:class:`PoolBlocks`: vLLM's block
manager and TensorRT-LLM's KV cache reuse keep cached blocks in their one free-block pool).
The pool's pages are free, a running request's own, or a cached block's (``block_pages``
each, counted once however many requests pin it); the rule relating a request's pages to
the cached copies, here and nowhere else:

- Admission: the prompt's leading blocks the cache holds are shared, pinned by the request
  while it runs; it reserves as its own only the rest of its reservation (reservation minus
  their pages). It fits when that fits the free pages plus the idle (unpinned) cached
  blocks' pages, its own hits not among them; taking it evicts idle blocks, least recently
  used first, until its own pages are free.
- Prefill end: each of the prompt's whole blocks it does not pin yet is given to the cache.
  A block not cached moves from the request's own pages into the cache (the same physical
  pages: cached, and pinned by it); a block another request cached meanwhile is shared (the
  request pins that copy and its own copy's pages return free, as vLLM's promotion of a
  full block to one already cached does); a block the cache cannot take (its optional cap
  reached, every block pinned) stays the request's own.
- Leaving: its own pages return free; the blocks it pinned become idle (still cached,
  evictable).

So pages in use (own pages plus cached blocks) never exceed the pool, a pinned block is
never evicted, and an admission is refused only when evicting every idle block would not
make room. With no prompt sharing a block, admissions are exactly those of a pool without
a cache (an idle block is a finished request's pages, free for the taking).
"""

from __future__ import annotations

from typing import Protocol

from rdu_sim.kv.paged import PagedKV
from rdu_sim.serving.step_cache import StepCounts


class SlotKV:
    """Static slots: a request's KV cache is its slot's (every admission fits)."""

    bounded = False  # whether an admission may be refused for memory (the scheduler asks)

    def fits(self, request: int, prompt: int, output: int) -> bool:
        """Whether the free KV memory holds ``request`` of ``prompt`` and ``output`` tokens."""
        return True

    def take(self, request: int, prompt: int, output: int, now: int) -> None:
        """``request`` is admitted at ``now`` (ps), after its cached blocks were pinned (the
        hooks' ``admitted``): its reservation is taken."""

    def prefilled(self, request: int, now: int) -> None:
        """``request``'s prefill ended at ``now`` (ps), after the cache took its blocks (the
        hooks' ``prefilled``)."""

    def give_back(self, request: int, now: int) -> None:
        """``request`` left at ``now`` (ps): its reservation returns."""


class PoolBlocks(Protocol):
    """A prefix cache whose blocks live in a paged pool's pages (a cluster replica's:
    ``cluster.replica``), counted in blocks of ``block_pages`` pages
    (``kv.paged.block_pages``). Only the pool evicts for room, through :meth:`evict`."""

    @property
    def block_pages(self) -> int:
        """Pages of one block."""
        ...

    def sharable(self, request: int) -> tuple[int, int]:
        """The cached leading blocks of ``request``'s prompt its admission now would pin,
        and how many of them are idle (no running request pins them)."""
        ...

    def pinned(self, request: int) -> int:
        """Blocks ``request`` pins now."""
        ...

    def cached(self) -> int:
        """Blocks cached now (pinned or idle)."""
        ...

    def idle(self) -> int:
        """Cached blocks no running request pins."""
        ...

    def evict(self) -> None:
        """Evict the least recently used idle block: an admission needs its pages."""
        ...


class PagedPool(SlotKV):
    """A paged KV cache's pool (module docstring): ``kv.pages`` pages, reserved per
    request at admission and returned at completion, shared with a prefix cache's blocks
    (``blocks``) when there is one; never more in use than the pool. Its peaks and
    time-weighted use go to ``counts`` (``kv_pages_peak``, ``kv_cached_pages_peak``,
    ``kv_page_ps``)."""

    bounded = True

    def __init__(
        self,
        kv: PagedKV,
        counts: StepCounts,
        role: str = "mixed",
        blocks: PoolBlocks | None = None,
    ) -> None:
        self.kv = kv
        self.role = role  # a prefill server's reservation ends at the hand-off (``held_output``)
        self.blocks = blocks
        self._block_pages = 0 if blocks is None else blocks.block_pages
        self.reserved = 0  # running requests' own pages
        self.counts = counts
        self._since = 0  # when the pages in use last changed (ps)
        self._used = 0  # the pages in use since then
        self._held: dict[int, int] = {}  # request -> its own pages
        self._pins: dict[int, int] = {}  # request -> blocks it pinned, as last seen

    @property
    def cached_pages(self) -> int:
        """Pages the cached blocks take (pinned or idle)."""
        return 0 if self.blocks is None else self.blocks.cached() * self._block_pages

    @property
    def in_use(self) -> int:
        """Pages in use now: requests' own and cached blocks'."""
        return self.reserved + self.cached_pages

    @property
    def free(self) -> int:
        """Pages neither a request's nor a cached block's."""
        return self.kv.pages - self.in_use

    def fits(self, request: int, prompt: int, output: int) -> bool:
        """Whether the free pages, and the idle cached blocks' it would not pin, hold the
        request's own pages (its reservation less its cached leading blocks')."""
        pages = self.kv.request_pages(prompt, output, self.role)
        blocks = self.blocks
        if blocks is None:
            return pages <= self.kv.pages - self.reserved
        hits, idle_hits = blocks.sharable(request)
        size = self._block_pages
        return pages - hits * size <= self.free + (blocks.idle() - idle_hits) * size

    def take(self, request: int, prompt: int, output: int, now: int) -> None:
        """Reserve ``request``'s own pages (its reservation less the blocks it pinned),
        evicting idle blocks, least recently used first, for room (RuntimeError if they do
        not fit: the scheduler asks :meth:`fits` first)."""
        pages = self.kv.request_pages(prompt, output, self.role)
        self._elapse(now)
        blocks = self.blocks
        if blocks is not None:
            pins = self._pins[request] = blocks.pinned(request)
            pages -= pins * self._block_pages
            while pages > self.free and blocks.idle():
                blocks.evict()
        if pages > self.free:
            raise RuntimeError(f"request {request} admitted beyond the KV pool (a bug)")
        self.reserved += pages
        self._held[request] = pages
        used = self._used = self.in_use
        if used > self.counts.kv_pages_peak:
            self.counts.kv_pages_peak = used

    def prefilled(self, request: int, now: int) -> None:
        """The cache took ``request``'s prompt blocks: those it now pins beyond its hits
        leave its own pages (moved into the cache, or its copy of a block cached meanwhile
        returned free)."""
        blocks = self.blocks
        if blocks is None or request not in self._held:
            return
        self._elapse(now)
        pins = blocks.pinned(request)
        moved = (pins - self._pins[request]) * self._block_pages
        self._pins[request] = pins
        own = self._held[request] = self._held[request] - moved
        if own < 0:
            raise RuntimeError(f"request {request} cached more pages than it reserved (a bug)")
        self.reserved -= moved
        self._used = self.in_use
        cached = self.cached_pages
        if cached > self.counts.kv_cached_pages_peak:
            self.counts.kv_cached_pages_peak = cached

    def give_back(self, request: int, now: int) -> None:
        """Return ``request``'s own pages (none if it took none here: a decode replica's);
        the blocks it pinned stay cached (the cache unpins them: the hooks' ``left``)."""
        self._pins.pop(request, None)
        pages = self._held.pop(request, 0)
        if pages:
            self._elapse(now)
            self.reserved -= pages
            self._used = self.in_use

    def _elapse(self, now: int) -> None:
        """Add the pages in use since the last change to the time-weighted sum (the count
        the pool last saw: a prefill's blocks reach the cache just before :meth:`prefilled`
        moves them out of the request's own pages, the same pages)."""
        self.counts.kv_page_ps += self._used * (now - self._since)
        self._since = now


def kv_pool(
    kv: PagedKV | None, counts: StepCounts, role: str = "mixed", blocks: PoolBlocks | None = None
) -> SlotKV:
    """The scheduler's KV admission rule: a paged pool for ``kv`` (its use counted in
    ``counts``; a server of ``role``; sharing its pages with ``blocks``, a prefix cache),
    else static slots."""
    return SlotKV() if kv is None else PagedPool(kv, counts, role, blocks)
