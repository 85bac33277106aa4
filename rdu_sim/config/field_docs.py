"""A config field in words: its description and unit, by the dotted path ``--set`` takes.

Sweep tables and plots name a swept axis by what it means, not only by its path: a
``serving.max_context`` axis reads "longest sequence a slot holds (tokens)". The words are
the field's own ``description`` (the one the JSON Schema and error messages show), so there
is one text per field; the unit comes from the field's type (a quantity parsed by
``config.units``) or, for a count, from the noun its description counts in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.loader import model_classes, unknown_field_message
from rdu_sim.config.overrides import HW_PREFIX, STACK_PREFIX
from rdu_sim.config.stack import StackConfig
from rdu_sim.config.units import field_unit
from rdu_sim.config.workload import WorkloadConfig

__all__ = ["FieldDoc", "axis_label", "field_doc", "unknown_field"]

_PART_NAMES = {
    "hbm": "HBM",
    "ddr": "DDR",
    "pcu": "PCU",
    "pmu": "PMU",
    "kv": "KV",
    "intra_node_link": "intra-node link",
    "inter_node_link": "inter-node link",
    "inter_rack_link": "inter-rack link",
}
"""Config sections whose name says which part a field belongs to, as a reader writes it."""

_CLAUSE_END = re.compile(r" \(|; |: |, or |, in ")


@dataclass(frozen=True)
class FieldDoc:
    """A field's description, the part of the machine it belongs to (``HBM``; '' when the
    path says nothing more), and its unit ('' for a plain count or a name)."""

    description: str
    part: str
    unit: str

    def words(self) -> str:
        """The description's first clause (past a one-letter symbol such as ``k:``), with
        its part unless the clause names it: ``HBM peak bytes/s``."""
        clauses = [c.strip() for c in _CLAUSE_END.split(self.description)]
        clause = next((c for c in clauses if len(c) > 2), clauses[0])
        if self.part.lower() in clause.lower():
            return clause
        return f"{self.part} {clause}".strip()

    def label(self) -> str:
        """Words and unit: ``longest sequence a slot holds (tokens)``; the unit is left out
        when the words already say it."""
        words = self.words()
        said = re.search(rf"(?<![\w/]){re.escape(self.unit)}(?![\w/])", words)
        return words if not self.unit or said else f"{words} ({self.unit})"


def _unit(annotation: Any, metadata: Sequence[Any], description: str) -> str:
    """The unit of a field: its quantity type's (looking through ``X | None``), else
    ``tokens`` for a count of tokens, else ''."""
    unit = field_unit(annotation, metadata)
    if unit:
        return unit
    return "tokens" if re.search(r"\btokens\b", description) else ""


def _classes(path: str) -> tuple[list[type[BaseModel]], str]:
    """The config models a dotted path starts in, and the path inside them."""
    if path.startswith(HW_PREFIX):
        return [HardwareConfig, GpuHardwareConfig], path[len(HW_PREFIX) :]
    if path.startswith(STACK_PREFIX):
        return [StackConfig], path[len(STACK_PREFIX) :]
    return [WorkloadConfig], path


def unknown_field(path: str) -> str | None:
    """What is wrong with a dotted path (``hw.``, ``stack.`` or a workload's) whose part
    names no field, as the loader tells an unknown key (``stack.host.serial_per_stepp:
    unknown field 'serial_per_stepp'; did you mean 'serial_per_step'? ...``); None when
    every part names a field."""
    classes, inner = _classes(path)
    parts = inner.split(".")
    prefix = path[: len(path) - len(inner)]
    for i, part in enumerate(parts):
        owner = next((c for c in classes if part in c.model_fields), None)
        where = prefix + ".".join(parts[: i + 1])
        if owner is None:
            valid = sorted({name for c in classes for name in c.model_fields})
            return f"{where}: {unknown_field_message(part, valid)}"
        classes = model_classes(owner.model_fields[part].annotation)
        if not classes and i < len(parts) - 1:
            return f"{where}: is a value, not a section with fields"
    return None


def _field_info(path: str) -> Any:
    """The pydantic field at a dotted path (``field_doc``), or None."""
    classes, inner = _classes(path)
    parts = inner.split(".")
    info = None
    for i, part in enumerate(parts):
        owner = next((c for c in classes if part in c.model_fields), None)
        if owner is None:
            return None
        info = owner.model_fields[part]
        if i < len(parts) - 1:
            classes = model_classes(info.annotation)
    return info


def discrete_type(path: str) -> str | None:
    """The type of the field at a dotted path when it takes no fraction (``int | None``,
    ``bool``, a name), for a fit to refuse it; None for a continuous (float) field or a
    path that names no field."""
    info = _field_info(path)
    if info is None:
        return None
    annotation = info.annotation
    if annotation is float or float in get_args(annotation):
        return None
    return getattr(annotation, "__name__", None) or str(annotation)


def field_doc(path: str) -> FieldDoc | None:
    """The field at a dotted workload path (``hw.`` paths: the hardware file's, of either
    kind; ``stack.`` paths: the serving stack's), or None when the path names no documented
    field (a whole section, a list item)."""
    info = _field_info(path)
    if info is None or not info.description:
        return None
    parts = _classes(path)[1].split(".")
    parent = parts[-2] if len(parts) > 1 else ""
    # pydantic keeps a top-level Annotated's validators in ``metadata``, beside the bare type
    unit = _unit(info.annotation, info.metadata, info.description)
    return FieldDoc(info.description, _PART_NAMES.get(parent, ""), unit)


def axis_label(path: str) -> str:
    """A swept axis in words with its unit (``field_doc``), or the path when it has none."""
    doc = field_doc(path)
    return path if doc is None else doc.label()
