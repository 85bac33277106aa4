"""The batching policy's contract, and the registry of policies by name.

A batching policy decides, at each step boundary of a continuous-batching server, whether
prefill work takes the next step and which (a slot's next chunk, or a waiting request taking
a free slot), and whether a decode run must stop at its next step for prefill work. It reads
the slots (``serving.slots``) and the queue's length; it never changes them: the scheduler
(``serving.scheduler``) admits, prefills, decodes and accounts. A policy may also choose which
waiting request an admission takes (:meth:`BatchingPolicy.admit_from`, reading a
:class:`QueueView`; the oldest unless it says otherwise). ``serving.prefill_priority`` names
the policy of a workload; each shipped policy is one small module beside this file,
registered in ``__init__.py``; one written outside rdu-sim registers from a plugin module
(``rdu_sim.plugins``), loaded when a name is not found here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar, overload

from rdu_sim import plugins
from rdu_sim.native import mypyc_attr

if TYPE_CHECKING:  # (numpy: a workload's check imports the registry without it)
    from rdu_sim.serving.clock import Clock
    from rdu_sim.serving.slots import Slots

ADMIT: Final = -1
"""``next_prefill``: a waiting request (the oldest, unless ``admit_from`` chooses) takes the
lowest free slot and prefills."""
NO_PREFILL: Final = -2
"""``next_prefill``: no prefill work now (the server decodes, or idles)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class BatchingPolicy:
    """Prefill against decode, at a step boundary (module docstring). A server makes one of
    its own (:func:`make_batching`), so a policy may keep state across boundaries.

    A base class rather than a Protocol: the scheduler is compiled, and calls a compiled
    policy directly (~3 ns, where a Protocol's call costs ~60 ns, at every decision); a
    policy written in Python subclasses it all the same."""

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        """The prefill work to run at this boundary: a slot in ``slots.prefill_order`` (its
        next chunk), :data:`ADMIT`, or :data:`NO_PREFILL`. ``queued``: requests waiting for
        a slot; ``after_prefill``: the step that just ended was prefill work. Asked only
        when there is prefill work (a prefilling slot or a waiting request)."""
        raise NotImplementedError

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        """Whether prefill work (the server's, or a router's on the same sockets) may take
        the next step at all."""
        raise NotImplementedError

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        """Whether prefill work is waiting for the next step boundary: a decode run then
        lasts one step. Asked only when there is prefill work."""
        raise NotImplementedError

    def admit_from(self, queue: QueueView) -> int:
        """Which waiting request an admission takes: its position in ``queue`` (0, the
        oldest, to ``len(queue) - 1``). Asked, of a policy that overrides it, once at each
        decision at which a request waits and a slot is free, before :meth:`next_prefill`:
        the request chosen is the one the KV memory is checked for (``queued`` is 0 while a
        paged pool cannot hold it) and the one taken if that decision answers ``ADMIT``;
        a decision that does not admit asks again at the next one, so a policy that keeps
        state must not count its calls as admissions. Asked too for each further prompt a
        batched prefill considers packing (``prefill_batch_tokens``: packing stops at the
        first whose prompt pads to another shape, or does not fit the pool), that one taken
        if it packs. Never asked with no slot free, nor again at the admission itself. The
        default, FIFO, is never called: the scheduler takes the queue's head."""
        return 0


