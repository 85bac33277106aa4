"""The preemption policy's contract, and the registry of policies by name.

A paged KV pool that gives pages on demand (the stack's ``kv_allocation: on_demand``) can
run short of pages for the next decode step; the scheduler then preempts running requests,
one at a time, until the step fits (``Scheduler._make_room``): each victim's pages return,
it leaves its slot and goes back to the queue's front, to be prefilled again. *Which*
running request goes is the preemption policy's: it reads the running requests through a
:class:`RunningView` and answers a slot; the scheduler does the preempting and accounting.
``serving.preemption`` names the policy of a workload; each shipped policy is one small
module beside this file, registered in ``__init__.py``; one written outside rdu-sim
registers from a plugin module (``rdu_sim.plugins``), loaded when a name is not found here:
the batching policies' registry rule (``plugins.register_in``, ``lookup``, ``unknown``).

Asked only when a decode step lacks pages (rare beside decisions): a Python call, not the
compiled scheduler's direct one a batching policy gets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar, overload

from rdu_sim import plugins

if TYPE_CHECKING:  # (numpy: a workload's check imports the registry without it)
    from rdu_sim.serving.clock import Clock
    from rdu_sim.serving.kv_pool import PagedPool
    from rdu_sim.serving.slots import Slots

DEFAULT: Final = "latest_arrival"
"""The policy a workload that names none runs (``serving.preemption``'s default)."""


class PreemptionPolicy:
    """Which running request a decode step short of KV pages preempts (module docstring).
    A server makes one of its own (:func:`make_preemption`), so a policy may keep state."""

    def victim(self, running: RunningView) -> int:
        """The slot whose request is preempted next: one holding a request
        (``running.request(slot) >= 0``). Asked again, after that one left, while the step
        still lacks pages; every request may go (the step then waits for a decision)."""
        raise NotImplementedError


class RunningView:
    """The requests holding slots, as a preemption policy reads them, by slot (``0`` to
    ``len(running) - 1``, an empty slot's request ``-1``): each one's request id, arrival
    and admission order, prompt as drawn, output tokens generated so far (over all its
    admissions), whether it decodes (else it is still prefilling) and the KV pages it holds
    of its own (what preempting it returns), and the time now. Read-only; it reads the
    scheduler's state as it is when asked (the scheduler makes one, and keeps it)."""

    def __init__(
        self,
        slots: Slots,
        arrivals: memoryview,
        prompts: memoryview,
        outputs: memoryview,
        left: memoryview,
        admitted: list[int],
        pool: PagedPool,
        clock: Clock,
    ) -> None:
        """``prompts``, ``outputs``: the requests as drawn (the records'); ``left``: the
        output tokens each has left at its current admission (the scheduler's copy, cut at
        each preemption); ``admitted``: each slot's admission serial."""
        from rdu_sim.serving.slots import DECODING  # (numpy: a scheduler's, loaded already)

        self._decoding = DECODING
        self._slots = slots
        self._arrivals = arrivals
        self._prompts = prompts
        self._outputs = outputs
        self._left = left
        self._admitted = admitted
        self._pool = pool
        self._clock = clock

    def __len__(self) -> int:
        """Slots (empty ones included)."""
        return self._slots.n

    @property
    def now(self) -> int:
        """The decision's instant, in integer picoseconds."""
        return self._clock.now

    def request(self, slot: int) -> int:
        """The request id in ``slot``; -1 when it is empty."""
        return self._slots.request[slot]

    def arrival_ps(self, slot: int) -> int:
        """When the slot's request arrived (ps)."""
        arrival: int = self._arrivals[self._slots.request[slot]]
        return arrival

    def admitted(self, slot: int) -> int:
        """The slot's admission serial: larger for a later admission (a readmitted request's
        is its latest), distinct across slots."""
        return self._admitted[slot]

    def prompt_tokens(self, slot: int) -> int:
        """The slot's request's prompt as drawn (not the generated tokens a readmission
        prefills with it)."""
        prompt: int = self._prompts[self._slots.request[slot]]
        return prompt

    def decoding(self, slot: int) -> bool:
        """Whether the slot's request decodes (else it is still prefilling)."""
        return bool(self._slots.phase[slot] == self._decoding)

    def generated(self, slot: int) -> int:
        """Output tokens the slot's request has generated so far, over all its admissions
        (0 before its first token)."""
        slots = self._slots
        request = slots.request[slot]
        if self.decoding(slot):  # it has ``finish - steps_done`` decode steps left
            left = int(slots.finish[slot]) - slots.steps_done
        else:  # (prefilling: what it had left when it was admitted)
            left = self._left[request]
        generated: int = self._outputs[request] - left
        return generated

    def pages(self, slot: int) -> int:
        """KV pages the slot's request holds of its own (its cached prompt blocks a prefix
        cache keeps are not: preempting it returns these)."""
        return self._pool.own_pages(self._slots.request[slot])


_REGISTRY: dict[str, type[PreemptionPolicy]] = {}
P = TypeVar("P", bound=PreemptionPolicy)


@overload
def register(name: str) -> Callable[[type[P]], type[P]]: ...


@overload
def register(name: str, policy: type[P]) -> type[P]: ...


def register(name: str, policy: type[P] | None = None) -> type[P] | Callable[[type[P]], type[P]]:
    """Register ``policy`` as ``serving.preemption: name`` (returned), or, without
    ``policy``, the class decorator that does (the batching registry's rule:
    ``plugins.register_in``)."""
    registered: type[P] | Callable[[type[P]], type[P]]
    registered = plugins.register_in("preemption policy", _REGISTRY, name, policy)
    return registered


def preemption_class(name: str) -> type[PreemptionPolicy] | None:
    """The policy class registered as ``name``, the plugins loaded first when none is;
    None when no plugin registers it either."""
    return plugins.lookup(_REGISTRY, name)


def preemption_names() -> list[str]:
    """Registered policy names, sorted (the plugins' too: loaded first)."""
    return plugins.names(_REGISTRY)


def make_preemption(name: str) -> PreemptionPolicy:
    """A fresh policy of the given name (its own state); ValueError naming the valid ones."""
    return plugins.make(_REGISTRY, "serving.preemption", name)


def check_preemption(name: str, file: str, line: int | None = None) -> None:
    """ConfigError naming ``file`` (at ``line``, where the name is written) and
    ``serving.preemption`` when no policy has that name (checked before a run
    simulates anything, and by ``rdu-sim check``)."""
    plugins.check_name("preemption policy", "serving.preemption", _REGISTRY, name, file, line)
