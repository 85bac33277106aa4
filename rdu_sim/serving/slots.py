"""The static batch slots as parallel NumPy arrays, and the decode-run arithmetic on them.

A decoding slot's cache grows by one token per generated token until it saturates at the
cache it has at its last decode step: ``cache(g) = min(c + g - 1, cap)`` with
``c = policy.cache_at(prompt, 1)`` and ``cap = policy.cache_at(prompt, output - 1)``. Every
registered KV policy has this form (full and SnapKV grow, SnapStream and StreamingLLM
saturate at their slot; tests check it), and it lets the scheduler compute, without stepping,
how many decode steps keep the same static shape.

Completions come off a heap: a slot that starts decoding ``k`` steps when ``steps_done``
decode steps have run finishes at step ``steps_done + k``, so a run's completions are the
heap's tops, not a pass over every slot (the pass cost more than the rest of ``advance``).
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque

import numpy as np
from numpy.typing import NDArray

EMPTY, PREFILLING, DECODING, WAITING = 0, 1, 2, 3
"""Slot phases. WAITING: taken but neither prefilling nor decoding, while a request's KV
cache moves between replicas (disaggregated serving): held after prefill until sent, or
reserved before decode until received."""

IDLE = 2**62
"""``finish`` of a slot that is not decoding (and its ``cap`` is 0), so the decode-run
arithmetic needs no mask of the decoding slots: no idle slot is ever the first to complete,
the longest cache or one that outgrows a bucket (~25% of the serving level's time was
building and applying those masks on every decode run)."""


_max = np.maximum.reduce  # the ufunc's own reduction: a slot array is small, and
# ``ndarray.max()``'s Python wrapper would cost as much again


class Slots:
    """State of ``n`` static batch slots."""

    def __init__(self, n: int) -> None:
        self.n = n
        # Read and written a slot at a time, never as a whole: Python lists (a NumPy scalar
        # access costs several times a list's, and the scheduler makes a dozen a request).
        self.request: list[int] = [-1] * n
        self.prefilled: list[int] = [0] * n  # prompt tokens prefilled (chunking)
        # Read and written both ways: a slot at a time by the scheduler, through Python
        # arrays (an item ~30 ns, a NumPy scalar ~100 ns), and whole by the decode-run
        # arithmetic, through NumPy views of the same memory (``np.frombuffer``).
        self._phase = bytearray(n)
        self._cache = array("q", [0]) * n
        self._cap = array("q", [0]) * n
        self._finish = array("q", [IDLE]) * n
        self.phase = np.frombuffer(self._phase, dtype=np.int8)  # EMPTY ... WAITING
        self._cache_view = np.frombuffer(self._cache, dtype=np.int64)  # see ``cache``
        self._grown = 0  # decode steps run since ``_cache`` last had them added
        self.cap = np.frombuffer(self._cap, dtype=np.int64)  # the cache never exceeds it (0: idle)
        self.finish = np.frombuffer(self._finish, dtype=np.int64)  # the step it completes at
        self.chunked_this_round: set[int] = set()  # slots prefilled since the last decode step
        self.prefill_order: deque[int] = deque()  # prefilling slots, oldest first
        self.decoding = 0
        self.waiting = 0
        self.occupied = 0
        self._empty = list(range(n))  # a heap of the empty slots' indices
        self.steps_done = 0  # decode steps run so far (rounds, for speculative slots)
        self.most = 1  # tokens a slot's cache grows at most a step (k + 1 a speculative round)
        self._due: list[tuple[int, int, int]] = []  # heap: (finish step, slot, request)
        self._capped = np.zeros(n, dtype=np.int64)  # scratch: each slot's capped cache
        self._cap_bound = 0  # >= every slot's cap (raised as slots start, lowered when read)
        self._leader = 0  # the slot that held the longest cache when it was last computed

    @property
    def cache(self) -> NDArray[np.int64]:
        """Each slot's uncapped cache at the next decode step (an idle slot's is stale but
        never negative). A decode run adds its steps to one counter, not to every slot; they
        are added to the slots here, when the array is read (rarely: the longest cache is
        mostly bounded without it, ``longest_within``)."""
        if self._grown:
            self._cache_view += self._grown
            self._grown = 0
        return self._cache_view

    @property
    def remaining(self) -> NDArray[np.int64]:
        """Decode steps each slot has left (a copy; an idle slot's is huge, never 0)."""
        left: NDArray[np.int64] = self.finish - self.steps_done
        return left

    def free_slot(self) -> int:
        """Lowest-index empty slot, or -1."""
        return self._empty[0] if self._empty else -1

    def _take(self, slot: int) -> None:
        """An empty slot is taken."""
        empty = self._empty
        if empty[0] == slot:
            heapq.heappop(empty)
        else:
            empty.remove(slot)
            heapq.heapify(empty)

    def admit(self, slot: int, request: int) -> None:
        """Put a request in an empty slot, to be prefilled."""
        empty = self._empty
        if empty[0] == slot:  # (the lowest, as a scheduler takes them: ``_take``)
            heapq.heappop(empty)
        else:
            self._take(slot)
        self.request[slot] = request
        self._phase[slot] = PREFILLING
        self.prefilled[slot] = 0
        self.prefill_order.append(slot)
        self.occupied += 1

    def reserve(self, slot: int, request: int) -> None:
        """Put a request in an empty slot to wait for its KV cache (it decodes here only)."""
        self._take(slot)
        self.request[slot] = request
        self._phase[slot] = WAITING
        self.waiting += 1
        self.occupied += 1

    def hold(self, slot: int) -> None:
        """The slot's prefill is done and its KV cache stays until sent elsewhere."""
        self.prefill_order.remove(slot)
        self._phase[slot] = WAITING
        self.waiting += 1

    def start_decode(self, slot: int, cache: int, cap: int, steps: int) -> None:
        """The slot's prefill is done (or its KV cache arrived); it decodes ``steps`` more
        tokens."""
        if self._phase[slot] == WAITING:
            self.waiting -= 1
        else:
            self.prefill_order.remove(slot)
        self._phase[slot] = DECODING
        self._cache[slot] = cache - self._grown  # (the array lags by ``_grown`` steps)
        self._cap[slot] = cap
        if cap > self._cap_bound:
            self._cap_bound = cap
        finish = self._finish[slot] = self.steps_done + steps
        self.decoding += 1
        heapq.heappush(self._due, (finish, slot, self.request[slot]))

    def release(self, slot: int) -> None:
        """Empty a slot (its request completed)."""
        phase = self._phase[slot]
        if phase == DECODING:
            self.decoding -= 1
        elif phase == PREFILLING:
            self.prefill_order.remove(slot)
        elif phase == WAITING:
            self.waiting -= 1
        self._phase[slot] = EMPTY
        self.request[slot] = -1
        self._finish[slot] = IDLE
        self._cap[slot] = 0
        self.occupied -= 1
        heapq.heappush(self._empty, slot)

    def preempt(self, slot: int) -> None:
        """Empty a slot whose request was preempted: as :meth:`release`, and its entry in the
        completion heap dropped (the request may return to this slot with the same
        ``finish``, which the stale entry would complete twice)."""
        self.release(slot)
        due = self._due
        kept = [entry for entry in due if entry[1] != slot]
        if len(kept) != len(due):
            heapq.heapify(kept)
            self._due = kept

    def longest_cache(self) -> int:
        """Longest cache among decoding slots at the next decode step (0 if none). An idle
        slot's cap is 0 and its cache never negative, so it counts 0."""
        if not self.decoding:
            return 0
        capped = np.minimum(self.cache, self.cap, out=self._capped)
        leader = self._leader = int(capped.argmax())
        return int(capped[leader])

    def longest_within(self, low: int, high: int) -> bool:
        """Whether the longest cache (:meth:`longest_cache`) is provably in ``[low, high]``
        without a reduction over the slots: every cap is at most ``high`` (the caps' bound),
        and the slot that held the longest when last computed still has at least ``low``
        (any slot's capped cache is a lower bound of the longest: a slot that left since
        has cap 0, so counts 0). False: compute it."""
        if self._cap_bound > high:
            return False
        leader = self._leader
        cache = self._cache[leader] + self._grown
        cap = self._cap[leader]
        return (cache if cache < cap else cap) >= low

    def steps_in_run(self, bucket: int) -> int:
        """Decode steps until the next completion (the completion heap's top) or until the
        longest cache outgrows ``bucket`` (whichever is first): the steps that share one
        static shape (an idle slot's cap is 0, never the first to outgrow). A slot whose cap
        exceeds the bucket outgrows it after ``bucket - cache + 1`` steps; the largest such
        cache first."""
        steps = self._next_finish() - self.steps_done
        if self._cap_bound > bucket:  # a slot may outgrow the bucket: the caps decide
            self._cap_bound = int(_max(self.cap))
        if self._cap_bound > bucket:
            largest = int(_max(self.cache[self.cap > bucket]))
            steps = min(steps, bucket - largest + 1)
        return steps

    def mean_cache(self) -> int:
        """Mean cache among decoding slots at the next decode step, rounded up (0 if none):
        what a runtime that reads each sequence's own pages reads a sequence on average (an
        idle slot's capped cache is 0, so the sum is the decoding slots')."""
        if not self.decoding:
            return 0
        capped = np.minimum(self.cache, self.cap, out=self._capped)
        return -(-int(capped.sum()) // self.decoding)

    def steps_in_mean_run(self, bucket: int, mean: int) -> int:
        """Decode steps (rounds, for speculative slots) until the next completion or until
        the mean cache (``mean`` now, at most ``bucket``) may outgrow ``bucket``: a sequence
        grows at most ``most`` tokens a step, so the rounded-up mean does too, and stays
        within it for ``(bucket - mean) // most + 1`` steps; never, when no cap exceeds the
        bucket (saturated slots: SnapStream, StreamingLLM)."""
        steps = self._next_finish() - self.steps_done
        if self._cap_bound > bucket:  # a slot may outgrow the bucket: the caps decide
            self._cap_bound = int(_max(self.cap))
        if self._cap_bound > bucket:
            steps = min(steps, (bucket - mean) // self.most + 1)
        return steps

    def _next_finish(self) -> int:
        """The earliest ``finish`` of a decoding slot (``IDLE`` if none): the completion heap's
        top, once the entries of requests that left their slot early are dropped (they would
        be at their step; they never complete)."""
        heap, request, finish = self._due, self.request, self._finish
        while heap:
            due, slot, owner = heap[0]
            if request[slot] == owner and finish[slot] == due:
                return due
            heapq.heappop(heap)
        return IDLE

    def emitted(self, steps: int) -> int:
        """Tokens the decoding slots emit in their next ``steps`` decode steps (one each)."""
        return steps * self.decoding

    def advance(self, steps: int) -> list[int]:
        """Run ``steps`` decode steps; return the slots whose request is now complete. Idle
        slots step too (their cache is rewritten when they start decoding); a slot's
        ``finish`` stays, the count of steps run moves."""
        self._grown += steps  # (added to every slot's cache when ``cache`` is read)
        self.chunked_this_round.clear()
        return self._finished(steps)

    def _finished(self, steps: int) -> list[int]:
        """After ``steps`` more decode steps, the slots whose ``finish`` is now, in slot
        order: the heap's entries due by now (one whose slot was emptied or refilled since,
        so holds another request or has steps left, is dropped)."""
        now = self.steps_done = self.steps_done + steps
        heap, request, finish = self._due, self.request, self._finish
        done: list[int] = []
        while heap and heap[0][0] <= now:
            _, slot, owner = heapq.heappop(heap)
            if request[slot] == owner and finish[slot] == now:
                done.append(slot)
        return done
