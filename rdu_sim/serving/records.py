"""What the serving core emits: per-request times and a time series of state changes.

Metrics are observers: the scheduler only writes these records; report/summary.py turns them
into percentiles, throughputs and utilizations. Records are compact (preallocated int64
arrays per request; one packed row of five int64 per state change, never one per decode
step), so 10,000 requests with thousands of output tokens each cost a few megabytes.

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
    """Time-series rows packed into one growing int64 buffer (``SERIES_COLUMNS``), one row
    per instant: a change at the same picosecond as the last row replaces it (the states
    in between last no time, so no time average or occupancy sees them). 40 bytes a row
    where a list of tuples took ~120 a row and two rows an instant: a million DeepSeek-R1
    requests keep ~80 MB, not ~480 MB. ``as_array`` is a view, not a copy."""

    def __init__(self) -> None:
        self._values = array("q")
        self._last_ps = -1

    def append(self, row: tuple[int, int, int, int, int]) -> None:
        """The state after a change at ``row[0]`` ps (never before the last row's)."""
        try:
            self._put(row)
        except BufferError:  # a view from as_array is alive: go on in a buffer of our own
            self._values = array("q", self._values)
            self._put(row)

    def _put(self, row: tuple[int, int, int, int, int]) -> None:
        if row[0] == self._last_ps:
            self._values[-len(row) :] = array("q", row)
        else:
            self._values.extend(row)
            self._last_ps = row[0]

    def __len__(self) -> int:
        return len(self._values) // len(SERIES_COLUMNS)

    def as_array(self) -> NDArray[np.int64]:
        """The rows as a (rows, 5) int64 array (a view of the buffer)."""
        flat = np.frombuffer(self._values, dtype=np.int64) if self._values else _EMPTY
        return flat.reshape(-1, len(SERIES_COLUMNS))


_EMPTY: NDArray[np.int64] = np.zeros(0, dtype=np.int64)


class _NoSeries(SeriesLog):
    """A time series that keeps nothing (a cluster's replicas: see ``replica_view``)."""

    def append(self, row: tuple[int, int, int, int, int]) -> None:
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
        self.target_prompt_tokens = self.prompt_tokens.copy()
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
        """The time series as an (rows, 5) int64 array in ``SERIES_COLUMNS`` order."""
        return self.series.as_array()
