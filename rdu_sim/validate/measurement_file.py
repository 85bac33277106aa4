"""Read a measurement file: a CSV of measured points, each checked before anything runs.

Lines starting with ``#`` are comments (the file's citation and method); the first other
line is the header. Columns (docs/calibration.md has a worked example):

- ``hardware``: the hardware file the deployment runs on (a shipped name, or a path relative
  to the measurement file);
- ``model``: a model preset (``rdu-sim inspect model --list``);
- ``tp``: devices per model instance (tensor parallel);
- ``batch``: batch slots, or ``auto``: as many as the KV memory holds (a full-load run);
- ``input_tokens``, ``output_tokens``: every request's prompt and output lengths;
- ``metric``: what was measured (``rdu_sim.validate.deployment.METRICS``: ``e2e_s``,
  ``ttft_s``, ``tpot_s``, ``output_tokens_per_s``);
- ``measured`` (or ``measured_s``, the older name): the value, in the metric's unit;
- optional: ``requests`` (requests sent, all at time 0; default one per batch slot, required
  with ``batch`` auto), ``weights`` and ``kv`` (dtypes, default ``bf16``), ``stack`` (the
  serving stack; default the hardware file's), ``kv_memory_fraction`` (the share of the
  memory left after the weights and activations the run gave its KV cache, when the
  measurement states it; default the stack's), ``label`` (free text reports show).

Every cell is checked where it is read (a number in its range, a known metric, dtype or
column), and the file as a whole is bounded (size, rows, cell length), so any input ends in
the points or one ConfigError naming the file, line and column (``read_points``: every
bad row; ``check_points``, for ``rdu-sim check``: every bad row, each also resolved as the
suite and ``calibrate`` resolve it). A row that repeats an earlier one's measurement (the
same run and the same measured value: ``deployment_suite.duplicate_issues``), and a file
given twice, are refused: a measurement counts once. The same run measured again with
another value is data, and both rows count.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from rdu_sim.config.dtypes import ValueDtype, WeightDtype
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.yaml_io import read_text_file
from rdu_sim.validate.deployment import AUTO, METRICS, TPOT_LOW, MeasuredPoint

if TYPE_CHECKING:
    from rdu_sim.validate.deployment_suite import Row

REQUIRED = (
    "hardware",
    "model",
    "tp",
    "batch",
    "input_tokens",
    "output_tokens",
    "metric",
)
MEASURED = ("measured", "measured_s")
"""The value's column: ``measured`` (in the metric's unit), or ``measured_s`` as files
written before throughput was a metric name it (one of the two, not both)."""
OPTIONAL = ("requests", "weights", "kv", "stack", "kv_memory_fraction", "label")
COLUMNS = (*REQUIRED, MEASURED[0], *OPTIONAL)
"""Every column, in the order converters write them."""

MAX_POINTS = 10_000
MAX_FILE_BYTES = 10 << 20
MAX_CELL_CHARS = 1000
MAX_TOKENS = 1 << 20
MAX_TP = 4096
MAX_BATCH = 65536
MAX_REQUESTS = 1_000_000  # serving.requests' own bound

_INTEGER = re.compile(r"[0-9]{1,15}")
_NEGATIVE = re.compile(r"-[0-9]{1,15}")
"""A negative integer: refused for its range (``-16``), not as if it were not a number."""

_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")
WEIGHT_DTYPES: tuple[str, ...] = get_args(WeightDtype)
KV_DTYPES: tuple[str, ...] = get_args(ValueDtype)


def _integer_like(cell: str) -> bool:
    """Whether ``cell`` is written as an integer (a negative one too: its range refuses it)."""
    return bool(_INTEGER.fullmatch(cell) or _NEGATIVE.fullmatch(cell))


def _int(text: str, column: str, where: str, low: int, high: int) -> int:
    """An integer cell in ``low..high`` (ASCII digits only: ``1_000`` or ``٣`` are refused)."""
    cell = text.strip()
    if not _integer_like(cell):
        raise ConfigError.single(where, column, f"expected an integer, got {cell[:40]!r}")
    value = int(cell)
    if not low <= value <= high:
        raise ConfigError.single(where, column, f"must be in {low}..{high}, got {value}")
    return value


def _measured(text: str, column: str, metric: str, where: str) -> float:
    """The measured value: a decimal number inside the metric's plausible range."""
    cell = text.strip()
    spec = METRICS[metric]
    if not _DECIMAL.fullmatch(cell):
        raise ConfigError.single(
            where,
            column,
            f"expected a number in {metric}'s unit ({spec.unit}, not written), got {cell[:40]!r}",
        )
    value = float(cell)
    if not spec.low <= value <= spec.high:
        raise ConfigError.single(
            where,
            column,
            f"{metric} must be in [{spec.low:g}, {spec.high:g}] {spec.unit}, got {cell}",
        )
    return value


