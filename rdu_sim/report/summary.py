"""Metrics of a serving run, computed from the records the serving core emitted.

Definitions (docs/serving.md repeats them for users):

- ``ttft_s``: first output token - arrival (queueing + prefill; the prefill produces the
  first token). ``tpot_s``: (finish - first token) / (output - 1), over requests with more
  than one output token. ``queue_delay_s``: admission (first prefill step starts) - arrival.
  ``e2e_s``: finish - arrival. Each is ``{p50, p90, p99, mean}``.
- ``decode_tokens_per_s``: all output tokens / the makespan of decode activity, i.e. from
  the first first-token of the run to the last completion (prefill stalls in between count).
  It includes the ramp-up (all slots prefilling at once) and the drain (slots emptying one
  by one at the end), so a short run reports well below the rate with the slots kept full.
- ``steady_decode_tokens_per_s``, ``steady_window_s``: that rate with the slots kept full,
  over the window [completion number ``batch_slots``, last admission] of a closed-loop run
  (``rdu_sim.serving.steady``; the calibration's figure); both None without a window.
- ``user_tokens_per_s``: per request, 1 / TPOT (the rate a user sees once tokens stream).
- ``makespan_s``: first arrival to last completion. ``utilization`` (``hbm``: achieved HBM
  bandwidth over peak; ``pcu``: PCU busy fraction) is time-weighted over every step run,
  divided by the makespan (idle time counts as zero).
- ``occupancy``: time-weighted mean fraction of slots holding a request over the makespan;
  ``decode_slot_fill``: decoding slots / batch slots, averaged over decode steps (how much of
  the static decode graph did useful work rather than padding).
- ``memory``: per tier, one socket's view (TP is symmetric: every socket holds the same).

Floats are rounded to 12 significant digits, so the JSON is byte-identical across runs and
platforms for the same inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.compiler.program import TIERS, Placement
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.steady import steady_state
from rdu_sim.serving.step_cache import PS_PER_S, StepCache

PERCENTILES = (50, 90, 99)
SIGNIFICANT_DIGITS = 12


def stats(values: NDArray[np.float64]) -> dict[str, float | None]:
    """``{p50, p90, p99, mean}`` of the values (all None when there are none)."""
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    out: dict[str, float | None] = {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}
    out["mean"] = float(values.mean())
    return out


def rounded(value: Any) -> Any:
    """Round every float in a JSON-like structure to 12 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if np.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def memory_summary(placement: Placement) -> dict[str, dict[str, int]]:
    """Per tier: capacity, used, weights, KV, activations and free bytes (one socket)."""
    out: dict[str, dict[str, int]] = {}
    for tier in TIERS:
        usage = placement.tiers.get(tier)
        if usage is None:
            continue
        out[tier] = {
            "capacity_bytes": int(usage.capacity_bytes),
            "used_bytes": int(usage.used_bytes),
            "weights_bytes": int(usage.weights_bytes),
            "kv_bytes": int(usage.kv_bytes),
            "activations_bytes": int(usage.activations_bytes),
            "free_bytes": int(usage.free_bytes),
        }
    return out


def request_columns(records: ServingRecords) -> dict[str, NDArray[Any]]:
    """Per-request columns (seconds), in request-id order; for CSV and plots."""
    sec = records.seconds
    arrival, admit = sec(records.arrival_ps), sec(records.admit_ps)
    first, finish = sec(records.first_token_ps), sec(records.finish_ps)
    output = records.output_tokens
    decode_tokens = (output - 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (finish - first) / np.maximum(decode_tokens, 1), np.nan)
    return {
        "request": np.arange(len(records), dtype=np.int64),
        "prompt_tokens": records.prompt_tokens,
        "output_tokens": output,
        "slot": records.slot,
        "arrival_s": arrival,
        "admit_s": admit,
        "first_token_s": first,
        "finish_s": finish,
        "queue_delay_s": admit - arrival,
        "ttft_s": first - arrival,
        "tpot_s": tpot,
        "e2e_s": finish - arrival,
    }


def series_columns(records: ServingRecords, batch_slots: int) -> dict[str, NDArray[Any]]:
    """The state-change time series with the state after each change (last row per instant)."""
    rows = records.series_array()
    if rows.shape[0]:
        keep = np.append(rows[1:, 0] != rows[:-1, 0], True)
        rows = rows[keep]
    occupied = rows[:, 2] + rows[:, 3]
    return {
        "time_s": rows[:, 0].astype(np.float64) / PS_PER_S,
        "waiting": rows[:, 1],
        "prefilling": rows[:, 2],
        "decoding": rows[:, 3],
        "occupied": occupied,
        "occupancy": occupied / batch_slots,
        "decode_bucket": rows[:, 4],
    }


