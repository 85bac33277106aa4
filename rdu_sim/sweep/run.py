"""Drive a sweep: expand the spec, skip what the database already has, run the rest, record.

    summary = run_sweep("workloads/sweeps/llama8b-batch.yaml", workers=2)

The order of work, and why:
1. load and validate the spec; expand and resolve every point (a bad axis fails here, before
   anything runs or any file is written);
2. open the database (default `<spec stem>.sqlite` beside the spec; a shipped spec's in the
   current folder) and plan: a point with a
   'done' row holding every requested metric is skipped; a 'failed' one is skipped unless
   `retry_failed`;
3. claim the points to run (``claims``: one another live process claimed is left to it);
4. run the rest on the chosen executor; the parent writes each Outcome in its own
   transaction as it arrives (ending its claim), so an interrupted sweep resumes where it
   stopped; then wait for the points other processes held, taking over those they leave.

Interrupted (SIGINT, SIGTERM: ``rdu_sim.interrupts``) stops a sweep without losing a finished
point: a row being written is finished first, the executor hands over what its workers
finished (``executors``), and the Interrupted raised again says how many of the spec's points
the database holds (``Interrupted.kept``).
"""

from __future__ import annotations

import difflib
import inspect
import json
import numbers
import os
import sqlite3
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rdu_sim import human, interrupts
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.loader import issues_from_validation
from rdu_sim.config.show import cut_middle
from rdu_sim.report.files import refuse_overwrite
from rdu_sim.report.sweep_table import DOES_NOT_FIT
from rdu_sim.sweep import claims
from rdu_sim.sweep.evaluators import BoundEvaluator, get_evaluator
from rdu_sim.sweep.executors import (
    Cluster,
    SchedulerLost,
    check_cluster,
    connected,
    default_workers,
    run_dask,
    run_pool,
    run_serial,
)
from rdu_sim.sweep.expand import SAMPLE_POINTS, Expansion, Point, expand, grid_size
from rdu_sim.sweep.key import canonical_json, jsonable
from rdu_sim.sweep.progress import Reporter, RichReporter, Silent
from rdu_sim.sweep.spec import LoadedSpec, load_spec
from rdu_sim.sweep.store import Existing, Row, Store, StoreError
from rdu_sim.sweep.worker import Outcome, PointLike, Task, WorkerMismatch, covers

Evaluate = Callable[[Point], Mapping[str, Any]]


@dataclass(frozen=True)
class Plan:
    """Which points of an expansion run now, and which the database already has."""

    expansion: Expansion
    to_run: tuple[Point, ...]
    already_done: int
    failed_before: int  # failed rows skipped (not retried)
    retrying: int  # failed rows rerun because of retry_failed
    stale: int  # done rows missing a requested metric, rerun
    rerun: int = 0  # stored rows run again because of rerun
    other_code: str = ""  # a note on reused rows another build computed (``other_code``)
    elsewhere: tuple[str, ...] = ()  # keys another live process is running (``claims``)
    others: tuple[str, ...] = ()  # those processes, host:pid

    def describe(self) -> str:
        """One line: how many points, how many already done, how many to run."""
        exp = self.expansion
        parts = [f"{exp.spec.name}: {len(exp.points)} points"]
        if exp.sampled:
            resolved = _SAMPLED.format(n=len(exp.points))
            parts = [f"{exp.spec.name}: {exp.grid_size:,} grid points, {resolved}"]
        if exp.duplicates:
            parts.append(f"({exp.duplicates} duplicate grid points resolved to the same config)")
        detail = [f"{'of those, ' if exp.sampled else ''}{self.already_done} already done"]
        if self.failed_before:
            detail.append(f"{self.failed_before} failed before (rerun with --retry-failed)")
        if self.retrying:
            detail.append(f"{self.retrying} failed before, retrying")
        if self.stale:
            detail.append(f"{self.stale} done without a requested metric, rerunning")
        if self.rerun:
            detail.append(f"{self.rerun} stored before, rerunning (--rerun)")
        if self.elsewhere:
            detail.append(
                f"{len(self.elsewhere)} being run by another process "
                f"({', '.join(self.others)}), waited for"
            )
        detail.append(f"{len(self.to_run)} to run")
        line = " ".join(parts) + "; " + ", ".join(detail)
        return f"{line}; {self.other_code}" if self.other_code else line


