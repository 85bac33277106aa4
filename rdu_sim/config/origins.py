"""Where a hardware file's values come from when the file does not state them, for ``rdu-sim
check``: an author writing a new machine sees what it takes without saying so.

- Its default stack, when a file it ``extends:`` sets it (a chip written over ``sn40l-8``
  runs SambaStack, whose host time was fitted to SambaNova's SN40L figures), or the
  schema's ``none`` when no file does (the same chip written from scratch: no host time).
- A value a shipped calibration fitted (a ``fit:`` entry of ``calibrations/*.yaml``) on a
  machine the file extends, in force because no file between restates it; and the fitted
  values of a default stack it inherits.
- A field of the device or the system left at the schema's default, beside what the shipped
  files of its kind use (``topology`` defaults to ``ring``; every shipped file says
  ``switched``). ``power`` and ``cost`` are left out: they move a run's energy and price,
  never its times, and a report says when they are not given.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rdu_sim.config import shipped
from rdu_sim.config.extends import EXTENDS, extends_chain
from rdu_sim.config.field_docs import field_doc
from rdu_sim.config.fit_syntax import split_fit
from rdu_sim.config.hardware_file import Hardware, kind_of, read_hardware, validate_hardware
from rdu_sim.config.overrides import HW_PREFIX, STACK_PREFIX
from rdu_sim.config.stack import NONE, StackConfig
from rdu_sim.config.stack_file import stack_data, stack_path, validate_stack
from rdu_sim.config.units import quantity_words
from rdu_sim.config.yaml_io import read_yaml

NOT_STRUCTURAL = frozenset({"power", "cost"})
"""A hardware file's sections whose defaults move no simulated time (energy and price)."""

DIGITS = 4
"""Significant digits of a value shown (``33.53 GB/s``, ``1.732 ms``: as the files write
them)."""


@dataclass(frozen=True)
class Origins:
    """What ``check`` adds for a hardware file: after its default stack's name, where that
    came from (``''`` when the file states it), and one line per inherited fitted value and
    per structural field left at its default."""

    stack: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Fitted:
    """One ``fit:`` entry of a shipped calibration spec, resolved: the spec, the field
    (``hw.`` or ``stack.``), and the machine or stack file it was fitted on."""

    spec: Path
    path: str
    target: Path

    def by(self) -> str:
        """``calibrate joint (calibrations/joint.yaml)``."""
        try:
            where = self.spec.relative_to(shipped.root())
        except ValueError:
            where = self.spec
        return f"calibrate {self.spec.stem} ({where})"


def hardware_origins(path: Path, hardware: Hardware) -> Origins:
    """Where ``hardware`` (the validated file at ``path``, its ``extends:`` resolved) got
    what it does not state (the module docstring)."""
    chain = [(file, _mapping(read_yaml(file)[0])) for file in extends_chain(path, "hardware")]
    extends = str(chain[0][1].get(EXTENDS, "")).strip()
    notes: list[str] = []
    setter = _setter(chain, ("default_stack",))
    if setter is None:
        stack = " (not set: the default, the device alone: no host time)"
    elif setter == 0:
        stack = ""
    else:
        stack = f" (from extends: {extends}" + (
            f", set in {chain[setter][0].name})" if setter > 1 else ")"
        )
    fitted = _fitted_entries()
    for entry, parts in _inherited_fits(chain):
        notes.append(
            f"{entry.path} {_shown(entry.path, _value(hardware, parts))}: fitted by "
            f"{entry.by()}, inherited from {entry.target.name}"
        )
    if setter is not None and setter > 0 and hardware.default_stack != NONE:
        stack_file = stack_path(hardware.default_stack, path)
        if stack_file is not None:
            served = _stack(stack_file)
            for entry in fitted:
                if entry.path.startswith(STACK_PREFIX) and entry.target == stack_file.resolve():
                    parts = tuple(entry.path.removeprefix(STACK_PREFIX).split("."))
                    notes.append(
                        f"{entry.path} {_shown(entry.path, _value(served, parts))}: fitted by "
                        f"{entry.by()}, with the default stack {hardware.default_stack!r} "
                        f"inherited from {chain[setter][0].name}"
                    )
    notes.extend(_defaults_notes(hardware))
    return Origins(stack, tuple(notes))


def _inherited_fits(
    chain: Sequence[tuple[Path, Mapping[str, Any]]],
) -> Iterator[tuple[_Fitted, tuple[str, ...]]]:
    """Each hardware value a shipped calibration fitted on a file the first of ``chain``
    extends, in force because no file between restates it, with its path's parts: the one
    rule of ``check``'s notes and of :func:`predicted_words`."""
    for entry in _fitted_entries():
        if not entry.path.startswith(HW_PREFIX) or entry.target not in [f for f, _ in chain[1:]]:
            continue
        parts = tuple(entry.path.removeprefix(HW_PREFIX).split("."))
        held = _setter(chain, parts)
        if held is not None and chain[held][0] == entry.target:
            yield entry, parts


DEVICE_SECTIONS = {"rdu": "socket", "gpu": "gpu"}
"""Each kind's device section: what a datasheet gives (units, memory, rates)."""