def _time_average(
    times: NDArray[np.float64], values: NDArray[Any], start: float, end: float
) -> float:
    """Mean over [start, end] of the step function (times[i] -> values[i])."""
    if end <= start or times.size == 0:
        return 0.0
    edges = np.clip(np.append(times, end), start, end)
    return float((values * np.diff(edges)).sum() / (end - start))


def utilization(cache: StepCache, span: float) -> dict[str, float]:
    """``hbm`` (achieved HBM bandwidth over peak) and ``pcu`` (PCU busy fraction) of the steps
    counted in ``cache``, time-weighted over those steps and divided by ``span`` seconds (idle
    time counts as zero)."""
    hbm = pcu = 0.0
    for shape, count in cache.steps.items():
        cost = cache.cost(shape)
        busy = count * cache.step_s(shape)
        hbm += busy * cost.hbm_util
        pcu += busy * cost.pcu_util
    return {"hbm": hbm / span if span > 0 else 0.0, "pcu": pcu / span if span > 0 else 0.0}


def steps_run(records: ServingRecords) -> dict[str, int]:
    """Prefill steps, decode steps and batched decode advances (simulation events)."""
    return {
        "prefill": records.prefill_steps,
        "decode": records.decode_steps,
        "decode_events": records.decode_runs,
    }


def summarize(
    *,
    meta: Mapping[str, Any],
    kv_policy: str,
    batch_capacity: int,
    batch_slots: int,
    placement: Placement,
    records: ServingRecords,
    cache: StepCache,
    prefill_s: float,
    closed_loop: bool,
) -> dict[str, Any]:
    """The run's result dict (the JSON contract of ``rdu-sim run --json``);
    ``closed_loop``: whether the requests came from a closed loop (the steady window needs
    one)."""
    cols = request_columns(records)
    done = records.completed
    output_tokens = int(records.tokens_generated)
    first_arrival = float(cols["arrival_s"].min()) if len(records) else 0.0
    last_finish = float(cols["finish_s"][done].max()) if done.any() else 0.0
    first_token = float(cols["first_token_s"][done].min()) if done.any() else 0.0
    makespan = last_finish - first_arrival
    decode_span = last_finish - first_token
    tpot = cols["tpot_s"][done]
    tpot = tpot[np.isfinite(tpot)]
    series = series_columns(records, batch_slots)
    decode_fill = (
        (output_tokens - int(done.sum())) / (records.decode_steps * batch_slots)
        if records.decode_steps
        else 0.0
    )
    kv_total = sum(u.kv_bytes for u in placement.tiers.values())
    steady = steady_state(records, batch_slots, closed_loop)
    result: dict[str, Any] = {
        **meta,
        "kv_policy": kv_policy,
        "batch_capacity": int(batch_capacity),
        "batch_slots": int(batch_slots),
        "kv_bytes_per_slot": int(kv_total // batch_slots) if batch_slots else 0,
        "memory": memory_summary(placement),
        "requests": len(records),
        "requests_completed": int(done.sum()),
        "output_tokens": output_tokens,
        "prefill_s": prefill_s,
        "ttft_s": stats(cols["ttft_s"][done]),
        "tpot_s": stats(tpot),
        "queue_delay_s": stats(cols["queue_delay_s"][done]),
        "e2e_s": stats(cols["e2e_s"][done]),
        "decode_tokens_per_s": output_tokens / decode_span if decode_span > 0 else 0.0,
        "steady_decode_tokens_per_s": steady.tokens_per_s if steady is not None else None,
        "steady_window_s": [steady.start_s, steady.end_s] if steady is not None else None,
        "user_tokens_per_s": stats(1.0 / tpot[tpot > 0]),
        "makespan_s": makespan,
        "occupancy": _time_average(
            series["time_s"], series["occupancy"], first_arrival, last_finish
        ),
        "decode_slot_fill": decode_fill,
        "utilization": utilization(cache, makespan),
        "step_cache": {
            "hits": cache.hits,
            "misses": cache.misses,
            "hit_rate": cache.hit_rate,
            "shapes": len(cache.shapes),
        },
        "steps": steps_run(records),
    }
    rounded_result: dict[str, Any] = rounded(result)
    return rounded_result