@dataclass(repr=False)
class SweepSummary:
    """What a sweep run did (its repr a line: the keys and the plan are thousands of
    characters a point)."""

    name: str
    db: Path
    points: int
    already_done: int
    failed_before: int
    ran: int = 0
    done: int = 0
    failed: int = 0
    wall_s: float = 0.0
    keys: tuple[str, ...] = field(default_factory=tuple)
    plan: Plan | None = None
    fits: FitCheck | None = None  # a dry run's early check of the points to run
    elsewhere: int = 0  # points another process ran and stored meanwhile (``claims``)
    failed_elsewhere: int = 0  # of those, failed
    unrun: int = 0  # points the database holds no row of once the sweep ended

    def __repr__(self) -> str:
        return (
            f"SweepSummary(name={self.name!r}, db={str(self.db)!r}, points={self.points}, "
            f"ran={self.ran}, done={self.done}, failed={self.failed}, "
            f"already_done={self.already_done}, wall_s={self.wall_s:.3g})"
        )

    def describe(self) -> str:
        """One line for people; "nothing to run" only when every point has its row."""
        there = ""
        if self.elsewhere:
            failed = f", {self.failed_elsewhere} failed" if self.failed_elsewhere else ""
            there = f"; {self.elsewhere} run by another process meanwhile{failed}"
        if self.unrun:
            there += (
                f"; {human.count(self.unrun, 'point')} not run (no worker handed back "
                "its result): run the same command again"
            )
        if not self.ran and not self.unrun:
            return (
                f"{self.name}: nothing to run; {self.already_done} of {self.points} "
                f"points already done{there} ({self.db})"
            )
        return (
            f"{self.name}: ran {human.count(self.ran, 'point')} in "
            f"{human.duration(self.wall_s)}: {self.done} done, "
            f"{self.failed} failed; {self.already_done} were already done{there} ({self.db})"
        )


FIT_BUDGET_S = 10.0
"""How long a dry run or `check` spends on its points' early checks (``BoundEvaluator.check``:
the simulator's memory plans took 1 to 120 ms a point on the shipped specs, less for points
the compiler sees alike); the points past it are left unchecked, and the output says so."""


@dataclass(frozen=True)
class FitCheck:
    """What a point's early check (``BoundEvaluator.check``) found, for a dry run and
    `check`: each failing point's verdict (``does not fit`` for memory, ``fails`` for the
    rest) and reason (the run's own words), of how many checked in how long."""

    failing: dict[str, tuple[str, str]]  # key -> (verdict, reason)
    checked: int
    total: int
    seconds: float

    def describe(self) -> str:
        """A clause for the plan's line: how many would fail, and what was left unchecked."""
        bad = len(self.failing)
        fits = sum(verdict == DOES_NOT_FIT for verdict, _ in self.failing.values())
        found = [f"{fits} {'does' if fits == 1 else 'do'} not fit in memory"] if fits else []
        if bad - fits:
            found.append(f"{bad - fits} would fail before simulating")
        said = ", ".join(found) or ("all fit" if self.checked > 1 else "it fits")
        if self.checked == self.total:
            return f"memory plans checked: {said}"
        each = human.duration(self.seconds / max(1, self.checked))
        return (
            f"memory plans checked for {self.checked} of {self.total} points in "
            f"{human.duration(self.seconds)} (about {each} a point; the rest are not "
            f"checked): {said}"
        )


def check_fits(points: Sequence[Point], evaluate: Evaluate) -> FitCheck | None:
    """Run the evaluator's early check (``BoundEvaluator.check``) on ``points`` in turn for
    at most ``FIT_BUDGET_S``, sharing what points the compiler sees alike share (as a
    sweep's worker does); None for an evaluator without one."""
    if not isinstance(evaluate, BoundEvaluator) or evaluate.checker is None:
        return None
    from rdu_sim.api import share_steps  # the simulator, only when it checks
    from rdu_sim.compiler import CapacityError
    from rdu_sim.input_errors import InputError

    failing: dict[str, tuple[str, str]] = {}
    checked = 0
    start = time.perf_counter()
    with share_steps():
        for point in points:
            if checked and time.perf_counter() - start > FIT_BUDGET_S:
                break  # at least one is checked: the header says how long one takes
            try:
                evaluate.check(point)
            except InputError as exc:
                verdict = DOES_NOT_FIT if isinstance(exc, CapacityError) else "fails"
                failing[point.key] = (verdict, str(exc))
            checked += 1
    return FitCheck(failing, checked, len(points), time.perf_counter() - start)


@dataclass(frozen=True)
class SpecCheck:
    """What `check_spec` found: a valid spec, its resolved points, and what their early
    check found (``check_fits``)."""

    expansion: Expansion
    fits: FitCheck | None = None

    def __str__(self) -> str:
        exp = self.expansion
        axes = ", ".join(exp.axes) or "no axes"
        count = f"{len(exp.points)} points"
        if exp.sampled:
            count = f"{exp.grid_size:,} grid points, {_SAMPLED.format(n=len(exp.points))},"
        line = f"{exp.spec.name!r}: {count} over {axes} (base {exp.spec.base.name})"
        if self.fits is None:
            return line
        line += f"; {self.fits.describe()}"
        by_key = {p.key: p for p in exp.points}
        for key, (verdict, reason) in list(self.fits.failing.items())[:1]:
            line += f" (first: {by_key[key].describe()}: {verdict}: {reason})"
        return line