def predicted_words(path: Path | str) -> str | None:
    """What a run or a compare column says of hardware predicted, not measured: a file
    that keeps values fitted on a machine it extends (``check``'s rule,
    :func:`_inherited_fits`) while its device section differs from that machine's
    (``dgx-h200``: the H100's kernel-boundary time and GEMM efficiency, fitted on H100 rows,
    beside an H200's HBM): ``predicted, not measured: its gpu section differs from
    dgx-h100.yaml's, whose fitted hw.gpu.kernel.sync, ... it keeps (rdu-sim check dgx-h200
    lists them)``; None otherwise (a file that only resizes the system, or
    restates every fitted value, or a file no one extends)."""
    file = Path(path)
    if not file.is_file():
        return None
    return _predicted(str(file.resolve()), file.stat().st_mtime_ns)


@functools.cache
def _predicted(path: str, _mtime: int) -> str | None:
    """:func:`predicted_words` of the file at ``path`` (as it was at ``_mtime``)."""
    file = Path(path)
    chain = [(f, _mapping(read_yaml(f)[0])) for f in extends_chain(file, "hardware")]
    fitted_in: dict[Path, list[str]] = {}
    for entry, _ in _inherited_fits(chain):
        fitted_in.setdefault(entry.target, []).append(entry.path)
    if not fitted_in:
        return None
    data, lines = read_hardware(file)
    hardware = validate_hardware(data, str(file), lines)
    section = DEVICE_SECTIONS[kind_of(hardware)]
    for target, paths in fitted_in.items():
        base_data, base_lines = read_hardware(target)
        base = validate_hardware(base_data, str(target), base_lines)
        if getattr(hardware, section) != getattr(base, section):
            shipped_file = shipped.entries("hardware").get(file.stem)
            named = file.stem if shipped_file and shipped_file.resolve() == file else str(file)
            return (
                f"predicted, not measured: its {section} section differs from "
                f"{target.name}'s, whose fitted {', '.join(sorted(paths))} it keeps (rdu-sim "
                f"check {named} lists them)"
            )
    return None


def _mapping(data: Any) -> Mapping[str, Any]:
    return data if isinstance(data, Mapping) else {}


def _setter(chain: Sequence[tuple[Path, Mapping[str, Any]]], parts: Sequence[str]) -> int | None:
    """The index in ``chain`` (the file, then each it extends) of the nearest file whose own
    text sets the field at ``parts``, or None when none does (the schema's default)."""
    for index, (_, data) in enumerate(chain):
        node: Any = data
        for part in parts:
            node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node is not _ABSENT:
            return index
    return None


_ABSENT = object()


def _value(model: BaseModel, parts: Sequence[str]) -> Any:
    value: Any = model
    for part in parts:
        value = getattr(value, part)
    return value


def _shown(path: str, value: Any) -> str:
    """A value as a file writes it: in its field's unit (``500 ns``), ``true``, ``ring``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        doc = field_doc(path)
        unit = doc.unit if doc is not None else ""
        return quantity_words(value, unit, DIGITS) if unit and unit != "tokens" else f"{value:g}"
    return str(value)


@functools.cache
def _fitted_entries() -> tuple[_Fitted, ...]:
    """Every ``fit:`` entry of the shipped calibration specs whose scope names a file."""
    found = []
    for _, spec in sorted(shipped.entries("calibration").items()):
        data = _mapping(read_yaml(spec)[0])
        entries = data.get("fit")
        for text in entries if isinstance(entries, list) else []:
            written = split_fit(str(text))
            if not written.scope:
                continue  # the one machine of the fitted rows: no file to name
            kinds = ("stack",) if written.path.startswith(STACK_PREFIX) else ("hardware",)
            near = shipped.written_in(spec, written.scope)
            target = shipped.locate_near(near, written.scope, kinds)
            if target.is_file():
                found.append(_Fitted(spec, written.path, target.resolve()))
    return tuple(found)


def _stack(path: Path) -> StackConfig:
    data, lines, file = stack_data(path)
    return validate_stack(data, file, lines)


def _defaults_notes(hardware: Hardware) -> Iterator[str]:
    """``left at its default: hw.system.topology ring (every shipped rdu file: switched)``
    for each structural field the file (with what it extends) leaves to the schema."""
    kind = kind_of(hardware)
    for path, value in _defaulted(hardware, HW_PREFIX):
        parts = path.removeprefix(HW_PREFIX).split(".")
        used = sorted({_shown(path, _value(other, parts)) for other in _shipped(kind)})
        if used == [_shown(path, value)]:
            beside = f"as every shipped {kind} file"
        elif len(used) == 1:
            beside = f"every shipped {kind} file: {used[0]}"
        else:
            beside = f"the shipped {kind} files: {' or '.join(used)}"
        yield f"left at its default: {path} {_shown(path, value)} ({beside})"


def _defaulted(model: BaseModel, prefix: str) -> Iterator[tuple[str, Any]]:
    """(``hw.`` path, value) of each field below ``model`` the input did not set and whose
    default is a value (not None: an optional part left out, such as a rack level)."""
    for name, info in type(model).model_fields.items():
        if (prefix == HW_PREFIX and name in NOT_STRUCTURAL) or info.exclude:
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _defaulted(value, f"{prefix}{name}.")
        elif prefix != HW_PREFIX and name not in model.model_fields_set and value is not None:
            yield f"{prefix}{name}", value


@functools.cache
def _shipped(kind: str) -> tuple[Hardware, ...]:
    """The shipped hardware files of one kind, validated."""
    found = []
    for _, path in sorted(shipped.entries("hardware").items()):
        data, lines = read_hardware(path)
        if kind_of(data) == kind:
            found.append(validate_hardware(data, str(path), lines))
    return tuple(found)
