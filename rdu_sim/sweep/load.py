"""Read sweep results back: `load(db)` gives a pandas DataFrame; `export` writes CSV/Parquet.

One row per point: key, sweep, status, the axis values (one column per axis path, as the
spec gave them), the metrics (one column per dotted metric path), then error, timings,
version and worker; ``frame.attrs["axes"]`` lists the axis columns. An axis or metric named
like one of these bookkeeping columns (a metric ``version``) is ``overrides.NAME`` or
``metrics.NAME`` instead (``store.flat_name``), so no name means two things. Failed points have
empty metric columns and their error text. A sweep's rows are the points of its spec as last
run, with its axis values (``Store.set_members``: not the rows an earlier version of the
spec left, and with the rows another sweep ran), in its grid order; else rows are by sweep
and key.
``frame.attrs`` also names the workload, model and hardware the points ran (from each row's
resolved config), for figure titles, and says how many points the spec has and how many
are stored (``spec_points``, ``stored_points``: an interrupted sweep holds fewer).

An export holds the results only: the provenance of each run (when, where and how long it
ran, how often) differs between two runs of the same points, so it is left out unless
asked for, and the same rows export to the same bytes whether they ran serially, in a
pool or on Dask.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdu_sim import extras
from rdu_sim.config.errors import ConfigError, WriteError
from rdu_sim.config.show import cut_middle
from rdu_sim.report.files import unwritable_problem, write_file
from rdu_sim.report.sweep_companions import companions
from rdu_sim.sweep.store import Store, StoreError, flat_name
from rdu_sim.sweep.worker import covers

if TYPE_CHECKING:
    import pandas as pd

_LEADING = ("key", "sweep", "status")
_TRAILING = ("error", "wall_s", "started", "finished", "attempts", "version", "worker")
PROVENANCE = ("wall_s", "started", "finished", "attempts", "worker")
"""Columns that describe one run of a point, not its result (left out of exports)."""


def sweep_names(db: str | Path) -> list[str]:
    """The sweeps whose points `db` holds (a database may hold several)."""
    with Store(Path(db), create=False) as store:
        return store.sweeps()


def load(
    db: str | Path,
    *,
    sweep: str | None = None,
    keys: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The results in `db` as a DataFrame: `keys`' rows (with `sweep`, each of its points
    with its name and axis values, whichever spec stored it), or `sweep`'s points (its spec's
    latest, in its grid order), or, given neither, the one sweep's the database holds (every
    row when it holds several). `metrics` (a spec's list) keeps only those metric columns,
    in its order, each with the names stored below it: a row another spec stored with more
    metrics adds none, so an export's columns do not depend on what else the database
    holds; a throughput brings what bound it after them (``report.sweep_companions``,
    where the rows hold it); None keeps every metric the rows hold.

    Arguments are checked before anything is read (a notebook's typo is an error, not an
    empty frame): ``db`` not a path, or ``keys``/``metrics`` one str (read a character at a
    time, no column matched), is a TypeError naming it; a ``sweep`` the database holds no
    point of (given without ``keys``) a StoreError naming the file and the sweeps it holds,
    as ``rdu-sim plot sweep --sweep`` says; a metric no row holds and no evaluator's result
    can hold a ValueError naming the closest name."""
    import pandas as pd  # here, not at import: workers and `rdu-sim check` do not need it

    _check_load_arguments(db, sweep, keys, metrics)
    with Store(Path(db), create=False) as store:
        if sweep is None and keys is None:
            held = store.sweeps()
            sweep = held[0] if len(held) == 1 else None
        elif sweep is not None and keys is None and sweep not in (held := store.sweeps()):
            shown = ", ".join(held) if held else "none"
            raise StoreError.single(str(db), "sweep", f"no sweep {sweep!r} here; it holds {shown}")
        rows = store.rows(keys=keys, sweep=sweep)
        planned = store.members(sweep) if sweep is not None and keys is None else None
    axes: dict[str, None] = {}
    found: dict[str, None] = {}
    rank: dict[str, int] = {}  # metric column -> its metric's place in `metrics`
    kinds: dict[str, set[bool]] = {}  # column -> whether each value held is an integer
    names: dict[str, dict[Any, None]] = {part: {} for part in (*SUBJECT, *CONFIG_FIELDS)}
    records: list[dict[str, Any]] = []
    stored_metrics: set[str] = set()  # every stored metric's name, over the rows
    for row in rows:
        stored_metrics.update(row["metrics"] or {})
        overrides = {flat_name(k, "overrides"): v for k, v in row["overrides"].items()}
        kept = _wanted(row["metrics"] or {}, metrics)  # stored name -> (rank, value)
        values = {flat_name(k, "metrics"): v for k, (_, v) in kept.items()}
        rank.update({flat_name(k, "metrics"): r for k, (r, _) in kept.items()})
        _subject(row["config"], names)
        axes.update(dict.fromkeys(overrides))
        found.update(dict.fromkeys(values))
        record = {name: row[name] for name in (*_LEADING, *_TRAILING)}
        record.update(overrides)
        for name, value in values.items():
            record.setdefault(name, value)
        for name, value in (*overrides.items(), *values.items()):
            if value is not None:
                kinds.setdefault(name, set()).add(
                    isinstance(value, int) and not isinstance(value, bool)
                )
        records.append(record)
    _refuse_unknown_metrics(metrics, stored_metrics)
    ordered = sorted(found, key=rank.__getitem__)  # stable: first seen within a metric
    columns = [*_LEADING, *axes, *(m for m in ordered if m not in axes), *_TRAILING]
    frame = pd.DataFrame.from_records(records, columns=columns)
    frame.attrs["axes"] = list(axes)  # which columns the spec varied (plots go along them)
    # columns of whole numbers only: a failed point's empty cell makes pandas store them as
    # floats, which an export writes back as integers (``export``)
    frame.attrs["integers"] = [c for c in columns if kinds.get(c) == {True}]
    for part, seen in names.items():  # what was simulated, for titles: each name once
        frame.attrs[part] = list(seen)
    _spec_points(frame, planned)
    return frame