_SAMPLED = "{n:,} of them resolved (evenly spaced: a run resolves every point first)"


def default_db(spec_file: Path) -> Path:
    """`<spec stem>.sqlite` beside the spec; a shipped spec's in the current folder
    (``config.shipped.beside``)."""
    return shipped.beside(spec_file, ".sqlite")


def bind_evaluator(loaded: LoadedSpec) -> BoundEvaluator:
    """The spec's evaluator with its options validated and the spec's metrics checked
    against the names its result can hold (``Evaluator.result``): ConfigError at the
    spec's lines (one issue per metric not in the results), before anything runs."""
    spec = loaded.spec.evaluator
    try:
        entry = get_evaluator(spec.name)
    except KeyError as exc:
        raise loaded.error(str(exc.args[0]), "evaluator", "name") from None
    if entry.result is not None and loaded.spec.metrics:
        schema = entry.result()
        problems = [(i, schema.problem(m)) for i, m in enumerate(loaded.spec.metrics)]
        issues = [loaded.issue(p, "metrics", str(i)) for i, p in problems if p is not None]
        if issues:
            raise ConfigError(issues)
    try:
        options = entry.options.model_validate(spec.options)
    except ValidationError as exc:
        raise ConfigError(
            issues_from_validation(
                exc, entry.options, str(loaded.file), loaded.lines, ("evaluator", "options")
            )
        ) from None
    return BoundEvaluator(entry.function, options, entry.check)


def check_spec(path: str | Path) -> SpecCheck:
    """Validate a spec and resolve all its points without running anything.

    Raises ConfigError naming the spec file, field and line. Used by `rdu-sim check`.
    """
    loaded = load_spec(path)
    evaluate = bind_evaluator(loaded)
    expansion = expand(loaded, sample=SAMPLE_POINTS)  # a huge grid is counted, not listed
    check_traces(expansion)
    return SpecCheck(expansion, check_fits(expansion.points, evaluate))


def check_traces(expansion: Expansion) -> None:
    """Read each request trace the points use (the rows a run would read) once, so a bad
    trace is a ConfigError before anything runs, not a failure of every point."""
    from rdu_sim.serving.requests import trace_experts  # the serving package, when needed
    from rdu_sim.serving.traces import read_trace

    seen: set[tuple[Path, int, str, int | None]] = set()
    for point in expansion.points:
        serving = point.scenario.workload.serving
        if serving.trace is None:
            continue
        path = shipped.trace_path(point.scenario.base_dir, serving.trace)
        experts = trace_experts(point.scenario.workload.coe)
        wanted = (path, serving.requests, serving.trace_format, experts)
        if wanted not in seen:
            seen.add(wanted)
            read_trace(
                path,
                point.scenario.workload_file,
                serving.requests,
                serving.trace_format,
                point.scenario.overrides,
                experts,
            )


def check_writes(expansion: Expansion, db: Path, writes: Sequence[tuple[str, Path]]) -> None:
    """Refuse, before anything runs, a file the caller writes after the sweep (`--export`)
    that is one of the sweep's inputs: its database (``--db r.csv --export r.csv`` replaced
    every stored row), its spec, or a point's workload, hardware, stack or request trace
    (``--export chat.csv`` over the trace the points replay)."""
    if not writes:
        return
    from rdu_sim.provenance import input_files  # the simulator's modules, only when asked

    inputs: dict[Path, None] = {db: None, Path(expansion.spec.file): None}
    for point in expansion.points:
        inputs.update(dict.fromkeys(input_files(point.scenario)))
    refuse_overwrite(writes, inputs, "the sweep")


def full_names(loaded: LoadedSpec) -> frozenset[str]:
    """The names every whole result of the spec's evaluator holds (its result schema's
    top-level leaves: ``model``, ``batch_slots``, ...; a section may be absent from a
    result, a leaf never is), empty for an evaluator without a schema. A spec without a
    ``metrics:`` list asks for every metric, and a stored row lacking one of these was
    stored by a spec that kept only some (``plan``)."""
    entry = get_evaluator(loaded.spec.evaluator.name)
    if entry.result is None:
        return frozenset()
    return frozenset(name for name, below in entry.result().names.items() if below is None)


def plan(
    expansion: Expansion,
    existing: Mapping[str, Existing],
    *,
    retry_failed: bool,
    rerun: bool = False,
    full: frozenset[str] = frozenset(),
) -> Plan:
    """Decide which points run, from what the database holds (``rerun``: every point). A
    done row is reused when it holds every metric the spec lists, or with no list every
    name a whole result holds (``full``: ``full_names``), so a row another spec stored with
    a few metrics is run again, not exported with blank cells."""
    metrics = set(expansion.spec.spec.metrics or full)
    to_run: list[Point] = []
    done = failed_before = retrying = stale = reran = 0
    for point in expansion.points:
        row = existing.get(point.key)
        if row is None:
            to_run.append(point)
        elif rerun:
            reran += 1
            to_run.append(point)
        elif row.status == "done":
            covered = all(any(covers(m, k) for k in row.metric_keys) for m in metrics)
            if covered:
                done += 1
            else:
                stale += 1
                to_run.append(point)
        elif retry_failed:
            retrying += 1
            to_run.append(point)
        else:
            failed_before += 1
    running = {point.key for point in to_run}
    note = other_code(existing, [p.key for p in expansion.points if p.key not in running])
    return Plan(expansion, tuple(to_run), done, failed_before, retrying, stale, reran, note)


