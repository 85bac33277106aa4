"""What runs on a worker: evaluate one point, never raise, return an Outcome for the parent.

`run_task` is the only function executors ship to workers (a process pool, Dask, or the
parent itself). It catches every exception, so one bad point becomes a 'failed' Outcome and
the sweep goes on; it selects the spec's metrics (and what bound a throughput among them)
from the result so only those travel back.
The parent alone writes the database.

A signal stops a worker's batch, never the worker (``rdu_sim.interrupts``): `run_batch`
hands back the points it finished, and once stopped a worker returns every later batch of
that sweep at once, untouched (a rerun runs them). A pool worker is stopped by SIGINT or
SIGTERM (``interrupts.start_worker``: the terminal's, or the one its parent forwards) within
the point it runs; a Dask worker, whose batches run in threads signals never reach, by
`stop_batches` (run on it by the parent) after the point it runs. A Dask worker outlives the
sweep, so that stop is the stopped sweep's alone (its id): the next sweep on the same
workers runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from rdu_sim import __version__, interrupts, plugins
from rdu_sim.input_errors import InputError
from rdu_sim.provenance import simulator
from rdu_sim.report.sweep_companions import companions
from rdu_sim.sweep.key import jsonable

MAX_ERROR_CHARS = 4000


class PointLike(Protocol):
    """What the machinery needs of a point: its key and what to store beside its metrics
    (a sweep's ``expand.Point``, or a plan's point: anything an evaluator understands)."""

    @property
    def key(self) -> str:
        """sha256 of the point's resolved config: its identity in the database."""
        ...

    @property
    def overrides(self) -> dict[str, Any]:
        """What defines the point (axis path -> value), stored as JSON."""
        ...

    @property
    def config(self) -> dict[str, Any]:
        """The resolved config the key hashes, stored as JSON."""
        ...


@dataclass(frozen=True)
class Task:
    """One point to evaluate, how, and which metrics to keep (None: all); ``version``: the
    rdu-sim version its key was made with (the sweep's, set where the task is made)."""

    point: PointLike
    evaluate: Callable[[Any], Mapping[str, Any]]
    metrics: tuple[str, ...] | None
    version: str = __version__


class WorkerMismatch(InputError):
    """A worker that is not the simulator a point's key describes: another rdu-sim version,
    or a plugin whose source differs from the one the key hashed (or that it cannot import).
    Every row it computed would be stored under a key saying otherwise, so the sweep stops
    with this one line instead (the worker's environment to fix, not the spec)."""


def recorded_code(config: Mapping[str, Any]) -> dict[str, tuple[str, str | None]]:
    """The plugin code a resolved config records (``provenance.outside_code``: its
    ``plugins``, a cluster's pools' too): package -> (a policy's qualified name, its
    source's sha256)."""
    found: dict[str, tuple[str, str | None]] = {}
    pools = config.get("pools")
    for part in [config, *(pools if isinstance(pools, list) else [])]:
        codes = part.get("plugins") if isinstance(part, Mapping) else None
        for code in codes.values() if isinstance(codes, Mapping) else ():
            if isinstance(code, Mapping) and "package" in code:
                found[str(code["package"])] = (str(code.get("name")), code.get("sha256"))
    return found


def identity(packages: Sequence[str]) -> dict[str, Any]:
    """What this process simulates with: rdu-sim's version and build, each plugin package's
    source sha256 here (None: it cannot import it), the plugin variable and the plugins'
    import error, if any. Run on every Dask worker before a sweep submits (``mismatch``)."""
    problem = None
    try:
        plugins.load()
    except plugins.PluginError as exc:
        problem = str(exc)
    return {
        "worker": worker_name(),
        "version": __version__,
        "build": simulator().label,
        "variable": os.environ.get(plugins.VARIABLE, ""),
        "code": {package: plugins.digest_here(package) for package in packages},
        "problem": problem,
    }


def mismatch(
    here: Mapping[str, Any], version: str, recorded: Mapping[str, tuple[str, str | None]]
) -> str | None:
    """How a worker (its ``identity``) differs from what the points' keys describe
    (``version``, ``recorded``: ``recorded_code``), in words; None when it does not."""
    if here["version"] != version:
        return (
            f"runs rdu-sim {here['version']} (build {here['build']}), the sweep's keys are "
            f"rdu-sim {version}'s (install the same version on both)"
        )
    for package, (name, digest) in sorted(recorded.items()):
        there = here["code"].get(package)
        if there is None:
            why = f"; {here['problem']}" if here.get("problem") else ""
            return (
                f"cannot import plugin package {package!r} ({name}), which the sweep's points "
                f"use: {plugins.VARIABLE}={here['variable']!r} there{why} (the worker's "
                "environment, not the spec)"
            )
        if there != digest:
            return (
                f"has another source of plugin package {package!r} ({name}): sha256 "
                f"{there[:12]} there, {str(digest)[:12]} in the sweep (install the same "
                "plugin on both)"
            )
    return None