class QueueView:
    """The waiting requests as a policy reads them, in queue order (oldest first, but for a
    request preempted under pages on demand, put back at the front): each one's request id,
    prompt tokens (what the server prefills: the target's, under speculation) and arrival
    time, and the time now (integer picoseconds, the server's clock): what an aging policy
    needs (a request's wait is ``queue.now - queue.arrival_ps(i)``). Read-only; it reads the
    queue, the records and the clock as they are when asked (the scheduler makes one, and
    keeps it: nothing is copied at a decision)."""

    def __init__(
        self, queue: deque[int], prompts: memoryview, arrivals: memoryview, clock: Clock
    ) -> None:
        self._queue = queue
        self._prompts = prompts
        self._arrivals = arrivals
        self._clock = clock

    def __len__(self) -> int:
        """Requests waiting."""
        return len(self._queue)

    @property
    def now(self) -> int:
        """The decision's instant, in integer picoseconds (``serving.clock.PS_PER_S`` a
        second)."""
        return self._clock.now

    def request(self, position: int) -> int:
        """The request id at ``position`` (0: the oldest)."""
        return self._queue[position]

    def prompt_tokens(self, position: int) -> int:
        """The prompt tokens of the request at ``position``."""
        prompt: int = self._prompts[self._queue[position]]
        return prompt

    def arrival_ps(self, position: int) -> int:
        """When the request at ``position`` arrived (ps; a decode replica's: its arrival at
        the cluster, before its prefill elsewhere), never after :attr:`now`."""
        arrival: int = self._arrivals[self._queue[position]]
        return arrival


def chooses_admission(policy: BatchingPolicy) -> bool:
    """Whether ``policy`` overrides :meth:`BatchingPolicy.admit_from` (else admissions are
    FIFO and the scheduler asks nothing: the shipped policies' path is unchanged)."""
    return type(policy).admit_from is not BatchingPolicy.admit_from


def can_admit(slots: Slots, queued: int) -> bool:
    """Whether a waiting request could take a slot now: one waits and one is free."""
    return queued > 0 and slots.occupied < slots.n


def oldest_work(slots: Slots, queued: int) -> int:
    """Prefill work in arrival order: the oldest prefilling slot (its next chunk), else
    :data:`ADMIT` if a request could take a slot, else :data:`NO_PREFILL`."""
    if slots.prefill_order:
        return slots.prefill_order[0]
    return ADMIT if can_admit(slots, queued) else NO_PREFILL


def has_work(slots: Slots, queued: int) -> bool:
    """Whether prefill work could run now: a slot is prefilling, or a request could take a
    slot."""
    return bool(slots.prefill_order) or can_admit(slots, queued)


_REGISTRY: dict[str, type[BatchingPolicy]] = {}
P = TypeVar("P", bound=BatchingPolicy)


@overload
def register(name: str) -> Callable[[type[P]], type[P]]: ...


@overload
def register(name: str, policy: type[P]) -> type[P]: ...


def register(name: str, policy: type[P] | None = None) -> type[P] | Callable[[type[P]], type[P]]:
    """Register ``policy`` as ``serving.prefill_priority: name`` (returned), or, without
    ``policy``, the class decorator that does (``@register(name)``, as a router's;
    ``plugins.register_in``). A name is refused to a class other than the one holding it;
    the same class again (module and name: a reloaded plugin, ``importlib.reload``)
    replaces it."""
    registered: type[P] | Callable[[type[P]], type[P]]
    registered = plugins.register_in("batching policy", _REGISTRY, name, policy)
    return registered


def batching_class(name: str) -> type[BatchingPolicy] | None:
    """The policy class registered as ``name``, the plugins loaded first when none is
    (``rdu_sim.plugins``); None when no plugin registers it either."""
    return plugins.lookup(_REGISTRY, name)


def batching_names() -> list[str]:
    """Registered policy names, sorted (the plugins' too: loaded first)."""
    return plugins.names(_REGISTRY)


def make_batching(name: str) -> BatchingPolicy:
    """A fresh policy of the given name (its own state); ValueError naming the valid ones."""
    return plugins.make(_REGISTRY, "serving.prefill_priority", name)


def check_batching(name: str, file: str, line: int | None = None) -> None:
    """ConfigError naming ``file`` (at ``line``, where the name is written) and
    ``serving.prefill_priority`` when no policy has that name (checked before a run
    simulates anything, and by ``rdu-sim check``)."""
    plugins.check_name("batching policy", "serving.prefill_priority", _REGISTRY, name, file, line)
