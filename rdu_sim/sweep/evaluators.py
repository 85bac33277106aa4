"""Evaluators: what turns a resolved point into a dict of results.

An evaluator is a module-level function `f(point, options) -> Mapping[str, Any]`, registered
by name with a pydantic model of its options (a spec's `evaluator: {name, options}` is
validated against it). Module-level so it pickles by reference into worker processes and
Dask workers.

- `simulate` (the default) runs the full simulation in process: `rdu_sim.api.run(scenario)`.
  Its `check` is what the run decides before simulating (``serving.run.plan_run``: the batch
  slots and memory plan, 1 to 120 ms a point), so a dry run and `rdu-sim check` mark the
  points that would fail there, in the run's words.
- `synthetic` is a closed-form stand-in that takes microseconds. Its numbers are NOT a
  simulation: it exists so the sweep machinery (executors, storage, resume, kill safety) can
  be tested and demonstrated quickly and deterministically. Options: `sleep_s` (seconds each
  point sleeps, to make points slow enough to interrupt) and `fail_when` (field path ->
  value; a point whose resolved config matches all of them raises, to exercise failures).

Each names its result's dataclass (``result``: a schema, ``sweep.schema``), so a spec's
metrics are checked before anything runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from rdu_sim.config.base import StrictModel
from rdu_sim.sweep.schema import Schema

if TYPE_CHECKING:
    from rdu_sim.sweep.expand import Point

EvaluatorFn = Callable[["Point", Any], Mapping[str, Any]]
CheckFn = Callable[["Point", Any], None]
"""An evaluator's cheap check of a point: raises what evaluating it would fail with early
(a model that does not fit), or returns."""
ResultFn = Callable[[], Schema]
"""The names an evaluator's result can hold (``sweep.schema``), built when asked: the
simulator's types are imported only by what checks or runs."""


@dataclass(frozen=True)
class Evaluator:
    """A registered evaluator: its function and the model its options validate against."""

    name: str
    function: EvaluatorFn
    options: type[StrictModel]
    check: CheckFn | None = None
    result: ResultFn | None = None  # None: the names are known only from a result


_REGISTRY: dict[str, Evaluator] = {}


def register(
    name: str,
    options: type[StrictModel],
    check: CheckFn | None = None,
    result: ResultFn | None = None,
) -> Callable[[EvaluatorFn], EvaluatorFn]:
    """Register an evaluator under `name` (with its cheap `check` of a point and the
    `result` schema of what it returns, if it has them); a duplicate name is refused."""

    def decorate(function: EvaluatorFn) -> EvaluatorFn:
        if name in _REGISTRY:
            raise ValueError(f"evaluator {name!r} is already registered")
        _REGISTRY[name] = Evaluator(name, function, options, check, result)
        return function

    return decorate


def evaluator_names() -> list[str]:
    """Registered evaluator names, sorted."""
    return sorted(_REGISTRY)


def get_evaluator(name: str) -> Evaluator:
    """The evaluator called `name`; KeyError listing the valid names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown evaluator {name!r}; valid: {', '.join(evaluator_names())}"
        ) from None


@dataclass(frozen=True)
class BoundEvaluator:
    """An evaluator with validated options: call it with a point. Picklable."""

    function: EvaluatorFn
    options: Any
    checker: CheckFn | None = None

    def __call__(self, point: Point) -> Mapping[str, Any]:
        return self.function(point, self.options)

    def check(self, point: Point) -> None:
        """Raise what evaluating ``point`` would fail with early, when the evaluator can
        tell cheaply (``Evaluator.check``); else return."""
        if self.checker is not None:
            self.checker(point, self.options)


class NoOptions(StrictModel):
    """An evaluator that takes no options."""


def _simulate_check(point: Point, options: NoOptions) -> None:
    """What the run decides before simulating (batch slots, memory plans), raising what it
    would fail with there (``serving.run.plan_run``)."""
    from rdu_sim.serving.backend import EngineBackend
    from rdu_sim.serving.run import plan_run

    plan_run(point.scenario, EngineBackend())


def _simulate_result() -> Schema:
    """``RunSummary.to_dict()``'s names, less its provenance (``simulate`` drops it)."""
    from rdu_sim.report.summary import RunSummary

    return Schema.of(RunSummary, leave_out=("provenance",))


