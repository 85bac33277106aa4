"""The calibration suite: the two deployment runs through `rdu_sim.api.run`, then the figures.

The suite runs the SnapStream workload and the full-attention workload exactly as
``rdu-sim run WORKLOAD --set ...`` would (``api.run(path, overrides)``, batch slots
``auto`` = each policy's own batch capacity), measures each run (steady-state decode rate,
batch capacity, prefill of the typical compressed prompt from the run's own step cache) and
compares with the published figures (rdu_sim/validate/figures.py). A third, small run of
the full-attention workload with one batch slot (``SINGLE_STREAM``) measures the speed one
request decodes at alone, for the independent single-stream figure.

``quick`` is the same code path with fewer requests: ``QUICK_TURNOVERS`` requests per slot
instead of the workload's ``serving.requests``, enough for one turnover of warm-up and a
steady window after it. The runs are independent, so they run in two processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from rdu_sim import api
from rdu_sim.config.errors import ConfigError
from rdu_sim.validate.figures import FIGURES, Figure, Measurements, Row, evaluate
from rdu_sim.validate.measure import (
    compressed_prompt,
    min_requests,
    prefill_time,
    single_stream_speed,
    steady_state,
)

QUICK_TURNOVERS = 3
"""Requests per slot in ``--quick`` runs (the fewest with a full turnover in the steady window)."""

SINGLE_STREAM = (
    "serving.batch_slots=1",
    "serving.requests=3",
    "serving.prompt_tokens=1024",
    "serving.output_tokens=1024",
)
"""Overrides (after the caller's) of the full-attention run that measures the single-stream
speed (figure decode_speed_batch1): one slot, three short requests."""

ROOT = Path(__file__).resolve().parents[2]
SNAPSTREAM_WORKLOAD = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
FULL_WORKLOAD = ROOT / "workloads" / "deepseek-r1-128k-full.yaml"


@dataclass(frozen=True)
class RunMeasurement:
    """What one calibration run measured (small and picklable: it crosses processes)."""

    workload: str
    kv_policy: str
    batch_capacity: int
    batch_slots: int
    requests: int
    decode_tokens_per_s: float
    window_s: tuple[float, float]
    aggregate_decode_tokens_per_s: float
    prefill_prompt: int | None
    prefill_s: float
    wall_s: float


@dataclass(frozen=True)
class SuiteResult:
    """The two deployment runs and the figures compared (the single-stream speed is in
    ``measurements``)."""

    snapstream: RunMeasurement
    full: RunMeasurement
    measurements: Measurements
    rows: list[Row]

    @property
    def passed(self) -> bool:
        """True when every figure is inside its tolerance."""
        return all(row.passed for row in self.rows)


def plan_run(path: Path, overrides: Sequence[str], quick: bool) -> list[str]:
    """The overrides one calibration run uses: the caller's, plus ``serving.requests`` for a
    quick run (QUICK_TURNOVERS per slot). Checks, before anything is simulated, that the run
    can have a steady window (closed loop, enough requests): a ConfigError otherwise."""
    ovr = list(overrides)
    scenario = api.load(path, ovr)
    serving = scenario.workload.serving
    if serving.arrival.process != "closed_loop":
        raise ConfigError.single(
            scenario.workload_file,
            "serving.arrival.process",
            "the calibration measures a closed loop (slots kept full); "
            f"got {serving.arrival.process!r}",
        )
    slots = api.resolve_batch_slots(scenario, api.EngineBackend())[1]
    if quick:
        return [*ovr, f"serving.requests={max(QUICK_TURNOVERS * slots, min_requests(slots))}"]
    if serving.requests < min_requests(slots):
        raise ConfigError.single(
            scenario.workload_file,
            "serving.requests",
            f"{serving.requests} requests leave no steady window with "
            f"{slots} slots; need at least {min_requests(slots)}",
        )
    return ovr


def measure_run(path: Path, overrides: Sequence[str], prompt: int | None) -> RunMeasurement:
    """Run one workload through ``api.run`` (as ``rdu-sim run PATH --set ...``) and
    measure it."""
    began = time.perf_counter()
    result = api.run(path, list(overrides))
    steady = steady_state(result)
    data = result.to_dict()
    prefill = prefill_time(result, prompt) if prompt is not None else math.nan
    return RunMeasurement(
        workload=result.scenario.workload.name,
        kv_policy=result.policy.name,
        batch_capacity=result.batch_capacity,
        batch_slots=result.batch_slots,
        requests=len(result.records),
        decode_tokens_per_s=steady.tokens_per_s,
        window_s=(steady.start_s, steady.end_s),
        aggregate_decode_tokens_per_s=float(data["decode_tokens_per_s"]),
        prefill_prompt=prompt,
        prefill_s=prefill,
        wall_s=time.perf_counter() - began,
    )


def measure_single_stream(path: Path, overrides: Sequence[str]) -> float:
    """One request decoding alone on the full-attention workload (``SINGLE_STREAM``), through
    ``api.run`` as ``rdu-sim run PATH --set ...`` would."""
    return single_stream_speed(api.run(path, [*overrides, *SINGLE_STREAM]))


def reference_prompt(snapstream: Path, overrides: Sequence[str]) -> int | None:
    """The typical compressed prompt of the SnapStream workload (None: none compresses)."""
    scenario = api.load(snapstream, list(overrides))
    policy = api._policy(scenario)
    return compressed_prompt(scenario, policy.slot_tokens(scenario.workload.serving.max_context))


def run_suite(
    *,
    quick: bool = False,
    overrides: Iterable[str] = (),
    snapstream: Path = SNAPSTREAM_WORKLOAD,
    full: Path = FULL_WORKLOAD,
    figures: Sequence[Figure] = FIGURES,
    parallel: bool = True,
) -> SuiteResult:
    """Run both deployments (``overrides`` apply to both, ``hw.`` ones to the shared
    hardware file) and compare with the published figures."""
    ovr = list(overrides)
    # bad input fails here, in this process, before anything is simulated
    plans = [(path, plan_run(path, ovr, quick)) for path in (snapstream, full)]
    prompt = reference_prompt(snapstream, ovr)
    if parallel:
        with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(measure_run, path, run_ovr, prompt) for path, run_ovr in plans]
            single = pool.submit(measure_single_stream, full, ovr)
            ss, fu = (f.result() for f in futures)
            single_stream = single.result()
    else:
        ss, fu = (measure_run(path, run_ovr, prompt) for path, run_ovr in plans)
        single_stream = measure_single_stream(full, ovr)
    measurements = Measurements(
        batch_capacity_snapstream=ss.batch_capacity,
        batch_capacity_full=fu.batch_capacity,
        decode_tokens_per_s_snapstream=ss.decode_tokens_per_s,
        decode_tokens_per_s_full=fu.decode_tokens_per_s,
        prefill_prompt=prompt,
        prefill_s_snapstream=ss.prefill_s,
        prefill_s_full=fu.prefill_s,
        single_stream_tokens_per_s=single_stream,
    )
    return SuiteResult(ss, fu, measurements, evaluate(measurements, figures))


def tolerance_overrides(items: Iterable[str]) -> Mapping[str, float]:
    """``NAME=VALUE`` strings -> {figure name: tolerance}; ValueError on a malformed item."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--tolerance takes NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--tolerance {name.strip()}: not a number: {value!r}") from None
    return out
