"""Measured deployments as data: a measured point, its metric, one simulation per point, errors.

A point is one row of a measurement file (``rdu_sim.validate.measurement_file`` reads them;
docs/calibration.md states the format with a worked example): a deployment (hardware,
serving stack, model, tensor-parallel degree, weight and KV dtypes), a run of it (``requests``
requests of ``input_tokens`` and ``output_tokens`` each, all sent at time 0, ``batch`` slots or
as many as the KV memory holds) and one measured value of one metric (``METRICS``).

Each point runs through ``rdu_sim.api.run`` (the code path of ``rdu-sim run``): a serving run
of its requests, fixed lengths, full attention, kernel looping on SN40L. ``validate --suite
deployment`` and ``calibrate`` read points here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.yaml_io import LineMap

if TYPE_CHECKING:
    from rdu_sim.report.run_result import RunResult
    from rdu_sim.report.summary import RunSummary
    from rdu_sim.scenario import Scenario
    from rdu_sim.serving.limits import UnchunkedPromptWarning

MIN_CONTEXT = 4096
"""The least ``serving.max_context`` a fixed-batch point's workload gets (its decode buckets
start below); a full-load point's is its own length, which sets how many sequences fit."""

AUTO = "auto"
"""``batch`` of a full-load point: the batch capacity (as many slots as the KV memory holds
and the stack runs)."""

FULL_LOAD, BATCH = "full-load", "batch"
"""How a point was measured: a full-load run (``batch`` auto), or a batch sent together."""


@dataclass(frozen=True)
class Metric:
    """A measured quantity: its unit, what it is in a run, and the range a measurement of it
    may take (outside it, a row is refused as a typo or a unit mistake)."""

    name: str
    unit: str
    definition: str
    read: Callable[[RunSummary], float | None]
    low: float
    high: float


def _mean(value: Any) -> float | None:
    mean = getattr(value, "mean", None)
    return None if mean is None else float(mean)


def _output_rate(summary: RunSummary) -> float | None:
    span = summary.makespan_s
    return summary.output_tokens / span if span else None


TPOT_LOW, TPOT_HIGH = 1e-4, 2.0
"""The plausible time per output token (s) of a served LLM, bounds on a measurement of it.
A decode step launches a model's kernels and reads its weights: no deployment of a
transformer serves a token in under 100 us (a 1B-parameter model's BF16 weights alone take
0.6 ms at 3.35 TB/s). 2 s a token (0.5 tokens/s a user) is beyond any deployment the
project models; above it a value is taken for milliseconds written as seconds (a TPOT of
8.5 ms written 8.5), which a fit would otherwise chase to its parameters' bounds. The other
metrics are checked against these too, through the row's own lengths and batch
(``measurement_file``: a batch's latency holds its decode steps; a throughput, at most every
sequence's token a step)."""

METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric(
            "e2e_s",
            "s",
            "the run's end-to-end seconds: from the requests' arrival (all at time 0) to the "
            "last request's last token (a batch's latency)",
            lambda s: s.makespan_s,
            1e-6,
            1e6,
        ),
        Metric(
            "ttft_s",
            "s",
            "the mean over requests of the time to first token, from arrival (time 0)",
            lambda s: _mean(s.ttft_s),
            1e-6,
            1e6,
        ),
        Metric(
            "tpot_s",
            "s",
            "the mean over requests of the time per output token after the first: "
            "(last token - first token) / (output_tokens - 1)",
            lambda s: _mean(s.tpot_s),
            TPOT_LOW,
            TPOT_HIGH,
        ),
        Metric(
            "output_tokens_per_s",
            "tokens/s",
            "every request's output tokens over the whole run (first request sent to last "
            "token): the throughput of a full-load run",
            _output_rate,
            1e-3,
            1e9,
        ),
    )
}
"""The metrics a measurement file may hold, by name."""


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured point of a deployment (one row of a measurement file)."""

    hardware: str
    model: str
    tp: int
    batch: int | None  # None: the batch capacity (``auto``)
    input_tokens: int
    output_tokens: int
    metric: str
    measured: float  # in the metric's unit
    requests: int = 0  # 0: one request per batch slot
    weights: str = "bf16"
    kv: str = "bf16"
    stack: str = ""  # "": the hardware file's default stack
    kv_memory_fraction: float | None = None  # None: the stack's
    label: str = ""
    source: str = ""  # file:line, for reports and errors

    @property
    def file(self) -> str:
        """The measurement file the point came from (relative paths inside resolve from it)."""
        return self.source.rsplit(":", 1)[0]

    @property
    def unit(self) -> str:
        """The unit of the measured value."""
        return METRICS[self.metric].unit

    @property
    def method(self) -> str:
        """How it was measured: ``full-load`` (batch auto) or ``batch``."""
        return FULL_LOAD if self.batch is None else BATCH

    @property
    def request_count(self) -> int:
        """Requests sent: the ``requests`` column, or one per batch slot."""
        if self.requests:
            return self.requests
        assert self.batch is not None, "a full-load point names its request count"
        return self.batch

    @property
    def settings(self) -> list[str]:
        """What the row states of its run beyond its workload, as overrides that come after
        any caller's (a fit does not move what a measurement states)."""
        from rdu_sim.config.overrides import given

        if self.kv_memory_fraction is None:
            return []
        # the row's share replaces the stack's bound on the KV cache, whichever it is
        texts = [
            "stack.memory_utilization=null",
            f"stack.kv_memory_fraction={self.kv_memory_fraction!r}",
        ]
        return given(texts, "the row's kv_memory_fraction")

    def scenario(self, overrides: Sequence[str] = ()) -> Scenario:
        """The validated workload that simulates this point; a ConfigError naming the row
        and its column when the row names something that does not exist or does not fit
        together (an unknown model, a tp the model cannot split by, a missing hardware
        file). A full-load row on a paged KV cache reserves each request's whole length in
        pages at admission: the run's own rule (``kv.paged``)."""
        return self._build(self.workload(), overrides)

    def _build(self, data: dict[str, Any], overrides: Sequence[str]) -> Scenario:
        from rdu_sim.config.overrides import API
        from rdu_sim.scenario import build_scenario

        _, _, line = self.source.rpartition(":")
        # the row's line for the files it names: a fault inside one ends '(the stack of
        # FILE:LINE)' (``config.overrides.in_context``)
        lines: LineMap = {(k,): int(line) for k in ("hardware", "stack")} if line.isdigit() else {}
        try:
            return build_scenario(
                data,
                workload_file=self.file,
                lines=lines,
                overrides=[*overrides, *self.settings],
                overrides_from=API,  # a caller's not marked (``--set`` marks its own)
            )
        except ConfigError as exc:
            raise self.row_error(exc) from None

    def row_error(self, exc: ConfigError) -> ConfigError:
        """``exc`` (of this point's workload or run) as one issue of its row: a fault in a
        file the row names is told on one line, in that file, ending with the row's line."""
        first, *rest = (self._row_issue(issue) for issue in exc.issues)
        if rest:
            more = "; ".join(str(issue) for issue in rest)
            first = ConfigIssue(first.file, first.field, f"{first.message} {more}")
        return ConfigError([first])

    def _row_issue(self, issue: ConfigIssue) -> ConfigIssue:
        """An issue of this point's workload, told as one of its row (its column named)."""
        if issue.file != self.file:  # a fault inside the hardware file: that file names it
            return issue
        column = WORKLOAD_COLUMNS.get(issue.field.partition(".")[0], "")
        column = WORKLOAD_COLUMNS.get(issue.field, column)
        return ConfigIssue(self.source, column or issue.field, issue.message)

    def workload(self) -> dict[str, Any]:
        """The workload mapping that simulates this point."""
        length = self.input_tokens + self.output_tokens
        data: dict[str, Any] = {
            "name": f"measured-{self.model}-b{self.batch or AUTO}-{self.input_tokens}",
            "hardware": self.hardware,
            "model": self.model,
            "dtypes": {"weights": self.weights, "kv": self.kv, "activations": "bf16"},
            "parallelism": {"tp": self.tp},
            "kv": {"policy": "full"},
            "serving": {
                "batch_slots": AUTO if self.batch is None else self.batch,
                "max_context": length if self.batch is None else max(MIN_CONTEXT, length),
                "prompt_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "arrival": {"process": "all_at_once"},
                "requests": self.request_count,
                "seed": 0,
            },
        }
        if self.stack:
            data["stack"] = self.stack
        return data


WORKLOAD_COLUMNS = {
    "hardware": "hardware",
    "stack": "stack",
    "model": "model",
    "parallelism.tp": "tp",
    "dtypes.weights": "weights",
    "dtypes.kv": "kv",
    "dtypes": "weights",
    "serving.batch_slots": "batch",
    "serving.requests": "requests",
    "serving.prompt_tokens": "input_tokens",
    "serving.output_tokens": "output_tokens",
    "serving.max_context": "input_tokens",
    "stack.kv_memory_fraction": "kv_memory_fraction",
}
"""A point's workload field -> the measurement file's column it comes from."""


@dataclass(frozen=True)
class Simulated:
    """What one point's run gave: the metric's value and the batch slots it ran."""

    value: float
    batch_slots: int


