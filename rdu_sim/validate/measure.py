"""Measurements on one `rdu_sim.api.run` result: steady-state decode rate, prefill time.

Why a steady-state window, not the run's aggregate ``decode_tokens_per_s``: a closed-loop
run starts with every slot prefilling at once and ends with slots draining one by one as
the last requests finish; both ends leave slots empty, and a run of few requests is mostly
ends. The published "decode throughput" is a production rate with the slots kept full, so
the window is

    [completion number ``batch_slots``, last admission]

from the slots' first full turnover (the lock-step start has broken up into a staggered
mix of requests at every stage) to the moment the last request takes a slot (after which
slots start emptying). In a closed loop every slot is occupied throughout the window.
Tokens in the window are counted per request: its first token if emitted inside, plus its
``output - 1`` decode tokens spread evenly between first token and finish (every decode
step advances each decoding request by one token, and a prefill stall stops them all at
once, so the even spread is exact up to the position of stalls within one request's life).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rdu_sim.api import RunResult
from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import Scenario
from rdu_sim.serving.requests import typical_compressed_length
from rdu_sim.serving.step_cache import PS_PER_S

MIN_TURNOVERS = 3
"""Requests per slot a run needs: the first ``batch_slots`` start in lock-step, the next
``batch_slots`` completions are the warm-up turnover, and the last admission comes at
completion ``requests - batch_slots``, so 3 per slot leave one full turnover inside the
steady window."""

@dataclass(frozen=True)
class SteadyState:
    """Decode rate over the steady window of a continuous-batching run."""

    tokens_per_s: float
    start_s: float
    end_s: float
    tokens: float


def min_requests(batch_slots: int) -> int:
    """Fewest requests whose run has a steady window."""
    return MIN_TURNOVERS * batch_slots


def steady_state(result: RunResult) -> SteadyState:
    """Decode tokens/s between the slots' first full turnover and the last admission."""
    records, slots = result.records, result.batch_slots
    workload_file = result.scenario.workload_file
    if not result.requests_in.closed_loop:
        raise ConfigError.single(workload_file, "serving.arrival.process",
                                 "the calibration measures a closed loop (slots kept full); "
                                 "use closed_loop")
    finish = np.sort(records.finish_ps[records.completed])
    if len(records) < min_requests(slots) or finish.shape[0] < slots:
        raise ConfigError.single(workload_file, "serving.requests",
                                 f"{len(records)} requests leave no steady window with "
                                 f"{slots} slots; need at least {min_requests(slots)}")
    start = float(finish[slots - 1])
    end = float(records.admit_ps.max())
    if not end > start:
        raise ConfigError.single(workload_file, "serving.requests",
                                 f"{len(records)} requests leave no steady window with "
                                 f"{slots} slots (last admission before the first turnover)")
    first = records.first_token_ps.astype(np.float64)
    last = records.finish_ps.astype(np.float64)
    decode = records.output_tokens.astype(np.float64) - 1.0
    span = np.maximum(last - first, 1.0)
    inside = np.clip(np.minimum(last, end) - np.maximum(first, start), 0.0, None)
    first_in = (first >= start) & (first < end)
    tokens = float(np.sum(decode * inside / span) + np.count_nonzero(first_in))
    seconds = (end - start) / PS_PER_S
    return SteadyState(tokens / seconds, start / PS_PER_S, end / PS_PER_S, tokens)


def single_stream_speed(result: RunResult) -> float:
    """Median over completed requests of (output - 1) / (finish - first token): the decode
    speed one user sees, which with one batch slot is 1 / TPOT (no other request shares the
    steps and prefills happen between requests, not inside one's decode)."""
    records = result.records
    if result.batch_slots != 1:
        raise ValueError(f"single-stream speed needs 1 batch slot, got {result.batch_slots}")
    done = records.completed & (records.output_tokens > 1)
    if not done.any():
        return float("nan")
    seconds = (records.finish_ps[done] - records.first_token_ps[done]).astype(np.float64)
    speeds = (records.output_tokens[done] - 1.0) / (seconds / PS_PER_S)
    return float(np.median(speeds))


def compressed_prompt(scenario: Scenario, slot_tokens: int) -> int | None:
    """The workload's typical compressed prompt (see
    ``rdu_sim.serving.requests.typical_compressed_length``)."""
    return typical_compressed_length(scenario.workload.serving, slot_tokens,
                                     scenario.base_dir, scenario.workload_file)


def prefill_time(result: RunResult, prompt: int) -> float:
    """Prefill time of ``prompt`` as the run serves it (bucketed or chunked, SnapKV
    selection included when the run's policy compresses it), from the run's own step cache:
    the same engine path as the run's ``prefill_s``."""
    return result.prefill_time(prompt)
