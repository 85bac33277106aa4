"""Measurements on one `rdu_sim.api.run` result: steady-state decode rate, prefill time.

The steady-state decode rate is ``rdu_sim.serving.steady`` (its docstring says why a
window and which one): the same computation as the run's ``steady_decode_tokens_per_s``.
The calibration refuses a run without a steady window (a ConfigError naming the workload
field to change) instead of reporting null.
"""

from __future__ import annotations

import numpy as np

from rdu_sim.api import RunResult
from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import Scenario
from rdu_sim.serving.requests import typical_compressed_length
from rdu_sim.serving.steady import (
    CLOSED_LOOP_FIELD,
    MIN_TURNOVERS,
    NoSteadyWindow,
    SteadyState,
    find_steady_state,
    min_requests,
)
from rdu_sim.serving.step_cache import PS_PER_S

__all__ = [
    "MIN_TURNOVERS",
    "SteadyState",
    "compressed_prompt",
    "min_requests",
    "prefill_time",
    "single_stream_speed",
    "steady_state",
]


def steady_state(result: RunResult) -> SteadyState:
    """Decode tokens/s between the slots' first full turnover and the last admission
    (``rdu_sim.serving.steady.find_steady_state``); a ConfigError when there is no window."""
    found = find_steady_state(result.records, result.batch_slots, result.requests_in.closed_loop)
    if isinstance(found, NoSteadyWindow):
        message = found.message
        if found.field == CLOSED_LOOP_FIELD:
            message = "the calibration measures a closed loop (slots kept full); use closed_loop"
        raise ConfigError.single(result.scenario.workload_file, found.field, message)
    return found


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
    return typical_compressed_length(
        scenario.workload.serving, slot_tokens, scenario.base_dir, scenario.workload_file
    )


def prefill_time(result: RunResult, prompt: int) -> float:
    """Prefill time of ``prompt`` as the run serves it (bucketed or chunked, SnapKV
    selection included when the run's policy compresses it), from the run's own step cache:
    the same engine path as the run's ``prefill_s``."""
    return result.prefill_time(prompt)