def _check_load_arguments(db: object, sweep: object, keys: object, metrics: object) -> None:
    """:func:`load`'s arguments of the wrong type, each a TypeError naming it."""
    if not isinstance(db, str | os.PathLike):  # (pathlib's TypeError named nothing)
        raise TypeError(
            f"db must be a sweep database's path (str or Path), not {type(db).__name__} "
            f"{cut_middle(repr(db))}"
        )
    if sweep is not None and not isinstance(sweep, str):
        raise TypeError(f"sweep must be a sweep's name or None, not {type(sweep).__name__}")
    for name, given in (("keys", keys), ("metrics", metrics)):
        if isinstance(given, str | bytes):
            raise TypeError(
                f"{name} must be a list of names or None, not one str {cut_middle(repr(given))}"
                f" (give [{given!r}])"
            )


def _refuse_unknown_metrics(metrics: Sequence[str] | None, held: set[str]) -> None:
    """A metric no stored row holds and no evaluator's result can hold (each registered
    one's schema refuses it) is a ValueError in the words a spec's metrics are refused in
    (``did you mean``), not a frame silently without it. Unchecked while an evaluator
    knows its names only from a result (no schema)."""
    from rdu_sim.sweep.evaluators import evaluator_names, get_evaluator

    unheld = [m for m in metrics or () if not any(covers(m, name) for name in held)]
    if not unheld:  # (the usual case: no schema is built)
        return
    entries = [get_evaluator(name) for name in evaluator_names()]
    schemas = [entry.result() for entry in entries if entry.result is not None]
    if len(schemas) < len(entries):
        return
    problems = []
    for metric in unheld:
        words = [schema.problem(metric) for schema in schemas]
        if all(word is not None for word in words):
            problems.append(str(words[0]))
    if problems:
        raise ValueError(f"metrics: {'; '.join(problems)}")


def _spec_points(frame: pd.DataFrame, planned: dict[str, str] | None) -> None:
    """Say in ``frame.attrs`` how many points the sweep's spec has (``spec_points``: the
    points it recorded before running any, ``Store.members``; the rows' count when it
    recorded none) and how many the database holds (``stored_points``), so a reader of an
    interrupted sweep sees what is missing; each axis's values over the spec's points
    (``axis_values``, in grid order), so an axis whose stored points share one value (an
    interrupted sweep's first points) still counts as swept; and each spec point's axis
    values (``axis_points``, in grid order), so which axes move together (a zip) is read
    off the spec, not off the few rows a stopped sweep stored."""
    frame.attrs["stored_points"] = len(frame)
    frame.attrs["spec_points"] = len(frame) if planned is None else len(planned)
    if planned is None:
        return
    values: dict[str, dict[str, Any]] = {}
    points: list[dict[str, Any]] = []
    for text in planned.values():
        point = json.loads(text)
        columns = {
            flat_name(axis, "overrides"): value
            for axis, value in (point.items() if isinstance(point, dict) else ())
        }
        for column, value in columns.items():
            values.setdefault(column, {}).setdefault(json.dumps(value, sort_keys=True), value)
        points.append({c: v for c, v in columns.items() if c in frame.columns})
    frame.attrs["axis_points"] = points
    frame.attrs["axis_values"] = {
        axis: list(seen.values()) for axis, seen in values.items() if axis in frame.columns
    }


