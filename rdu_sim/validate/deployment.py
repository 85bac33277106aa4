"""Measured deployments as data: the points, one simulation per point, and their errors.

A measurement file is a CSV (comment lines start with ``#``: its citation and method) with
one measured point per row and these columns:

- ``hardware``: the hardware file the deployment is simulated on (a shipped name or a path);
- ``model``: a model preset (``rdu-sim inspect model --list``);
- ``tp``: devices per model instance (tensor parallel);
- ``batch``: requests sent together (every one arrives at time 0);
- ``input_tokens``, ``output_tokens``: each request's prompt and output lengths;
- ``metric``: ``e2e_s``, the batch's end-to-end seconds (the last request's completion), or
  ``ttft_s``, the batch's mean time to first token;
- ``measured_s``: the measured value, in seconds;
- ``label`` (optional): free text reports show (the source's system or model name).

Each point runs through ``rdu_sim.api.run`` (the code path of ``rdu-sim run``): ``batch``
slots, ``batch`` requests at once, fixed lengths, full attention, 16-bit weights and KV,
kernel looping on SN40L. ``validate --suite deployment`` and ``calibrate`` read points here.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.yaml_io import file_problem

if TYPE_CHECKING:
    from rdu_sim.scenario import Scenario

COLUMNS = (
    "hardware",
    "model",
    "tp",
    "batch",
    "input_tokens",
    "output_tokens",
    "metric",
    "measured_s",
)
METRICS = ("e2e_s", "ttft_s")
MAX_POINTS = 10_000
MAX_FILE_BYTES = 10 << 20
MAX_TOKENS = 1 << 20
MIN_CONTEXT = 4096
"""The least ``serving.max_context`` a point's workload gets (its decode buckets start below)."""


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured point of a deployment (one row of a measurement file)."""

    hardware: str
    model: str
    tp: int
    batch: int
    input_tokens: int
    output_tokens: int
    metric: str
    measured_s: float
    label: str = ""
    source: str = ""  # file:line, for reports and errors

    @property
    def file(self) -> str:
        """The measurement file the point came from (relative paths inside resolve from it)."""
        return self.source.rsplit(":", 1)[0]

    def scenario(self, overrides: Sequence[str] = ()) -> Scenario:
        """The validated workload that simulates this point."""
        from rdu_sim.scenario import build_scenario

        return build_scenario(self.workload(), workload_file=self.file, overrides=overrides)

    def workload(self) -> dict[str, Any]:
        """The workload mapping that simulates this point."""
        data: dict[str, Any] = {
            "name": f"measured-{self.model}-b{self.batch}-{self.input_tokens}",
            "hardware": self.hardware,
            "model": self.model,
            "dtypes": {"weights": "bf16", "kv": "bf16", "activations": "bf16"},
            "parallelism": {"tp": self.tp},
            "kv": {"policy": "full"},
            "serving": {
                "batch_slots": self.batch,
                "max_context": max(MIN_CONTEXT, self.input_tokens + self.output_tokens),
                "prompt_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "arrival": {"process": "all_at_once"},
                "requests": self.batch,
                "seed": 0,
            },
        }
        return data


def _int(text: str, field: str, where: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError.single(where, field, f"expected an integer, got {text!r}") from None
    if not low <= value <= high:
        raise ConfigError.single(where, field, f"must be in {low}..{high}, got {value}")
    return value


def _seconds(text: str, where: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError.single(where, "measured_s", f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1e6:
        raise ConfigError.single(where, "measured_s", f"must be in (0, 1e6] s, got {value}")
    return value


def read_points(path: Path) -> list[MeasuredPoint]:
    """The points of one measurement file (ConfigError naming the file, line and column)."""
    problem = file_problem(path)
    if problem is not None:
        raise ConfigError.single(str(path), "", problem)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError.single(str(path), "", f"larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError.single(str(path), "", "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError.single(str(path), "", f"cannot read: {exc.strerror}") from None
    numbered = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not numbered:
        raise ConfigError.single(str(path), "", "no header row and no points")
    header = next(csv.reader([numbered[0][1]]))
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ConfigError.single(
            str(path), "", f"header lacks column(s) {missing}; expected {list(COLUMNS)}"
        )
    if len(set(header)) != len(header):
        raise ConfigError.single(str(path), "", f"a column is named twice in {header}")
    if len(numbered) - 1 > MAX_POINTS:
        raise ConfigError.single(str(path), "", f"more than {MAX_POINTS} points")
    points = []
    for number, line in numbered[1:]:
        where = f"{path}:{number}"
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) != len(header):
            raise ConfigError.single(
                where, "", f"{len(cells)} cells where the header has {len(header)}"
            )
        row = dict(zip(header, cells, strict=True))
        metric = row["metric"].strip()
        if metric not in METRICS:
            raise ConfigError.single(where, "metric", f"must be one of {METRICS}, got {metric!r}")
        point = MeasuredPoint(
            hardware=row["hardware"].strip(),
            model=row["model"].strip(),
            tp=_int(row["tp"], "tp", where, 1, 4096),
            batch=_int(row["batch"], "batch", where, 1, 65536),
            input_tokens=_int(row["input_tokens"], "input_tokens", where, 1, MAX_TOKENS),
            output_tokens=_int(row["output_tokens"], "output_tokens", where, 1, MAX_TOKENS),
            metric=metric,
            measured_s=_seconds(row["measured_s"], where),
            label=row.get("label", "").strip(),
            source=where,
        )
        for field in ("hardware", "model"):
            if not getattr(point, field):
                raise ConfigError.single(where, field, "is empty")
        points.append(point)
    if not points:
        raise ConfigError.single(str(path), "", "no points below the header")
    return points


def shipped_files() -> list[Path]:
    """The shipped measurement files, sorted by name."""
    from rdu_sim.config import shipped

    return sorted((shipped.root() / shipped.KINDS["measurement"]).glob("*.csv"))


def read_all(paths: Iterable[Path]) -> list[MeasuredPoint]:
    """The points of several files, in file then row order."""
    return [point for path in paths for point in read_points(path)]


def simulate(point: MeasuredPoint, overrides: Sequence[str] = ()) -> float:
    """The simulated value of ``point``'s metric, in seconds (``hw.`` overrides apply to its
    hardware file)."""
    from rdu_sim import api

    summary = api.run(point.scenario(overrides)).summary()
    value = summary.makespan_s if point.metric == "e2e_s" else summary.ttft_s.mean
    if value is None:
        raise ValueError(f"{point.source}: the run completed no request")
    return float(value)


@dataclass(frozen=True)
class PointResult:
    """A point, its simulated value and the relative error (simulated / measured - 1)."""

    point: MeasuredPoint
    simulated_s: float

    @property
    def relative_error(self) -> float:
        """Simulated over measured, less one: negative when the simulator is faster."""
        return self.simulated_s / self.point.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the point's fields, the simulated value and the error."""
        return {
            **asdict(self.point),
            "simulated_s": self.simulated_s,
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


def summarize(results: Sequence[PointResult], group: str) -> ErrorSummary:
    """The errors of ``results`` as one group."""
    errors = np.abs([r.relative_error for r in results])
    worst = int(np.argmax(errors))
    return ErrorSummary(
        group=group,
        points=len(results),
        median_abs_error=float(np.median(errors)),
        worst_abs_error=float(errors[worst]),
        worst_point=results[worst].point.source,
    )


def by_hardware(results: Sequence[PointResult]) -> list[ErrorSummary]:
    """One summary per hardware file, in order of first appearance."""
    groups: dict[str, list[PointResult]] = {}
    for result in results:
        groups.setdefault(result.point.hardware, []).append(result)
    return [summarize(rows, name) for name, rows in groups.items()]