def other_code(existing: Mapping[str, Existing], reused: Sequence[str]) -> str:
    """A note when done rows about to be reused (``reused``: keys) were computed by another
    build of the simulator than this one ('' when none were): a point's key names the
    simulator's version, not its commit, so rows stored before a change within one version
    are reused as they are."""
    from rdu_sim.provenance import simulator

    here = simulator().label
    others = [
        existing[k].version
        for k in reused
        if k in existing and existing[k].status == "done" and existing[k].version not in ("", here)
    ]
    builds = sorted(set(others))
    count = len(others)
    if not count:
        return ""
    shown = ", ".join(builds[:2]) + (f" and {len(builds) - 2} more" if len(builds) > 2 else "")
    return (
        f"{human.count(count, 'stored row')} reused from another build ({shown}; this is "
        f"{here}): --rerun computes them again"
    )


def _axis_values(point: PointLike) -> str:
    """A point's axis values as a row stores them: JSON in the spec's order (load()'s
    columns)."""
    return json.dumps(jsonable(point.overrides))


def _row(outcome: Outcome, point: PointLike, sweep: str) -> Row:
    return Row(
        key=outcome.key,
        sweep=sweep,
        overrides=_axis_values(point),
        config=canonical_json(point.config),
        metrics=None if outcome.metrics is None else json.dumps(outcome.metrics),  # spec order
        status=outcome.status,
        error=outcome.error,
        version=outcome.version,
        worker=outcome.worker,
        wall_s=outcome.wall_s,
        started=outcome.started,
        finished=outcome.finished,
    )


def _missing_metrics_error(loaded: LoadedSpec, outcome: Outcome) -> ConfigError:
    metrics = loaded.spec.metrics or []
    first = metrics.index(outcome.missing[0]) if outcome.missing[0] in metrics else 0
    shown = ", ".join(outcome.available[:60])
    more = f" and {len(outcome.available) - 60} more" if len(outcome.available) > 60 else ""
    close = difflib.get_close_matches(outcome.missing[0], outcome.available, n=1)
    meant = f" (did you mean {close[0]!r}?)" if close else ""
    return loaded.error(
        f"not in the results: {', '.join(outcome.missing)}{meant}; the sweep stopped (the "
        f"point computed is stored without it). Available metrics: {shown}{more}",
        "metrics",
        str(first),
    )


def _executor(tasks: Sequence[Task], workers: int, cluster: Cluster | None) -> Iterator[Outcome]:
    if cluster is not None:
        return run_dask(tasks, cluster, workers)
    if workers <= 1 or len(tasks) <= 1:
        return run_serial(tasks)
    return run_pool(tasks, min(workers, len(tasks)))


def run_sweep(
    spec: str | Path,
    *,
    db: str | Path | None = None,
    workers: int | None = None,
    cluster: str | None = None,
    retry_failed: bool = False,
    rerun: bool = False,
    dry_run: bool = False,
    progress: bool | Reporter = False,
    evaluator: Evaluate | None = None,
    writes: Sequence[tuple[str, Path]] = (),
) -> SweepSummary:
    """Run (or resume) the sweep in `spec`; return what it did.

    `workers`: processes (default: the core count; 1 runs in this process). `cluster`:
    'local' or a Dask scheduler address `tcp://host:port`. `rerun` runs every point again,
    replacing its row (keys already change with the simulator's version; this is for a code
    change within one version). `evaluator` replaces the spec's
    (a module-level function of a Point, so it pickles); `progress=True` draws a bar on
    stderr. Raises ConfigError for a bad spec or metric before anything runs (a metric the
    evaluator's result schema does not have), or for a metric only a run can refuse (a
    memory tier) at the first result, which is stored first.
    `writes`: the files (option, path) the caller writes after the sweep, refused before
    anything runs when one is an input (``check_writes``).
    Call it under `if __name__ == "__main__":` in scripts: worker processes re-import the
    main module.
    """
    if not isinstance(spec, str | os.PathLike):  # (pathlib's TypeError named nothing)
        raise TypeError(
            f"spec must be a sweep spec file's path (str or Path) or a shipped sweep's name, "
            f"not {type(spec).__name__} {cut_middle(repr(spec))} (write a mapping to a file)"
        )
    _check_run_arguments(workers, progress)
    with interrupts.handled():  # from Python too, a stop keeps every finished point
        return _run_sweep(
            spec, db, workers, cluster, retry_failed, rerun, dry_run, progress, evaluator, writes
        )