def simulate_run(point: MeasuredPoint, overrides: Sequence[str] = ()) -> Simulated:
    """Run ``point``'s workload (``overrides`` on top, ``hw.`` ones on its hardware file) and
    read its metric; a ConfigError naming the row when the run gives no finite, positive
    value (no request completed)."""
    from rdu_sim import api
    from rdu_sim.serving.limits import UnchunkedPromptWarning
    from rdu_sim.sim_warnings import warn

    scenario = point.scenario(overrides)
    try:  # the run's warnings are told below, for a measured row
        result = api.run(scenario, warn=False)
    except ConfigError as exc:  # a run the row asks for that cannot be done (too much work)
        raise point.row_error(exc) from None
    for found in result.warnings():
        warn(_as_measured(found, result) if isinstance(found, UnchunkedPromptWarning) else found)
    value = METRICS[point.metric].read(result.summary())
    if value is None or not np.isfinite(value) or value <= 0:
        raise ConfigError.single(
            point.source, "metric", f"the run gives no {point.metric} (got {value!r})"
        )
    return Simulated(float(value), int(result.batch_slots))


def _as_measured(warning: UnchunkedPromptWarning, run: RunResult) -> UnchunkedPromptWarning:
    """A measured row's prompts past its stack's token budget, told for the measurement:
    what the model assumes for its rows (each prompt one prefill step), not advice to edit
    a workload the rows do not have (a measurement file has no column for chunking)."""
    from rdu_sim.serving.limits import UnchunkedPromptWarning, unchunked_prompts

    found = unchunked_prompts(run.scenario, run.requests_in.prompt_tokens)
    if found is None:  # (not so: the run found them)
        return warning
    longest, budget = found
    return UnchunkedPromptWarning(
        f"{run.scenario.workload_file}: its rows' prompts of up to {longest:,} tokens pass "
        f"the stack {run.scenario.stack.name}'s prefill_batch_tokens ({budget:,}); the "
        "measurement does not say its runtime cut them into chunks, so each is simulated as "
        f"one prefill step (--set serving.prefill_chunk_tokens={budget} simulates them "
        "chunked)"
    )


def simulate(point: MeasuredPoint, overrides: Sequence[str] = ()) -> float:
    """The simulated value of ``point``'s metric, in its unit."""
    return simulate_run(point, overrides).value


@dataclass(frozen=True)
class PointResult:
    """A point, its simulated value and the relative error (simulated / measured - 1)."""

    point: MeasuredPoint
    simulated: float
    batch_slots: int = 0  # the batch the run ran at (a full-load point's is the simulator's)

    @property
    def relative_error(self) -> float:
        """Simulated over measured, less one (negative when the simulated value is the
        smaller: for seconds, the simulator is faster; for tokens/s, slower)."""
        return self.simulated / self.point.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the point's fields, its unit and method, the simulated value, the batch
        it ran at and the error."""
        return {
            **asdict(self.point),
            "unit": self.point.unit,
            "method": self.point.method,
            "simulated": self.simulated,
            "batch_slots": self.batch_slots,
            "relative_error": self.relative_error,
        }


@dataclass(frozen=True)
class ErrorSummary:
    """Median and worst absolute relative error of a group of points."""

    group: str
    points: int
    median_abs_error: float
    worst_abs_error: float
    worst_point: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe."""
        return asdict(self)


def summarize_errors(errors: Sequence[tuple[str, float]], group: str) -> ErrorSummary:
    """(name, relative error) pairs as one group's median and worst |error|."""
    magnitudes = np.abs([error for _, error in errors])
    worst = int(np.argmax(magnitudes))
    return ErrorSummary(
        group=group,
        points=len(errors),
        median_abs_error=float(np.median(magnitudes)),
        worst_abs_error=float(magnitudes[worst]),
        worst_point=errors[worst][0],
    )


def summarize(results: Sequence[PointResult], group: str) -> ErrorSummary:
    """The errors of ``results`` as one group."""
    return summarize_errors([(r.point.source, r.relative_error) for r in results], group)


def grouped(
    results: Sequence[PointResult], key: Callable[[PointResult], str]
) -> list[ErrorSummary]:
    """One summary per value of ``key``, in order of first appearance."""
    groups: dict[str, list[PointResult]] = {}
    for result in results:
        groups.setdefault(key(result), []).append(result)
    return [summarize(rows, name) for name, rows in groups.items()]


def by_hardware(results: Sequence[PointResult]) -> list[ErrorSummary]:
    """One summary per hardware file, in order of first appearance."""
    return grouped(results, lambda r: r.point.hardware)
