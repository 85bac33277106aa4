"""`rdu-sim plot KIND INPUT -o FILE`: one plot from a run, a sweep database or a workload.

INPUT is read by its suffix:

* ``.json``: what ``rdu-sim run --json`` prints or ``--out DIR`` writes (one run, or a
  list); ``requests.csv`` and ``timeseries.csv`` beside it (``--out`` writes them) supply the
  per-request records and the occupancy series; INPUT may also be that DIR. A cluster's
  result (``rdu-sim run CLUSTER --out DIR``) plots latency (from its requests.csv) and no
  other kind (``CLUSTER_KINDS``: the rest are a replica's; each is refused saying so). For
  ``calibration``, what ``rdu-sim validate --json`` prints; for ``deployment``, what
  ``rdu-sim validate --suite deployment --json`` prints or ``rdu-sim calibrate``'s fit.json;
* ``.sqlite`` / ``.db`` / ``.sqlite3``: a sweep database, read with ``rdu_sim.sweep.load``;
  ``sweep`` plots a metric (``--y``) along any swept axis (``--x``), a line per value of the
  other axes (``--by``), each defaulted from the spec's axes; ``memory`` goes along the same
  axis (``--x``), a column of bars per value of the other axes (``--by``); ``throughput``
  and ``capacity`` go along the swept axis when the sweep keeps the context fixed, and
  along the context (a line per KV policy) when it varies it;
* ``.yaml`` / ``.yml``: a workload, simulated here (``rdu_sim.studies``), each point being
  what ``rdu-sim run WORKLOAD --set serving.max_context=C --set kv.policy=P`` runs: the
  compiler's memory plan and batch capacity over ``--contexts`` and ``--policies`` (memory,
  capacity); one decode step at the capacity per context (throughput, steady state); one
  decode step's kernels (roofline); a serving run of ``--requests`` requests (latency,
  occupancy). ``--set`` applies to every point, parsed as ``rdu-sim run`` parses it.

Every mistake in the input (an unknown KIND, an unreadable file, results lacking what the
plot needs) prints ``error: ...`` and exits 2, like every other rdu-sim command.
"""

from __future__ import annotations

import atexit
import csv
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.main import STOPS
from rdu_sim.cli.options import FilePath, GivenPath, overrides_option
from rdu_sim.config import json_text
from rdu_sim.config.errors import WriteError
from rdu_sim.config.show import shown
from rdu_sim.config.yaml_io import MAX_DEPTH, file_problem, read_text_file
from rdu_sim.diagnostics import STDERR
from rdu_sim.interrupts import keeps_on_stop
from rdu_sim.report.files import REQUESTS_FILE, RESULT_FILE, TIMESERIES_FILE

_DB_SUFFIXES = (".sqlite", ".sqlite3", ".db")
_YAML_SUFFIXES = (".yaml", ".yml")
_KINDS = (
    "memory",
    "capacity",
    "throughput",
    "roofline",
    "latency",
    "occupancy",
    "calibration",
    "deployment",
    "compare",
    "speculation",
    "crossover",
    "sweep",
)
_NOTED_KINDS = ("sweep", "memory")
"""Plots of a sweep database that say in the figure what they leave out (failed points,
points not run yet: ``plots_sweep.left_out_note``); the others say it on stderr."""
_SWEEP_KINDS = {
    "speculation": "workloads/sweeps/speculation-acceptance-k.yaml",
    "crossover": "workloads/sweeps/speculation-crossover.yaml",
}


MAX_RESULTS_BYTES = 64 * 2**20  # a run's JSON is kilobytes; its per-request rows are CSV
MAX_COLUMNS_BYTES = 256 * 2**20  # requests.csv of a million requests is about 100 MB


def _tokens(text: str) -> int:
    """'8k' -> 8192, '128K' -> 131072, '4096' -> 4096 (``config.units.parse_tokens``, the
    rule of every token-count field; at most 100M tokens)."""
    from rdu_sim.config.units import MAX_TOKENS, UnitError, parse_tokens

    try:
        tokens = parse_tokens(text)
    except UnitError:
        raise click.BadParameter(f"{text[:40]!r} is not a token count like 8192 or 8k") from None
    if not 1 <= tokens <= MAX_TOKENS:
        raise click.BadParameter(f"{text!r} is not in 1..{MAX_TOKENS} tokens")
    return tokens