def _check_run_arguments(workers: object, progress: object) -> None:
    """``workers`` None or a whole number at least 1, as ``--workers`` (``0`` read as "the
    default" and ``-1`` as one, a float failed inside multiprocessing), and ``progress`` a
    bool or a Reporter (a callable ``progress(done, total)``, what ``api.run`` takes, failed
    with an AttributeError): checked before the spec loads, each error naming its argument."""
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, numbers.Integral):
            raise TypeError(
                f"workers must be an integer or None, not {type(workers).__name__} "
                f"{cut_middle(repr(workers))}"
            )
        if workers < 1:
            raise ValueError(f"workers must be at least 1 (got {workers}), or None for the default")
    if isinstance(progress, bool):
        return
    missing = [name for name in _REPORTER_METHODS if not callable(getattr(progress, name, None))]
    if missing:
        raise TypeError(
            f"progress must be True, False or a Reporter (rdu_sim.sweep.progress: "
            f"{', '.join(_REPORTER_METHODS)}), not {type(progress).__name__} "
            f"{cut_middle(repr(progress))}, which has no {', '.join(missing)}"
        )


_REPORTER_METHODS = ("message", "start", "advance", "close")
"""What a :class:`Reporter` is called with (``progress.Reporter``)."""


def _run_sweep(
    spec: str | Path,
    db: str | Path | None,
    workers: int | None,
    cluster: str | None,
    retry_failed: bool,
    rerun: bool,
    dry_run: bool,
    progress: bool | Reporter,
    evaluator: Evaluate | None,
    writes: Sequence[tuple[str, Path]],
) -> SweepSummary:
    db_path: Path | None = None  # once known: where a stop says the finished points are
    try:
        if cluster is not None:
            check_cluster(cluster)  # no Dask, or a bad address: an error before any work
        loaded = load_spec(spec)
        evaluate: Evaluate = evaluator if evaluator is not None else bind_evaluator(loaded)
        reporter: Reporter = (
            progress if not isinstance(progress, bool) else RichReporter() if progress else Silent()
        )
        total = grid_size(loaded)
        if total > SAMPLE_POINTS and not dry_run:  # about 1 ms a point: say so before it starts
            reporter.message(
                f"{loaded.name}: resolving {total:,} grid points before the first runs"
            )
        expansion = expand(loaded, sample=SAMPLE_POINTS if dry_run else None)
        check_traces(expansion)
        db_path = Path(db) if db is not None else default_db(loaded.file)
        check_writes(expansion, db_path, writes)
        keys = tuple(p.key for p in expansion.points)
        # with no metrics list, a reused row must hold a whole result (the spec's own
        # evaluator's names: another evaluator's are not known)
        full = full_names(loaded) if evaluator is None and not loaded.spec.metrics else frozenset()

        if dry_run:
            existing = _peek(db_path, keys, reporter.message)
            the_plan = plan(expansion, existing, retry_failed=retry_failed, rerun=rerun, full=full)
            fits = check_fits(the_plan.to_run, evaluate) if the_plan.to_run else None
            line = the_plan.describe() + (f"; {fits.describe()}" if fits is not None else "")
            reporter.message(line + " (dry run: nothing runs)")
            return _summary(loaded.name, db_path, keys, the_plan, fits)

        with (
            connected(cluster, workers or default_workers()) as dask,  # reached first
            Store(db_path, waiting=reporter.message) as store,  # a lock's wait is said
        ):
            # what reading this sweep back returns: its points, with their axis values
            store.set_members(loaded.name, [(p.key, _axis_values(p)) for p in expansion.points])
            owner = claims.me()
            with _claiming(store, owner):
                the_plan = _claimed_plan(store, owner, expansion, retry_failed, rerun, full)
                reporter.message(the_plan.describe())
                summary = _summary(loaded.name, db_path, keys, the_plan)
                metrics = tuple(loaded.spec.metrics) if loaded.spec.metrics else None

                def run(points: Sequence[Point]) -> None:
                    tasks = [Task(point, evaluate, metrics) for point in points]
                    by_key = {p.key: p for p in points}
                    if tasks:
                        count = workers or default_workers()
                        _execute(
                            store, owner, tasks, by_key, loaded, summary, reporter, count, dask
                        )

                start = time.perf_counter()
                try:
                    run(the_plan.to_run)
                    if the_plan.elsewhere:
                        _take_over(store, owner, expansion, the_plan, summary, reporter, run, full)
                except interrupts.Interrupted as stop:
                    raise interrupts.Interrupted(
                        stop.signum, _kept(store, keys, summary.ran, "point", rerun)
                    ) from None
                except SchedulerLost as lost:
                    kept = _kept(store, keys, summary.ran, "point", rerun)
                    raise SchedulerLost(f"{lost}: {kept}") from None
                summary.wall_s = time.perf_counter() - start
                summary.unrun = len(set(keys)) - len(store.existing(keys))
            _refresh_view(store, expansion)
        return summary
    except interrupts.Interrupted as stop:  # before the points ran, or after: no count
        if stop.kept:
            raise
        raise interrupts.Interrupted(stop.signum, stopped_early(db_path, rerun)) from None


