"""The sweep spec: a base workload, fixed overrides, axes to vary, metrics to keep.

A spec is a YAML file:

    name: llama8b-batch
    base: ../llama3.1-8b-1socket.yaml      # relative to the spec
    set: {serving.requests: 8}             # fixed overrides (optional)
    axes:                                  # grid product over these
      serving.batch_slots: [1, 2, 4, 8]
      hw.socket.hbm.bandwidth: {start: 1.0, stop: 3.2, num: 4, unit: TB/s}
    zip:                                   # groups whose axes vary together
      - {parallelism.tp: [1, 2, 4], hw.system.sockets: [1, 2, 4]}
    metrics: [decode_tokens_per_s, ttft_s.p50, memory.hbm.kv_bytes]

It is validated with the same strict pydantic models and ConfigError messages (file, field,
line, fix) as workloads, so a typo in a spec fails like a typo in a workload.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from rdu_sim.config import shipped
from rdu_sim.config.base import StrictModel
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.kinds import KIND_WORDS, file_kind_problem, refuse_other_kind
from rdu_sim.config.loader import LineMap, read_yaml, validate

MAX_AXIS_VALUES = 100_000  # one axis longer than this is a mistake (a step off by 1000x)


def _check_path(path: str) -> str:
    """A dotted field path: non-empty parts, no spaces."""
    if not path or any(not part or part != part.strip() for part in path.split(".")):
        raise ValueError(f"{path!r} is not a dotted field path like 'serving.batch_slots'")
    return path


class RangeSpec(StrictModel):
    """Evenly spaced values from `start` to `stop`, both inclusive.

    Give `step` (linear) or `num` (linear or `scale: log`). Integer start, stop and step give
    integers; so does an integer `num` range whose values all land on integers; a log range of
    integers is rounded to integers (an error if that repeats a value). `unit`
    turns each value into a unit string (`{start: 1, stop: 3, step: 1, unit: TB/s}` gives
    "1 TB/s", "2 TB/s", "3 TB/s"), parsed by the config like any other.
    """

    start: int | float = Field(description="first value")
    stop: int | float = Field(description="last value (included)")
    step: int | float | None = Field(default=None, description="spacing (linear ranges)")
    num: int | None = Field(
        default=None, ge=1, le=MAX_AXIS_VALUES, description="how many values, evenly spaced"
    )
    scale: Literal["linear", "log"] = Field(
        default="linear", description="linear, or log (evenly spaced logarithms; needs num)"
    )
    unit: str | None = Field(
        default=None, min_length=1, max_length=20, description="appended to each value (TB/s)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> RangeSpec:
        if not all(math.isfinite(v) for v in (self.start, self.stop)):
            raise ValueError("start and stop must be finite numbers")
        if (self.step is None) == (self.num is None):
            raise ValueError("give exactly one of step or num")
        if self.step is not None:
            if self.scale == "log":
                raise ValueError("scale: log needs num, not step")
            if not math.isfinite(self.step) or self.step == 0:
                raise ValueError(f"step must be a non-zero number, got {self.step}")
            if (self.stop - self.start) * self.step < 0:
                raise ValueError(
                    f"step {self.step} never reaches stop {self.stop} from start {self.start}"
                )
            steps = (self.stop - self.start) / self.step  # inf for a denormal step
            count = math.floor(steps + 1e-9) + 1 if steps < MAX_AXIS_VALUES else None
            if count is None or count > MAX_AXIS_VALUES:
                shown = f"{count}" if count else f"{steps + 1:.4g}"
                raise ValueError(f"the range has {shown} values; at most {MAX_AXIS_VALUES}")
        if self.scale == "log" and (self.start <= 0 or self.stop <= 0):
            raise ValueError("scale: log needs start and stop > 0")
        return self

    def values(self) -> list[Any]:
        """The range's values, in order, with the unit appended when given."""
        numbers = self._numbers()
        values: list[Any] = (
            numbers if self.unit is None else [f"{_short(v)} {self.unit}" for v in numbers]
        )
        if len(set(values)) != len(values):
            kind = "integer range" if all(isinstance(v, int) for v in numbers) else "range"
            raise ValueError(
                f"the {kind} {self.start}..{self.stop} repeats values after rounding; use "
                "fewer points or wider bounds"
            )
        return values

    def _numbers(self) -> list[int | float]:
        ints = isinstance(self.start, int) and isinstance(self.stop, int)
        if self.step is not None:
            ints = ints and isinstance(self.step, int)
            count = math.floor((self.stop - self.start) / self.step + 1e-9) + 1
            raw = [self.start + i * self.step for i in range(count)]
        else:
            num = self.num or 1
            if num == 1:
                raw = [self.start]
            elif self.scale == "log":
                ratio = math.log(self.stop / self.start) / (num - 1)
                raw = [self.start * math.exp(ratio * i) for i in range(num)]
            else:
                raw = [self.start + (self.stop - self.start) * i / (num - 1) for i in range(num)]
            raw[-1] = self.stop if num > 1 else raw[-1]
        if ints and self.num is not None and self.scale == "linear":
            ints = all(abs(v - round(v)) < 1e-9 for v in raw)  # 1..9 in 5 steps stays ints
        if ints:
            return [round(v) for v in raw]
        return [round(v, 12) for v in raw]