_JSON_KINDS = {
    "calibration": "the JSON `rdu-sim validate --json` prints",
    "deployment": (
        "the JSON `rdu-sim validate --suite deployment --json` prints, or a calibration's "
        "fit.json (`rdu-sim calibrate`)"
    ),
    "compare": "the JSON `rdu-sim compare --json` prints",
}
"""What a plot that reads one command's JSON, and no workload or run, takes as INPUT."""


def takes(kind: str) -> str:
    """What the ``kind`` plot takes as INPUT, in words, for its errors: a command's JSON
    (:data:`_JSON_KINDS`), a sweep database, or a run's JSON, a sweep database or a
    workload."""
    if kind in _JSON_KINDS:
        return _JSON_KINDS[kind]
    if kind == "sweep":
        return "a sweep database (.sqlite, .db) `rdu-sim sweep SPEC` writes"
    if kind in _SWEEP_KINDS:
        return f"the sweep database `rdu-sim sweep {_SWEEP_KINDS[kind]}` writes"
    return "the file `rdu-sim run --json` writes, a sweep database or a workload YAML"


def _read_json(path: Path, kind: str) -> Any:
    text = read_text_file(path, MAX_RESULTS_BYTES, "a run's JSON")
    try:
        return json_text.loads(text, MAX_DEPTH)
    except json.JSONDecodeError as exc:
        fail(
            f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); the "
            f"{kind} plot reads {takes(kind)}"
        )
    except json_text.JsonLimitError as exc:  # 5000-digit numbers, 100,000 brackets
        fail(f"{path}: not a run's JSON: {exc}")


def _read_columns(
    path: Path, names: tuple[str, ...] | None = None
) -> dict[str, list[float | None]]:
    """A CSV of numeric columns (``requests.csv``, ``timeseries.csv``), or only its columns
    ``names`` (a cluster's requests.csv holds text columns too); empty cells -> None."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        found = reader.fieldnames or []
        kept = [name for name in found if names is None or name in names]
        columns: dict[str, list[float | None]] = {name: [] for name in kept}
        for row in reader:
            for name in kept:
                cell = row[name]
                try:
                    columns[name].append(float(cell) if cell else None)
                except ValueError:
                    fail(f"{path}: column {shown(name)} holds {shown(cell)}, not a number")
    return columns


MAX_LISTED = 64
"""Contexts (or policies) a plot simulates at most: each is its own simulation."""


def _listed(option: str, text: str, parse: Any) -> list[Any]:
    """``option``'s comma-separated values, parsed, each once, at most ``MAX_LISTED``."""
    values = list(dict.fromkeys(parse(v) for v in text.split(",") if v.strip()))
    if len(values) > MAX_LISTED:
        fail(f"{option} lists {len(values)} values; a plot simulates at most {MAX_LISTED}")
    return values


def _sibling(sibling: Path, names: tuple[str, ...] | None = None) -> dict[str, list[Any]]:
    """The columns of ``--out``'s CSV ``sibling`` (or its columns ``names``)."""
    if sibling.stat().st_size > MAX_COLUMNS_BYTES:
        fail(f"{sibling}: larger than {MAX_COLUMNS_BYTES} bytes; not a run's {sibling.name}")
    try:
        return _read_columns(sibling, names)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        fail(f"{sibling}: cannot read: {str(exc)[:200]}")


def _attach_siblings(results: Any, folder: Path) -> Any:
    """Add ``--out``'s requests.csv and timeseries.csv to a single run's dict."""
    if not isinstance(results, dict):
        return results
    for name, key in ((REQUESTS_FILE, "request_records"), (TIMESERIES_FILE, "slot_occupancy")):
        sibling = folder / name
        if key not in results and sibling.is_file():
            results[key] = _sibling(sibling)
    return results


CLUSTER_KINDS = ("latency",)
"""The plots of a cluster's result (``rdu-sim run CLUSTER --out DIR``): the TTFT and TPOT of
every request, from its requests.csv. Memory, capacity, throughput and occupancy are a
replica's (its workload's plan, steps and slots), which a cluster's result does not hold."""


def is_cluster_result(results: Any) -> bool:
    """Whether ``results`` is what ``rdu-sim run CLUSTER`` writes (its pools, per replica)."""
    return isinstance(results, dict) and "pools" in results and "per_replica" in results


def _common(pools: Any, key: str) -> str:
    """The value of ``key`` every pool shares ("" when they differ or none says)."""
    values = {str(p.get(key)) for p in pools.values() if isinstance(p, dict) and p.get(key)}
    return values.pop() if len(values) == 1 else ""