def _summary(
    name: str, db: Path, keys: tuple[str, ...], the_plan: Plan, fits: FitCheck | None = None
) -> SweepSummary:
    """The summary a sweep starts from: its plan's counts, nothing run yet."""
    return SweepSummary(
        name,
        db,
        len(keys),
        the_plan.already_done,
        the_plan.failed_before,
        keys=keys,
        plan=the_plan,
        fits=fits,
    )


@contextmanager
def _claiming(store: Store, owner: claims.Owner) -> Iterator[None]:
    """``owner``'s claims given back however the block ends: what it did not store, so
    another process may take it at once (after the database failed, a lock held past the
    wait, only if it is free now)."""
    try:
        yield
    except StoreError:
        _give_back(store, owner, wait=False)
        raise
    except BaseException:
        _give_back(store, owner)
        raise
    _give_back(store, owner)


def _give_back(store: Store, owner: claims.Owner, *, wait: bool = True) -> None:
    """Release what ``owner`` did not store, so another process may take it at once."""
    with suppress(StoreError, sqlite3.Error):
        store.release(owner, wait=wait)


def _claimed_plan(
    store: Store,
    owner: claims.Owner,
    expansion: Expansion,
    retry_failed: bool,
    rerun: bool,
    full: frozenset[str] = frozenset(),
) -> Plan:
    """The plan, its points to run claimed for ``owner`` (``claims``): those a live other
    process holds are left to it (``Plan.elsewhere``). The rows are read again once the
    points are claimed, so a point another process stored since the first reading (and so
    no longer claimed) is not run again."""
    keys = [p.key for p in expansion.points]
    first = plan(expansion, store.existing(keys), retry_failed=retry_failed, rerun=rerun, full=full)
    if not first.to_run:
        return first
    held = store.claim([p.key for p in first.to_run], owner, claims.alive)
    again = plan(expansion, store.existing(keys), retry_failed=retry_failed, rerun=rerun, full=full)
    mine = tuple(p for p in again.to_run if p.key not in held)
    store.release(owner, {p.key for p in first.to_run} - set(held) - {p.key for p in mine})
    # a point its owner stored since the claim is done, not elsewhere: counted once
    elsewhere = tuple(p.key for p in again.to_run if p.key in held)
    others = sorted({held[key].label for key in elsewhere})
    return replace(again, to_run=mine, elsewhere=elsewhere, others=tuple(others))


def _take_over(
    store: Store,
    owner: claims.Owner,
    expansion: Expansion,
    the_plan: Plan,
    summary: SweepSummary,
    reporter: Reporter,
    run: Callable[[Sequence[Point]], None],
    full: frozenset[str] = frozenset(),
) -> None:
    """Once this sweep's own points are stored: wait for the points other processes held
    (``Plan.elsewhere``), running here each one whose owner died or gave it back without
    storing its row (a failed row counts as stored: ``--retry-failed`` reruns it)."""

    def run_taken(taken: set[str]) -> set[str]:
        existing = store.existing(sorted(taken))
        points = tuple(p for p in expansion.points if p.key in taken)  # grid order
        need = plan(
            replace(expansion, points=points), existing, retry_failed=False, full=full
        ).to_run
        store.release(owner, taken - {p.key for p in need})
        run(need)
        return {p.key for p in need}

    ran_here = _wait_for_others(store, owner, set(the_plan.elsewhere), run_taken, reporter)
    others = [k for k in the_plan.elsewhere if k not in ran_here]
    rows = store.existing(others)
    summary.elsewhere = sum(k in rows for k in others)
    summary.failed_elsewhere = sum(rows[k].status == "failed" for k in others if k in rows)


def _wait_for_others(
    store: Store,
    owner: claims.Owner,
    pending: set[str],
    run_taken: Callable[[set[str]], set[str]],
    reporter: Reporter,
) -> set[str]:
    """Wait for the points (``pending``: keys) other live processes hold, claiming each one
    as its owner dies or gives it back; ``run_taken`` runs those of them not stored and
    returns their keys. Returns every key run here."""
    said = False
    ran_here: set[str] = set()
    while pending:
        held = store.claim(pending, owner, claims.alive)
        taken = pending - set(held)
        if taken:
            ran_here |= run_taken(taken)
        pending = set(held)
        if pending:
            if not said:
                who = ", ".join(sorted({o.label for o in held.values()}))
                reporter.message(
                    f"waiting for {human.count(len(pending), 'point')} another process "
                    f"({who}) is running in {store.path}; taken over here if it stops"
                )
                said = True
            store.refresh(owner)
            time.sleep(claims.POLL_S)
    return ran_here


