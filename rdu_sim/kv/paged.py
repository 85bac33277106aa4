"""A paged KV cache's pool and what a request reserves in it: the one rule.

A runtime with a paged KV cache (the serving stack's ``kv_page_tokens``: TensorRT-LLM,
vLLM) gives its KV cache one pool of pages (the room ``StackConfig.kv_room`` leaves, cut
into pages) instead of a static slot of ``max_context`` tokens per batch slot. It admits a
request only when the pool's free pages hold the request's whole reservation: its prompt
plus its output tokens (at most the policy's slot), rounded up to whole pages
(TensorRT-LLM's guaranteed-no-evict scheduling: the stack's ``kv_allocation: reserve``).
The pages return when the request completes. A stack with ``kv_allocation: on_demand``
(vLLM's block manager) gives a request only its prompt's pages at admission and one more
page as its decode crosses each page boundary, preempting the running request that arrived
last when none is free (``serving.kv_pool.OnDemandPool``). The compiler sizes the batch
with the rule the pool follows (``compiler.placement.smallest_request_pages``: a
reservation, or a prompt's pages and the watermark where pages come on demand), the
scheduler admits with it (``serving.kv_pool``).

A cluster's prefix cache keeps its blocks in the same pool (``serving.kv_pool`` says how a
request's pages and the cached blocks relate): a block of ``block_tokens`` is
:func:`block_pages` whole pages, so a prompt's leading blocks are exactly its leading pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.pickled import Reduced, by_fields


@dataclass(frozen=True)
class PagedKV:
    """A paged KV pool: ``pages`` pages of ``page_tokens`` tokens each (one device's share
    of every page fits its room), sequences cached up to ``slot_tokens`` tokens (the KV
    policy's slot) plus ``extra_tokens`` (a speculative verify step's rollback positions)."""

    page_tokens: int
    pages: int
    slot_tokens: int
    extra_tokens: int = 0
    page_bytes: int = 0  # one device's bytes of one page (for the report)
    # the stack's ``kv_allocation`` is ``on_demand``: where the pool gives pages on demand
    # (:meth:`gives_on_demand`) a request takes its prompt's pages at admission and grows page
    # by page (``serving.kv_pool.OnDemandPool``), an admission leaving ``watermark_pages``
    # free (the stack's ``kv_watermark`` of the pool, rounded down)
    on_demand: bool = False
    watermark_pages: int = 0
    # tokens a sequence's cache grows at most a decode step: 1, or k + 1 a speculative round
    step_tokens: int = 1

    def __reduce__(self) -> Reduced:
        return by_fields(self)

    def gives_on_demand(self, role: str) -> bool:
        """Whether this pool gives pages on demand on a server of ``role``
        (:func:`gives_on_demand`)."""
        return gives_on_demand(self.on_demand, role, self.step_tokens)

    def request_pages(self, prompt: int, output: int, role: str = "mixed") -> int:
        """Pages a request of ``prompt`` and ``output`` tokens reserves at admission on a
        server of ``role`` (:func:`held_output`)."""
        return reserved_pages(
            prompt,
            held_output(output, role),
            self.slot_tokens,
            self.page_tokens,
            self.extra_tokens,
        )

    @property
    def tokens(self) -> int:
        """Tokens the whole pool holds."""
        return self.pages * self.page_tokens


def gives_on_demand(on_demand: bool, role: str, step_tokens: int) -> bool:
    """Whether a paged pool gives pages on demand, the one rule (the scheduler's pool,
    ``serving.kv_pool.kv_pool``; the run's refusals, ``serving.limits``; the batch ``auto``
    sizes, ``compiler.placement``; the reports' preemptions): the stack's ``kv_allocation``
    is ``on_demand``, on a server that prefills and decodes its own requests (``role``
    mixed) ``step_tokens`` 1 a decode step. A disaggregated replica (its pages handed over
    whole) and speculative rounds (a round's k + 1 tokens) reserve."""
    return on_demand and role == "mixed" and step_tokens == 1


def role_sizes_pool(role: str, on_demand: bool) -> bool:
    """Whether a server's ``role`` changes what a paged pool's smallest request takes at
    admission, and so the batch ``auto`` sizes (``compiler.placement``): under pages on demand
    (:func:`gives_on_demand`: only a mixed server's requests grow page by page), or on a
    prefill server, which holds a request's prompt and first token (:func:`held_output`)."""
    return on_demand or role == "prefill"


def held_output(output: int, role: str) -> int:
    """The output tokens a server of ``role`` caches for a request of ``output``: a
    prefill-role server holds its prompt and the one token its prefill emits until the
    hand-off takes the KV cache to a decode replica; a mixed or decode server all of them."""
    return min(output, 1) if role == "prefill" else output


def reserved_pages(
    prompt: int, output: int, slot_tokens: int, page_tokens: int, extra_tokens: int = 0
) -> int:
    """Pages a request reserves: its prompt and output tokens, at most ``slot_tokens`` (the
    policy's slot: a compressing policy's cache saturates there), plus ``extra_tokens``,
    rounded up to whole pages of ``page_tokens``."""
    tokens = min(prompt + output, slot_tokens) + extra_tokens
    return -(-tokens // page_tokens)


def block_pages(block_tokens: int, page_tokens: int) -> int:
    """Pages of one prefix-cache block of ``block_tokens`` tokens in a pool of
    ``page_tokens``-token pages: the runtimes cache whole pages (vLLM hashes each page, a
    block of its block manager), so a block is whole pages only when the page size divides
    it; ValueError otherwise (the cluster's loader says it in the file's words)."""
    if block_tokens % page_tokens:
        raise ValueError(
            f"a {block_tokens}-token prefix-cache block is not whole {page_tokens}-token pages"
        )
    return block_tokens // page_tokens
