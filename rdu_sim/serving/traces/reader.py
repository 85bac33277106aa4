"""The one trace reader: any registered format, for a workload (``read_trace``) or a cluster
(``read_table``), streaming, within stated limits, every problem a ConfigError naming the
trace file and the line.

A trace fixes each request's lengths (and, for open-loop arrivals, its arrival time). Its
format is chosen once (:func:`_choose`): by name, or, for ``auto``, by the file's first
line when it is a published trace's (Azure, Mooncake, BurstGPT), else by the file's suffix
(the project's ``.csv`` and ``.jsonl``). Every row then passes the same checks
(``traces.values``) whichever reader asked:

- lengths are whole numbers of tokens; a published trace's zero-token row is a failed
  request, counted as ``skipped``, never served;
- ``arrival_s`` may be absent from a workload's trace in the project's formats (closed-loop
  and all-at-once arrivals do not need it); when the first row has it, every row must, and
  none may without it. A published trace's arrival column is part of its format, and a
  cluster replays arrivals: there every row needs one. A published trace's clock (wall-clock
  times, milliseconds from its start) starts at its earliest request; so does every trace a
  cluster reads (its window is on that clock); a workload's own ``arrival_s`` is used as
  written. The clock must then fit the serving clock;
- ``acceptance`` and ``expert`` are optional as ``arrival_s`` is; a cluster keeps the other
  columns as text (filters, request classes) and Mooncake's block hashes.

Errors name the cause where a user would look: a path that is no readable file says what it
is (``trace_problem``); a first JSON row with neither format's prompt length names each JSON
format's fields (``_json_misfit``); an error at the first row of a format that was named, not
detected, says where it was named; a clock too long names its first row past the limit; with
a cluster's prefix cache, each Mooncake row's ``hash_ids`` must number ``ceil(input_length /
block_tokens)`` (``blocks_problem``). Each request keeps its line (``TraceTable.lines``).

Only the first ``max_rows`` requests are read (a workload's ``serving.requests``: the rest
would be unused), so time and memory follow the requests, not the file; ``rdu-sim check``
reads every row (``EVERY_ROW``), so a damaged row below a run's is found there. Limits: a
regular file of at most ``MAX_TRACE_BYTES``; UTF-8 text, lines of at most
``MAX_LINE_BYTES`` and at most ``MAX_TRACE_LINES`` lines (``traces.lines``), the last ended
as the others are; a format's own limits in its module.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.json_text import loads
from rdu_sim.config.overrides import overridden, setting_origin
from rdu_sim.config.show import cut_middle
from rdu_sim.config.text import not_text
from rdu_sim.config.yaml_io import file_problem
from rdu_sim.serving.clock import MAX_ARRIVAL_S
from rdu_sim.serving.traces import azure, burstgpt, mooncake
from rdu_sim.serving.traces.jsonl_format import MAX_JSON_DEPTH
from rdu_sim.serving.traces.lines import MAX_LINE_BYTES, NotTextError, TraceLines
from rdu_sim.serving.traces.registry import (
    TraceFormat,
    format_for,
    formats,
    get_format,
    known_suffixes,
)
from rdu_sim.serving.traces.table import TraceTable
from rdu_sim.serving.traces.values import (
    MAX_TOKENS,
    REQUIRED,
    ValueProblem,
    clock_seconds,
    column_text,
    expert,
    probability,
    seconds,
    tokens,
)

MAX_TRACE_BYTES = 512 * 2**20  # a trace larger than this is a mistake
MAX_TRACE_ROWS = 1_000_000  # serving.requests' own bound: no run uses more rows
EVERY_ROW = 2**62  # a cluster, and `rdu-sim check`, read every row (``traces.lines``: lines)

__all__ = [
    "MAX_TOKENS",
    "MAX_TRACE_BYTES",
    "MAX_TRACE_ROWS",
    "Blocks",
    "Trace",
    "detect",
    "read_table",
    "read_trace",
    "trace_problem",
]

SOURCE_COLUMNS: dict[str, dict[str, str]] = {
    azure.NAME: azure.SOURCE,
    mooncake.NAME: mooncake.SOURCE,
    burstgpt.NAME: burstgpt.SOURCE,
}
"""Per published format, the file's own column behind each row key (errors name it)."""

