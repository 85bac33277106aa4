"""What a fitted parameter reaches: a machine (a hardware file and every file extending it) or
one serving stack; the ``--fit`` syntax that names it.

``--fit [SCOPE:]PATH=LOW:HIGH``:

- ``PATH`` is a field as ``--set`` takes it: ``hw.FIELD`` (the hardware file's) or
  ``stack.FIELD`` (the serving stack's);
- ``SCOPE`` names where it is one value: for ``hw.`` a machine, a hardware file standing
  for itself and every file that extends it (``sn40l`` is shared by ``sn40l-8`` and
  ``sn40l-16`` when they extend it); for ``stack.`` a serving stack. Either by a name the
  fitted rows' machine or stack answers to (``names_of``: the stem reports print, or the
  ``name:`` its file states), else a path, else a shipped name. Without it, the one machine
  (or stack) every fitted row runs on;
- ``LOW:HIGH`` are the bounds, in the field's own unit (``0:2ms``, ``8 GB/s:64 GB/s``; a bare
  number is the internal unit: seconds, bytes/s).

A row is reached by a machine parameter when its hardware file is the machine or extends
it, by a stack parameter when it runs that stack. Identities are resolved files, never the
names written: two folders' ``hw.yaml`` are two machines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.extends import extends_chain
from rdu_sim.config.fit_syntax import split_fit
from rdu_sim.config.overrides import given
from rdu_sim.config.stack import NONE
from rdu_sim.config.units import (
    UnitError,
    parse_bandwidth,
    parse_bytes,
    parse_decimal,
    parse_flops,
    parse_seconds,
)
from rdu_sim.validate.given import Given

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rdu_sim.scenario import Scenario

HW = "hw."
STACK = "stack."
MAX_FIT_CHARS = 1000
MAX_SCOPE_CHARS = 500
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_PARSERS: dict[str, Callable[[Any], float]] = {
    "s": parse_seconds,
    "bytes/s": parse_bandwidth,
    "FLOP/s": parse_flops,
    "bytes": parse_bytes,
}
"""A field's unit -> the parser of its bounds (the config's own)."""


@dataclass(frozen=True)
class Deployment:
    """Where a run runs: its hardware file and the files that file extends (resolved paths,
    nearest first), and its serving stack (the stack file, or ``none``)."""

    chain: tuple[Path, ...]
    stack: str

    @property
    def hardware(self) -> Path:
        """The run's own hardware file."""
        return self.chain[0]

    def runs_on(self, machine: Path) -> bool:
        """Whether the run's hardware is ``machine`` or extends it."""
        return machine in self.chain


def stack_of(scenario: Scenario) -> str:
    """The serving stack a scenario runs: its stack file (resolved), or ``none``."""
    stack_file = scenario.stack_file
    return stack_file if stack_file == NONE else str(Path(stack_file).resolve())


def runtime_of(stack: str) -> str:
    """What a serving stack (a resolved stack file, or ``none``) runs as: its resolved
    settings (``settings_of``; ``none``: no runtime). Two stack files that run identically
    (one extends the other and only renames it) give the same."""
    if stack == NONE:
        return NONE
    from rdu_sim.config.stack_file import read_stack, validate_stack

    data, lines = read_stack(Path(stack))
    return settings_of(validate_stack(data, stack, lines))


NAMING_FIELDS = frozenset({"name", "description", "default_stack"})
"""A machine's or stack's fields that name it or pick for workloads that name none (a
hardware file's ``default_stack``: the stack a run runs is told on its own), not how it runs."""


def settings_of(config: BaseModel) -> str:
    """What a machine or a serving stack (validated, with any ``--set`` applied) runs as:
    its settings without ``NAMING_FIELDS``, as JSON. The one rule for when two machines or
    two stacks are the same: a copy that only renames one (``extends:`` it, ``name:``) is."""
    import json

    settings = config.model_dump(mode="json", exclude=set(NAMING_FIELDS))
    return json.dumps(settings, sort_keys=True)


def label_of(target: str) -> str:
    """A machine or stack as reports name it: its file's stem, or ``none``."""
    return target if target == NONE else Path(target).stem