def _short(value: float) -> str:
    """1.0 -> '1', 2.5 -> '2.5': unit strings read like a human wrote them."""
    return f"{value:.12g}"


def _range_problem(error: Any) -> str:
    """One pydantic error inside a range mapping, in words."""
    where = ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(where, sorted(RangeSpec.model_fields), n=1)
        hint = f", did you mean {close[0]!r}?" if close else ""
        return f"unknown field {where!r}{hint}"
    text = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {text}" if where else text


def _axis(value: Any) -> Any:
    """An axis is a non-empty list of values or a range mapping; say which rule broke."""
    if isinstance(value, RangeSpec):
        return value
    if isinstance(value, dict):
        try:
            return RangeSpec.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(_range_problem(e) for e in exc.errors())
            raise ValueError(
                f"bad range ({problems}); a range is {{start, stop, step}} or "
                "{start, stop, num, scale: linear|log}, optional unit"
            ) from None
    if isinstance(value, list):
        if not value:
            raise ValueError("an axis needs at least one value")
        return value
    raise ValueError(
        f"an axis is a list of values or a range mapping, got {type(value).__name__} {value!r}"
    )


AxisValues = Annotated[list[Any] | RangeSpec, BeforeValidator(_axis)]


class EvaluatorSpec(StrictModel):
    """Which registered evaluator computes a point's metrics, and its options.

    The default, `simulate`, runs the full simulation (rdu_sim.api.run). `synthetic` is a
    cheap closed-form stand-in for tests and demos (see rdu_sim.sweep.evaluators).
    """

    name: str = Field(
        default="simulate",
        min_length=1,
        max_length=100,
        description="a registered evaluator: simulate (the full simulation) or synthetic",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="the evaluator's options")