_OWN = ("arrival_s", "prompt_tokens", "output_tokens", "acceptance", "expert", "hash_ids")
"""Row keys read as the request's own; any other is a kept column (a cluster's)."""


@dataclass(frozen=True)
class Trace:
    """A workload's trace rows, as parallel arrays (file order)."""

    arrival_s: NDArray[np.float64] | None  # None when the trace has no arrival_s column
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    # a request's per-token acceptance rate under speculative decoding (None: no column)
    acceptance: NDArray[np.float64] | None = None
    # the expert each request needs in a Composition of Experts (None: no column)
    expert: NDArray[np.int64] | None = None
    format: str = "csv"  # the format read (``_choose``)
    skipped: int = 0  # a published trace's failed requests (zero tokens), not read

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])


def format_names() -> list[str]:
    """Every format a trace may name (besides ``auto``)."""
    return [f.name for f in formats()]


def _first_line(path: Path, file: str) -> str:
    """The file's first line, stripped (a byte-order mark too); a line that is not UTF-8 is
    refused as every reader refuses it (``config.text``: a gzip file named as such), never
    shown as the replacement characters of a lenient decode."""
    try:
        with path.open("rb") as stream:
            raw = stream.readline(MAX_LINE_BYTES)
    except OSError as exc:
        raise ConfigError.single(file, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        head = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.single(file, "", not_text(raw, exc.start, raw[exc.start]), 1) from None
    return head.lstrip("\ufeff").strip()


def _published(line: str) -> str | None:
    """The published format a first line shows, or None."""
    if line.startswith("{"):
        return mooncake.NAME if '"input_length"' in line else None
    header = {name.strip() for name in line.split(",")}
    if "ContextTokens" in header:
        return azure.NAME
    if "Request tokens" in header:
        return burstgpt.NAME
    return None


JSON_FIELDS: dict[str, tuple[str, ...]] = {"jsonl": REQUIRED, mooncake.NAME: mooncake.FIELDS}
"""The fields every row of each JSON format needs (what a first row is compared with)."""


def _json_misfit(line: str) -> str | None:
    """For a first line that is a JSON object with neither JSON format's prompt length
    (``prompt_tokens``, Mooncake's ``input_length``), what each format needs that the row
    lacks (a misspelt field, most likely: ``input_len``); else None (a row of one format
    that lacks another of its fields is its reader's to report; so is a line that is not
    JSON, with its column)."""
    try:
        obj = loads(line, MAX_JSON_DEPTH, unique_keys=True)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    prompt = {"jsonl": "prompt_tokens", mooncake.NAME: mooncake.SOURCE["prompt_tokens"]}
    if any(field in obj for field in prompt.values()):
        return None
    lacks = {name: [f for f in fields if f not in obj] for name, fields in JSON_FIELDS.items()}
    names = [cut_middle(str(k), 40) for k in list(obj)[:12]] + (["..."] if len(obj) > 12 else [])
    needs = "; ".join(
        f"{name} needs {', '.join(JSON_FIELDS[name])} (it lacks {', '.join(missing)})"
        for name, missing in sorted(lacks.items(), key=lambda item: len(item[1]))
    )
    return (
        f"the first row's fields ({', '.join(names)}) are no trace format's: {needs}; a "
        "misspelt field name?"
    )


def detect(path: Path, file: str) -> str:
    """The format of a trace file from its first line: a published one, else the project's
    CSV or JSONL when the line is theirs (ConfigError when none fits, naming what a JSON
    row lacks for each JSON format)."""
    line = _first_line(path, file)
    found = _published(line)
    if found is not None:
        return found
    if line.startswith("{"):
        misfit = _json_misfit(line)
        if misfit is not None:
            raise ConfigError.single(file, "", misfit, 1)
        return "jsonl"
    if "prompt_tokens" in {name.strip() for name in line.split(",")}:
        return "csv"
    raise ConfigError.single(
        file,
        "",
        f"cannot tell the trace format from its first line {line[:80]!r}; name it (one of "
        f"{', '.join(format_names())})",
        1,
    )


def _choose(path: Path, name: str, file: str) -> TraceFormat | str:
    """The format to read ``path`` with: ``name``, or for ``auto`` the published format its
    first line shows, else the format owning its suffix (whose reader then says what the
    file lacks), else the one its first line shows; or, as a string, what is wrong with the
    file as a whole. A first row that is a JSON object with no JSON format's fields is
    refused here, naming what each format needs (not read as ``jsonl`` by its suffix, whose
    reader could only say ``prompt_tokens`` is missing)."""
    if name != "auto":
        try:
            return get_format(name)
        except KeyError as exc:
            return str(exc.args[0])
    first = _first_line(path, file)
    published = _published(first)
    if published is not None:
        return get_format(published)
    misfit = _json_misfit(first) if first.startswith("{") else None
    if misfit is not None:
        raise ConfigError.single(file, "", misfit, 1)
    by_suffix = format_for(path)
    if by_suffix is not None:
        return by_suffix
    try:
        return get_format(detect(path, file))
    except ConfigError:
        return (
            f"unknown format {path.suffix!r}; use {known_suffixes()}, or a published trace "
            f"({', '.join(SOURCE_COLUMNS)}) whose first line shows its format"
        )


def _skipped(value: Any) -> bool:
    """A zero token count: a failed request in the published traces."""
    return value == 0 or (isinstance(value, str) and value.strip() in ("0", "0.0"))


@dataclass
class _Rows:
    """What reading a trace found, collected compactly (8 bytes per value)."""

    trace_format: TraceFormat
    keep_columns: bool
    arrival: array[float] = field(default_factory=lambda: array("d"))
    prompt: array[int] = field(default_factory=lambda: array("q"))
    output: array[int] = field(default_factory=lambda: array("q"))
    acceptance: array[float] = field(default_factory=lambda: array("d"))
    expert: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))  # each row's line
    offsets: array[int] = field(default_factory=lambda: array("q", [0]))
    hashes: array[int] = field(default_factory=lambda: array("q"))
    columns: dict[str, list[str]] = field(default_factory=dict)
    has: dict[str, bool] = field(default_factory=dict)
    skipped: int = 0
    first_line: int = 0  # the line of the first row read, kept or skipped (0: none yet)

    def optional(self, name: str) -> bool:
        """Whether the rows hold the optional column ``name`` (from the first row)."""
        return self.has.get(name, False)


