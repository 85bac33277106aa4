"""From what the user gave (a spec file, or measurement files and ``--fit`` options) to a
checked calibration problem, before anything is simulated.

Every row's workload is built (its model, tp, hardware, stack and dtypes checked: a row that
cannot run fails at once, naming its file and line), the figure suite's workloads are loaded,
held-out groups are split off, scopes are resolved, and each parameter is tried at both of
its bounds on every kind of run it reaches, so a field that does not exist there or a bound
its field refuses fails before the first simulation, naming the ``--fit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import given, override_note
from rdu_sim.config.yaml_io import checked_file
from rdu_sim.validate.calibration_spec import CalibrationSpec, read_spec
from rdu_sim.validate.deployment_suite import read_rows
from rdu_sim.validate.holdout import Selector, split
from rdu_sim.validate.measurement_file import read_each
from rdu_sim.validate.overlays import held_out_in, read_overlay
from rdu_sim.validate.scope import (
    FIT,
    Deployment,
    FitParameter,
    Fixed,
    Scoped,
    fixed_overrides,
    label_of,
    overrides_for,
    quantity_text,
    resolve,
    runtime_of,
)
from rdu_sim.validate.targets import Target, Unit, figure_targets, row_targets


@dataclass(frozen=True)
class Problem:
    """What to fit: targets, the units simulating them, parameters, the held-out split."""

    units: tuple[Unit, ...]
    targets: tuple[Target, ...]
    parameters: tuple[Scoped, ...]
    train: tuple[int, ...]
    held_out: tuple[int, ...]
    overrides: tuple[str, ...] = ()  # --set on every run, before the fitted values
    fixed: tuple[Fixed, ...] = ()  # values passed back (--overlay), where they reach

    def __post_init__(self) -> None:
        if not self.parameters:
            raise ConfigError.single("--fit", "", "name at least one parameter to fit")
        for one in self.parameters:
            if not any(self._reaches(one, self.targets[i]) for i in self.train):
                raise one.parameter.given.error("reaches no trained row or figure (all held out?)")
            if one.parameter.kind == "machine":
                self._spans_stacks(one)

    def blocks(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The parameters in groups no trained target joins (two parameters are in one group
        when a trained target reaches both), each with the trained targets it reaches, in
        the parameters' order: groups that share no target are separate fits (a machine and
        its stacks), so what moves one never moves another's values."""
        n = len(self.parameters)
        group = list(range(n))

        def root(i: int) -> int:
            while group[i] != i:
                group[i] = group[group[i]]
                i = group[i]
            return i

        reached = {
            i: [k for k in range(n) if self._reaches(self.parameters[k], self.targets[i])]
            for i in self.train
        }
        for ks in reached.values():
            for k in ks[1:]:
                a, b = root(ks[0]), root(k)
                if a != b:
                    group[max(a, b)] = min(a, b)
        members: dict[int, list[int]] = {}
        for k in range(n):
            members.setdefault(root(k), []).append(k)
        return [
            (tuple(ks), tuple(i for i in self.train if reached[i] and root(reached[i][0]) == r))
            for r, ks in sorted(members.items())
        ]

    def _reaches(self, one: Scoped, target: Target) -> bool:
        return any(one.reaches(d) for d in self.units[target.unit].deployments)

    def reaching(self, target: int) -> tuple[int, ...]:
        """The parameters (indices) whose value reaches target ``target``'s runs."""
        return tuple(
            k for k, one in enumerate(self.parameters) if self._reaches(one, self.targets[target])
        )

    def _spans_stacks(self, one: Scoped) -> None:
        """A machine's parameter is one value under every stack it runs: fitted on one
        stack's measurements alone it would be that stack's, so it is refused. Stacks are
        told apart by what they run (``runtime_of``): a copy that only renames a stack is
        the same stack. ``none`` (no runtime) is a stack of its own; rows measured under a
        real stack but labelled ``none`` cannot be told from the file, and would pass."""
        stacks = {
            d.stack
            for i in self.train
            for d in self.units[self.targets[i].unit].deployments
            if one.reaches(d)
        }
        runtimes: dict[str, list[str]] = {}
        for stack in sorted(stacks):
            runtimes.setdefault(runtime_of(stack), []).append(label_of(stack))
        if len(runtimes) < 2:
            # by name: an order by path would depend on where the files are
            names = ", ".join(sorted(label_of(s) for s in stacks))
            alike = ", which run identically" if len(stacks) > 1 else ""
            raise one.parameter.given.error(
                f"a hardware parameter is fitted on the rows of one serving stack only "
                f"({names}{alike}): a machine's value must hold under every stack it runs, "
                "so fit it on at least two stacks' measurements (or fit a stack's own "
                "parameter instead)"
            )

    def unit_overrides(self, unit: int, values: Sequence[float | None]) -> list[list[str]]:
        """The overrides of each of ``unit``'s deployments at parameter ``values`` (None: the
        parameter is not applied, its file's own value stays)."""
        owner = self.units[unit]
        return [
            [
                *base,
                *fixed_overrides(self.fixed, deployment),
                *overrides_for(self.parameters, values, deployment),
            ]
            for base, deployment in zip(owner.parts(self.overrides), owner.deployments, strict=True)
        ]