class SweepSpec(StrictModel):
    """A sweep spec file, validated."""

    name: str | None = Field(
        default=None, min_length=1, max_length=200, description="default: the file's name"
    )
    description: str = Field(default="", description="what the sweep asks (free text)")
    base: str = Field(min_length=1, description="workload file, relative to the spec")
    set: dict[str, Any] = Field(default_factory=dict, description="fixed overrides")
    axes: dict[str, AxisValues] = Field(default_factory=dict, description="grid axes")
    zip: list[dict[str, AxisValues]] = Field(
        default_factory=list, description="groups of axes that vary together"
    )
    metrics: list[str] | None = Field(
        default=None, description="result keys to keep (dotted paths); all when omitted"
    )
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)

    @field_validator("set", "axes")
    @classmethod
    def _paths(cls, value: dict[str, Any]) -> dict[str, Any]:
        for path in value:
            _check_path(path)
        return value

    @field_validator("axes")
    @classmethod
    def _non_empty_axes(cls, value: dict[str, AxisValues]) -> dict[str, AxisValues]:
        for path, values in value.items():
            if isinstance(values, list) and not values:
                raise ValueError(f"axis {path!r} has no values")
        return value

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, value: list[dict[str, AxisValues]]) -> list[dict[str, AxisValues]]:
        for index, group in enumerate(value):
            if not group:
                raise ValueError(f"zip group {index} is empty")
            for path, values in group.items():
                _check_path(path)
                if isinstance(values, list) and not values:
                    raise ValueError(f"zip group {index}: axis {path!r} has no values")
        return value

    @field_validator("metrics")
    @classmethod
    def _metric_paths(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("metrics is empty; omit it to keep every metric")
        for path in value:
            _check_path(path)
        duplicates = sorted({m for m in value if value.count(m) > 1})
        if duplicates:
            raise ValueError(f"metrics repeat: {', '.join(duplicates)}")
        return value


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from: its file, lines and the base workload path."""

    spec: SweepSpec
    file: Path
    lines: LineMap
    base: Path  # absolute

    @property
    def name(self) -> str:
        """The spec's name, or its file stem."""
        return self.spec.name or self.file.stem

    def line(self, *path: str) -> int | None:
        """The line of a field in the spec file (the nearest enclosing one that is known)."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None

    def issue(self, message: str, *path: str) -> ConfigIssue:
        """A ConfigIssue at `path` in the spec file."""
        return ConfigIssue(str(self.file), ".".join(path), message, self.line(*path))

    def error(self, message: str, *path: str) -> ConfigError:
        """A ConfigError at `path` in the spec file."""
        return ConfigError([self.issue(message, *path)])


def _duplicates(loaded: LoadedSpec) -> None:
    """A field may be set by one place only: `set`, one axis, or one zip group; and a path
    may not lie inside another one given (``serving.seed`` and ``serving: {seed: 2}``): a
    mapping set at a path merges into the fields under it (``config.merge``), so which value a
    field set in both takes would be up to their order."""
    seen: dict[str, tuple[str, ...]] = {}
    spec = loaded.spec
    places: list[tuple[tuple[str, ...], str]] = [(("set", p), p) for p in spec.set]
    places += [(("axes", p), p) for p in spec.axes]
    places += [(("zip", str(i), p), p) for i, g in enumerate(spec.zip) for p in g]
    for where, path in places:
        if path in seen:
            first = ".".join(seen[path])
            raise loaded.error(
                f"{path!r} is already given at {first}; a field may vary in one place only", *where
            )
        parts = path.split(".")
        for other, at in seen.items():
            inner, outer = (path, other) if len(parts) > other.count(".") + 1 else (other, path)
            if inner.startswith(outer + "."):
                raise loaded.error(
                    f"{path!r} overlaps {other!r} (given at {'.'.join(at)}): {outer!r} "
                    f"holds {inner!r}, so which value wins would be up to their order; set the "
                    "field in one place only (both dotted, or both inside the mapping)",
                    *where,
                )
        seen[path] = where


def _value_key(value: Any) -> str:
    """What makes two written values one: type and content (8 and 8.0, true and 1, "1 TB/s"
    and "1000 GB/s" are different values; equal configs they resolve to are one point)."""
    return f"{type(value).__name__}:{json.dumps(value, sort_keys=True, default=str)}"


def _first_repeat(rows: Iterable[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The first row given a second time, or None."""
    seen: set[tuple[str, ...]] = set()
    for row in rows:
        key = tuple(_value_key(value) for value in row)
        if key in seen:
            return row
        seen.add(key)
    return None


def _repeated_values(loaded: LoadedSpec) -> None:
    """An axis lists each value once, and a zip group each row of its axes' values: a repeat
    is a slip, and its point would run only once. (A zipped axis may repeat a value where
    the group's other axes differ.) After `_zip_lengths`: a group's rows are whole."""
    for path, values in loaded.spec.axes.items():
        if not isinstance(values, list):
            continue  # a range refuses its own repeats (RangeSpec._numbers)
        repeat = _first_repeat((value,) for value in values)
        if repeat is not None:
            raise loaded.error(
                f"{repeat[0]!r} is listed twice; give each value once "
                "(a sweep runs each distinct point once)",
                "axes",
                path,
            )
    for index, group in enumerate(loaded.spec.zip):
        columns = [axis_values(loaded, v, ("zip", str(index), p)) for p, v in group.items()]
        repeat = _first_repeat(zip(*columns, strict=True))
        if repeat is not None:
            shown = ", ".join(f"{p}={v!r}" for p, v in zip(group, repeat, strict=True))
            raise loaded.error(
                f"the row {shown} is listed twice; give each row once "
                "(a sweep runs each distinct point once)",
                "zip",
                str(index),
            )


def _zip_lengths(loaded: LoadedSpec) -> None:
    """Axes zipped together must have equal lengths."""
    for index, group in enumerate(loaded.spec.zip):
        lengths = {
            path: len(axis_values(loaded, values, ("zip", str(index), path)))
            for path, values in group.items()
        }
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{p}: {n}" for p, n in lengths.items())
            raise loaded.error(
                f"zipped axes must have equal lengths, got {shown}", "zip", str(index)
            )


def axis_values(loaded: LoadedSpec, values: AxisValues, where: tuple[str, ...]) -> list[Any]:
    """The list of values of one axis (a list as given, or a range expanded)."""
    if isinstance(values, list):
        return list(values)
    try:
        return values.values()
    except ValueError as exc:
        raise loaded.error(str(exc), *where) from None


def load_spec(path: str | Path) -> LoadedSpec:
    """Read and validate a sweep spec file; every problem is a ConfigError naming the spec.
    ``path`` may also name a shipped sweep (``llama8b-batch``, ``rdu_sim.config.shipped``)."""
    file = shipped.locate(path, ("sweep",))
    data, lines = read_yaml(file)
    refuse_other_kind(data, str(file), "sweep")
    spec = validate(SweepSpec, data, str(file), lines)
    near = Path(spec.base)
    if not near.is_absolute():
        near = file.parent / near
    base = shipped.locate_near(near, spec.base, ("workload",))
    loaded = LoadedSpec(spec, file, lines, _resolved(base, file, lines))
    if not loaded.base.is_file():
        problem = (
            f"base workload {str(loaded.base)!r} not found (paths are relative to the spec file"
        )
        other = shipped.other_kind(spec.base, ("workload",))
        if other is not None:
            problem += f"; {spec.base!r} names a shipped {KIND_WORDS[other]}, not a workload)"
        else:
            with contextlib.suppress(ConfigError):  # no shipped files installed: no names
                names = ", ".join(shipped.names("workload"))
                problem += f"; a bare name is a shipped workload: {names}"
            problem += ")"
        raise loaded.error(problem, "base")
    _base_is_a_workload(loaded)
    _duplicates(loaded)
    _zip_lengths(loaded)
    _repeated_values(loaded)
    return loaded


def _base_is_a_workload(loaded: LoadedSpec) -> None:
    """A base that is another kind of config file (a cluster, a hardware file, a sweep spec)
    is one error at `base`, not one "unknown field" per top-level key of it."""
    problem = file_kind_problem(loaded.base, loaded.spec.base, "workload")
    if problem is not None:
        raise loaded.error(problem, "base")


def _resolved(path: Path, file: Path, lines: LineMap) -> Path:
    """`path` made absolute with its symbolic links followed; a loop is a ConfigError at
    `base` (Python raises RuntimeError or OSError for one, depending on its version)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        line = lines.get(("base",))
        problem = "a loop of symbolic links" if isinstance(exc, RuntimeError) else str(exc)
        raise ConfigError.single(str(file), "base", f"{str(path)!r}: {problem}", line) from None