@dataclass(frozen=True)
class Blocks:
    """The block size a trace's ``hash_ids`` are checked against, and what set it (for the
    message: ``prefix_cache.block_tokens in cluster.yaml``)."""

    tokens: int
    origin: str


class BlockSizeError(ConfigError):
    """A row's ``hash_ids`` contradict the block size (not a sign of a wrong format)."""


def blocks_problem(prompt: int, hashes: int, blocks: Blocks) -> str | None:
    """Why a row's number of block hashes contradicts the block size, or None.

    Mooncake's ``hash_ids`` name every block of the prompt, the last partial block
    included: ``ceil(input_length / block)`` ids. Every row of the published FAST'25 traces
    (conversation, synthetic: 16,024 rows) has exactly that many at 512-token blocks, so
    there is no slack: one id more or fewer means the ids name blocks of another size. A
    row without ``hash_ids`` is not checked (it has no cacheable blocks)."""
    expected = -(-prompt // blocks.tokens)
    if hashes == expected:
        return None
    return (
        f"{hashes:,} block hash{'' if hashes == 1 else 'es'} for input_length {prompt:,}, "
        f"expected ceil({prompt:,} / "
        f"{blocks.tokens:,}) = {expected:,} at {blocks.tokens:,}-token blocks "
        f"({blocks.origin}); the trace's blocks are another size (the published Mooncake "
        "traces': 512)"
    )


def _collect(
    lines: TraceLines,
    trace_format: TraceFormat,
    max_rows: int,
    replay: bool,
    blocks: Blocks | None = None,
    first_row: Callable[[ConfigError], ConfigError] | None = None,
) -> _Rows:
    """Check each row's values (module docstring) and collect them; with ``blocks``, each
    row's number of block hashes too (``blocks_problem``). Every bad row is named in one
    error (``TraceLines.bad_rows``), with a problem of the file as a whole when one ends the
    reading. An error at the first row read, before any good one, passes through
    ``first_row`` (which says how the format was chosen); when no row at all fits a format
    that was named, the first row's error alone is raised (the format is the likely fault,
    not each row)."""
    found = _Rows(trace_format, keep_columns=replay)
    try:
        _fill(found, lines, max_rows, blocks)
    except ConfigError as exc:  # the file's problem that ended the reading
        error = type(exc)([*lines.bad_rows(), *exc.issues])
    else:
        if not lines.bad:
            return found
        error = ConfigError(lines.bad_rows())
    first = error.issues[0].line or 0
    if (
        first_row is None
        or (found.first_line and found.first_line < first)
        or isinstance(error, (BlockSizeError, NotTextError))
    ):
        raise error
    noted = first_row(ConfigError(error.issues[:1])).issues
    if not found.prompt and not found.skipped:  # no row fits the format named: its first says why
        raise type(error)(noted)
    raise type(error)([*noted, *error.issues[1:]])


def _fill(found: _Rows, lines: TraceLines, max_rows: int, blocks: Blocks | None) -> None:
    """``_collect``'s loop: every row into ``found``."""
    trace_format, replay = found.trace_format, found.keep_columns
    published = trace_format.published
    arrival_check: Callable[[Any], float] = clock_seconds if published else seconds
    optional: tuple[tuple[str, Callable[[Any], Any], Any], ...] = (
        ("arrival_s", arrival_check, found.arrival),
        ("acceptance", probability, found.acceptance),
        ("expert", expert, found.expert),
    )
    has = found.has
    format_name = trace_format.name
    hashed = format_name == mooncake.NAME
    for line, row in trace_format.rows(lines):
        column = "arrival_s"
        found.first_line = found.first_line or line
        try:
            if row.get(column) in (None, ""):
                if published:
                    raise ValueProblem(f"missing value (every {format_name} trace row has one)")
                if replay:
                    raise ValueProblem("a cluster replays arrival times: every row needs one")
            if published and (
                _skipped(row.get("prompt_tokens")) or _skipped(row.get("output_tokens"))
            ):
                found.skipped += 1
                continue
            column = "prompt_tokens"
            prompt = tokens(row.get(column))
            column = "output_tokens"
            output = tokens(row.get(column))
            for column, check, values in optional:
                present = row.get(column) not in (None, "")
                if has.setdefault(column, present) != present:
                    raise ValueProblem(
                        "missing value (other rows have one)"
                        if has[column]
                        else "a value where earlier rows have none"
                    )
                if present:
                    values.append(check(row[column]))
        except ValueProblem as exc:
            missing = row.get(column) in (None, "") and column in ("prompt_tokens", "output_tokens")
            shown = SOURCE_COLUMNS.get(format_name, {}).get(column, column)
            lines.bad_row("missing value" if missing else str(exc), shown, line)
            if len(found.prompt) + lines.bad >= max_rows:
                break
            continue
        hashes = row.get("hash_ids", ()) if hashed else ()
        if blocks is not None and hashed and "hash_ids" in row:
            problem = blocks_problem(prompt, len(hashes), blocks)
            if problem is not None:
                raise BlockSizeError(lines.error(problem, "hash_ids", line).issues)
        found.prompt.append(prompt)
        found.output.append(output)
        found.lines.append(line)
        if hashed:
            found.hashes.extend(hashes)
            found.offsets.append(len(found.hashes))
        if found.keep_columns:
            for name, value in row.items():
                if name not in _OWN:
                    found.columns.setdefault(name, []).append(column_text(value))
        if len(found.prompt) + lines.bad >= max_rows:  # (a bad row is one of a run's rows)
            break
    if not found.prompt and not lines.bad:  # (bad rows: ``_collect`` names them)
        detail = f" ({found.skipped} failed rows skipped)" if found.skipped else ""
        raise lines.error(f"trace has no requests{detail}", line=1)


def _clock(found: _Rows, name: str, shift: bool) -> NDArray[np.float64] | None:
    """The arrival times, shifted to start at the earliest when ``shift``; a clock longer
    than the serving clock holds is refused at the first row past it, in the format's own
    column name."""
    if not found.optional("arrival_s"):
        return None
    arrival = np.frombuffer(found.arrival, dtype=np.float64).copy()
    if shift:
        arrival -= arrival.min()
    span = float(arrival.max())
    if not span <= MAX_ARRIVAL_S:
        first = int(np.flatnonzero(~(arrival <= MAX_ARRIVAL_S))[0])
        column = SOURCE_COLUMNS.get(found.trace_format.name, {}).get("arrival_s", "arrival_s")
        start = "after the earliest request" if shift else "on the trace's clock"
        raise ConfigError.single(
            name,
            column,
            f"this row arrives {float(arrival[first]):.4g} s {start} (the trace spans "
            f"{span:.4g} s), beyond the {MAX_ARRIVAL_S:.4g} s the serving clock holds; replay "
            "a window of it (a cluster's traffic.start and traffic.end)",
            found.lines[first],
        )
    return arrival


def _experts_within(found: _Rows, name: str, experts: int) -> None:
    """Refuse, at its line, the first row that asks for an expert the workload does not have
    (``experts`` of them, counted from 0): what each row holds is known before anything
    runs, so ``rdu-sim check`` refuses it as a run does."""
    if not found.optional("expert"):
        return  # a Composition of Experts refuses a trace without the column (serving.coe)
    column = np.frombuffer(found.expert, dtype=np.int64)
    beyond = np.flatnonzero(column >= experts)
    if beyond.size:
        first = int(beyond[0])
        raise ConfigError.single(
            name,
            "expert",
            f"expected an expert's index in 0..{experts - 1} (coe.experts is {experts}; "
            f"experts count from 0), got {int(column[first])}",
            found.lines[first],
        )


def trace_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a trace at all, or None: not found, a directory, not a
    regular file (a FIFO, ``/dev/null``), unreadable, empty. The one rule for a workload's
    trace, a cluster's and ``rdu-sim check`` on a trace file."""
    problem = file_problem(path)
    if problem == "file not found":
        return "not found (paths are relative to the file naming the trace)"
    if problem is not None:
        return problem
    try:
        size = path.stat().st_size
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}"
    return "is empty (a trace has a row per request)" if size == 0 else None


