"""Which replicas of a router's group cache each prompt block, so a router reads them at once.

Every replica's prefix cache (``prefix_cache``) reports the blocks it starts and stops
holding; the index keeps, per block hash, a bitmask of the group's members holding it (bit
``i``: the group's ``i``-th replica). A request's leading cached blocks on every replica then
follow from one walk down its hashes, AND-ing masks, instead of a lookup per replica and
block: a prefix-aware choice among 32 replicas costs a few microseconds where asking each
replica cost ~30 (the replicas holding none of its first block are never visited).
"""

from __future__ import annotations

from collections.abc import Sequence


class PrefixIndex:
    """Block hash -> bitmask of the group members whose prefix cache holds it."""

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}

    def add(self, block: int, member: int) -> None:
        """Member ``member`` now caches ``block``."""
        holders = self._holders
        holders[block] = holders.get(block, 0) | 1 << member

    def remove(self, block: int, member: int) -> None:
        """Member ``member`` evicted ``block``."""
        holders = self._holders
        left = holders[block] & ~(1 << member)
        if left:
            holders[block] = left
        else:
            del holders[block]

    def matches(self, hashes: Sequence[int], members: int) -> list[tuple[int, int]]:
        """``(member, leading blocks of hashes it caches)`` for each member of the mask
        ``members`` that caches at least the first block (what ``PrefixCache.match`` says of
        each), in no particular order."""
        holders = self._holders
        found: list[tuple[int, int]] = []
        alive = members  # the members caching every block so far
        for count, block in enumerate(hashes):
            held = holders.get(block, 0) & alive
            if count:
                _add_bits(found, alive ^ held, count)  # they cache ``count`` blocks, no more
            alive = held
            if not alive:
                return found
        _add_bits(found, alive, len(hashes))
        return found


def _add_bits(found: list[tuple[int, int]], mask: int, count: int) -> None:
    """Append ``(i, count)`` for each set bit ``i`` of ``mask``."""
    while mask:
        low = mask & -mask
        found.append((low.bit_length() - 1, count))
        mask ^= low