_IDENTITY: dict[tuple[str, ...], dict[str, Any]] = {}  # what identity() found, by packages


def _refusal(task: Task) -> str | None:
    """Why this process must not evaluate ``task`` (``mismatch``), or None; a plugin's
    digest is taken once a process (the code it imported does not change under it)."""
    recorded = recorded_code(task.point.config) if task.version == __version__ else {}
    if task.version == __version__ and not recorded:
        return None
    packages = tuple(sorted(recorded))
    if packages not in _IDENTITY:
        _IDENTITY[packages] = identity(packages)
    problem = mismatch(_IDENTITY[packages], task.version, recorded)
    return None if problem is None else f"worker {worker_name()} {problem}"


@dataclass(frozen=True)
class Outcome:
    """The result of one task, ready to be written as a row."""

    key: str
    status: str  # 'done' | 'failed'
    metrics: dict[str, Any] | None
    error: str | None
    missing: tuple[str, ...]  # requested metrics the result did not have
    available: tuple[str, ...]  # the result's metric names when some were missing
    version: str  # the simulator that ran it, with its commit (provenance.Simulator.label)
    worker: str
    wall_s: float
    started: str
    finished: str
    refused: bool = False  # the worker is not the simulator the key describes (its error)


def flatten(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'ttft_s': {'p50': 1}} -> {'ttft_s.p50': 1}; lists and scalars are leaves."""
    flat: dict[str, Any] = {}
    for name, value in result.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def covers(metric: str, name: str) -> bool:
    """Whether a spec's ``metric`` asks for the stored metric ``name``: the same name, or
    one inside it (``decode_step`` covers ``decode_step.bound``)."""
    return name == metric or name.startswith(metric + ".")


def select(
    flat: Mapping[str, Any], metrics: tuple[str, ...] | None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Keep the requested metrics; a path naming a mapping keeps all its leaves. A path
    inside a section this run does not have (``speculation: null`` in a run without a
    draft) is kept as None, so points with and without the section share one sweep. What
    bound a requested throughput (``report.sweep_companions``) is kept after them where the
    result has it, never missing where it does not."""
    if metrics is None:
        return dict(flat), ()
    kept: dict[str, Any] = {}
    missing: list[str] = []
    for metric in metrics:
        found = {k: v for k, v in flat.items() if covers(metric, k)}
        parts = metric.split(".")
        if not found and any(
            ".".join(parts[:i]) in flat and flat[".".join(parts[:i])] is None
            for i in range(1, len(parts))
        ):
            found = {metric: None}
        if not found:
            missing.append(metric)
        kept.update(found)
    for name in companions(metrics):
        if name in flat:
            kept.setdefault(name, flat[name])
    return kept, tuple(missing)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _describe_error(exc: BaseException) -> str:
    """A failed point's error: its type and message; for a bug (not bad input:
    ``input_errors``) the traceback's tail too, to report it, which bad input's message does
    without (and without the paths of rdu-sim's own source files)."""
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, InputError):
        text += "\n" + "".join(traceback.format_exception(exc)[-6:])
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def worker_name() -> str:
    """host:pid of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def run_task(task: Task) -> Outcome:
    """Evaluate one point; any exception becomes a 'failed' Outcome with its message."""
    started = _now()
    clock = time.perf_counter()
    metrics: dict[str, Any] | None = None
    error: str | None = None
    missing: tuple[str, ...] = ()
    available: tuple[str, ...] = ()
    from rdu_sim.api import share_steps  # the simulator, loaded where it is needed

    refused = _refusal(task)
    if refused is not None:
        return replace(lost(task, refused), worker=worker_name(), refused=True)
    try:
        with share_steps():  # a worker's points share equal steps (engine.shared_steps)
            result = task.evaluate(task.point)
        if not isinstance(result, Mapping):
            raise TypeError(f"the evaluator returned {type(result).__name__}, not a mapping")
        flat = flatten(jsonable(dict(result)))
        metrics, missing = select(flat, task.metrics)
        if missing:
            available = tuple(sorted(flat))
    except Exception as exc:  # a failing point is recorded, never fatal to the sweep
        error = _describe_error(exc)
    return Outcome(
        key=task.point.key,
        status="failed" if error is not None else "done",
        metrics=metrics if error is None else None,
        error=error,
        missing=missing,
        available=available,
        version=simulator().label,
        worker=worker_name(),
        wall_s=time.perf_counter() - clock,
        started=started,
        finished=_now(),
    )


_STOPPED: set[str] = set()
"""The sweeps (their ids) whose batches this process was told to stop (``stop_batches``)."""


def run_batch(tasks: Sequence[Task], sweep: str | None = None) -> list[Outcome]:
    """Evaluate a batch of tasks one after another in this process (``sibling_batches``);
    stopped (a signal, or ``stop_batches`` of ``sweep``: the id a Dask sweep gives its
    batches), the outcomes of those finished, or none once stopped before it began."""
    outcomes: list[Outcome] = []
    try:
        with interrupts.raising():
            for task in tasks:
                if sweep in _STOPPED or interrupts.received() is not None:
                    break
                outcomes.append(run_task(task))
                if outcomes[-1].refused:  # so would every later point be
                    break
    except interrupts.Interrupted:
        pass  # what finished goes back; the rest wait for a rerun
    return outcomes


def leave_signals_to_the_sweep() -> None:
    """Ignore SIGINT and SIGTERM in this Dask worker (run on each by a sweep's LocalCluster):
    the terminal's Ctrl-C reaches the whole process group, and the sweep then stops its
    workers after their points (``stop_batches``) instead of losing them, and closes them."""
    for signum in interrupts.SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def stop_batches(sweep: str) -> None:
    """Stop ``sweep``'s batches this process runs after the point each is running (they hand
    back what they finished), and return its every later one at once: run by the parent on
    each Dask worker, whose task threads no signal reaches. Other sweeps' batches, later
    ones on the same long-running worker among them, run."""
    _STOPPED.add(sweep)


MAX_BATCH = 8
"""Most tasks one batch holds (``sibling_batches``)."""

SIBLING_FREE_PREFIXES = ("serving.",)
"""Override paths that step siblings may differ in: serving knobs, which the engine does
not read, so such points mostly ask for the same steps."""


def _fixed(overrides: Mapping[str, Any], free: Callable[[str], bool]) -> str:
    """The overrides outside ``free``, as a grouping key."""
    kept = {path: value for path, value in overrides.items() if not free(path)}
    return json.dumps(kept, sort_keys=True, default=str)


def _step_free(path: str) -> bool:
    return path.startswith(SIBLING_FREE_PREFIXES)


def _compile_free(path: str) -> bool:
    from rdu_sim.compiler.view import unread_override  # the simulator, loaded when needed

    return _step_free(path) or unread_override(path)


def sibling_batches(tasks: Sequence[Task], batches_at_least: int) -> list[tuple[Task, ...]]:
    """The tasks in batches one worker evaluates in turn, so what they share is computed
    once per worker (``engine.shared_steps`` and ``compiler.shared_programs`` memoize per
    process), where a pool would hand consecutive siblings to different workers at the same
    time. Step siblings (points differing only in serving knobs, ``SIBLING_FREE_PREFIXES``)
    stay together, and step siblings that differ only in fields the compiler never reads
    (``compiler.view.unread_override``: the links, say) are packed into the same batches.
    Batches hold at most ``MAX_BATCH`` tasks and ``len(tasks) // batches_at_least`` (every
    worker keeps work, a killed worker loses few); a step-sibling group larger than that is
    split. Batching is scheduling only: what is shared is keyed by every input, whichever
    points meet, and the order tasks are handed out in depends on the tasks alone."""
    cap = max(1, min(MAX_BATCH, len(tasks) // max(1, batches_at_least)))
    groups: dict[str, dict[str, list[Task]]] = {}
    for task in tasks:
        overrides = task.point.overrides
        units = groups.setdefault(_fixed(overrides, _compile_free), {})
        units.setdefault(_fixed(overrides, _step_free), []).append(task)
    batches: list[tuple[Task, ...]] = []
    for units in groups.values():
        batch: list[Task] = []
        for unit in units.values():
            if batch and len(batch) + len(unit) > cap:
                batches.append(tuple(batch))
                batch = []
            while len(batch) + len(unit) > cap:
                batches.append(tuple(unit[:cap]))
                unit = unit[cap:]
            batch.extend(unit)
        if batch:
            batches.append(tuple(batch))
    return batches


def lost(task: Task, reason: str) -> Outcome:
    """An Outcome for a task whose worker died or whose result never came back."""
    now = _now()
    return Outcome(
        task.point.key,
        "failed",
        None,
        reason,
        (),
        (),
        simulator().label,
        "unknown",
        0.0,
        now,
        now,
    )
