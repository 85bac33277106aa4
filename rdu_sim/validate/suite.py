"""The calibration suite: the deployment runs and steps through `rdu_sim.api`, then the figures.

The suite runs the SnapStream workload and the full-attention workload exactly as
``rdu-sim run WORKLOAD --set ...`` would (``api.run(path, overrides)``, batch slots
``auto`` = each policy's own batch capacity), measures each run (steady-state decode rate,
batch capacity, prefill of the typical compressed prompt from the run's own step cache) and
compares with the published figures (rdu_sim/validate/figures.py). Three smaller measurements
check the other public figures: a run of the full-attention workload with one batch slot
(``SINGLE_STREAM``: the speed one request decodes at alone, and its step's share of HBM peak),
one with 256 slots (``THROUGHPUT``: SambaNova's 256-user throughput), and batch-1 decode steps
of Llama 3.1 with and without kernel looping on 8 and 16 sockets
(``rdu_sim.validate.decode_scaling``: the Kernel Looping figures), through ``api.step`` as
``rdu-sim step`` would.

``quick`` is the same code path with fewer requests in the two deployment runs:
``QUICK_TURNOVERS`` requests per slot instead of the workload's ``serving.requests``, enough
for one turnover of warm-up and a steady window after it (the three small measurements are
the same either way). The measurements are independent, so they run in two processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from rdu_sim import api, api_cluster
from rdu_sim.cluster.scenario import build_cluster
from rdu_sim.cluster.simulate import ClusterRun
from rdu_sim.compiler.errors import CapacityError
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import (
    API,
    HW_PREFIX,
    STACK_PREFIX,
    SUITE,
    given,
    normalize_overrides,
    override_texts,
    set_fields,
    written_value,
)
from rdu_sim.interrupts import (
    Interrupted,
    blocked,
    pool_owner,
    run_stoppable,
    start_worker,
    stop_children,
)
from rdu_sim.kv.policies import unread_overrides
from rdu_sim.serving.steady import NoSteadyWindow, find_steady_state
from rdu_sim.sim_warnings import RduSimWarning, kept, say
from rdu_sim.validate.decode_scaling import DecodeScaling, measure_decode_scaling
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

AA_TOKENS = 1000
"""Prompt and output tokens per query of Artificial Analysis's workload shape (its System Load
Test and its default 1k-input API benchmark: 1,000 in, 1,000 out), the benchmark SambaNova's
blog cites for both its per-user and its 256-user DeepSeek-R1 figures."""

SINGLE_STREAM = tuple(
    given(
        (
            "serving.batch_slots=1",
            "serving.requests=3",
            f"serving.prompt_tokens={AA_TOKENS}",
            f"serving.output_tokens={AA_TOKENS}",
        ),
        SUITE,
    )
)
"""Overrides (after the caller's) of the full-attention run that measures the single-stream
speed (figures decode_speed_batch1 and decode_speed_per_user): one slot, three requests of
Artificial Analysis's shape."""

THROUGHPUT_USERS = 256
"""Concurrent users of the blog's throughput figure, one closed-loop request each."""

THROUGHPUT_CONTEXT = tuple(given(("serving.max_context=4096", "kv.context_buckets=pow2"), SUITE))
"""The 256-user runs' slots: decode graphs per power-of-two bucket up to 4,096 tokens (256
slots of 128k do not fit)."""

THROUGHPUT = tuple(
    given(
        (
            f"serving.batch_slots={THROUGHPUT_USERS}",
            f"serving.requests={min_requests(THROUGHPUT_USERS)}",
            f"serving.prompt_tokens={AA_TOKENS}",
            f"serving.output_tokens={AA_TOKENS}",
            *THROUGHPUT_CONTEXT,
        ),
        SUITE,
    )
)
"""Overrides (after the caller's) of the full-attention run that measures the 256-user
throughput (figure decode_throughput_256_users) under TP16: a slot per user (as Artificial
Analysis's System Load Test sends the next query when one finishes), three turnovers of
1000-token prompts and 1000-token outputs."""

THROUGHPUT_RANKS = 16
"""Attention ranks of the data-parallel configuration: one a socket of the 16-socket rack."""

DATA_PARALLEL = tuple(
    given(
        (
            "parallelism.tp=1",
            f"parallelism.dp_attention={THROUGHPUT_RANKS}",
            f"parallelism.ep={THROUGHPUT_RANKS}",
            f"serving.batch_slots={THROUGHPUT_USERS // THROUGHPUT_RANKS}",
            *THROUGHPUT_CONTEXT,
        ),
        SUITE,
    )
)
"""Overrides (after the caller's) of the same workload configured as MLA mixture-of-experts
deployments configure decode for throughput (DeepSeek's, SGLang's: docs/parallelism.md):
attention data-parallel, a socket a rank holding 16 of the 256 users and their caches, the 256
routed experts whole, 16 a socket, reached by all-to-alls."""

SATURATING_RATE = 1e6
"""Requests per second of the data-parallel run's traffic: all 768 arrive within the first
millisecond, so every rank's slots stay full until the last admission, as the closed loop
keeps them (a replica of attention ranks runs as a cluster, a server a rank, and a cluster's
traffic is an arrival process)."""

SNAPSTREAM_WORKLOAD = "deepseek-r1-128k-snapstream"
FULL_WORKLOAD = "deepseek-r1-128k-full"
"""The deployment's workloads, by shipped name (``rdu_sim.config.shipped``: installed or in a
checkout)."""


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
    """The two deployment runs, the Kernel Looping steps and the figures compared (the small
    runs' results are in ``measurements``)."""

    snapstream: RunMeasurement
    full: RunMeasurement
    measurements: Measurements
    rows: list[Row]
    scaling: DecodeScaling | None = None

    @property
    def passed(self) -> bool:
        """True when every figure is inside its tolerance."""
        return all(row.passed for row in self.rows)


def read_by(path: str | Path, overrides: Sequence[str]) -> list[str]:
    """``overrides`` but those of ``kv`` fields the workload's policy (after them) does not
    read (``kv.policies.unread_overrides``): the suite applies one list to both deployments,
    so a variant of one policy's field (SnapStream's kv.budget, full attention's
    kv.context_buckets) is left out of the other's runs instead of set where it is unread."""
    given = normalize_overrides(overrides)
    policy = given.get("kv.policy") or api.load(path).workload.kv.policy
    unread = set(unread_overrides(str(policy), given))
    return [o for o in overrides if not unread & set(set_fields(normalize_overrides([o])))]


def plan_run(path: str | Path, overrides: Sequence[str], quick: bool) -> list[str]:
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
        quick_run = f"serving.requests={max(QUICK_TURNOVERS * slots, min_requests(slots))}"
        return [*ovr, *given([quick_run], SUITE)]
    if serving.requests < min_requests(slots):
        raise ConfigError.single(
            scenario.workload_file,
            "serving.requests",
            f"{serving.requests} requests leave no steady window with "
            f"{slots} slots; need at least {min_requests(slots)}",
        )
    return ovr


def measure_run(path: str | Path, overrides: Sequence[str], prompt: int | None) -> RunMeasurement:
    """Run one workload through ``api.run`` (as ``rdu-sim run PATH --set ...``) and
    measure it."""
    began = time.perf_counter()
    result = api.run(path, list(overrides))
    steady = steady_state(result)
    prefill = prefill_time(result, prompt) if prompt is not None else math.nan
    return RunMeasurement(
        workload=result.scenario.workload.name,
        kv_policy=result.policy.name,
        batch_capacity=result.batch_capacity,
        batch_slots=result.batch_slots,
        requests=len(result.records),
        decode_tokens_per_s=steady.tokens_per_s,
        window_s=(steady.start_s, steady.end_s),
        aggregate_decode_tokens_per_s=float(result.summary().decode_tokens_per_s or 0.0),
        prefill_prompt=prompt,
        prefill_s=prefill,
        wall_s=time.perf_counter() - began,
    )


def measure_single_stream(path: str | Path, overrides: Sequence[str]) -> tuple[float, float]:
    """One request decoding alone on the full-attention workload (``SINGLE_STREAM``), through
    ``api.run`` as ``rdu-sim run PATH --set ...`` would: its decode speed, and its decode
    step's HBM bytes per second over the HBM peak (the same step on the device alone,
    ``stack=none``, through ``api.step``: a share of peak is the hardware's, as Kernel
    Looping's are)."""
    ovr = [*overrides, *SINGLE_STREAM]
    speed = single_stream_speed(api.run(path, ovr))
    return speed, api.step(path, [*device_only(ovr), "stack=none"], batch=1).hbm_util


def device_only(overrides: Sequence[str]) -> list[str]:
    """``overrides`` without the serving stack's (``stack.``): a figure of the device alone
    never sees a stack's host time, whatever the caller (or a calibration) sets."""
    return [o for o in overrides if not o.strip().startswith(STACK_PREFIX)]


def measure_throughput(path: str | Path, overrides: Sequence[str]) -> tuple[float, float]:
    """Steady-state decode tokens/s of the full-attention workload with 256 users, under TP16
    (``THROUGHPUT``, through ``api.run``) and attention data-parallel (``DATA_PARALLEL``,
    a cluster of one replica through ``api_cluster.run_cluster``)."""
    tensor = steady_state(api.run(path, [*overrides, *THROUGHPUT])).tokens_per_s
    return tensor, data_parallel_throughput(path, overrides)


def data_parallel_throughput(path: str | Path, overrides: Sequence[str]) -> float:
    """Steady-state decode tokens/s of the 256 users on the workload's rack with
    ``DATA_PARALLEL``: the window of ``steady_state`` over the replica's requests (its 256
    slots in all). NaN where the hardware cannot run the layout (a parallelism error: a ring
    wiring has no all-to-all; or its memory plan does not fit), so that the figure reads
    TP16's alone."""
    try:
        run = saturated_run(path, [*overrides, *DATA_PARALLEL])
    except ConfigError as exc:
        if any(issue.field.startswith("parallelism.") for issue in exc.issues):
            return math.nan
        raise
    except CapacityError:
        return math.nan
    found = find_steady_state(run.serving, THROUGHPUT_USERS, closed_loop=True)
    if isinstance(found, NoSteadyWindow):  # not the input's fault: the run is built here
        raise RuntimeError(f"the data-parallel 256-user run has no steady window: {found.message}")
    return found.tokens_per_s


def saturated_run(path: str | Path, pool_overrides: Sequence[str]) -> ClusterRun:
    """A one-replica cluster of the workload (with ``pool_overrides``) serving
    ``min_requests(THROUGHPUT_USERS)`` requests of 1000/1000 tokens that all arrive at once
    (``SATURATING_RATE``), routed to its ranks in turn."""
    workload = api.load(path, list(pool_overrides)).workload_file
    cluster = build_cluster(
        {
            "name": "validate-256-users",
            "pools": {
                "rack": {
                    "workload": str(Path(workload).resolve()),
                    "replicas": 1,
                    "set": normalize_overrides(pool_overrides),
                }
            },
            "router": {"policy": "round_robin"},
            "traffic": {
                "rate": SATURATING_RATE,
                "requests": min_requests(THROUGHPUT_USERS),
                "prompt_tokens": AA_TOKENS,
                "output_tokens": AA_TOKENS,
                "seed": 0,
            },
            # required by a cluster file; the figure reads throughput, not attainment
            "slo": {"ttft": "1 h", "tpot": "1 s", "attainment": 0.5},
        },
        file=str(workload),
    )
    return api_cluster.run_cluster(cluster).run


def measure_small(
    full: str | Path, overrides: Sequence[str]
) -> tuple[float, float, tuple[float, float]]:
    """The small DeepSeek-R1 runs: single-stream speed and HBM share, 256-user throughput in
    both configurations (one task, so that the suite's two processes stay balanced)."""
    speed, share = measure_single_stream(full, overrides)
    return speed, share, measure_throughput(full, overrides)


def reference_prompt(snapstream: str | Path, overrides: Sequence[str]) -> int | None:
    """The typical compressed prompt of the SnapStream workload (None: none compresses)."""
    scenario = api.load(snapstream, list(overrides))
    return compressed_prompt(scenario, scenario.kv_policy.slot_tokens())


def suite_overrides(overrides: Iterable[str] | Mapping[str, Any], name: str) -> list[str]:
    """The caller's overrides as the suite's texts (``PATH=VALUE``, each marked as given at
    ``overrides``, the API's argument, unless it says where: the CLI's ``--set``): a mapping
    (``{"serving.requests": 8}``, as ``api.run`` takes) or a sequence of texts; a bare
    string (read a character at a time) or anything else is a TypeError naming ``name``
    (``config.overrides.override_texts``, the check ``normalize_overrides`` makes)."""
    if isinstance(overrides, Mapping):
        values = normalize_overrides(overrides, API)
        return given([f"{path}={written_value(v)}" for path, v in values.items()], API)
    return given(override_texts(overrides, name), API)


R = TypeVar("R")


def _said(outcome: tuple[R, list[RduSimWarning]]) -> R:
    """A worker's result, its warnings said here (``sim_warnings.kept``)."""
    result, found = outcome
    say(found)
    return result


def run_suite(
    *,
    quick: bool = False,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    snapstream: str | Path = SNAPSTREAM_WORKLOAD,
    full: str | Path = FULL_WORKLOAD,
    figures: Sequence[Figure] = FIGURES,
    parallel: bool = True,
    scaling_overrides: Iterable[str] | Mapping[str, Any] | None = None,
) -> SuiteResult:
    """Run both deployments and the smaller measurements (``overrides`` apply to every
    DeepSeek-R1 run; the Llama 3.1 steps of the Kernel Looping figures, their own workload,
    take ``scaling_overrides``, by default the ``hw.`` ones of ``overrides``: the hardware
    file is shared) and compare with the published figures. ``overrides`` and
    ``scaling_overrides`` are a mapping or a sequence of ``PATH=VALUE`` texts
    (``suite_overrides``)."""
    ovr = suite_overrides(overrides, "overrides")
    # bad input fails here, in this process, before anything is simulated
    plans = [(path, plan_run(path, read_by(path, ovr), quick)) for path in (snapstream, full)]
    prompt = reference_prompt(snapstream, read_by(snapstream, ovr))
    hardware_ovr = (
        [o for o in ovr if o.strip().startswith(HW_PREFIX)]
        if scaling_overrides is None
        else suite_overrides(scaling_overrides, "scaling_overrides")
    )
    if parallel:  # a signal stops the workers' runs too (interrupts.start_worker)
        spawn = get_context("spawn")
        with ProcessPoolExecutor(
            2, mp_context=spawn, initializer=start_worker, initargs=(pool_owner(),)
        ) as pool:
            try:
                with blocked():  # the workers start with the signals blocked
                    # each sends its warnings back, said here as this process's (kept)
                    futures = [
                        pool.submit(run_stoppable, kept, measure_run, path, run_ovr, prompt)
                        for path, run_ovr in plans
                    ]
                    small_future = pool.submit(
                        run_stoppable, kept, measure_small, full, read_by(full, ovr)
                    )
                    scaling_future = pool.submit(
                        run_stoppable, kept, measure_decode_scaling, hardware_ovr
                    )
                ss, fu = (_said(f.result()) for f in futures)
                small, scaling = _said(small_future.result()), _said(scaling_future.result())
            except Interrupted:
                stop_children()
                pool.shutdown(cancel_futures=True)
                raise
    else:
        ss, fu = (measure_run(path, run_ovr, prompt) for path, run_ovr in plans)
        small, scaling = (
            measure_small(full, read_by(full, ovr)),
            measure_decode_scaling(hardware_ovr),
        )
    speed, share, (tensor, data) = small
    measurements = Measurements(
        batch_capacity_snapstream=ss.batch_capacity,
        batch_capacity_full=fu.batch_capacity,
        decode_tokens_per_s_snapstream=ss.decode_tokens_per_s,
        decode_tokens_per_s_full=fu.decode_tokens_per_s,
        prefill_prompt=prompt,
        prefill_s_snapstream=ss.prefill_s,
        prefill_s_full=fu.prefill_s,
        single_stream_tokens_per_s=speed,
        single_stream_hbm_share=share,
        looping_speedup=scaling.looping_speedup,
        multi_socket_scaling=scaling.multi_socket_scaling,
        peak_share_8=scaling.peak_share[8],
        peak_share_16=scaling.peak_share[16],
        throughput_256_users_tensor_parallel=tensor,
        throughput_256_users_data_parallel=data,
    )
    return SuiteResult(ss, fu, measurements, evaluate(measurements, figures), scaling)


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
