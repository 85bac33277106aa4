"""The public, in-process API: what the CLI, sweeps, plots and notebooks call.

    >>> from rdu_sim.api import run, step_report
    >>> result = run("workloads/deepseek-r1-128k-snapstream.yaml",
    ...              overrides={"serving.requests": 200})
    >>> result.to_dict()["decode_tokens_per_s"]             # the JSON contract
    >>> result.requests()["ttft_s"]                         # per-request columns
    >>> result.timeseries()["occupied"]                     # slot occupancy over time
    >>> step_report("llama3.1-8b-1socket", batch=4).to_dict()["bound"]   # `step --json`

(tests/test_api_examples.py runs these examples.) A facade: each function loads the workload
(``rdu_sim.scenario``) and hands it to the room that owns the job: serving runs
(``rdu_sim.serving.run``), the default step shape (``rdu_sim.serving.step_shape``), the
compiler's view of a step (``rdu_sim.compiler.inspect``), the report's views of a run and a
step (``rdu_sim.report.run_result``, ``rdu_sim.report.step_report``). Nothing is written to
disk, so calls in one process are independent and repeatable. Process-wide state: none a
result depends on; ``share_steps()`` (what a sweep's worker wraps its points in) lets the
calls made inside it, in the caller's own thread, share equal steps' results through
per-process memos (``rdu_sim.engine.shared_steps``: keyed by every engine input, never
stale; the same numbers either way), and a thread not inside it computes afresh.

What a caller owns: a result keeps deep copies of the overrides it was given (editing the
dict afterwards changes nothing of it), and ``to_dict()`` returns a new dict each call.
Results are compared and hashed by identity (compare two runs' ``to_json()``).

Across a process boundary (``ProcessPoolExecutor().submit(run, ...)``): a RunResult pickles
whole (its scenario, records and step caches, whose backend comes along without its
compilers, a cache rebuilt on first use), as do ``step``'s StepCost and a StepReport,
compiled or not (``rdu_sim.pickled``); a ClusterResult pickles its summary and request
columns, not its live simulation (``api_cluster``). The unpickled result's ``to_json()``
equals the original's. Errors cross as themselves: ``rdu_sim.InputError`` subclasses for
bad input.

Arguments are checked at the door: a workload that is no path, overrides that are a str,
a ``progress`` that cannot be called as ``progress(done, total)``, a ``backend`` that is no
Backend, or a step dimension that is not an integer is a TypeError naming the argument; a
step dimension out of range (a batch of 0) a ``StepShapeError``, an ``rdu_sim.InputError``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdu_sim.config.overrides import API
from rdu_sim.engine.shared_steps import sharing as share_steps
from rdu_sim.scenario import Scenario, load_scenario, with_overrides
from rdu_sim.serving.backend import (
    Backend,
    EngineBackend,
    resolve_batch_slots,
    step_batch,
    warn_over_pool,
    warn_spilled,
)
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.serving.step_shape import default_step_shape as _default_step_shape
from rdu_sim.serving.step_shape import dimension
from rdu_sim.shapes import StepShape

if TYPE_CHECKING:
    from rdu_sim.report.run_result import RunResult
    from rdu_sim.report.step_report import StepReport

__all__ = [
    "Backend",
    "EngineBackend",
    "RunResult",
    "default_step_shape",
    "inspect_graph",
    "load",
    "resolve_batch_slots",
    "run",
    "share_steps",
    "step",
    "step_report",
]


def __getattr__(name: str) -> Any:
    """``api.RunResult``, imported when first asked for: a command that only steps or checks
    never loads the serving loop and the report room (the CLI's start)."""
    if name == "RunResult":
        from rdu_sim.report.run_result import RunResult

        return RunResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Overrides = Mapping[str, Any] | list[str] | tuple[str, ...] | None
"""``{"serving.requests": 8}`` or ``["serving.requests=8"]`` (``--set``'s form). Not
``Iterable[str]``: a str is one, and ``"serving.requests=8"`` would type-check and then be
read a character at a time; at run time a str is a TypeError naming ``overrides``."""
Progress = Callable[[int, int], None]
Workload = Scenario | str | Path


def load(scenario_or_path: Workload, overrides: Overrides = None) -> Scenario:
    """A validated Scenario from a workload path, or an existing Scenario plus overrides.
    Anything else is a TypeError naming the argument (``api.run(42)`` was pathlib's, naming
    none); a path that does not load is a ConfigError (``rdu_sim.InputError``). An error at
    a field an override set ends ``(from overrides: PATH)``, the argument that gave it, or
    where an override says it was given: ``(from --set PATH)`` for the command line's
    (``config.overrides.GivenText``, ``origin_of``)."""
    if isinstance(scenario_or_path, Scenario):
        return with_overrides(scenario_or_path, overrides, API)
    if not isinstance(scenario_or_path, str | os.PathLike):
        given = repr(scenario_or_path)
        shown = given if len(given) <= 60 else given[:57] + "..."
        raise TypeError(
            "scenario_or_path must be a Scenario, a workload file's path (str or Path) or a "
            f"shipped workload's name, not {type(scenario_or_path).__name__} {shown}"
        )
    return load_scenario(scenario_or_path, overrides, API)


def check_progress(progress: object) -> None:
    """``progress`` is None or callable as ``progress(done, total)``, else a TypeError naming
    it now, not from inside the scheduler once the simulation has started."""
    if progress is None:
        return
    if not callable(progress):
        raise TypeError(
            f"progress must be None or a callable progress(done, total), not "
            f"{type(progress).__name__} {progress!r}"
        )
    try:
        signature = inspect.signature(progress)
    except (TypeError, ValueError):  # a builtin without one: it answers for itself
        return
    try:
        signature.bind(0, 0)
    except TypeError:
        raise TypeError(
            f"progress must take two arguments, progress(done, total); {progress!r} takes "
            f"{signature}"
        ) from None


def check_flag(name: str, value: object) -> None:
    """A yes/no argument is a bool, else a TypeError naming it: ``warn="no"`` is a true
    string and would warn."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")


BACKEND_METHODS = ("batch_capacity", "memory_capacity", "plan_memory", "step_cost")
"""What a :class:`Backend` answers (``serving.backend.Backend``)."""


def check_backend(backend: object) -> None:
    """``backend`` is None or a :class:`Backend` (``EngineBackend()``), else a TypeError
    naming it now: ``backend="engine"`` failed inside the serving loop with an
    AttributeError on a str."""
    if backend is None:
        return
    missing = [name for name in BACKEND_METHODS if not callable(getattr(backend, name, None))]
    if missing:
        given = repr(backend)
        shown = given if len(given) <= 60 else given[:57] + "..."
        raise TypeError(
            f"backend must be None or a Backend such as EngineBackend(), not "
            f"{type(backend).__name__} {shown}, which has no {', '.join(missing)}"
        )


def _check_step(phase: object, batch: object, tokens: object, context: object) -> None:
    """A step's options checked before anything loads: ``phase`` a str, each dimension an
    integer in range (``serving.step_shape.dimension``: a TypeError or a StepShapeError
    naming it)."""
    if not isinstance(phase, str):
        raise TypeError(
            f"phase must be 'decode' or 'prefill', not {type(phase).__name__} {phase!r}"
        )
    dimension("batch", batch, 1)
    dimension("tokens", tokens, 1)
    dimension("context", context, 0)


def run(
    scenario_or_path: Workload,
    overrides: Overrides = None,
    progress: Progress | None = None,
    *,
    backend: Backend | None = None,
    warn: bool = True,
) -> RunResult:
    """Simulate serving a workload; ``progress(done, total)`` is called as requests finish.
    What the reader must be told (weights pushed to DDR, ...) is warned, each of its class
    (``rdu_sim.RduSimWarning``s), as the report's ``warnings`` say (``RunResult.warn``);
    ``warn=False`` leaves that to the caller, which shows the report's ``warnings`` itself
    (``rdu-sim run``'s text report: each said once)."""
    from rdu_sim.report.run_result import RunResult
    from rdu_sim.serving.run import serve_scenario

    check_progress(progress)
    check_backend(backend)
    check_flag("warn", warn)
    scenario = load(scenario_or_path, overrides)
    result = RunResult.of(serve_scenario(scenario, backend or EngineBackend(), progress))
    if warn:
        result.warn()
    return result


def default_step_shape(
    scenario: Workload,
    phase: str = "decode",
    *,
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
    backend: Backend | None = None,
) -> StepShape:
    """The static shape :func:`step` simulates when not told otherwise (the rule is
    ``rdu_sim.serving.step_shape``; the batch slots come from ``backend``'s capacity).
    ``scenario`` is a Scenario or a workload's path or shipped name, as every function here
    takes (:func:`load`)."""
    check_backend(backend)
    loaded = load(scenario)

    def batch_slots() -> int:  # on a paged stack, what its pool holds at the context
        return step_batch(loaded, backend or EngineBackend(), context)

    return _default_step_shape(
        loaded, batch_slots, phase, batch=batch, tokens=tokens, context=context
    )


def step(
    scenario_or_path: Workload,
    overrides: Overrides = None,
    *,
    phase: str = "decode",
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
    backend: Backend | None = None,
    record: bool = False,
) -> StepCost:
    """Simulate one static step (see :func:`default_step_shape` for the defaults).
    ``detail`` of the result holds the engine's StepTiming; with ``record`` the engine also
    collects its trace records (``detail.records``, for ``rdu_sim.report.trace``). The
    timing is the same either way. ``record`` with a ``backend`` needs a recording one
    (``EngineBackend(record=True)``)."""
    _check_step(phase, batch, tokens, context)
    check_backend(backend)
    check_flag("record", record)
    scenario = load(scenario_or_path, overrides)
    if backend is None:
        backend = EngineBackend(record=record)
    elif record and not getattr(backend, "record", False):
        raise ValueError(
            "record=True needs a backend that records, e.g. "
            "EngineBackend(record=True), or no backend"
        )
    shape = default_step_shape(
        scenario, phase, batch=batch, tokens=tokens, context=context, backend=backend
    )
    if phase == "decode":  # does its pool hold the batch, given or the default (one at least)?
        warn_over_pool(scenario, backend, int(shape.batch), context)  # a numpy integer too
    warn_spilled(scenario, backend, shape)  # weights its memory plan pushed to DDR, as run's
    return backend.step_cost(scenario, shape)


def step_report(
    scenario_or_path: Workload,
    overrides: Overrides = None,
    *,
    phase: str = "decode",
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
) -> StepReport:
    """Simulate one static step as :func:`step` does and report it: ``.to_dict()`` is the
    JSON of ``rdu-sim step --json`` (the same builder: ``rdu_sim.report.step_report``; bound,
    memory, model FLOPs, layout, provenance, ...), ``.cost`` what :func:`step` returns,
    ``.timing`` the engine's StepTiming, ``.program`` the compiled step."""
    from rdu_sim.report.step_report import step_report as report_of

    _check_step(phase, batch, tokens, context)
    scenario = load(scenario_or_path, overrides)
    backend = EngineBackend()
    cost = step(scenario, phase=phase, batch=batch, tokens=tokens, context=context, backend=backend)
    return report_of(scenario, cost, backend, phase, batch=batch, tokens=tokens, context=context)


def inspect_graph(
    scenario_or_path: Workload,
    overrides: Overrides = None,
    *,
    phase: str = "decode",
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
) -> dict[str, Any]:
    """What the compiler makes of the step :func:`step` would simulate with these options
    (kernels, stages, placement, the layer graph), as JSON-ready data."""
    from rdu_sim.compiler import inspect as compiler_inspect

    _check_step(phase, batch, tokens, context)
    scenario = load(scenario_or_path, overrides)
    backend = EngineBackend()
    shape = default_step_shape(
        scenario, phase, batch=batch, tokens=tokens, context=context, backend=backend
    )
    return compiler_inspect.inspect_graph(scenario, shape, backend.compiler(scenario))
