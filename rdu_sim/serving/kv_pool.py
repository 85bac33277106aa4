"""What a request's KV cache takes of memory when it is admitted: the scheduler asks here.

Static slots (SambaNova's programs, any stack without ``kv_page_tokens``): each slot already
holds a whole ``max_context`` sequence, so a free slot is all an admission needs
(:class:`SlotKV`: every request fits, nothing is counted). A paged KV cache
(:class:`PagedPool`, the stack's ``kv_page_tokens``): one pool of pages, a request admitted
only when its reservation (``kv.paged.PagedKV.request_pages``: prompt plus output tokens,
rounded up to pages; a prefill-role server's prompt plus its first token) fits the free
pages, the pages returned when it leaves (the stack's ``kv_allocation: reserve``,
TensorRT-LLM's GUARANTEED_NO_EVICT). The pool keeps its peak and its time-weighted pages in
use, for the run's report. Pages on demand (``kv_allocation: on_demand``, vLLM's block
manager: :class:`OnDemandPool`): an admission takes its prompt's pages only, a decode run
grows each request a page per page boundary it crosses, and the scheduler preempts the
running request that arrived last while the next decode step's pages do not fit
(``Scheduler._make_room``); a preempted request's own pages return and its pinned blocks
become idle, as a leaving request's.

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

from rdu_sim.kv.paged import PagedKV, reserved_pages
from rdu_sim.serving.step_cache import StepCounts


class SlotKV:
    """Static slots: a request's KV cache is its slot's (every admission fits)."""

    bounded = False  # whether an admission may be refused for memory (the scheduler asks)
    grows = False  # whether a request's pages grow as it decodes (:class:`OnDemandPool`)

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
        self.watermark = 0  # pages an admission leaves free (:class:`OnDemandPool`'s)

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

    def own_pages(self, request: int) -> int:
        """The pages ``request`` holds of its own (what giving it back returns; 0 if none)."""
        return self._held.get(request, 0)

    def fits(self, request: int, prompt: int, output: int) -> bool:
        """Whether the free pages, and the idle cached blocks' it would not pin, hold the
        request's own pages (what its admission takes, less its cached leading blocks') and
        leave the watermark."""
        pages = self._admitted_pages(prompt, output) + self.watermark
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
        pages = self._admitted_pages(prompt, output)
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

    def _admitted_pages(self, prompt: int, output: int) -> int:
        """Pages an admission of ``prompt`` and ``output`` tokens takes: its reservation."""
        return self.kv.request_pages(prompt, output, self.role)

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


class OnDemandPool(PagedPool):
    """A paged pool that gives pages on demand (the stack's ``kv_allocation: on_demand``,
    vLLM's block manager): an admission takes the prompt's pages only (a readmitted
    request's prompt is its prompt and the tokens it had generated), if the free pages
    less those leave ``kv.watermark_pages`` (vLLM's watermark); a decoding request takes
    one page more as its next decode step's token crosses a page boundary. The scheduler
    asks :meth:`short` before a decode run (pages its first step lacks: it preempts until
    none), :meth:`steps_fit` how many steps of it the free pages hold, and tells
    :meth:`grow` when it ends. A request's room (its own pages and the cached blocks it
    pins) covers its cache: ``reserved_pages(prompt, k)`` after ``k`` decode steps, never
    more than a reservation would take. The pages in use are counted at each run's end
    (the time-weighted mean takes a run's growth from its end)."""

    grows = True

    def __init__(self, kv: PagedKV, counts: StepCounts, blocks: PoolBlocks | None = None) -> None:
        """A mixed server's pool (a prefill or decode replica reserves: :func:`kv_pool`)."""
        super().__init__(kv, counts, "mixed", blocks)
        self.watermark = kv.watermark_pages
        self._room: dict[int, int] = {}  # request -> pages its cache has (own and pinned)
        # decoding request -> (its prompt, the slots' decode steps done when it started)
        self._decoding: dict[int, tuple[int, int]] = {}

    def _admitted_pages(self, prompt: int, output: int) -> int:
        """The prompt's pages (its cache at admission)."""
        return self.kv.request_pages(prompt, 0, self.role)

    def take(self, request: int, prompt: int, output: int, now: int) -> None:
        """Take the prompt's pages (:class:`PagedPool`'s rule); its room is theirs."""
        super().take(request, prompt, output, now)
        self._room[request] = self._admitted_pages(prompt, output)

    def decoding(self, request: int, prompt: int, steps_done: int) -> None:
        """``request`` (of ``prompt`` tokens cached) starts decoding when the slots have run
        ``steps_done`` decode steps: its step ``k`` caches ``prompt + k`` tokens."""
        self._decoding[request] = (prompt, steps_done)

    def _lacks(self, request: int, at: int) -> int:
        """Pages decoding ``request`` lacks for its cache after the slots' decode step ``at``
        beyond its room (0 or less: none)."""
        kv = self.kv
        prompt, start = self._decoding[request]
        cached = reserved_pages(prompt, at - start, kv.slot_tokens, kv.page_tokens, kv.extra_tokens)
        return cached - self._room[request]

    def _needed(self, at: int) -> int:
        """Pages the decoding requests lack for their caches after the slots' decode step
        ``at`` (their room now counted)."""
        lacking = 0
        for request in self._decoding:
            more = self._lacks(request, at)
            if more > 0:
                lacking += more
        return lacking

    def _spare(self) -> int:
        """Pages a request may grow into now: the free pages and the idle cached blocks'."""
        blocks = self.blocks
        return self.free + (0 if blocks is None else blocks.idle() * self._block_pages)

    def short(self, steps_done: int) -> int:
        """Pages the next decode step (after ``steps_done``) lacks (0: it fits)."""
        lacking = self._needed(steps_done + 1) - self._spare()
        return lacking if lacking > 0 else 0

    def steps_fit(self, steps_done: int, steps: int) -> int:
        """The most of ``steps`` decode steps from ``steps_done`` whose growth the pool
        holds (0 when not even the first's: :meth:`short`)."""
        spare = self._spare()
        if self._needed(steps_done + steps) <= spare:
            return steps
        low, high = 0, steps  # the growth of ``low`` steps fits, of ``high`` does not
        while high - low > 1:
            middle = (low + high) // 2
            if self._needed(steps_done + middle) <= spare:
                low = middle
            else:
                high = middle
        return low

    def grow(self, steps_done: int, now: int) -> None:
        """The slots' decode steps up to ``steps_done`` ran (ending now): each decoding
        request's room grows to its cache, idle cached blocks evicted, least recently used
        first, for the pages (RuntimeError if they do not fit: :meth:`steps_fit` said)."""
        room, held = self._room, self._held
        self._elapse(now)
        blocks = self.blocks
        for request in self._decoding:
            more = self._lacks(request, steps_done)
            if more <= 0:
                continue
            if blocks is not None:
                while more > self.free and blocks.idle():
                    blocks.evict()
            if more > self.free:
                raise RuntimeError(f"request {request} grew beyond the KV pool (a bug)")
            room[request] += more
            held[request] += more
            self.reserved += more
        used = self._used = self.in_use
        if used > self.counts.kv_pages_peak:
            self.counts.kv_pages_peak = used

    def give_back(self, request: int, now: int) -> None:
        """Return ``request``'s own pages (completed or preempted)."""
        self._room.pop(request, None)
        self._decoding.pop(request, None)
        super().give_back(request, now)


def kv_pool(
    kv: PagedKV | None,
    counts: StepCounts,
    role: str = "mixed",
    blocks: PoolBlocks | None = None,
) -> SlotKV:
    """The scheduler's KV admission rule: a paged pool for ``kv`` (its use counted in
    ``counts``; a server of ``role``; sharing its pages with ``blocks``, a prefix cache),
    else static slots. Pages on demand where ``kv`` gives them on a server of ``role``
    (``kv.paged.gives_on_demand``: a mixed server decoding a token a step; a disaggregated
    replica and speculative rounds reserve)."""
    if kv is None:
        return SlotKV()
    if kv.gives_on_demand(role):
        return OnDemandPool(kv, counts, blocks)
    return PagedPool(kv, counts, role, blocks)
