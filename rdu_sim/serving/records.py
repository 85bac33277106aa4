"""What the serving core emits: per-request times and a time series of state changes.

Metrics are observers: the scheduler only writes these records; report/summary.py turns them
into percentiles, throughputs and utilizations. Records are compact (preallocated int64
arrays per request; one packed row of 24 bytes per instant with a state change, never one
per decode step), so 10,000 requests with thousands of output tokens each cost a few megabytes.

All times are integer picoseconds from the start of the run (``step_cache.PS_PER_S``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from rdu_sim.serving.series import SERIES_COLUMNS, SeriesLog
from rdu_sim.serving.step_cache import PS_PER_S

__all__ = ["SERIES_COLUMNS", "UNSET", "SeriesLog", "ServingRecords"]

UNSET = -1


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
        view.series = SeriesLog()  # (left empty: a scheduler writes none when not kept)
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