@register("simulate", NoOptions, _simulate_check, _simulate_result)
def simulate(point: Point, options: NoOptions) -> Mapping[str, Any]:
    """The full simulation of the point's scenario, as `RunResult.to_dict()` without its
    provenance (the row holds the config, the overrides and the simulator's version)."""
    from rdu_sim.api import run  # here: a worker loads the simulator only if it simulates

    metrics = run(point.scenario).to_dict()
    metrics.pop("provenance", None)
    return metrics


class SyntheticOptions(StrictModel):
    """Options of the synthetic evaluator (a test and demo hook, not a model)."""

    sleep_s: float = Field(default=0.0, ge=0, le=60, description="sleep per point, seconds")
    fail_when: dict[str, Any] = Field(
        default_factory=dict,
        description="field path -> value: a point matching all of them raises RuntimeError",
    )


def _field(point: Point, path: str) -> Any:
    """A resolved config value by dotted path (`hw.` paths read the hardware)."""
    scenario = point.scenario
    data: Any = (
        scenario.hardware.model_dump(mode="json")
        if path.startswith("hw.")
        else scenario.workload.model_dump(mode="json")
    )
    for part in path.removeprefix("hw.").split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


@dataclass(frozen=True)
class SyntheticTier:
    """A synthetic result's memory tier (bytes)."""

    capacity_bytes: float
    kv_bytes: float
    weights_bytes: float
    free_bytes: float


@dataclass(frozen=True)
class SyntheticResult:
    """What ``synthetic`` returns (as ``asdict``), shaped like a RunResult's."""

    model: str
    max_context: int
    kv_policy: str
    batch_slots: int
    batch_capacity: int
    kv_bytes_per_slot: int
    decode_tokens_per_s: float
    steady_decode_tokens_per_s: float
    requests_truncated: int
    prompt_tokens_truncated: int
    output_tokens_truncated: int
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    memory: dict[str, SyntheticTier]
    requests_completed: int


@register("synthetic", SyntheticOptions, result=lambda: Schema.of(SyntheticResult))
def synthetic(point: Point, options: SyntheticOptions) -> Mapping[str, Any]:
    """Closed-form numbers shaped like a RunResult: fast, deterministic, not a simulation."""
    if options.sleep_s:
        time.sleep(options.sleep_s)
    if options.fail_when and all(_field(point, p) == v for p, v in options.fail_when.items()):
        shown = ", ".join(f"{p}={v}" for p, v in options.fail_when.items())
        raise RuntimeError(f"synthetic failure requested by fail_when ({shown})")
    scenario = point.scenario
    workload = scenario.workload
    hbm = scenario.hardware.hbm
    slots = workload.serving.batch_slots if isinstance(workload.serving.batch_slots, int) else 8
    weights = 2.0e9 * scenario.model.layers / max(1, scenario.tp)
    step_s = weights / (hbm.bandwidth * hbm.efficiency) + 1e-5 * slots
    kv_bytes = 131072 * slots * workload.serving.max_context
    per_slot = 131072 * workload.serving.max_context
    return asdict(
        SyntheticResult(
            model=scenario.model.name,
            max_context=workload.serving.max_context,
            kv_policy=workload.kv.policy,
            batch_slots=slots,
            batch_capacity=max(1, int((hbm.capacity - weights) // per_slot)),
            kv_bytes_per_slot=per_slot,
            decode_tokens_per_s=slots / step_s,
            steady_decode_tokens_per_s=slots / step_s,
            requests_truncated=0,
            prompt_tokens_truncated=0,
            output_tokens_truncated=0,
            ttft_s={"p50": 40 * step_s, "p90": 50 * step_s, "p99": 60 * step_s},
            tpot_s={"p50": step_s, "p90": 1.1 * step_s, "p99": 1.2 * step_s},
            memory={
                "hbm": SyntheticTier(
                    capacity_bytes=hbm.capacity,
                    kv_bytes=kv_bytes,
                    weights_bytes=weights,
                    free_bytes=hbm.capacity - kv_bytes,
                )
            },
            requests_completed=workload.serving.requests,
        )
    )