def _execute(
    store: Store,
    owner: claims.Owner,
    tasks: list[Task],
    by_key: Mapping[str, Point],
    loaded: LoadedSpec,
    summary: SweepSummary,
    reporter: Reporter,
    workers: int,
    cluster: Cluster | None,
) -> None:
    """Run the tasks, writing each outcome as it arrives. A metric the first result lacks
    stops the sweep when only a run could tell it exists; one the result's fields declare
    (a key the run's JSON holds only where it applies) is null, at every point alike."""
    checked = False
    declared = _declared(loaded)

    def record(outcome: Outcome) -> None:
        nonlocal checked
        if outcome.status == "done" and not checked:
            unknown = tuple(m for m in outcome.missing if not declared(m))
            if unknown:  # a name only a run could refuse: keep the point, then stop
                store_row(outcome)  # without the missing names, so a rerun computes them
                raise _missing_metrics_error(loaded, replace(outcome, missing=unknown))
            checked = True
        if outcome.status == "done" and outcome.missing:  # others had it: record null
            outcome = _null_missing(outcome)
        store_row(outcome)

    def store_row(outcome: Outcome) -> None:
        try:
            store.record(_row(outcome, by_key[outcome.key], loaded.name), owner)
        except StoreError as exc:  # the rows stored so far stay: a rerun resumes
            note = (
                f" ({summary.ran} of the {len(tasks)} points run now were stored "
                "before it; they are kept, and a rerun resumes after them)"
            )
            raise StoreError([replace(i, message=i.message + note) for i in exc.issues]) from None
        summary.ran += 1
        summary.done += outcome.status == "done"
        summary.failed += outcome.status == "failed"

    with closing(_outcomes(loaded.name, tasks, reporter, workers, cluster)) as outcomes:
        _record_each(outcomes, record)


def _record_each(
    outcomes: Generator[Outcome, None, None], record: Callable[[Outcome], None]
) -> None:
    """``record`` each outcome as it arrives, each whole (``interrupts.deferred``). An
    Interrupted raised as one was recorded is thrown into the executor, which then yields
    what its workers finished (recorded too) and raises it again (``executors``)."""
    try:
        for outcome in outcomes:
            with interrupts.deferred():
                record(outcome)
            interrupts.raise_lost()  # a stop a library swallowed: here, not after every point
    except interrupts.Interrupted as stop:
        if inspect.getgeneratorstate(outcomes) != inspect.GEN_SUSPENDED:
            raise  # the executor raised it, having handed over what it had
        try:
            outcome = outcomes.throw(stop)
            while True:
                with interrupts.deferred():
                    record(outcome)
                outcome = next(outcomes)
        except (StopIteration, interrupts.Interrupted):
            pass  # handed over (or a second interrupt: stop waiting for the rest)
        raise stop from None


def _kept(
    store: Store, keys: Sequence[str] | None, ran: int, noun: str, rerun: bool = False
) -> str:
    """What an interrupted run kept, in words: how many of ``keys`` the database holds (and
    ``ran``, how many of them finished now), or with no ``keys`` how many rows it holds; and
    how to resume (``rerun``: not by the same command, which would start over)."""
    try:
        saved = len(store.existing(keys))
    except interrupts.Interrupted:  # a second signal: say what is known without the database
        return f"{human.count(ran, noun)} finished now are saved in {store.path}"
    if keys is None:
        held = f"{human.count(saved, noun)} are saved in {store.path}"
    else:
        held = f"{saved} of {human.count(len(keys), noun)} are saved in {store.path} ({ran} "
        held += "finished now)"
    return held + resume_hint(rerun)


def resume_hint(rerun: bool) -> str:
    """How a stopped sweep or plan resumes (``rerun``: not by the same command, which would
    start over)."""
    if rerun:
        return "; run the same command without --rerun to resume (with it, it starts over)"
    return "; run the same command again to resume"


def stopped_early(db: Path | None, rerun: bool, noun: str = "points") -> str:
    """What a sweep or plan stopped outside its points' runs kept (while it resolved its
    points or opened its database, between two rounds, as it ended): the rows its database
    holds, or nothing when it has none."""
    if db is None or not db.is_file():
        return "nothing was run or written yet"
    return f"the {noun} finished so far are saved in {db}" + resume_hint(rerun)


def _outcomes(
    name: str, tasks: Sequence[Task], reporter: Reporter, workers: int, cluster: Cluster | None
) -> Generator[Outcome, None, None]:
    """The tasks' outcomes as they arrive, reported; the executor is closed (what it queued
    cancelled, what it started shut down) however the caller stops."""
    reporter.start(name, len(tasks))
    outcomes = _executor(tasks, workers, cluster)
    try:
        for outcome in outcomes:
            if outcome.refused:  # every point on that worker would be wrong: stop here
                raise WorkerMismatch(outcome.error or "")
            yield outcome
            reporter.advance(outcome)
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()
        reporter.close()


