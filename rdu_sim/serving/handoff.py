"""Where a server's requests' KV caches come from and go: the hand-off strategies.

A cluster splits serving by a pool's ``role`` (``ServerConfig.role``), and its replicas talk
to the cluster through their hooks (``serving.hooks``: a prefix cache, the KV link):

- ``mixed`` (:class:`KeepHere`): a server prefills and decodes its own requests; with hooks
  (a cluster replica with a prefix cache) a prefill starts past the prompt tokens the cache
  holds, and the cache sees each prompt prefilled and each request leave;
- ``prefill`` (:class:`SendAfterPrefill`): each prefilled request (more than one output
  token) is handed to the decode pool; its slot holds the KV cache until it has been sent;
- ``decode`` (:class:`ReceiveToDecode`): a queued request reserves a free slot, its KV cache
  is moved here, and it decodes once the cache has arrived; nothing is prefilled here.

A hand-off that ends mid-step takes effect at the next step boundary (``at_boundary``), like
an arrival: the strategy tells the server's driver (``Scheduler.poke``), and a server whose
hand-offs end at events its own steps cause settles after every step (``settles``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial

from simpy.events import Event

from rdu_sim.native import mypyc_attr
from rdu_sim.serving.hooks import ServerHooks
from rdu_sim.serving.slots import Slots


def _nothing() -> None:
    """No one to tell yet (until the scheduler binds the strategy)."""


def _no_decode(slot: int, request: int) -> None:
    raise RuntimeError("a hand-off started a decode before its scheduler bound it (a bug)")


def _no_leave(request: int, generated: int) -> None:
    raise RuntimeError("a hand-off sent a request before its scheduler bound it (a bug)")


def _no_reserve(request: int) -> bool:
    raise RuntimeError("a hand-off received a request before its scheduler bound it (a bug)")


@mypyc_attr(allow_interpreted_subclasses=True)
class HandOff:
    """What a server does with a request's KV cache around its prefill (module docstring).
    ``hooks``: the cluster's (None: a server alone, or a replica without a prefix cache)."""

    def __init__(self, hooks: ServerHooks | None) -> None:
        self.hooks = hooks
        self.packs = hooks is None  # prompts may share a prefill step (nothing per request)
        self.ended_slots: list[int] = []  # slots whose transfer ended (each holds its request)
        self.tell: Callable[[], None] = _nothing  # the scheduler's driver: a transfer ended
        # the scheduler: a reserved slot's request decodes (its cache arrived)
        self.start_received: Callable[[int, int], None] = _no_decode
        # the scheduler: a request left after so many output tokens (its load: serving.load)
        self.leaves: Callable[[int, int], None] = _no_leave
        # the scheduler: take a request's KV memory if it fits (a paged pool's pages)
        self.reserves: Callable[[int], bool] = _no_reserve

    def bind(
        self,
        tell: Callable[[], None],
        start_received: Callable[[int, int], None],
        leaves: Callable[[int, int], None],
        reserves: Callable[[int], bool],
    ) -> None:
        """The scheduler's calls: ``tell()`` when a transfer ended (its driver wakes or cuts
        the run), ``start_received(slot, request)`` when a received request decodes,
        ``leaves(request, generated)`` when a request's KV cache was sent on (its KV memory
        returns), ``reserves(request)`` to take the queue's head's KV memory (True: it
        leaves the queue, popped next), False (nothing taken) while the free memory does not
        hold it."""
        self.tell = tell
        self.start_received = start_received
        self.leaves = leaves
        self.reserves = reserves

    def settles(self) -> bool:
        """Whether its hand-offs end at same-instant events the server's own steps cause (the
        driver then lets them land after every step before deciding)."""
        return False

    def generated_on_arrival(self) -> int:
        """Output tokens an arriving request was generated elsewhere (its load here is its
        prompt plus its tokens so far: ``serving.load``): none."""
        return 0

    def admitted(self, request: int, prompt: int) -> int:
        """``request`` took a slot and its prefill starts now: the prompt tokens a prefix
        cache spares it (the hooks say; a reusable prefix: ``serving.buckets.reusable_prefix``;
        the scheduler checks it)."""
        return 0 if self.hooks is None else self.hooks.admitted(request, prompt)

    def prefilled(self, slots: Slots, slot: int, request: int) -> bool:
        """``request``'s last prefill step in ``slot`` ended (its first token is out): True if
        the slot now holds its KV cache for another replica (it decodes elsewhere)."""
        if self.hooks is not None:
            self.hooks.prefilled(request)  # (a prefix cache keeps the prompt's blocks)
        return False

    def left(self, request: int) -> None:
        """``request`` no longer holds a slot here (completed, or its KV cache was sent)."""
        if self.hooks is not None:
            self.hooks.left(request)

    def at_boundary(self, slots: Slots, queue: deque[int]) -> None:
        """A step boundary, before the server decides: the hand-offs that ended take effect."""

    def ended(self, slot: int, _event: Event) -> None:
        """A KV transfer of ``slot`` ended (sent or received): act at the next boundary (the
        slot holds its request until then)."""
        self.ended_slots.append(slot)
        self.tell()


