"""``Slots.longest_within``: the decode plan skips the reduction for the longest cache when
bounds prove it lies in the current bucket's range. A differential test against the masked
arithmetic over random admissions, decode starts, runs and releases: whenever it answers
True, the longest cache is in the range."""

from __future__ import annotations

import numpy as np
from test_slots_idle import masked_longest as _longest

from rdu_sim.serving.slots import EMPTY, Slots


def test_longest_within_never_claims_a_range_the_longest_is_outside() -> None:
    rng = np.random.default_rng(11)
    slots = Slots(7)
    request = 0
    claimed = refused_inside = 0
    for _ in range(6000):
        empty = np.flatnonzero(slots.phase == EMPTY)
        prefilling = list(slots.prefill_order)
        choice = rng.integers(5)
        if choice == 0 and empty.size:
            slots.admit(slots.free_slot(), request)
            request += 1
        elif choice == 1 and prefilling:
            cache = int(rng.integers(1, 500))
            steps = int(rng.integers(1, 80))
            slots.start_decode(prefilling[0], cache, cache + int(rng.integers(0, 400)), steps)
        elif choice == 2 and slots.decoding:
            for slot in slots.advance(int(rng.integers(1, 20))):
                slots.release(slot)
        elif choice == 3 and slots.occupied:
            slots.release(int(rng.choice(np.flatnonzero(slots.phase != EMPTY))))
        elif choice == 4:
            assert slots.longest_cache() == _longest(slots)  # the leader moves here
        truth = _longest(slots)
        low = max(0, truth + int(rng.integers(-60, 60)))
        high = low + int(rng.integers(0, 900))
        if slots.longest_within(low, high):
            assert low <= truth <= high, (low, truth, high)
            claimed += 1
        elif low <= truth <= high:
            refused_inside += 1
    assert claimed > 500 and refused_inside > 100  # both answers happen


def test_a_released_leader_proves_nothing() -> None:
    """The slot that held the longest cache leaves: its stale cache must not count (its cap
    is 0 once released)."""
    slots = Slots(2)
    slots.admit(0, 1)
    slots.admit(1, 2)
    slots.start_decode(0, 900, 1000, 50)
    slots.start_decode(1, 10, 1000, 50)
    assert slots.longest_cache() == 900
    assert slots.longest_within(800, 1000)
    slots.release(0)
    assert not slots.longest_within(800, 1000)
    assert slots.longest_cache() == 10
    assert slots.longest_within(0, 1000) and not slots.longest_within(11, 1000)


def test_a_cap_above_the_range_proves_nothing() -> None:
    """A slot whose cap exceeds ``high`` may hold a cache above it."""
    slots = Slots(2)
    slots.admit(0, 1)
    slots.admit(1, 2)
    slots.start_decode(0, 500, 600, 50)
    assert slots.longest_cache() == 500
    slots.start_decode(1, 100, 5000, 50)
    assert slots.longest_within(0, 5000)
    assert not slots.longest_within(0, 4999)