def _fraction(text: str, where: str) -> float | None:
    """An optional share in (0, 1]."""
    cell = text.strip()
    if not cell:
        return None
    if not _DECIMAL.fullmatch(cell) or not 0 < float(cell) <= 1:
        raise ConfigError.single(
            where, "kv_memory_fraction", f"expected a share in (0, 1], got {cell[:40]!r}"
        )
    return float(cell)


def _choice(text: str, column: str, where: str, valid: Iterable[str], default: str) -> str:
    """A cell naming one of ``valid`` (empty: ``default``)."""
    cell = text.strip() or default
    options = tuple(valid)
    if cell not in options:
        raise ConfigError.single(
            where, column, f"must be one of {', '.join(options)}, got {cell[:40]!r}"
        )
    return cell


def _cells(line: str, where: str) -> list[str]:
    """One line's cells, each at most ``MAX_CELL_CHARS`` long."""
    if len(line) > MAX_CELL_CHARS * 32:
        raise ConfigError.single(where, "", f"a line longer than {MAX_CELL_CHARS * 32} characters")
    try:
        cells = next(csv.reader(io.StringIO(line)), [])
    except csv.Error as exc:
        raise ConfigError.single(where, "", f"not a CSV row: {exc}") from None
    for cell in cells:
        if len(cell) > MAX_CELL_CHARS:
            raise ConfigError.single(
                where, "", f"a cell longer than {MAX_CELL_CHARS} characters: {cell[:40]!r}..."
            )
    return cells


_SEPARATORS = ((";", "semicolons"), ("\t", "tabs"))
"""Separators a spreadsheet may export instead of commas (a locale's, or TSV), which a
header read as CSV shows as one column holding them."""


def _header(cells: list[str], where: str) -> list[str]:
    header = [cell.strip() for cell in cells]
    known = (*REQUIRED, *MEASURED, *OPTIONAL)
    if len(header) == 1:  # a spreadsheet's export with another separator: one long column
        for sep, name in _SEPARATORS:
            if sep in header[0]:
                commas = ",".join(c.strip() for c in header[0].split(sep))
                raise ConfigError.single(
                    where,
                    "",
                    f"the header is one column, its names separated by {name}: a measurement "
                    f"file is comma-separated (its header would read {commas[:200]!r}; save "
                    "the sheet as CSV with commas)",
                )
    unknown = [c for c in header if c not in known]
    if unknown:
        raise ConfigError.single(
            where, "", f"unknown column(s) {unknown}; the columns are {list(known)}"
        )
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ConfigError.single(
            where, "", f"header lacks column(s) {missing}; expected {list(COLUMNS)}"
        )
    if len(set(header)) != len(header):
        raise ConfigError.single(where, "", f"a column is named twice in {header}")
    values = [c for c in MEASURED if c in header]
    if len(values) != 1:
        raise ConfigError.single(
            where,
            "",
            f"name the measured value's column once: measured (or measured_s), got {values}",
        )
    return header