def _cluster_record(results: dict[str, Any], path: Path, kind: str) -> dict[str, Any]:
    """A cluster's result as the one run its latency plot draws: the TTFT and TPOT of every
    served request (requests.csv beside it; a rejected request's cells are empty), named by
    the cluster and what its pools share; any other plot is refused in one line."""
    if kind not in CLUSTER_KINDS:
        fail(
            f"{path}: a cluster's result; of the plots only {', '.join(CLUSTER_KINDS)} takes "
            f"one. For {kind}, plot one of its pools' workloads (rdu-sim plot {kind} WORKLOAD, "
            "or rdu-sim run WORKLOAD --out DIR and plot DIR)"
        )
    pools = results.get("pools") if isinstance(results.get("pools"), dict) else {}
    record: dict[str, Any] = {
        "workload": str(results.get("cluster") or path.parent.name),
        "model": _common(pools, "model"),
        "kv_policy": _common(pools, "kv_policy"),
        "hardware": _common(pools, "hardware"),
        "source": "cluster",
    }
    requests = path.parent / REQUESTS_FILE
    if "request_records" in results:
        record["request_records"] = results["request_records"]
    elif requests.is_file():
        record["request_records"] = _sibling(requests, ("ttft_s", "tpot_s"))
    return record


def _read_db(path: Path, sweep: str | None, *, keep_failed: bool = False) -> Any:
    """The finished points of the database's one sweep, or of ``sweep`` (a database may hold
    several sweeps, or a sweep and a plan's points, whose rows do not plot together); with
    ``keep_failed`` its failed points too (the sweep and memory plots' note counts them), else a
    line on stderr says how many are left out, and one how many the sweep has not run yet."""
    from rdu_sim.sweep import load
    from rdu_sim.sweep.load import sweep_names

    names = sweep_names(path)  # a StoreError names the file and the problem (exit 2)
    if sweep is not None and sweep not in names:
        fail(f"--sweep {sweep}: {path} holds no sweep of that name; it holds {', '.join(names)}")
    if sweep is None and len(names) > 1:
        fail(f"{path}: holds {len(names)} sweeps ({', '.join(names)}); name one with --sweep")
    frame = load(path, sweep=sweep)
    if "status" in frame.columns:
        done = frame["status"] == "done"
        if not done.any():
            fail(f"{path}: the sweep database has no finished points to plot")
        if not keep_failed:
            total = frame.attrs.get("spec_points", len(frame))
            if not done.all():
                failed = human.count(int((~done).sum()), "failed point")
                print(f"note: {failed} of {total} not drawn", file=STDERR)
            if total > len(frame):  # an interrupted sweep (the sweep plot's note says it)
                print(f"note: {total - len(frame)} of {total} points not run yet", file=STDERR)
            attrs = dict(frame.attrs)  # the axes and the names of what ran, kept through the cut
            frame = frame[done]
            frame.attrs.update(attrs)
    if frame.empty:
        fail(f"{path}: the sweep database has no finished points to plot")
    return frame


def _locate(given: Path, kind: str) -> Path:
    """INPUT as given when it exists; else the database of the shipped sweep it names
    (where ``rdu-sim sweep NAME`` writes it), else the shipped workload it names
    (``rdu_sim.config.shipped``'s one rule, and its error when neither exists). A database
    (by its suffix, or for a plot that reads only one) that is neither is named as a missing
    database, with the shipped sweeps (not the workloads) listed; for a plot that reads one
    command's JSON (:data:`_JSON_KINDS`), as a missing file, with what the plot reads."""
    from rdu_sim.config import shipped

    try:
        if given.exists() or given.is_symlink():  # a broken link: file_problem names it
            return given
    except (OSError, ValueError):
        return given
    spec = shipped.find(str(given), ("sweep",))
    if spec is not None and shipped.find(str(given), ("workload",)) is None:
        database = shipped.beside(spec, ".sqlite")
        if not database.is_file():
            fail(
                f"{given}: the shipped sweep has no database yet ({database}); run "
                f"`rdu-sim sweep {given}` first"
            )
        return database
    if kind in _JSON_KINDS:
        fail(f"{given}: file not found; the {kind} plot reads {takes(kind)}")
    if given.suffix.lower() in _DB_SUFFIXES or kind == "sweep" or kind in _SWEEP_KINDS:
        listed = shipped.unknown_name_message(("sweep",)).replace("file not found, and ", "")
        fail(f"{given}: no such sweep database, and {listed}")
    return shipped.locate(given, ("workload",))


