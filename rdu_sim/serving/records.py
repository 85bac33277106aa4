"""What the serving core emits: per-request times and a time series of state changes.

Metrics are observers: the scheduler only writes these records; report/summary.py turns them
into percentiles, throughputs and utilizations. Records are compact (preallocated int64
arrays per request; one packed row of 24 bytes per instant with a state change, never one
per decode step), so 10,000 requests with thousands of output tokens each cost a few megabytes.

All times are integer picoseconds from the start of the run (``step_cache.PS_PER_S``).
"""

from __future__ import annotations

import copy
from array import array
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from rdu_sim.serving.step_cache import PS_PER_S

UNSET = -1

SERIES_COLUMNS = ("time_ps", "waiting", "prefilling", "decoding", "decode_bucket")
"""Time-series row: after the change at ``time_ps``, requests waiting in the queue, slots
prefilling (chunked prompts in progress), slots decoding, and the decode bucket of the last
decode step (0 before any)."""


class SeriesLog:
    """Time-series rows (``SERIES_COLUMNS``), one per instant: a change at the same
    picosecond as the last row replaces it (the states in between last no time, so no time
    average or occupancy sees them). Packed in two growing buffers, the times as int64 and
    the four counts as C ints: 24 bytes a row where a list of tuples took ~120 a row and two
    rows an instant (a million DeepSeek-R1 requests keep ~48 MB). ``times`` and ``counts``
    are views, not copies."""

    def __init__(self) -> None:
        self._times = array("q")
        self._counts = array("i")
        self._last_ps = -1

    def append(self, now: int, waiting: int, prefilling: int, decoding: int, bucket: int) -> None:
        """The state after a change at ``now`` ps (never before the last row's)."""
        try:
            if now == self._last_ps:
                counts = self._counts
                counts[-4], counts[-3], counts[-2], counts[-1] = (
                    waiting,
                    prefilling,
                    decoding,
                    bucket,
                )
            else:
                # a BufferError leaves the counts as they were: the times grow second
                self._counts.extend((waiting, prefilling, decoding, bucket))
                self._times.append(now)
                self._last_ps = now
        except BufferError:  # a view is alive: go on in buffers of our own
            self._times = array("q", self._times)
            self._counts = array("i", self._counts[: _COUNTS * len(self._times)])
            self.append(now, waiting, prefilling, decoding, bucket)

    def __len__(self) -> int:
        return len(self._times)

    def times(self) -> NDArray[np.int64]:
        """Each row's time (ps), a view of the buffer."""
        return np.frombuffer(self._times, dtype=np.int64) if self._times else _EMPTY

    def counts(self) -> NDArray[np.intc]:
        """Each row's waiting, prefilling, decoding and decode bucket: a (rows, 4) view."""
        flat = np.frombuffer(self._counts, dtype=np.intc) if self._counts else _EMPTY_COUNTS
        return flat.reshape(-1, _COUNTS)

    def as_array(self) -> NDArray[np.int64]:
        """The rows as a (rows, 5) int64 array (a copy)."""
        rows = np.empty((len(self), len(SERIES_COLUMNS)), dtype=np.int64)
        rows[:, 0] = self.times()
        rows[:, 1:] = self.counts()
        return rows


_COUNTS = len(SERIES_COLUMNS) - 1
_EMPTY: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_EMPTY_COUNTS: NDArray[np.intc] = np.zeros(0, dtype=np.intc)


class _NoSeries(SeriesLog):
    """A time series that keeps nothing (a cluster's replicas: see ``replica_view``)."""

    def append(self, now: int, waiting: int, prefilling: int, decoding: int, bucket: int) -> None:
        pass


def _unset(n: int) -> NDArray[np.int64]:
    return np.full(n, UNSET, dtype=np.int64)


@dataclass
class ServingRecords:
    """Per-request timestamps (ps) and state-change time series of one run."""

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    arrival_ps: NDArray[np.int64] = field(init=False)
    admit_ps: NDArray[np.int64] = field(init=False)  # first prefill step starts
    first_token_ps: NDArray[np.int64] = field(init=False)  # prefill ends: first output token
    finish_ps: NDArray[np.int64] = field(init=False)  # last output token
    slot: NDArray[np.int64] = field(init=False)
    completions: NDArray[np.int64] = field(init=False)  # times each request completed (count)
    # Prompt tokens the target prefills and caches: the prompt, or the kept tokens under
    # speculative prefill (``serving.speculative``).
    target_prompt_tokens: NDArray[np.int64] = field(init=False)
    # Speculative decoding, per request: the rounds (target verify steps) it decoded in, and
    # the drafted tokens accepted in them (its last round's included, even those past its end).
    rounds: NDArray[np.int64] = field(init=False)
    accepted_drafts: NDArray[np.int64] = field(init=False)
    series: SeriesLog = field(default_factory=SeriesLog)
    prefill_steps: int = 0
    decode_steps: int = 0
    decode_runs: int = 0  # batched advances (one simulation event each)
    tokens_generated: int = 0  # output tokens the steps produced (first tokens included)
    keeps_series: bool = True  # False: a replica's view, whose series is not kept
    # "decoding": decode steps are speculative rounds (``rounds`` kept); "prefill": the target
    # prefills the kept tokens (``target_prompt_tokens``); "": neither
    speculation: str = ""

    def __post_init__(self) -> None:
        n = int(self.prompt_tokens.shape[0])
        self.arrival_ps = _unset(n)
        self.admit_ps = _unset(n)
        self.first_token_ps = _unset(n)
        self.finish_ps = _unset(n)
        self.slot = _unset(n)
        self.completions = np.zeros(n, dtype=np.int64)
        # the prompts themselves (no copy: a million requests' 8 MB); speculative prefill
        # replaces the whole array, nothing writes into it
        self.target_prompt_tokens = self.prompt_tokens
        self.rounds = np.zeros(n, dtype=np.int64)
        self.accepted_drafts = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    def replica_view(self) -> ServingRecords:
        """The records one replica of a cluster writes through: the same per-request arrays
        (each request's fields are written by the replica doing that part of its work), its
        own step counters, and no time series (a cluster of a million requests would keep
        millions of rows; its occupancy comes from the per-request times instead)."""
        view = copy.copy(self)
        view.series = _NoSeries()
        view.keeps_series = False
        view.prefill_steps = view.decode_steps = view.decode_runs = view.tokens_generated = 0
        return view

    @property
    def completed(self) -> NDArray[np.bool_]:
        """Mask of requests that finished."""
        mask: NDArray[np.bool_] = self.finish_ps != UNSET
        return mask

    def seconds(self, values: NDArray[np.int64]) -> NDArray[np.float64]:
        """Picosecond timestamps -> seconds (float64)."""
        return values.astype(np.float64) / PS_PER_S

    def series_array(self) -> NDArray[np.int64]:
        """The time series as an (rows, 5) int64 array in ``SERIES_COLUMNS`` order (a copy:
        ``series.times()`` and ``series.counts()`` are views)."""
        return self.series.as_array()