def _wanted(stored: dict[str, Any], metrics: Sequence[str] | None) -> dict[str, tuple[int, Any]]:
    """The stored metrics ``metrics`` asks for (a name, or a section and every name below
    it, as a sweep's worker keeps them: ``worker.select``), then what bound a throughput
    among them (``report.sweep_companions``: a row stored before it was kept has none),
    each with the place of the metric that asked for it; all of them (place 0) for None."""
    if metrics is None:
        return {k: (0, v) for k, v in stored.items()}
    asked = [*metrics, *companions(metrics)]
    kept: dict[str, tuple[int, Any]] = {}
    for name, value in stored.items():
        place = next((i for i, m in enumerate(asked) if covers(m, name)), None)
        if place is not None:
            kept[name] = (place, value)
    return kept


CONFIG_FIELDS = {
    "kv_policy": ("kv", "policy"),
    "max_context": ("serving", "max_context"),
    "batch_slots": ("serving", "batch_slots"),
}
"""Fields of a point's workload a figure labels its lines with, by their JSON names
(``frame.attrs[name]``: the distinct values over the rows): a sweep that neither varied nor
stored its KV policy still says which it ran."""


SUBJECT = ("workload", "model", "hardware")
"""The parts of a point's resolved config whose names a figure's title gives
(``frame.attrs[part]``: the distinct names over the rows, first seen first)."""


def _subject(config: Any, names: dict[str, dict[Any, None]]) -> None:
    """Record the workload, model and hardware names of one point's resolved config, and
    the values of its :data:`CONFIG_FIELDS`."""
    if not isinstance(config, dict):
        raise ValueError("the resolved config is not a JSON object")
    for part in SUBJECT:
        block = config.get(part)
        name = block.get("name") if isinstance(block, dict) else None
        if isinstance(name, str):
            names[part].setdefault(name)
    workload = config.get("workload")
    for field, (section, key) in CONFIG_FIELDS.items():
        block = workload.get(section) if isinstance(workload, dict) else None
        value = block.get(key) if isinstance(block, dict) else None
        if isinstance(value, str | int) and not isinstance(value, bool):
            names[field].setdefault(value)


def parquet_available() -> bool:
    """True when pyarrow can be imported (pandas writes Parquet with it)."""
    return extras.available("pyarrow")


def check_export(path: str | Path) -> None:
    """Refuse an export file that :func:`export` could not write (an unknown suffix, Parquet
    without pyarrow: a ConfigError; a folder in the way, a read-only medium or folder: a
    WriteError, ``files.unwritable_problem``) naming it; the CLI asks before a sweep runs."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix in (".parquet", ".pq") and not parquet_available():
        raise ConfigError.single(
            str(out), "", f"{extras.missing('pyarrow', 'Parquet export')}; or export to .csv"
        )
    if suffix not in (".csv", ".parquet", ".pq"):
        kind = repr(suffix) if suffix else "a file without an extension"
        raise ConfigError.single(str(out), "", f"cannot export to {kind}: use .csv or .parquet")
    problem = unwritable_problem(out)
    if problem is not None:  # found before the sweep runs, not after
        raise WriteError.single(str(out), "", f"cannot write: {problem}")


def export(frame: pd.DataFrame, path: str | Path, *, provenance: bool = False) -> Path:
    """Write `frame` as CSV (.csv) or Parquet (.parquet, needs pyarrow), all or nothing.

    The run-provenance columns (``PROVENANCE``) are dropped unless `provenance`.
    """
    out = Path(path)
    check_export(out)
    integers = list(frame.attrs.get("integers", ()))
    if not provenance:
        frame = frame.drop(columns=[c for c in PROVENANCE if c in frame.columns])
    frame = _exportable(frame, integers)
    if out.suffix.lower() == ".csv":
        write_file(out, lambda handle: frame.to_csv(handle, index=False, lineterminator="\n"))
    else:
        mixed = [
            c
            for c in frame.columns
            if frame[c].dtype == object and frame[c].map(type).nunique() > 1
        ]
        frame = frame.astype({c: str for c in mixed})  # Parquet columns have one type
        write_file(out, lambda handle: frame.to_parquet(handle, index=False), binary=True)
    return out


def _exportable(frame: pd.DataFrame, integers: Sequence[str]) -> pd.DataFrame:
    """``frame`` as a file holds it: a list or mapping cell (``warnings``, a mapping axis)
    as JSON, not Python's repr (``['...']``); the ``integers`` columns (``load``: whole
    numbers only, stored as floats when a failed point left a cell empty) as integers, so
    ``batch_capacity`` writes 4, not 4.0."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(
                lambda v: json.dumps(v) if isinstance(v, list | dict) else v
            )
    for column in integers:
        if column in frame.columns and frame[column].dtype.kind == "f":
            frame[column] = frame[column].astype("Int64")
    return frame