def evaluate_points(
    name: str,
    points: Sequence[PointLike],
    evaluate: Callable[[Any], Mapping[str, Any]],
    db: str | Path,
    *,
    workers: int = 1,
    cluster: str | None = None,
    retry_failed: bool = False,
    reporter: Reporter | None = None,
    rerun: bool = False,
) -> dict[str, dict[str, Any]]:
    """Evaluate points through the sweep machinery, for a search that picks its next points
    from the results (``rdu_sim.plan``): points the database already holds are not rerun
    (failed ones only with ``retry_failed``; every one with ``rerun``), the rest are claimed
    (``claims``: a point another live process holds is waited for, and run here only if
    that process stops without storing it) and run on the chosen executor (``workers``
    processes, 1 = here, or Dask ``cluster``), each row written as it arrives. Returns
    every point's decoded row by key (``store.decode``: status, metrics, error, ...)."""
    keys = [p.key for p in points]
    report = reporter or Silent()
    unique = {p.key: p for p in points}
    with (
        interrupts.handled(),
        connected(cluster, workers) as dask,
        Store(Path(db), waiting=report.message) as store,
    ):

        def unstored(candidates: Sequence[str], *, again: bool) -> list[str]:
            """Which of ``candidates`` (keys) still need a run: with ``again``, by this
            call's rules (``rerun``, ``retry_failed``); else only those not stored."""
            existing = store.existing(candidates)
            if not again:
                return [k for k in candidates if k not in existing]
            return [
                k
                for k in candidates
                if rerun or k not in existing or (retry_failed and existing[k].status == "failed")
            ]

        first = unstored(list(unique), again=True)
        note = other_code(store.existing(keys), [k for k in unique if k not in set(first)])
        if note:
            report.message(note)
        owner = claims.me()
        ran = 0

        def run(run_keys: Sequence[str]) -> None:
            nonlocal ran
            if not run_keys:
                return
            by_key = {k: unique[k] for k in run_keys}
            tasks = [Task(point, evaluate, None) for point in by_key.values()]

            def record(outcome: Outcome) -> None:
                nonlocal ran
                store.record(_row(outcome, by_key[outcome.key], name), owner)
                ran += 1

            with closing(_outcomes(name, tasks, report, workers, dask)) as outcomes:
                _record_each(outcomes, record)

        def run_taken(taken: set[str]) -> set[str]:
            need = unstored([k for k in unique if k in taken], again=False)
            store.release(owner, taken - set(need))
            run(need)
            return set(need)

        with _claiming(store, owner):
            try:
                if first:
                    held = store.claim(first, owner, claims.alive)
                    # read again once claimed: a point stored meanwhile (no longer claimed)
                    mine = [k for k in unstored(first, again=True) if k not in held]
                    store.release(owner, set(first) - set(held) - set(mine))
                    run(mine)
                    _wait_for_others(store, owner, set(held), run_taken, report)
            except interrupts.Interrupted as stop:
                kept = _kept(store, None, ran, "evaluation", rerun)
                raise interrupts.Interrupted(stop.signum, kept) from None
            except SchedulerLost as lost:
                raise SchedulerLost(f"{lost}: {_kept(store, None, ran, 'evaluation')}") from None
        return {row["key"]: row for row in store.rows(keys=keys)}


def _declared(loaded: LoadedSpec) -> Callable[[str], bool]:
    """Whether the spec's evaluator's result declares a metric by name
    (``Schema.declares``); nothing is, for an evaluator without a schema."""
    entry = get_evaluator(loaded.spec.evaluator.name)
    if entry.result is None:
        return lambda metric: False
    return entry.result().declares


def _null_missing(outcome: Outcome) -> Outcome:
    """A metric the first result had but this one lacks (a tier not used, say), or one the
    result declares but this run leaves out, is null."""
    metrics = dict(outcome.metrics or {})
    metrics.update(dict.fromkeys(outcome.missing))
    return replace(outcome, metrics=metrics, missing=())


def _peek(
    db_path: Path, keys: Sequence[str], waiting: Callable[[str], None]
) -> dict[str, Existing]:
    """What an existing database holds, without creating one (for --dry-run)."""
    if not db_path.is_file():
        return {}
    with Store(db_path, create=False, waiting=waiting) as store:
        return store.existing(keys)


def _refresh_view(store: Store, expansion: Expansion) -> None:
    """Rebuild results_flat with this spec's axes and the metric names stored for it."""
    names: list[str] = []
    seen: set[str] = set()
    for row in store.rows(keys=[p.key for p in expansion.points]):
        if row["metrics"]:
            for name in row["metrics"]:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
    store.make_view(expansion.axes, names)