def _simulate(
    kind: str,
    path: Path,
    overrides: tuple[str, ...],
    contexts: list[int],
    policies: list[str],
    requests: int,
) -> Any:
    """Results for ``kind`` from a workload, simulated in-process (``rdu_sim.studies``; a
    point is what ``rdu-sim run`` runs at that context and policy)."""
    from rdu_sim import api, studies
    from rdu_sim.config.overrides import given
    from rdu_sim.report.plots_data import result_record

    results: list[dict[str, Any]] | dict[str, Any]
    if kind in ("memory", "capacity"):
        results = studies.plan_over_contexts(path, contexts, policies=policies, overrides=overrides)
    elif kind == "throughput":
        results = studies.decode_over_contexts(
            path, contexts, policies=policies, overrides=overrides
        )
    elif kind == "roofline":
        results = studies.decode_step_timing(path, overrides=overrides)
    else:
        asked = given([f"serving.requests={requests}"], "--requests")
        results = result_record(api.run(path, [*overrides, *asked]))
    return _noted(results, overrides)


def _noted(results: Any, overrides: tuple[str, ...]) -> Any:
    """``results`` with the ``--set`` edits among each point's ``settings``, which the figure
    prints under itself (``plots_style.note_settings``): a plot says what it changed."""
    from rdu_sim.config.overrides import parse_override

    edits = dict(parse_override(edit) for edit in overrides)
    for record in results if isinstance(results, list) else [results]:
        record["settings"] = {**edits, **(record.get("settings") or {})}
    return results


def _writable(folder: Path) -> bool:
    """Whether `folder` can be written, or made where its first existing parent is."""
    for place in (folder, *folder.parents):
        if os.path.lexists(place):
            return place.is_dir() and os.access(place, os.W_OK | os.X_OK)
    return False