def names_of(target: str) -> tuple[str, ...]:
    """Every name a machine or stack file (resolved) answers to in a scope (``--fit
    NAME:``) and a held-out group (``--holdout stack=NAME``): the label reports print (the
    file's stem, ``label_of``), then the ``name:`` its file states when that differs (a
    stack ``mystack.yaml`` whose ``name: labserve`` is how ``rdu-sim run`` calls it). The
    one rule for what a machine or stack is called; a path to the file is taken too."""
    label = label_of(target)
    if target == NONE:
        return (label,)
    from rdu_sim.config.yaml_io import read_yaml

    try:
        data, _ = read_yaml(Path(target))
    except (ConfigError, OSError):
        return (label,)  # the loader names what is wrong with the file
    named = data.get("name") if isinstance(data, dict) else None
    if isinstance(named, str) and named.strip() and named.strip() != label:
        return (label, named.strip())
    return (label,)


def _named(text: str, targets: Iterable[str]) -> str | None:
    """The one of ``targets`` that ``text`` names (``names_of``), or None; a ConfigError
    when it names two (two folders' ``hw.yaml``): then only a path tells them apart."""
    found = sorted({t for t in targets if text in names_of(t)})
    if len(found) > 1:
        raise ConfigError.single(
            "--fit", text, f"names {len(found)} files ({', '.join(found)}): give its path"
        )
    return found[0] if found else None


def accepted_names(targets: Iterable[str]) -> str:
    """The names ``targets`` answer to, for an error that found none: ``mystack (or
    labserve), tensorrt-llm``."""
    shown = []
    for target in sorted(set(targets)):
        label, *others = names_of(target)
        shown.append(label + (f" (or {', '.join(others)})" if others else ""))
    return ", ".join(shown)


def deployment_of(scenario: Scenario) -> Deployment:
    """Where ``scenario`` runs."""
    return Deployment(extends_chain(Path(scenario.hardware_file), "hardware"), stack_of(scenario))


def unit_of(path: str) -> str:
    """The unit of the field at ``path`` (``s``, ``bytes/s`` ...; '' for a plain number)."""
    from rdu_sim.config.field_docs import field_doc

    doc = field_doc(path)
    return "" if doc is None else doc.unit


@dataclass(frozen=True)
class FitParameter:
    """One parameter to fit: a field, its bounds in internal units, and where it is one value
    (``scope`` as written; '' for the one machine or stack of the fitted rows)."""

    path: str
    low: float
    high: float
    scope: str = ""
    text: str = ""  # as the user wrote it, for messages
    given: Given = field(default=Given("--fit", ""), compare=False)  # where, for errors

    @property
    def kind(self) -> str:
        """``machine`` for a hardware field, ``stack`` for a stack field."""
        return "stack" if self.path.startswith(STACK) else "machine"

    @property
    def unit(self) -> str:
        """The field's unit."""
        return unit_of(self.path)

    def value(self, unit: float) -> float:
        """The parameter's value at ``unit`` in [0, 1] over its bounds."""
        return self.low + unit * (self.high - self.low)


def read_bound(text: str, unit: str, where: str) -> float:
    """A value of a field of ``unit``, read as the config reads it (a bare number: the
    internal unit); a ConfigError naming ``--fit`` and ``where`` otherwise."""
    parse = _PARSERS.get(unit)
    try:
        value = float(parse(text.strip())) if parse else parse_decimal(text.strip())
    except (UnitError, ValueError, TypeError) as exc:
        raise ConfigError.single(
            "--fit", where, f"cannot read {text.strip()[:60]!r}: {exc}"
        ) from None
    if value is None:
        raise ConfigError.single(
            "--fit", where, f"cannot read {text.strip()[:60]!r} as a number (the field has no unit)"
        )
    return value


