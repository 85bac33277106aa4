"""The HBM region of a Composition of Experts: whole expert slots, and the eviction policy
that picks which cached expert a switch replaces (``coe.eviction``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EVICTION", "ExpertRegion"]


@dataclass
class _Entry:
    admitted: float  # when it was given its slot (any clock unit)
    last_used: float
    uses: int


Victim = Callable[[dict[int, _Entry]], int]
"""An eviction policy: the expert to evict among the candidates (ties: lowest id)."""

EVICTION: dict[str, Victim] = {
    "lru": lambda c: min(c, key=lambda e: (c[e].last_used, e)),
    "lfu": lambda c: min(c, key=lambda e: (c[e].uses, c[e].last_used, e)),
    "fifo": lambda c: min(c, key=lambda e: (c[e].admitted, e)),
}
"""Eviction policies by ``coe.eviction`` name: least recently used, least often used (ties
to the least recently used), least recently admitted."""


class ExpertRegion:
    """The HBM region of ``capacity`` expert slots and the policy that picks a victim."""

    def __init__(self, capacity: int, eviction: str) -> None:
        if capacity < 1:
            raise ValueError(f"the region needs at least one expert slot, got {capacity}")
        self.capacity = capacity
        self.victim = EVICTION[eviction]
        self.resident: dict[int, _Entry] = {}

    def __contains__(self, expert: int) -> bool:
        return expert in self.resident

    def use(self, expert: int, now: float) -> None:
        """Count a use of a resident expert."""
        entry = self.resident[expert]
        entry.last_used, entry.uses = now, entry.uses + 1

    def admit(self, expert: int, now: float, keep: set[int]) -> int | None:
        """Give ``expert`` a slot (it is being copied in), evicting a victim not in ``keep``
        when the region is full; returns the evicted expert (None: a free slot)."""
        evicted = None
        if len(self.resident) >= self.capacity:
            candidates = {e: v for e, v in self.resident.items() if e not in keep}
            evicted = self.victim(candidates)
            del self.resident[evicted]
        self.resident[expert] = _Entry(now, now, 0)
        return evicted

    def can_admit(self, keep: set[int]) -> bool:
        """Whether a slot is free or held by an expert outside ``keep``."""
        return len(self.resident) < self.capacity or any(e not in keep for e in self.resident)
