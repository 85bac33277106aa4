"""Slots keep idle slots at ``remaining = IDLE`` and ``cap = 0`` so the decode-run arithmetic
runs on whole arrays; a differential test against the same arithmetic on the decoding
slots alone (masks), over random admissions, decode starts, runs and releases."""

from __future__ import annotations

import numpy as np

from rdu_sim.serving.slots import DECODING, EMPTY, Slots


def masked_longest(slots: Slots) -> int:
    """The longest capped cache among decoding slots, from the masks (0 if none)."""
    mask = slots.phase == DECODING
    return int(np.minimum(slots.cache[mask], slots.cap[mask]).max()) if mask.any() else 0


def _masked(slots: Slots, bucket: int) -> tuple[int, int]:
    mask = slots.phase == DECODING
    longest = masked_longest(slots)
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
            assert done == expected.tolist()
            for slot in done:
                slots.release(slot)
        elif choice == 3 and (decoding.size or prefilling):
            slots.release(int(rng.choice(np.flatnonzero(slots.phase != EMPTY))))
        assert slots.longest_cache() == _masked(slots, 0)[0]
    assert request > 100


def test_a_completion_is_reported_once_by_the_slot_its_request_holds() -> None:
    """The completion heap keeps entries of requests that left their slot early: such an
    entry must never complete the slot's next request (nor an empty slot), and a refilled
    slot finishing at the old entry's step completes once."""
    slots = Slots(3)
    for request in (10, 11, 12):
        slots.admit(slots.free_slot(), request)
    slots.start_decode(0, 5, 100, 4)  # request 10 would finish at step 4
    slots.start_decode(1, 5, 100, 4)  # request 11 would finish at step 4
    slots.start_decode(2, 5, 100, 6)
    assert slots.advance(1) == []
    slots.release(0)  # request 10 leaves early; slot 0 refilled, finishing at step 4 too
    slots.release(1)  # request 11 leaves early; slot 1 stays empty
    slots.admit(0, 20)
    slots.start_decode(0, 5, 100, 3)
    assert slots.advance(3) == [0]
    assert int(slots.request[0]) == 20
    slots.release(0)
    assert slots.advance(2) == [2]
    assert slots.advance(1) == []  # nothing left but idle slots
