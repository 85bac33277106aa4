"""Slots keep idle slots at ``remaining = IDLE`` and ``cap = 0`` so the decode-run arithmetic
runs on whole arrays; a differential test against the same arithmetic on the decoding
slots alone (masks), over random admissions, decode starts, runs and releases."""

from __future__ import annotations

import numpy as np

from rdu_sim.serving.slots import DECODING, EMPTY, Slots


def _masked(slots: Slots, bucket: int) -> tuple[int, int]:
    mask = slots.phase == DECODING
    longest = int(np.minimum(slots.cache[mask], slots.cap[mask]).max()) if mask.any() else 0
    steps = int(slots.remaining[mask].min()) if mask.any() else -1
    grows = mask & (slots.cap > bucket)
    if grows.any():
        steps = min(steps, int((bucket - slots.cache[grows]).min()) + 1)
    return longest, steps


def test_idle_slots_never_decide_a_run() -> None:
    rng = np.random.default_rng(7)
    slots = Slots(9)
    request = 0
    for _ in range(3000):
        empty = np.flatnonzero(slots.phase == EMPTY)
        decoding = np.flatnonzero(slots.phase == DECODING)
        prefilling = list(slots.prefill_order)
        choice = rng.integers(4)
        if choice == 0 and empty.size:
            slots.admit(slots.free_slot(), request)
            request += 1
        elif choice == 1 and prefilling:
            cache = int(rng.integers(1, 500))
            slots.start_decode(prefilling[0], cache, cache + int(rng.integers(0, 400)), 50)
        elif choice == 2 and decoding.size:
            bucket = max(64, slots.longest_cache())
            longest, steps = _masked(slots, bucket)
            assert slots.longest_cache() == longest
            assert slots.steps_in_run(bucket) == steps
            run = int(rng.integers(1, steps + 1))
            remaining = slots.remaining.copy()
            done = slots.advance(run)
            expected = np.flatnonzero((slots.phase == DECODING) & (remaining == run))
            assert done.tolist() == expected.tolist()
            for slot in done:
                slots.release(int(slot))
        elif choice == 3 and (decoding.size or prefilling):
            slots.release(int(rng.choice(np.flatnonzero(slots.phase != EMPTY))))
        assert slots.longest_cache() == _masked(slots, 0)[0]
    assert request > 100