@dataclass(frozen=True)
class Inputs:
    """What a calibration is asked: from a spec file or the command line."""

    measurements: tuple[Path, ...]
    parameters: tuple[FitParameter, ...]
    held_out: tuple[Selector, ...] = ()
    tolerance: float = 0.10
    figures: bool = False
    figure_names: tuple[str, ...] | None = None
    quick: bool = True
    hardware: str | None = None  # fit only the rows on this hardware file
    overrides: tuple[str, ...] = ()
    overlays: tuple[Path, ...] = ()
    base: Path = Path()  # the folder scopes written as paths start from
    source: str = "--holdout"  # where held-out groups were given, for messages


def _chosen_hardware(text: str) -> Path:
    from rdu_sim.config import shipped

    if not text.strip():
        raise ConfigError.single("--hardware", "", "is empty: name a hardware file")
    return checked_file(shipped.locate(text, ("hardware",))).resolve()


def build_problem(inputs: Inputs) -> Problem:
    """The checked problem (ConfigErrors naming the file, row or option at fault)."""
    overrides = list(inputs.overrides)
    paths = inputs.measurements
    rows = read_rows(paths, read_each(paths), overrides)  # every bad row of every file named
    if inputs.hardware is not None:
        chosen = _chosen_hardware(inputs.hardware)
        kept = [row for row in rows if row.deployment.hardware == chosen]
        if not kept:
            names = ", ".join(sorted({row.deployment.hardware.stem for row in rows}))
            raise ConfigError.single(
                "--hardware", inputs.hardware, f"no measured row runs on it (they run on {names})"
            )
        rows = kept
    units: list[Unit] = []
    targets: list[Target] = []
    if rows:
        row_units, row_target_list = row_targets(rows, inputs.tolerance)
        units.extend(row_units)
        targets.extend(row_target_list)
    if inputs.figures:
        suite, figure_list = figure_targets(
            inputs.figure_names, inputs.quick, inputs.tolerance, overrides, unit=len(units)
        )
        units.append(suite)
        targets.extend(figure_list)
    if not targets:
        raise ConfigError.single("calibrate", "", "no measured rows or figures to fit")
    train, held = split(targets, inputs.held_out, inputs.source)
    trained = [d for i in train for d in units[targets[i].unit].deployments]
    scoped = resolve(inputs.parameters, trained, inputs.base)
    for path in inputs.overlays:  # one fitted on a target held out here would leak it
        held_out_in(path, [(targets[i].id, targets[i].key) for i in held])
    fixed = tuple(one for path in inputs.overlays for one in read_overlay(path))
    problem = Problem(
        tuple(units), tuple(targets), tuple(scoped), train, held, tuple(overrides), fixed
    )
    check_bounds(problem)
    return problem


def check_bounds(problem: Problem) -> None:
    """Each parameter at its low and its high bound on one run of every deployment it
    reaches (the workloads built, nothing simulated); a ConfigError naming the ``--fit``."""
    for number, one in enumerate(problem.parameters):
        for index in _one_unit_per_deployment(problem, one):
            for side, bound in (("low", one.parameter.low), ("high", one.parameter.high)):
                values = [
                    bound if i == number else other.parameter.low
                    for i, other in enumerate(problem.parameters)
                ]
                try:
                    problem.units[index].key(problem.unit_overrides(index, values))
                except ConfigError as exc:
                    issue = exc.issues[-1]
                    # the value is the fit's bound, not a --set the user gave
                    message = issue.message
                    note = override_note(one.parameter.path, FIT)
                    message = message.replace(f" {note}", "")
                    shown = quantity_text(bound, one.parameter.unit)
                    raise one.parameter.given.error(
                        f"at its {side} bound ({shown}) on {problem.units[index].name}: "
                        f"{issue.field + ': ' if issue.field else ''}{message}"
                    ) from None


def _one_unit_per_deployment(problem: Problem, one: Scoped) -> list[int]:
    seen: set[tuple[str, Deployment]] = set()
    chosen = []
    for index, unit in enumerate(problem.units):
        reached = tuple(d for d in unit.deployments if one.reaches(d))
        key = (unit.kind, reached[0]) if reached else None
        if key is not None and key not in seen:
            seen.add(key)
            chosen.append(index)
    return chosen


def spec_inputs(
    spec: CalibrationSpec, overrides: Sequence[str] = (), overlays: Sequence[Path] = ()
) -> Inputs:
    """What a spec file asks (``overrides`` and ``overlays`` added from the command line)."""
    figures = spec.file.figures
    return Inputs(
        measurements=tuple(spec.measurement_paths()),
        parameters=spec.parameters,
        held_out=spec.held_out,
        tolerance=spec.file.tolerance,
        figures=figures is not None,
        figure_names=None if figures is None or figures.names is None else tuple(figures.names),
        quick=True if figures is None else figures.quick,
        overrides=(*given(spec.file.overrides, f"{spec.path} overrides"), *overrides),
        overlays=tuple(overlays),
        base=spec.base,
        source=str(spec.path),
    )


def check_spec(path: Path) -> str:
    """A spec file read and its problem built (every row's workload, every scope and bound
    checked; nothing simulated): what it would fit, in words."""
    spec = read_spec(path)
    problem = build_problem(spec_inputs(spec))
    return (
        f"{spec.file.name!r}: {len(problem.parameters)} parameter(s) over "
        f"{len(problem.train)} fitted and {len(problem.held_out)} held-out target(s)"
    )