class KeepHere(HandOff):
    """``mixed``: prefill and decode here (:class:`HandOff` as it is)."""


class _Moves(HandOff):
    """A replica whose KV caches move over the cluster's link: it needs hooks, and settles
    after every step (its transfers end at events its own steps, or another replica's,
    cause)."""

    role = ""

    def __init__(self, hooks: ServerHooks | None) -> None:
        if hooks is None:
            raise ValueError(f"a {self.role} server needs hooks to move its KV cache")
        super().__init__(hooks)

    def settles(self) -> bool:
        """Yes (the class docstring)."""
        return True


class SendAfterPrefill(_Moves):
    """``prefill``: a prefilled request's KV cache leaves for a decode replica; its slot
    holds the cache until it has been sent."""

    role = "prefill"

    def prefilled(self, slots: Slots, slot: int, request: int) -> bool:
        """Hand the request to the cluster (unless it ends at its first token): the slot
        holds its cache until it has been sent (its load here until then: its prompt and
        first token; its decode is another pool's, which a router of this pool must not
        balance on)."""
        assert self.hooks is not None
        sent = self.hooks.prefilled(request)
        if sent is None:
            return False
        slots.hold(slot)
        sent.callbacks.append(partial(self.ended, slot))
        return True

    def at_boundary(self, slots: Slots, queue: deque[int]) -> None:
        """The caches sent since the last boundary free their slots."""
        ended = self.ended_slots
        if not ended:
            return
        for slot in ended:
            request = slots.request[slot]
            slots.release(slot)
            self.leaves(request, 1)  # its prompt and first token
            self.left(request)
        ended.clear()


class ReceiveToDecode(_Moves):
    """``decode``: a queued request reserves a free slot and its KV memory (a paged pool's
    pages, as an admission takes them: ``serving.kv_pool``) and decodes once its KV cache
    has arrived; its first token came with its prefill elsewhere. The memory returns when
    it completes (the scheduler's ``leaves``)."""

    role = "decode"

    def generated_on_arrival(self) -> int:
        """Its first token (prefilled elsewhere)."""
        return 1

    def at_boundary(self, slots: Slots, queue: deque[int]) -> None:
        """The caches received since the last boundary start decoding, then every queued
        request that finds a free slot and its KV memory, in order, reserves them and starts
        receiving its cache (the head waits for a completion while the memory does not
        hold it)."""
        ended = self.ended_slots
        if ended:
            for slot in ended:
                self.start_received(slot, slots.request[slot])
            ended.clear()
        hooks = self.hooks
        assert hooks is not None
        while queue and slots.occupied < slots.n and self.reserves(queue[0]):
            slot = slots.free_slot()
            request = queue.popleft()
            slots.reserve(slot, request)
            received = hooks.receive(request)
            received.callbacks.append(partial(self.ended, slot))


HANDOFFS: dict[str, type[HandOff]] = {
    "mixed": KeepHere,
    "prefill": SendAfterPrefill,
    "decode": ReceiveToDecode,
}
"""The strategy of each ``ServerConfig.role``."""


def make_handoff(role: str, hooks: ServerHooks | None) -> HandOff:
    """The hand-off strategy of a server of ``role`` with ``hooks``."""
    strategy = HANDOFFS.get(role)
    if strategy is None:
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(HANDOFFS)}")
    return strategy(hooks)