def parse_fit(text: str, given: Given | None = None) -> FitParameter:
    """``[SCOPE:]PATH=LOW:HIGH`` as a FitParameter (a ConfigError naming where it was
    ``given``, by default ``--fit``, when it is not one: see the module docstring). A path
    naming no field is told first, whatever the bounds' form."""
    given = given or Given.option("--fit", text)
    shape = "expected [SCOPE:]hw.FIELD=LOW:HIGH or [SCOPE:]stack.FIELD=LOW:HIGH, e.g. " + (
        "sn40l-8:hw.system.intra_node_link.bandwidth=8 GB/s:64 GB/s"
    )
    if len(text) > MAX_FIT_CHARS:
        raise given.error(f"longer than {MAX_FIT_CHARS} characters", text[:40] + "...")
    written = split_fit(text)
    scope, path, bounds = written.scope, written.path, written.bounds
    if (
        not written.equals
        or not (path.startswith(HW) or path.startswith(STACK))
        or bounds.count(":") != 1
    ):
        raise given.error(shape)
    if written.colon and not scope:
        raise given.error(f"an empty scope before ':'; {shape}")
    if len(scope) > MAX_SCOPE_CHARS or any(c in scope for c in "\0\n\r"):
        raise given.error("the scope is not a file's name or path", path)
    parts = path.split(".")[1:]
    if not parts or not all(_FIELD.fullmatch(part) for part in parts):
        raise given.error(f"not a field path; {shape}", path[:80])
    from rdu_sim.config.field_docs import discrete_type, unknown_field

    problem = unknown_field(path)
    if problem is not None:
        raise given.error(problem)
    kind = discrete_type(path)
    if kind is not None:
        raise given.error(
            "only a continuous field can be fitted (its value moved by any fraction): its "
            f"type is {kind}",
            path,
        )
    unit = unit_of(path)
    low_text, high_text = bounds.split(":")
    try:
        low, high = read_bound(low_text, unit, path), read_bound(high_text, unit, path)
    except ConfigError as exc:
        raise given.error(exc.issues[0].message, path) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise given.error(f"needs finite bounds LOW < HIGH, got {bounds.strip()}", path)
    return FitParameter(path, low, high, scope, text.strip(), given)


def reaches(kind: str, target: str, deployment: Deployment) -> bool:
    """Whether a value of a ``kind`` (``machine`` or ``stack``) field held by ``target`` (a
    resolved hardware or stack file) reaches a run on ``deployment``."""
    if kind == "stack":
        return deployment.stack == target
    return deployment.runs_on(Path(target))


@dataclass(frozen=True)
class Scoped:
    """A parameter and the machine (a resolved hardware file) or stack it is one value on."""

    parameter: FitParameter
    target: str  # a resolved path, or "none" for the stack that adds nothing
    label: str  # the scope as reports show it (the file's stem, or "none")

    def reaches(self, deployment: Deployment) -> bool:
        """Whether a run on ``deployment`` gets this parameter's value."""
        return reaches(self.parameter.kind, self.target, deployment)

    @property
    def name(self) -> str:
        """``label:path``, how reports name the parameter."""
        return f"{self.label}:{self.parameter.path}"


def _resolve_machine(text: str, base: Path, known: Sequence[str]) -> str:
    from rdu_sim.config import shipped

    named = _named(text, known)
    if named is not None:
        return named
    found = shipped.locate_near(shipped.written_in(base / "x", text), text, ("hardware",))
    if not found.is_file():
        raise ConfigError.single(
            "--fit",
            text,
            f"no machine of that name and no hardware file of that path (the fitted rows' "
            f"machines: {accepted_names(known)}; shipped: {', '.join(shipped.names('hardware'))})",
        )
    return str(found.resolve())


def _resolve_stack(text: str, base: Path, known: Sequence[str]) -> str:
    from rdu_sim.config import shipped

    if text == NONE:
        raise ConfigError.single(
            "--fit", text, "the stack none adds no host time: it has nothing to fit"
        )
    named = _named(text, [k for k in known if k != NONE])
    if named is not None:
        return named
    found = shipped.locate_near(shipped.written_in(base / "x", text), text, ("stack",))
    if not found.is_file():
        raise ConfigError.single(
            "--fit",
            text,
            f"no serving stack of that name or path (the fitted rows' stacks: "
            f"{accepted_names(k for k in known if k != NONE)}; shipped: "
            f"{', '.join(shipped.names('stack'))})",
        )
    return str(found.resolve())