def _matplotlib_config_dir() -> None:
    """Point matplotlib's config folder (MPLCONFIGDIR, unless the user set it) at a
    temporary folder when its default cannot be written (HOME unset, or another user's):
    matplotlib made one itself, printing two lines about it on every plot."""
    if "MPLCONFIGDIR" in os.environ:
        return
    try:
        config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    except (RuntimeError, KeyError):  # no home at all
        config = ""
    if config and _writable(Path(config) / "matplotlib"):
        return
    folder = tempfile.mkdtemp(prefix="rdu-sim-matplotlib-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ["MPLCONFIGDIR"] = folder


STOPPED = STOPS["plot"]
"""What a stop of the command says was kept."""


@click.command("plot")
@click.argument("kind", metavar="KIND")
@click.argument("input_path", metavar="INPUT", type=GivenPath())
@click.option(
    "-o",
    "--output",
    type=FilePath(),
    default=None,
    help="Image to write: .png, .svg or .pdf (default: KIND.png).",
)
@click.option(
    "--contexts",
    default="8k,32k,128k",
    show_default=True,
    help="Context lengths to simulate when INPUT is a workload (memory, capacity, throughput).",
)
@click.option(
    "--policies",
    default="full,snapstream",
    show_default=True,
    help="KV policies to compare when INPUT is a workload.",
)
@click.option(
    "--requests",
    type=click.IntRange(1, 1_000_000),
    default=16,
    show_default=True,
    help="Requests of the serving run when INPUT is a workload (latency, occupancy).",
)
@click.option(
    "--x",
    "x_axis",
    default=None,
    help="sweep, memory of a sweep database: the axis along x (default: the first swept).",
)
@click.option(
    "--y",
    "y_metric",
    default=None,
    help="sweep: the metric (default: steady_decode_tokens_per_s when the sweep stored it, "
    "the whole run's decode_tokens_per_s drawn faint beside it; else the first the sweep "
    "stored of report.plots_sweep.DEFAULT_METRICS).",
)
@click.option(
    "--by",
    "by_columns",
    multiple=True,
    help="sweep: a column whose values get a line each (memory: a column of bars each; "
    "repeatable; default: the other axes).",
)
@click.option(
    "--sweep",
    "sweep_name",
    default=None,
    help="A sweep database's sweep to plot, when it holds several (the spec's name).",
)
@overrides_option
@keeps_on_stop(STOPPED)
def command(
    kind: str,
    input_path: Path,
    output: Path | None,
    contexts: str,
    policies: str,
    requests: int,
    x_axis: str | None,
    y_metric: str | None,
    by_columns: tuple[str, ...],
    sweep_name: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Draw a KIND plot of INPUT (a run JSON, a sweep database or a workload YAML).

    KIND is one of: memory, capacity, throughput, roofline, latency, occupancy,
    calibration (INPUT: the JSON `rdu-sim validate --json` prints), deployment (INPUT: the
    JSON `rdu-sim validate --suite deployment --json` prints, or calibrate's fit.json),
    compare (INPUT: the
    JSON `rdu-sim compare --json` prints), speculation and crossover (INPUT: a sweep
    database of workloads/sweeps/speculation-*.yaml), sweep (INPUT: a sweep database;
    --x, --y, --by).

    Example: rdu-sim plot capacity run.json -o capacity.png; rdu-sim plot sweep
    llama8b-hbm-bandwidth.sqlite --y tpot_s.p50
    """
    kind = kind.lower()
    if kind not in _KINDS:
        from rdu_sim.config.loader import close_name  # (only a misspelt kind needs it)

        close = close_name(kind, _KINDS)
        hint = f"did you mean {close!r}? " if close is not None else ""
        fail(f"unknown plot kind {kind!r}; {hint}valid kinds: {', '.join(_KINDS)}")
    target = output if output is not None else Path(f"{kind}.png")
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        given = repr(target.suffix) if target.suffix else "a file without an extension"
        raise WriteError.single(
            str(target), "--output", f"cannot draw to {given}: use .png, .svg or .pdf"
        )
    if input_path.is_dir() and (input_path / RESULT_FILE).is_file():
        input_path = input_path / RESULT_FILE
    input_path = _locate(input_path, kind)
    problem = file_problem(input_path)
    if problem is not None:
        fail(f"{input_path}: {problem} (the {kind} plot reads {takes(kind)})")
    suffix = input_path.suffix.lower()
    _matplotlib_config_dir()
    from rdu_sim.report import plots

    if suffix in _YAML_SUFFIXES and kind == "calibration":
        fail(
            f"{input_path}: the calibration plot reads what `rdu-sim validate --json` "
            "prints; run `rdu-sim validate --json > v.json` and plot v.json"
        )
    if suffix in _YAML_SUFFIXES and kind == "deployment":
        fail(
            f"{input_path}: the deployment plot reads what `rdu-sim validate --suite "
            "deployment --json` prints or calibrate's fit.json; run `rdu-sim validate --suite "
            "deployment --json > d.json` and plot d.json"
        )
    if suffix in _YAML_SUFFIXES and kind in _SWEEP_KINDS:
        fail(
            f"{input_path}: the {kind} plot reads a sweep; run `rdu-sim sweep "
            f"{_SWEEP_KINDS[kind]} --db {kind}.sqlite` and plot {kind}.sqlite"
        )
    if suffix in _YAML_SUFFIXES and kind == "compare":
        fail(
            f"{input_path}: the compare plot reads what `rdu-sim compare --json` prints; run "
            "`rdu-sim compare WORKLOAD --hardware A --hardware B --json > c.json` and plot c.json"
        )
    if kind == "sweep" and suffix not in _DB_SUFFIXES:
        fail(
            f"{input_path}: the sweep plot reads a sweep database (.sqlite, .db); run "
            "`rdu-sim sweep SPEC` and plot the database it writes"
        )
    if suffix in _YAML_SUFFIXES:
        results = _simulate(
            kind,
            input_path,
            overrides,
            _listed("--contexts", contexts, _tokens),
            _listed("--policies", policies, str.strip),
            requests,
        )
    elif suffix in _DB_SUFFIXES:
        results = _read_db(input_path, sweep_name, keep_failed=kind in _NOTED_KINDS)
    else:
        results = _read_json(input_path, kind)
        if is_cluster_result(results):
            results = _cluster_record(results, input_path, kind)
        else:
            results = _attach_siblings(results, input_path.parent)
    try:
        if kind == "sweep":
            figure = plots.sweep_plot(results, x=x_axis, y=y_metric, by=by_columns or None)
        elif kind == "memory" and suffix in _DB_SUFFIXES:
            figure = plots.memory_footprint(results, x=x_axis, by=by_columns or None)
        else:
            figure = plots.plot(kind, results)
        source = f"rdu-sim plot {kind} {input_path.name}" + "".join(
            f" --set {edit}" for edit in overrides
        )
        written = plots.save_figure(figure, target, source=source)
    except plots.PlotInputError as exc:
        fail(f"{input_path}: {exc}")
    except OSError as exc:  # matplotlib's own file handling, if any
        fail(f"{target}: cannot write the plot: {exc.strerror or exc}")
    click.echo(f"wrote {written}")