def _point(row: dict[str, str], value_column: str, where: str) -> MeasuredPoint:
    metric = row["metric"].strip()
    if metric not in METRICS:
        raise ConfigError.single(
            where, "metric", f"must be one of {tuple(METRICS)}, got {metric[:40]!r}"
        )
    if value_column == "measured_s" and METRICS[metric].unit != "s":
        raise ConfigError.single(
            where, "measured_s", f"{metric} is in {METRICS[metric].unit}: name the column measured"
        )
    batch_cell = row["batch"].strip()
    if batch_cell != AUTO and not _integer_like(batch_cell):
        raise ConfigError.single(
            where, "batch", f"expected an integer or {AUTO}, got {batch_cell[:40]!r}"
        )
    batch = None if batch_cell == AUTO else _int(batch_cell, "batch", where, 1, MAX_BATCH)
    requests_cell = row.get("requests", "").strip()
    requests = _int(requests_cell, "requests", where, 1, MAX_REQUESTS) if requests_cell else 0
    if batch is None and not requests:
        raise ConfigError.single(
            where, "requests", "a full-load row (batch auto) names its requests"
        )
    output = _int(row["output_tokens"], "output_tokens", where, 1, MAX_TOKENS)
    if metric == "tpot_s" and output < 2:
        raise ConfigError.single(where, "output_tokens", "tpot_s needs at least 2 output tokens")
    point = MeasuredPoint(
        hardware=row["hardware"].strip(),
        model=row["model"].strip(),
        tp=_int(row["tp"], "tp", where, 1, MAX_TP),
        batch=batch,
        input_tokens=_int(row["input_tokens"], "input_tokens", where, 1, MAX_TOKENS),
        output_tokens=output,
        metric=metric,
        measured=_measured(row[value_column], value_column, metric, where),
        requests=requests,
        weights=_choice(row.get("weights", ""), "weights", where, WEIGHT_DTYPES, "bf16"),
        kv=_choice(row.get("kv", ""), "kv", where, KV_DTYPES, "bf16"),
        stack=row.get("stack", "").strip(),
        kv_memory_fraction=_fraction(row.get("kv_memory_fraction", ""), where),
        label=row.get("label", "").strip(),
        source=where,
    )
    for column in ("hardware", "model"):
        if not getattr(point, column):
            raise ConfigError.single(where, column, "is empty")
    _plausible(point, value_column, where)
    return point


def _plausible(point: MeasuredPoint, column: str, where: str) -> None:
    """Refuse a measured latency or throughput its row's own lengths and batch make
    implausible (``deployment.TPOT_LOW``): a batch's latency shorter than its decode steps
    after the first token take at the least, or a throughput beyond every sequence of the
    batch (a full-load row's requests) making a token each such step: a unit mistake."""
    steps = point.output_tokens - 1
    if point.metric == "e2e_s" and point.measured < steps * TPOT_LOW:
        raise ConfigError.single(
            where,
            column,
            f"e2e_s {point.measured:g} s is shorter than the {steps:,} decode steps after the "
            f"first token take at the least ({TPOT_LOW:g} s each): a value in another unit?",
        )
    sequences = point.batch or point.requests
    if point.metric == "output_tokens_per_s" and point.measured > sequences / TPOT_LOW:
        raise ConfigError.single(
            where,
            column,
            f"output_tokens_per_s {point.measured:g} is more than {sequences:,} sequences "
            f"make at a token each {TPOT_LOW:g} s ({sequences / TPOT_LOW:g} tokens/s): a value "
            "in another unit?",
        )


MARKS = ("metric", *MEASURED, "hardware", "tp", "stack")
"""Columns only a measurement file has (a request trace has none of them): its header naming
one of them makes a CSV a measurement file, even when another column is missing (or its names
are separated by semicolons or tabs, ``_SEPARATORS``: its reader then says to use commas)."""
_SNIFF_BYTES = 1 << 16


def is_measurement_file(path: Path) -> bool:
    """Whether ``path``'s header (its first line that is not a comment) names a column only a
    measurement file has (``MARKS``), not a request trace. The header is read off the raw
    bytes, so a file that is not UTF-8 is still told apart and its reader says what is wrong
    with it (as ``validate`` does); a file that cannot be opened is left to the trace
    reader, which says why."""
    try:
        with path.open("rb") as stream:
            head = stream.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    for line in head.removeprefix("\ufeff").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                cells = next(csv.reader(io.StringIO(line)), [])
            except csv.Error:
                return False
            if len(cells) == 1:  # another separator: its reader says to use commas
                sep = next((sep for sep, _ in _SEPARATORS if sep in cells[0]), None)
                cells = cells[0].split(sep) if sep else cells
            return any(cell.strip() in MARKS for cell in cells)
    return False


def read_points(path: Path) -> list[MeasuredPoint]:
    """The points of one measurement file (one ConfigError naming every bad row, in line
    order, each with its file, line and column: at most ``MAX_ROW_ISSUES``, as
    ``check_points`` names them)."""
    from rdu_sim.config.errors import bounded

    points, issues = _read(path)
    if issues:
        raise ConfigError(bounded(issues))
    return points