def resolve(
    parameters: Sequence[FitParameter], fitted: Iterable[Deployment], base: Path
) -> list[Scoped]:
    """Each parameter's machine or stack (scopes written as paths are relative to ``base``;
    an unscoped one takes the one machine or stack of the ``fitted`` runs). ConfigErrors: a
    scope naming nothing, an unscoped parameter over several machines or stacks, a field
    fitted twice where its scopes overlap, a scope no fitted run reaches."""
    runs = list(dict.fromkeys(fitted))
    scoped: list[Scoped] = []
    for parameter in parameters:
        given = parameter.given
        if parameter.scope:
            if parameter.kind == "stack":
                resolver, known = _resolve_stack, sorted({r.stack for r in runs})
            else:
                resolver, known = _resolve_machine, sorted({str(f) for r in runs for f in r.chain})
            try:
                target = resolver(parameter.scope, base, known)
            except ConfigError as exc:
                raise given.error(exc.issues[0].message) from None
        else:
            own = sorted({r.stack if parameter.kind == "stack" else str(r.hardware) for r in runs})
            if len(own) != 1:
                what = "serving stacks" if parameter.kind == "stack" else "machines"
                labels = [label_of(o) for o in own]
                named = ", ".join(o if labels.count(label_of(o)) > 1 else label_of(o) for o in own)
                raise given.error(
                    f"the fitted rows run on {len(own)} {what} ({named}): name one as "
                    f"SCOPE:{parameter.path}=..."
                )
            target = own[0]
            if parameter.kind == "stack" and target == "none":
                raise given.error(
                    "the fitted rows run the stack none (the device alone, no host time): it "
                    "has nothing to fit"
                )
        one = Scoped(parameter, target, label_of(target))
        if not any(one.reaches(run) for run in runs):
            raise given.error(f"no fitted row runs on {one.label} (nor on a file extending it)")
        for other in scoped:
            if other.parameter.path == parameter.path and any(
                other.reaches(run) and one.reaches(run) for run in runs
            ):
                raise given.error(
                    f"{parameter.path} is fitted twice on the same rows (also as "
                    f"{other.parameter.text or other.name}): give it once per machine or stack"
                )
        scoped.append(one)
    return scoped


FIT = "the fit"
"""Where a fitted parameter's value on a run comes from: the calibration's search (a bound,
a trial value), not a ``--set`` (``calibration_problem.check_bounds`` drops its note)."""


def overrides_for(
    scoped: Sequence[Scoped], values: Sequence[float | None], deployment: Deployment
) -> list[str]:
    """The ``--set`` overrides that give a run on ``deployment`` the parameters reaching it
    (a value of None is not applied: the run keeps its file's own value). A quantity is
    written in its internal unit, ``0.25 s``, not bare: read back to the same float, and
    never taken for a forgotten unit (a bare host time of 0.1 s or more is refused as one,
    ``config.units.BARE_SECONDS_CEILING``)."""
    texts = [
        f"{one.parameter.path}={value!r}{_internal_unit(one.parameter.unit)}"
        for one, value in zip(scoped, values, strict=True)
        if value is not None and one.reaches(deployment)
    ]
    return given(texts, FIT)


def _internal_unit(unit: str) -> str:
    """`` s``, `` B/s``, `` FLOP/s`` (the unit of scale 1 a config reads for ``unit``), or
    '' for a plain number."""
    name = next((n for scale, n in QUANTITY_UNITS.get(unit, ()) if scale == 1.0), "")
    return f" {name}" if name else ""


@dataclass(frozen=True)
class Fixed:
    """A value given, not fitted: a field of a calibrated overlay passed back (``--overlay``),
    on the machine or stack the overlay extends."""

    kind: str  # machine or stack
    target: str
    override: str  # PATH=VALUE

    def reaches(self, deployment: Deployment) -> bool:
        """Whether a run on ``deployment`` gets the value."""
        return reaches(self.kind, self.target, deployment)


def fixed_overrides(fixed: Sequence[Fixed], deployment: Deployment) -> list[str]:
    """The overrides of the given values that reach a run on ``deployment``."""
    return [one.override for one in fixed if one.reaches(deployment)]


QUANTITY_UNITS: dict[str, tuple[tuple[float, str], ...]] = {
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")),
    "bytes/s": ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")),
    "FLOP/s": ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s")),
}
"""The units a fitted value is written in, largest first (each one the config reads)."""


def quantity_text(value: float, unit: str, digits: int = 4) -> str:
    """``value`` (internal unit) to ``digits`` significant digits in the unit that reads
    best, as a config file takes it: ``285.2 us``, ``24.31 GB/s``, ``0.8734``."""
    scales = QUANTITY_UNITS.get(unit)
    if scales is None or value == 0:
        return f"{value:.{digits}g}" + (" B" if unit == "bytes" and value == 0 else "")
    scale, name = next(((s, n) for s, n in scales if abs(value) >= s), scales[-1])
    return f"{value / scale:.{digits}g} {name}"


def rounded(parameter: FitParameter, value: float) -> tuple[float, str]:
    """The value as written to 4 significant digits in its unit, and read back."""
    text = quantity_text(value, parameter.unit)
    return read_bound(text, parameter.unit, parameter.path), text