def _open(path: Path) -> tuple[BinaryIO, int] | str:
    """The file opened for reading and its size, or why it cannot be."""
    problem = trace_problem(path)
    if problem is not None:
        return problem
    try:
        size = path.stat().st_size
        stream = path.open("rb")
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}"
    return stream, size


def _named(
    path: Path, format: str, name: str, named_by: str
) -> Callable[[ConfigError], ConfigError]:
    """For an error at a trace's first row read in a format it was given (not ``auto``):
    the error with how the format was chosen, and what the first line looks like."""

    def note(exc: ConfigError) -> ConfigError:
        try:
            looks = detect(path, name)
        except ConfigError:
            looks = ""
        seen = f"; its first line looks like a {looks} trace" if looks and looks != format else ""
        said = f" (read as {format}: {named_by}{seen})"
        return ConfigError([replace(i, message=i.message + said) for i in exc.issues])

    return note


def _read(
    path: Path,
    format: str,
    name: str,
    refuse: Callable[[str], ConfigError],
    max_rows: int,
    replay: bool,
    blocks: Blocks | None = None,
    named_by: str = "",
) -> _Rows:
    opened = _open(path)
    if isinstance(opened, str):
        raise refuse(opened)
    stream, size = opened
    with stream:
        if size > MAX_TRACE_BYTES:
            raise ConfigError.single(name, "", f"trace is larger than {MAX_TRACE_BYTES} bytes", 1)
        trace_format = _choose(path, format, name)
        if isinstance(trace_format, str):
            raise refuse(trace_format)
        first_row = None
        if format != "auto":
            first_row = _named(path, format, name, named_by or f"the format named ({format!r})")
        lines = TraceLines(stream, name)
        return _collect(lines, trace_format, max(1, max_rows), replay, blocks, first_row)


