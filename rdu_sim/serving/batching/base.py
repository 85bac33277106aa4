"""The batching policy's contract, and the registry of policies by name.

A batching policy decides, at each step boundary of a continuous-batching server, whether
prefill work takes the next step and which (a slot's next chunk, or a waiting request taking
a free slot), and whether a decode run must stop at its next step for prefill work. It reads
the slots (``serving.slots``) and the queue's length; it never changes them: the scheduler
(``serving.scheduler``) admits, prefills, decodes and accounts. ``serving.prefill_priority``
names the policy of a workload; each policy is one small module beside this file, registered
in ``__init__.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rdu_sim.config.errors import ConfigError
from rdu_sim.native import mypyc_attr

if TYPE_CHECKING:  # (numpy: a workload's check imports the registry without it)
    from rdu_sim.serving.slots import Slots

ADMIT: Final = -1
"""``next_prefill``: the oldest waiting request takes the lowest free slot and prefills."""
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


def register(name: str, policy: type[BatchingPolicy]) -> None:
    """Register ``policy`` as ``serving.prefill_priority: name``; no duplicates."""
    if name in _REGISTRY:
        raise ValueError(f"batching policy {name!r} is already registered")
    _REGISTRY[name] = policy


def batching_names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(_REGISTRY)


def make_batching(name: str) -> BatchingPolicy:
    """A fresh policy of the given name (its own state); ValueError naming the valid ones."""
    policy = _REGISTRY.get(name)
    if policy is None:
        raise ValueError(
            f"unknown serving.prefill_priority {name!r}; valid: {', '.join(batching_names())}"
        )
    return policy()


def check_batching(name: str, file: str) -> None:
    """ConfigError naming ``file`` and ``serving.prefill_priority`` when no policy has that
    name (checked before a run simulates anything, and by ``rdu-sim check``)."""
    if name not in _REGISTRY:
        raise ConfigError.single(
            file,
            "serving.prefill_priority",
            f"unknown batching policy {name!r}; valid: {', '.join(batching_names())}",
        )
