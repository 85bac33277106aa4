"""A calibration spec: the measurement sets, the parameters with their bounds and scopes, and the
held-out groups of one fit, in a YAML file anyone can rerun (``rdu-sim calibrate joint``).

```yaml
name: joint
measurements: [argonne-sn40l, argonne-h100, trtllm-h100-max-throughput]  # files or names
tolerance: 0.10          # a row's residual is its log-error over log(1 + tolerance)
figures: {quick: true}   # the published figures rdu-sim validate holds (optional)
fit:                     # --fit's syntax: [SCOPE:]PATH=LOW:HIGH
  - "sn40l:hw.system.intra_node_link.bandwidth=8 GB/s:64 GB/s"
held_out:                # groups, never single rows: rdu_sim.validate.holdout
  - {model: llama-3.1-70b}
max_evaluations: 40
overrides: []            # --set on every run, before the fitted values
```

Paths in the spec (measurement files, scopes) are relative to the spec's folder, else
shipped names. The shipped specs are in ``calibrations/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from rdu_sim.config.base import StrictModel
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.kinds import refuse_other_kind
from rdu_sim.config.loader import LineMap, validate
from rdu_sim.config.yaml_io import read_yaml
from rdu_sim.validate.given import Given
from rdu_sim.validate.holdout import Selector, selector_from
from rdu_sim.validate.scope import FitParameter, parse_fit

MAX_ITEMS = 100


class FigureSet(StrictModel):
    """The published figures ``rdu-sim validate`` holds, as targets of the fit."""

    quick: bool = Field(
        default=True,
        description="run the suite as `validate --quick` (3 requests per slot in its "
        "deployment runs): the same code path, a few seconds",
    )
    names: list[str] | None = Field(
        default=None, max_length=MAX_ITEMS, description="the figures to fit (default: every one)"
    )


class CalibrationSpecFile(StrictModel):
    """A calibration spec file."""

    name: str = Field(min_length=1, max_length=200, description="the spec's name")
    description: str = Field(default="", max_length=10_000, description="free text")
    measurements: list[str] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="measurement files: shipped names or paths relative to this file",
    )
    tolerance: float = Field(
        default=0.10,
        gt=0,
        le=10,
        description="the relative error a measured row's residual is scaled by (and an "
        "'over X' figure's whose own tolerance is 0)",
    )
    figures: FigureSet | None = Field(default=None, description="the published figures")
    fit: list[str] = Field(
        min_length=1,
        max_length=MAX_ITEMS,
        description="parameters: [SCOPE:]hw.FIELD=LOW:HIGH or [SCOPE:]stack.FIELD=LOW:HIGH",
    )
    held_out: list[dict[str, str | int]] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="held-out groups, each a mapping such as {model: llama-3.1-70b}",
    )
    max_evaluations: int = Field(
        default=40,
        ge=1,
        le=10_000,
        description="most fit steps per group of parameters (slopes are evaluated besides)",
    )
    overrides: list[str] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="--set on every run"
    )


@dataclass(frozen=True)
class CalibrationSpec:
    """A spec file, read and checked: its parameters and held-out groups parsed."""

    path: Path
    file: CalibrationSpecFile
    parameters: tuple[FitParameter, ...]
    held_out: tuple[Selector, ...]
    lines: LineMap = field(default_factory=dict, compare=False)  # each entry's line

    def given(self, *path: str) -> Given:
        """The entry at ``path`` (``fit``, ``0``), for its errors: this file, its line."""
        return Given.spec(str(self.path), ".".join(path), _line(self.lines, *path))

    @property
    def base(self) -> Path:
        """The folder relative paths in the spec start from."""
        return self.path.parent

    def measurement_paths(self) -> list[Path]:
        """The measurement files it names (relative to the spec, else shipped)."""
        from rdu_sim.config import shipped

        paths = []
        for index, text in enumerate(self.file.measurements):
            found = shipped.locate_near(shipped.written_in(self.path, text), text, ("measurement",))
            if not found.is_file():
                raise self.given("measurements", str(index)).error(
                    f"{text!r}: no measurement file of that name or path (shipped: "
                    f"{', '.join(shipped.names('measurement'))})"
                )
            paths.append(found)
        return paths


def _line(lines: LineMap, *path: str) -> int | None:
    return lines.get(tuple(path))


def read_spec(path: Path) -> CalibrationSpec:
    """Read and check a spec file (ConfigError naming the file, field and line)."""
    data, lines = read_yaml(path)
    refuse_other_kind(data, str(path), "calibration")
    spec = validate(CalibrationSpecFile, data, str(path), lines)
    if not spec.measurements and spec.figures is None:
        raise ConfigError.single(str(path), "measurements", "name a measurement file or figures")
    parameters = [
        parse_fit(text, Given.spec(str(path), f"fit.{index}", _line(lines, "fit", str(index))))
        for index, text in enumerate(spec.fit)
    ]
    held = [
        selector_from(
            entry,
            Given.spec(str(path), f"held_out.{index}", _line(lines, "held_out", str(index))),
        )
        for index, entry in enumerate(spec.held_out)
    ]
    return CalibrationSpec(path, spec, tuple(parameters), tuple(held), lines)
