"""What the serving core emits: per-request times and a time series of state changes.

Metrics are observers: the scheduler only writes these records; report/summary.py turns them
into percentiles, throughputs and utilizations. Records are compact (preallocated int64
arrays per request; one packed row of 24 bytes per instant with a state change, never one
per decode step), so 10,000 requests with thousands of output tokens each cost a few megabytes.

Every array is made when the records are, and none is replaced after (the records are
frozen): the serving core reads and writes a request's items through memoryviews it takes of
them once, the reports read them whole; the step counts live in their own object
(:class:`StepCounts`), the one thing the simulation changes in place besides the arrays'
items.

All times are integer picoseconds from the start of the run (``step_cache.PS_PER_S``).
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from rdu_sim.serving.series import SERIES_COLUMNS, SeriesLog
from rdu_sim.serving.step_cache import PS_PER_S, StepCounts

__all__ = ["SERIES_COLUMNS", "UNSET", "SeriesLog", "ServingRecords", "StepCounts"]

UNSET = -1


def _unset(n: int) -> NDArray[np.int64]:
    return np.full(n, UNSET, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ServingRecords:
    """Per-request timestamps (ps), the state-change time series and the step counts of one
    run. ``target_prompts``: the prompt tokens the target prefills and caches, kept as
    ``target_prompt_tokens`` (the kept tokens under speculative prefill; by default the
    prompts themselves, no copy).
    ``speculation``: "decoding" (decode steps are speculative rounds, ``rounds`` kept),
    "prefill" (the target prefills the kept tokens) or "", ``acceptance_rates`` each request's
    rate under speculative decoding. ``keeps_series``: False for a cluster replica's view,
    whose series is not kept. ``coe``: a Composition of Experts' run, whose per-request
    expert arrays (below) have a value a request; any other run's are empty."""

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    target_prompts: InitVar[NDArray[np.int64] | None] = None
    speculation: str = ""
    series: SeriesLog = field(default_factory=SeriesLog)
    keeps_series: bool = True
    counts: StepCounts = field(default_factory=StepCounts)
    coe: bool = False
    # Speculative decoding: each request's per-token acceptance rate, drawn before the run
    # (``serving.acceptance.request_rates``); None otherwise.
    acceptance_rates: NDArray[np.float64] | None = None
    target_prompt_tokens: NDArray[np.int64] = field(init=False)
    arrival_ps: NDArray[np.int64] = field(init=False)
    admit_ps: NDArray[np.int64] = field(init=False)  # first prefill step starts
    first_token_ps: NDArray[np.int64] = field(init=False)  # prefill ends: first output token
    finish_ps: NDArray[np.int64] = field(init=False)  # last output token
    slot: NDArray[np.int64] = field(init=False)
    completions: NDArray[np.int64] = field(init=False)  # times each request completed (count)
    # times each request was preempted (a paged pool's pages given on demand ran out: its
    # pages freed, it was queued again and prefilled again; ``serving.kv_pool``)
    preemptions: NDArray[np.int64] = field(init=False)
    # Speculative decoding, per request: the rounds (target verify steps) it decoded in, and
    # the drafted tokens accepted in them (its last round's included, even those past its end).
    rounds: NDArray[np.int64] = field(init=False)
    accepted_drafts: NDArray[np.int64] = field(init=False)
    # A Composition of Experts, per request (``serving.coe_server``): the expert the router
    # named; 1 when that expert was in HBM when it was named and until the request was let
    # in (a hit), 0 when it had to be copied (a miss); the router's prefill of its prompt;
    # the time the node stood waiting for its expert's copy while it waited (0 for a hit).
    expert: NDArray[np.int64] = field(init=False)
    expert_hit: NDArray[np.int64] = field(init=False)
    router_ps: NDArray[np.int64] = field(init=False)
    copy_stall_ps: NDArray[np.int64] = field(init=False)
    # pages on demand: the prompts and outputs as the schedulers serve them (a preempted
    # request's prompt grows by the tokens it had generated, its output shrinks by them;
    # ``Scheduler._preempt``), copied once a run when a scheduler first asks
    # (:meth:`served_tokens`) and shared by a cluster's replica views, not one copy each
    _served: list[NDArray[np.int64]] = field(init=False)

    def __post_init__(self, target_prompts: NDArray[np.int64] | None) -> None:
        n = int(self.prompt_tokens.shape[0])
        if target_prompts is None:
            target_prompts = self.prompt_tokens
        elif target_prompts.shape != self.prompt_tokens.shape:
            raise ValueError("target_prompts needs one value a request")
        object.__setattr__(self, "target_prompt_tokens", target_prompts)
        if self.speculation not in ("", "decoding", "prefill"):
            raise ValueError(f"unknown speculation {self.speculation!r}")
        rates = self.acceptance_rates
        if rates is not None and (self.speculation != "decoding" or rates.shape != (n,)):
            raise ValueError("acceptance_rates needs speculative decoding and one rate a request")
        for name in ("arrival_ps", "admit_ps", "first_token_ps", "finish_ps", "slot"):
            object.__setattr__(self, name, _unset(n))
        for name in ("completions", "preemptions", "rounds", "accepted_drafts"):
            object.__setattr__(self, name, np.zeros(n, dtype=np.int64))
        per_expert = n if self.coe else 0  # (a run of no experts keeps none)
        for name in ("expert", "expert_hit"):
            object.__setattr__(self, name, _unset(per_expert))
        for name in ("router_ps", "copy_stall_ps"):
            object.__setattr__(self, name, np.zeros(per_expert, dtype=np.int64))
        object.__setattr__(self, "_served", [])

    def served_tokens(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The prompts (the target's) and outputs a scheduler giving pages on demand serves
        and changes as it preempts: copies of ``target_prompt_tokens`` and ``output_tokens``
        made at the first call, the same ones after (a cluster's replicas share them: each
        request is served by one replica at a time), the records' own left as drawn."""
        served = self._served
        if not served:
            served += (self.target_prompt_tokens.copy(), self.output_tokens.copy())
        return served[0], served[1]

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def prefill_steps(self) -> int:
        return self.counts.prefill_steps

    @property
    def decode_steps(self) -> int:
        return self.counts.decode_steps

    @property
    def mixed_steps(self) -> int:
        """Prefill steps that carried the decode rows (each decoded every decoding slot)."""
        return self.counts.mixed_steps

    @property
    def decode_runs(self) -> int:
        """Batched decode advances (one simulation event each)."""
        return self.counts.decode_runs

    @property
    def tokens_generated(self) -> int:
        """Output tokens the steps produced (first tokens included)."""
        return self.counts.tokens_generated

    def replica_view(self) -> ServingRecords:
        """The records one replica of a cluster writes through: the same per-request arrays
        (each request's fields are written by the replica doing that part of its work), its
        own step counts, and no time series (a cluster of a million requests would keep
        millions of rows; its occupancy comes from the per-request times instead)."""
        view = object.__new__(ServingRecords)  # (no new arrays: the run's are shared)
        for each in fields(self):
            object.__setattr__(view, each.name, getattr(self, each.name))
        object.__setattr__(view, "series", SeriesLog())  # (left empty: none is kept)
        object.__setattr__(view, "keeps_series", False)
        object.__setattr__(view, "counts", StepCounts())
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