def check_points(path: Path, earlier: list[Row] | None = None) -> list[MeasuredPoint]:
    """The points of one measurement file, each resolved as ``validate --suite deployment``
    and ``calibrate`` resolve it (its workload built: the model, tp, hardware and stack
    files it names; nothing simulated); one ConfigError naming every bad row, in line
    order, each with its file, line, column and problem (``rdu-sim check``). ``earlier``:
    the rows of the files checked before it, so a row repeating one of theirs is refused
    as ``validate`` refuses it; this file's rows that resolve are added to it."""
    from rdu_sim.config.errors import bounded
    from rdu_sim.validate.deployment_suite import duplicate_issues, resolve_rows

    before = [] if earlier is None else earlier
    points, bad_rows = _read(path)
    found = [(_line_of(issue.file), issue) for issue in bad_rows]
    resolved = []
    for point in points:
        try:
            resolved.extend(resolve_rows([point]))
        except ConfigError as exc:  # (a fault in a file the row names names that file)
            found.extend((_line_of(point.source), issue) for issue in exc.issues)
    mine = {row.point.source for row in resolved}
    found.extend(
        (_line_of(issue.file), issue)
        for issue in duplicate_issues([*before, *resolved])
        if issue.file in mine  # (a repeat among the earlier files was told with them)
    )
    before.extend(resolved)
    if found:
        found.sort(key=lambda pair: pair[0])
        raise ConfigError(bounded([issue for _, issue in found]))
    return points


def _line_of(source: str) -> int:
    """The line of a row (``FILE:LINE``), for ordering."""
    line = source.rpartition(":")[2]
    return int(line) if line.isdigit() else 0


def _read(path: Path) -> tuple[list[MeasuredPoint], list[ConfigIssue]]:
    """The file's good rows and one issue per bad row (a fault of the whole file, such as
    its header, is raised at once: no row can be read without it)."""
    numbered = [
        (number, line)
        for number, line in enumerate(
            read_text_file(path, MAX_FILE_BYTES, "a measurement file").splitlines(), start=1
        )
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not numbered:
        raise ConfigError.single(str(path), "", "no header row and no points")
    if len(numbered) - 1 > MAX_POINTS:
        raise ConfigError.single(str(path), "", f"more than {MAX_POINTS} points")
    header = _header(_cells(numbered[0][1], f"{path}:{numbered[0][0]}"), f"{path}:{numbered[0][0]}")
    value_column = next(c for c in MEASURED if c in header)
    points: list[MeasuredPoint] = []
    issues: list[ConfigIssue] = []
    for number, line in numbered[1:]:
        where = f"{path}:{number}"
        try:
            cells = _cells(line, where)
            if len(cells) != len(header):
                raise ConfigError.single(
                    where, "", f"{len(cells)} cells where the header has {len(header)}"
                )
            points.append(_point(dict(zip(header, cells, strict=True)), value_column, where))
        except ConfigError as exc:
            issues.extend(exc.issues)
    if not points and not issues:
        raise ConfigError.single(str(path), "", "no points below the header")
    return points, issues


def shipped_files() -> list[Path]:
    """The shipped measurement files of this format, sorted by name: those directly in
    ``measurements/`` (a subfolder holds files of another format, each with its own reader:
    ``measurements/expert-parallel/``)."""
    from rdu_sim.config import shipped

    top = shipped.folder(shipped.KINDS["measurement"]).resolve()
    return sorted(p for p in shipped.entries("measurement").values() if p.parent.resolve() == top)


def read_each(paths: Iterable[Path]) -> tuple[list[MeasuredPoint], list[ConfigIssue]]:
    """The good points of several files, in file then row order, and one issue per bad row
    of any of them; a ConfigError at once for a fault of a whole file, or a file given
    twice (its rows would count twice)."""
    seen: dict[Path, Path] = {}
    for path in paths:
        first = seen.get(path.resolve())
        if first is not None:
            raise ConfigError.single(
                str(path), "", f"given twice (also as {first}): a file's rows count once"
            )
        seen[path.resolve()] = path
    points: list[MeasuredPoint] = []
    issues: list[ConfigIssue] = []
    for path in seen.values():
        good, bad = _read(path)
        points.extend(good)
        issues.extend(bad)
    return points, issues


def read_all(paths: Iterable[Path]) -> list[MeasuredPoint]:
    """The points of several files, in file then row order (``read_each``; one ConfigError
    naming every bad row)."""
    from rdu_sim.config.errors import bounded

    points, issues = read_each(paths)
    if issues:
        raise ConfigError(bounded(issues))
    return points


def print_converted(source: Path, rows: Iterable[list[str]], converted_by: str) -> None:
    """A converter's output on standard output: ``source``'s comment lines (its citation and
    method), a line saying how it was converted, then ``rows`` (header first) as CSV."""
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            print(line)
    print(f"# Converted by: {converted_by}")
    csv.writer(sys.stdout, lineterminator="\n").writerows(rows)
