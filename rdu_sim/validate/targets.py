"""What a calibration compares: measured rows and published figures as targets, each with its
tolerance, and the units of simulation that produce their values.

A *target* is one measured value: a row of a measurement file (``rdu_sim.validate.
deployment``) or a published figure (``rdu_sim.validate.figures``, reused as it stands). Its
residual is the log-ratio of simulated to measured in units of its tolerance, so a target
exactly at its tolerance counts 1: ``log(simulated / measured) / log(1 + tolerance)``. A row's
tolerance is its set's (the spec's ``tolerance``); a point figure's its own; an "over X"
figure is a bound, 0 at or above its lowest passing value ``X (1 - tolerance)`` and the
log-ratio to it below (scaled by the figure's tolerance, or the set's where the figure's is
0). A figure the suite could not measure (NaN) or at or below zero counts as a value 1,000
times below its target.

A *unit* is what one simulation gives: one row's run (one value), or one run of the figure
suite (every figure at once, ``rdu_sim.validate.suite.run_suite``). Each unit runs on one or
more deployments (``rdu_sim.validate.scope``), which decide the parameters that reach it, and
has a key naming everything its result depends on (the resolved configuration of each of its
workloads with the overrides applied, the metric, the simulator's version and commit), the
key of the evaluation cache.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rdu_sim.validate.deployment import MeasuredPoint, simulate_run
from rdu_sim.validate.deployment_suite import Row, content_key
from rdu_sim.validate.scope import HW, Deployment, deployment_of, label_of, names_of

GROUP_KEYS = (
    "set",
    "machine",
    "hardware",
    "stack",
    "model",
    "tp",
    "metric",
    "method",
    "figure",
)
"""What a held-out group may select by: a measurement set (a file's stem, or ``figures``),
a machine (any hardware file a run's file is or extends), its own hardware file, a serving
stack, a model, a tensor-parallel degree, a metric, how a row was measured (``batch`` or
``full-load``), a figure's name."""

FIGURES_SET = "figures"
MISSING_RATIO = 1e-3
"""How far below its target an unmeasured (NaN) or non-positive simulated figure counts."""


@dataclass(frozen=True)
class Target:
    """One measured value the fit compares with its simulated counterpart."""

    id: str  # a row's file:line, or figures:NAME
    unit: int  # index of the unit that simulates it
    index: int  # position of its value among the unit's
    measured: float  # the measured or published value
    tolerance: float  # relative: a point's band, a bound's margin below its value
    scale: float  # the relative error its residual is scaled by
    bound: Literal["point", "at_least"] = "point"
    groups: tuple[tuple[str, str], ...] = ()  # (key, value), a key may repeat
    label: str = ""  # what reports show
    measure_unit: str = ""  # s, tokens/s, x, fraction
    aliases: tuple[tuple[str, str], ...] = ()  # other names of a group's value (names_of)
    key: str = ""  # a row's measurement by content (``deployment_suite.content_key``)

    @property
    def low(self) -> float:
        """The least passing simulated value of a bound."""
        return self.measured * (1.0 - self.tolerance)

    def values_of(self, key: str) -> list[str]:
        """The target's values of one group key."""
        return [value for k, value in self.groups if k == key]

    def answers(self, key: str, value: str) -> bool:
        """Whether the target is in group ``key=value``: by the value reports show, or by
        another name of it (a stack's ``name:``: ``scope.names_of``)."""
        return value in self.values_of(key) or (key, value) in self.aliases

    def names(self, key: str) -> list[str]:
        """Every name the target's values of ``key`` answer to (for an error)."""
        return [*self.values_of(key), *(v for k, v in self.aliases if k == key)]

    def residual(self, simulated: float) -> float:
        """The residual of ``simulated`` (module docstring)."""
        reference = self.low if self.bound == "at_least" else self.measured
        if not (math.isfinite(simulated) and simulated > 0):
            simulated = reference * MISSING_RATIO
        ratio = math.log(simulated / reference)
        return (min(0.0, ratio) if self.bound == "at_least" else ratio) / math.log1p(self.scale)

    def relative_error(self, simulated: float) -> float:
        """simulated / measured - 1 (NaN when nothing was measured)."""
        return simulated / self.measured - 1.0 if math.isfinite(simulated) else math.nan


@dataclass(frozen=True)
class Evaluated:
    """What one unit's simulation gave: its targets' values (NaN: a figure not measured)
    and, for a row, the batch slots its run ran at."""

    values: tuple[float, ...]
    batch_slots: tuple[int, ...] = ()


def _digest(described: Mapping[str, Any]) -> str:
    from rdu_sim.provenance import simulator

    text = json.dumps({**described, "simulator": simulator().label}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RowUnit:
    """One measured row's run."""

    point: MeasuredPoint
    deployments: tuple[Deployment, ...]

    kind = "row"
    size = 1

    @property
    def name(self) -> str:
        """The row, as reports and the cache name it."""
        return self.point.source

    def parts(self, base: Sequence[str]) -> list[list[str]]:
        """The overrides every run of the unit takes, per deployment: the caller's."""
        return [list(base)]

    def key(self, overrides: Sequence[Sequence[str]]) -> str:
        """Everything the run depends on, hashed."""
        from rdu_sim.provenance import resolved_config

        config = resolved_config(self.point.scenario(overrides[0]))
        return _digest({"row": config, "metric": self.point.metric})

    def run(self, overrides: Sequence[Sequence[str]]) -> Evaluated:
        """Simulate the row."""
        done = simulate_run(self.point, overrides[0])
        return Evaluated((done.value,), (done.batch_slots,))


@dataclass(frozen=True)
class FiguresUnit:
    """One run of the figure suite: the DeepSeek-R1 deployment runs (first deployment) and
    the Kernel Looping steps (second), every figure at once."""

    names: tuple[str, ...]
    quick: bool
    deployments: tuple[Deployment, ...]

    kind = "figures"

    @property
    def size(self) -> int:
        """How many values a run gives."""
        return len(self.names)

    @property
    def name(self) -> str:
        """How reports and the cache name the unit."""
        return FIGURES_SET + (" (quick)" if self.quick else "")

    def parts(self, base: Sequence[str]) -> list[list[str]]:
        """The overrides every run of the unit takes, per deployment: the caller's on the
        DeepSeek-R1 runs, their ``hw.`` ones on the Kernel Looping steps (another workload
        on the same hardware)."""
        return [list(base), [o for o in base if o.strip().startswith(HW)]]

    def key(self, overrides: Sequence[Sequence[str]]) -> str:
        """Everything the suite's runs depend on, hashed."""
        from rdu_sim import api
        from rdu_sim.provenance import resolved_config
        from rdu_sim.validate.decode_scaling import LLAMA_WORKLOAD
        from rdu_sim.validate.suite import FULL_WORKLOAD, SNAPSTREAM_WORKLOAD

        configs = [
            resolved_config(api.load(path, list(ovr)))
            for path, ovr in (
                (SNAPSTREAM_WORKLOAD, overrides[0]),
                (FULL_WORKLOAD, overrides[0]),
                (LLAMA_WORKLOAD, scaling_step(overrides[1])),
            )
        ]
        return _digest({"figures": list(self.names), "quick": self.quick, "configs": configs})

    def run(self, overrides: Sequence[Sequence[str]]) -> Evaluated:
        """Run the suite (in this process: the calibration spreads units over workers)."""
        from rdu_sim.validate.suite import run_suite

        rows = run_suite(
            quick=self.quick,
            overrides=overrides[0],
            scaling_overrides=overrides[1],
            parallel=False,
        ).rows
        found = {row.figure.name: row.simulated for row in rows}
        return Evaluated(tuple(float(found[name]) for name in self.names))


def scaling_step(overrides: Sequence[str]) -> list[str]:
    """The overrides of one of the Kernel Looping steps (``decode_scaling``): what they run
    on (the hardware file, the stack the steps name) is what every one of them runs on."""
    from rdu_sim.validate.decode_scaling import decode_overrides

    return [*overrides, *decode_overrides("llama-3.1-8b", 8, True)]


Unit = RowUnit | FiguresUnit


def _aliases(deployment: Deployment) -> tuple[tuple[str, str], ...]:
    """The other names (``names_of``) of a run's machines, hardware file and stack."""
    return (
        *(("machine", name) for path in deployment.chain for name in names_of(str(path))[1:]),
        *(("hardware", name) for name in names_of(str(deployment.hardware))[1:]),
        *(("stack", name) for name in names_of(deployment.stack)[1:]),
    )


def _row_groups(point: MeasuredPoint, deployment: Deployment) -> tuple[tuple[str, str], ...]:
    return (
        ("set", Path(point.file).stem),
        *(("machine", path.stem) for path in deployment.chain),
        ("hardware", deployment.hardware.stem),
        ("stack", label_of(deployment.stack)),
        ("model", point.model),
        ("tp", str(point.tp)),
        ("metric", point.metric),
        ("method", point.method),
    )


def row_targets(
    rows: Sequence[Row], tolerance: float, first: int = 0
) -> tuple[list[Unit], list[Target]]:
    """One unit and one target per resolved row (``deployment_suite.resolve_rows``, as
    ``validate --suite deployment`` resolves them; units numbered from ``first``)."""
    from rdu_sim.provenance import shown_file

    units: list[Unit] = []
    targets: list[Target] = []
    aliases: dict[Deployment, tuple[tuple[str, str], ...]] = {}
    for row in rows:
        point, deployment = row.point, row.deployment
        if deployment not in aliases:
            aliases[deployment] = _aliases(deployment)
        units.append(RowUnit(point, (deployment,)))
        file, _, line = point.source.rpartition(":")
        targets.append(
            Target(
                id=f"{shown_file(file)}:{line}",
                unit=first + len(units) - 1,
                index=0,
                measured=point.measured,
                tolerance=tolerance,
                scale=tolerance,
                groups=_row_groups(point, deployment),
                label=point.label or point.source,
                measure_unit=point.unit,
                aliases=aliases[deployment],
                key=content_key(row),
            )
        )
    return units, targets


def figure_targets(
    names: Iterable[str] | None,
    quick: bool,
    tolerance: float,
    overrides: Sequence[str] = (),
    unit: int = 0,
) -> tuple[FiguresUnit, list[Target]]:
    """The published figures (``names``, or all) as targets of one suite unit numbered
    ``unit``; ``tolerance`` scales the residual of a bound whose own tolerance is 0."""
    from rdu_sim import api
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.validate.decode_scaling import LLAMA_WORKLOAD
    from rdu_sim.validate.figures import FIGURES
    from rdu_sim.validate.suite import FULL_WORKLOAD, SNAPSTREAM_WORKLOAD

    known = {figure.name: figure for figure in FIGURES}
    chosen = list(known) if names is None else list(names)
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ConfigError.single(
            "figures", "names", f"unknown figure(s) {unknown}; the figures: {', '.join(known)}"
        )
    deployment, full = (
        deployment_of(api.load(path, list(overrides)))
        for path in (SNAPSTREAM_WORKLOAD, FULL_WORKLOAD)
    )
    if deployment != full:
        raise ConfigError.single(
            "figures",
            "",
            "the SnapStream and full-attention workloads run on different "
            "hardware or stacks: one parameter set cannot describe both",
        )
    suite = FiguresUnit(tuple(chosen), quick, ())
    scaling = deployment_of(api.load(LLAMA_WORKLOAD, scaling_step(suite.parts(overrides)[1])))
    suite = FiguresUnit(tuple(chosen), quick, (deployment, scaling))
    targets = []
    for index, name in enumerate(chosen):
        figure = known[name]
        groups = [
            ("set", FIGURES_SET),
            ("figure", name),
            ("metric", name),
            *(("machine", p.stem) for d in suite.deployments for p in d.chain),
            *(("hardware", d.hardware.stem) for d in suite.deployments),
            ("stack", figure.stack or label_of(deployment.stack)),
        ]
        targets.append(
            Target(
                id=f"{FIGURES_SET}:{name}",
                unit=unit,
                index=index,
                measured=figure.published,
                tolerance=figure.tolerance,
                scale=figure.tolerance if figure.tolerance > 0 else tolerance,
                bound=figure.bound,
                groups=tuple(dict.fromkeys(groups)),
                label=name,
                measure_unit=figure.unit,
            )
        )
    return suite, targets
