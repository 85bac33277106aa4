"""What a request's KV cache takes of memory when it is admitted: the scheduler asks here.

Static slots (SambaNova's programs, any stack without ``kv_page_tokens``): each slot already
holds a whole ``max_context`` sequence, so a free slot is all an admission needs
(:class:`SlotKV`: every request fits, nothing is counted). A paged KV cache
(:class:`PagedPool`, the stack's ``kv_page_tokens``): one pool of pages, a request admitted
only when its reservation (``kv.paged.PagedKV.request_pages``: prompt plus output tokens,
rounded up to pages; a prefill-role server's prompt plus its first token) fits the free
pages, the pages returned when it leaves. The pool keeps its peak and its time-weighted
pages in use, for the run's report.
"""

from __future__ import annotations

from rdu_sim.kv.paged import PagedKV
from rdu_sim.serving.step_cache import StepCounts


class SlotKV:
    """Static slots: a request's KV cache is its slot's (every admission fits)."""

    bounded = False  # whether an admission may be refused for memory (the scheduler asks)

    def fits(self, prompt: int, output: int) -> bool:
        """Whether the free KV memory holds a request of ``prompt`` and ``output`` tokens."""
        return True

    def take(self, request: int, prompt: int, output: int, now: int) -> None:
        """``request`` is admitted at ``now`` (ps): its reservation is taken."""

    def give_back(self, request: int, now: int) -> None:
        """``request`` left at ``now`` (ps): its reservation returns."""


class PagedPool(SlotKV):
    """A paged KV cache's pool (module docstring): ``kv.pages`` pages, reserved per
    request at admission and returned at completion; never more in use than the pool. Its
    peak and time-weighted use go to ``counts`` (``kv_pages_peak``, ``kv_page_ps``)."""

    bounded = True

    def __init__(self, kv: PagedKV, counts: StepCounts, role: str = "mixed") -> None:
        self.kv = kv
        self.role = role  # a prefill server's reservation ends at the hand-off (``held_output``)
        self.free = kv.pages
        self.counts = counts
        self._since = 0  # when the pages in use last changed (ps)
        self._held: dict[int, int] = {}  # request -> its pages

    def fits(self, prompt: int, output: int) -> bool:
        """Whether the free pages hold the request's reservation."""
        return self.kv.request_pages(prompt, output, self.role) <= self.free

    def take(self, request: int, prompt: int, output: int, now: int) -> None:
        """Reserve ``request``'s pages (RuntimeError if they do not fit: the scheduler asks
        :meth:`fits` first)."""
        pages = self.kv.request_pages(prompt, output, self.role)
        if pages > self.free:
            raise RuntimeError(f"request {request} admitted beyond the KV pool (a bug)")
        self._elapse(now)
        self.free -= pages
        self._held[request] = pages
        used = self.kv.pages - self.free
        if used > self.counts.kv_pages_peak:
            self.counts.kv_pages_peak = used

    def give_back(self, request: int, now: int) -> None:
        """Return ``request``'s pages (none if it took none here: a decode replica's)."""
        pages = self._held.pop(request, 0)
        if pages:
            self._elapse(now)
            self.free += pages

    def _elapse(self, now: int) -> None:
        """Add the pages in use since the last change to the time-weighted sum."""
        self.counts.kv_page_ps += (self.kv.pages - self.free) * (now - self._since)
        self._since = now

    @property
    def in_use(self) -> int:
        """Pages reserved now."""
        return self.kv.pages - self.free


def kv_pool(kv: PagedKV | None, counts: StepCounts, role: str = "mixed") -> SlotKV:
    """The scheduler's KV admission rule: a paged pool for ``kv`` (its use counted in
    ``counts``; a server of ``role``), else static slots."""
    return SlotKV() if kv is None else PagedPool(kv, counts, role)