def _refuse(
    name: str, workload_file: str, overrides: Mapping[str, Any]
) -> Callable[[str], ConfigError]:
    """An error about the trace file as a whole: named from the workload's field (with the
    override that set it, as every field an override set: ``config.overrides.overridden``),
    or, for a trace file on its own (``rdu-sim check trace.jsonl``), at the file itself."""

    def error(message: str) -> ConfigError:
        if not workload_file:
            return ConfigError.single(name, "", message)
        exc = ConfigError.single(
            workload_file, "serving.trace", f"trace {cut_middle(name)!r}: {message}"
        )
        return overridden(exc, workload_file, overrides)

    return error


def read_trace(
    path: str | Path,
    workload_file: str = "",
    max_rows: int = MAX_TRACE_ROWS,
    format: str = "auto",
    overrides: Mapping[str, Any] | None = None,
    experts: int | None = None,
) -> Trace:
    """The first `max_rows` requests of a workload's trace file; ConfigError naming the file
    and line (and, with ``workload_file``, the workload whose ``serving.trace`` it is, or
    the ``--set`` among ``overrides`` that named it: ``config.overrides.setting_origin``).
    With ``experts`` (a Composition of Experts' ``coe.experts``, when its popularity reads
    the trace), each row's expert must be below it (``_experts_within``)."""
    file = Path(path)
    name = str(file)
    overrides = overrides or {}
    named_by = (
        setting_origin("serving.trace_format", workload_file, overrides) if workload_file else ""
    )
    try:
        refuse = _refuse(name, workload_file, overrides)
        found = _read(file, format, name, refuse, max_rows, False, named_by=named_by)
        arrival = _clock(found, name, shift=found.trace_format.published)
        if experts is not None:
            _experts_within(found, name, experts)
    except ConfigError as exc:
        if not workload_file or exc.issues[0].field == "serving.trace":
            raise
        note = f" (the {setting_origin('serving.trace', workload_file, overrides)})"
        raise ConfigError([replace(i, message=i.message + note) for i in exc.issues]) from None
    return Trace(
        arrival_s=arrival,
        prompt_tokens=np.frombuffer(found.prompt, dtype=np.int64).copy(),
        output_tokens=np.frombuffer(found.output, dtype=np.int64).copy(),
        acceptance=(
            np.frombuffer(found.acceptance, dtype=np.float64).copy()
            if found.optional("acceptance")
            else None
        ),
        expert=(
            np.frombuffer(found.expert, dtype=np.int64).copy() if found.optional("expert") else None
        ),
        format=found.trace_format.name,
        skipped=found.skipped,
    )


