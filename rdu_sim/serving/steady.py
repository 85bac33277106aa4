"""Steady-state decode rate of a continuous-batching run, from its records.

Why a steady-state window, not the run's aggregate ``decode_tokens_per_s``: a closed-loop
run starts with every slot prefilling at once and ends with slots draining one by one as
the last requests finish; both ends leave slots empty, and a run of few requests is mostly
ends. A "decode throughput" in the sense of a production rate with the slots kept full is
measured over the window of whole turnovers

    [completion number ``B``, completion number ``m B``],  ``m = requests // B - 1``

(``B`` = ``batch_slots``), from the slots' first full turnover to the last whole turnover
that ends before the last request takes a slot (after which slots start emptying; the end is
never later than that admission). In a closed loop every slot is occupied throughout the
window. Whole turnovers matter when requests run in cohorts (every request of the same
lengths: each generation is admitted in one prefill phase and finishes at one moment); a
window ending at the last admission would hold one generation's decode and nearly two
prefill phases, and read the rate low.
Tokens in the window are counted per request: its first token if emitted inside, plus its
``output - 1`` decode tokens spread evenly between first token and finish (every decode
step, and every mixed step, advances each decoding request by one token, and a prefill step
alone stalls them all at once, so the even spread is exact up to the position of stalls
within one request's life).

There is no window when the run is not a closed loop (open-loop arrivals can leave slots
empty at any time), with fewer than ``MIN_TURNOVERS`` requests per slot, or when the last
admission comes before the first turnover. This is the one implementation: the run's JSON
(``steady_decode_tokens_per_s``, ``steady_window_s``) and the calibration suite
(``rdu_sim.validate.measure``) both call :func:`find_steady_state`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.step_cache import PS_PER_S

MIN_TURNOVERS = 3
"""Requests per slot a run needs: the first ``batch_slots`` start in lock-step, the next
``batch_slots`` completions are the warm-up turnover, and the last admission comes at
completion ``requests - batch_slots``, so 3 per slot leave one full turnover inside the
steady window."""

CLOSED_LOOP_FIELD = "serving.arrival.process"
REQUESTS_FIELD = "serving.requests"


@dataclass(frozen=True)
class SteadyState:
    """Decode rate over the steady window of a continuous-batching run."""

    tokens_per_s: float
    start_s: float
    end_s: float
    tokens: float


@dataclass(frozen=True)
class NoSteadyWindow:
    """Why a run has no steady window: the workload ``field`` to change and a message."""

    field: str
    message: str


def min_requests(batch_slots: int) -> int:
    """Fewest requests whose run has a steady window."""
    return MIN_TURNOVERS * batch_slots


def find_steady_state(
    records: ServingRecords, batch_slots: int, closed_loop: bool
) -> SteadyState | NoSteadyWindow:
    """Decode tokens/s over the run's whole turnovers after the first (module docstring),
    or why the run has no such window."""
    slots = int(batch_slots)
    if not closed_loop:
        return NoSteadyWindow(
            CLOSED_LOOP_FIELD, "no steady window without a closed loop (slots kept full)"
        )
    finish = records.finish_ps[records.completed]
    if slots < 1 or len(records) < min_requests(slots) or finish.shape[0] < slots:
        return NoSteadyWindow(
            REQUESTS_FIELD,
            f"{len(records)} requests leave no steady window with "
            f"{slots} slots; need at least {min_requests(slots)}",
        )
    start = float(np.partition(finish, slots - 1)[slots - 1])  # the slots-th completion
    # the last whole turnover's completion (every request completes in a run that ends)
    completed = finish.shape[0]
    last_turn = min(len(records) // slots - 1, completed // slots) * slots
    if last_turn <= slots:
        return NoSteadyWindow(
            REQUESTS_FIELD,
            f"{completed} of {len(records)} requests completed: no whole turnover of "
            f"{slots} slots after the first",
        )
    turned = float(np.partition(finish, last_turn - 1)[last_turn - 1])
    del finish
    end = min(turned, float(records.admit_ps.max()))
    if not end > start:
        return NoSteadyWindow(
            REQUESTS_FIELD,
            f"{len(records)} requests leave no steady window with "
            f"{slots} slots (last admission before the first turnover)",
        )
    first = records.first_token_ps.astype(np.float64)
    last = records.finish_ps.astype(np.float64)
    decode = records.output_tokens.astype(np.float64) - 1.0
    # decode * inside / span, computed in place (the same operations on the same values):
    # a million-request run holds five columns here, not eight
    span = last - first
    np.maximum(span, 1.0, out=span)
    inside = np.minimum(last, end)
    inside -= np.maximum(first, start)
    np.clip(inside, 0.0, None, out=inside)
    first_in = int(np.count_nonzero((first >= start) & (first < end)))
    decode *= inside
    decode /= span
    tokens = float(np.sum(decode) + first_in)
    seconds = (end - start) / PS_PER_S
    return SteadyState(tokens / seconds, start / PS_PER_S, end / PS_PER_S, tokens)


def steady_state(
    records: ServingRecords, batch_slots: int, closed_loop: bool
) -> SteadyState | None:
    """:func:`find_steady_state`, None when the run has no steady window."""
    found = find_steady_state(records, batch_slots, closed_loop)
    return found if isinstance(found, SteadyState) else None