def read_table(
    path: Path,
    format: str,
    file: str | None = None,
    *,
    blocks: Blocks | None = None,
    named_by: str = "",
) -> TraceTable:
    """A cluster's trace of ``format`` (or ``auto``), every request, its clock starting at
    the earliest, block hashes and the other columns kept; errors name ``file`` (default:
    the path). ``blocks``: the block size each row's ``hash_ids`` must fit
    (``blocks_problem``); ``named_by``: where a named ``format`` was set (for an error at
    the first row)."""
    name = file or str(path)

    def refuse(message: str) -> ConfigError:
        return ConfigError.single(name, "", f"trace: {message}")

    found = _read(path, format, name, refuse, EVERY_ROW, True, blocks, named_by)
    arrival = _clock(found, name, shift=True)
    assert arrival is not None  # replay: every row has one
    hashed = found.trace_format.name == mooncake.NAME
    columns: Mapping[str, NDArray[np.object_]] = {
        k: np.asarray(v, dtype=np.object_) for k, v in found.columns.items()
    }
    return TraceTable(
        format=found.trace_format.name,
        arrival_s=arrival,
        prompt_tokens=np.frombuffer(found.prompt, dtype=np.int64).copy(),
        output_tokens=np.frombuffer(found.output, dtype=np.int64).copy(),
        hash_offsets=np.frombuffer(found.offsets, dtype=np.int64).copy() if hashed else None,
        hash_values=np.frombuffer(found.hashes, dtype=np.int64).copy() if hashed else None,
        columns=columns,
        skipped=found.skipped,
        lines=np.frombuffer(found.lines, dtype=np.int64).copy(),
    )
