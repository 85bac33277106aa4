"""The names an evaluator's result can hold, known before anything runs, to check a spec's
metrics up front.

A result that is a dataclass's ``asdict`` (``simulate``'s is ``RunSummary.to_dict()``) has
its names in the dataclass's fields: a field that is a dataclass is a section with its own
names, a ``dict[str, X]`` a section whose names only a run knows (``memory``'s tiers), and
anything else a leaf. A metric is then unknown when it leaves the tree: a name no section
has, or a name below a leaf. What only a run can tell (a tier a point does not use) is
checked when the first result arrives (``run._execute``); a declared name a run leaves out
(a key the JSON has only where it applies) is null there, never a stop (`Schema.declares`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ANY_NAME = "*"
"""A section's names known only at run time (a ``dict[str, X]`` field)."""


@dataclass(frozen=True)
class Schema:
    """A result's names: ``names`` maps each to its own schema (None: a leaf);
    ``open`` is a section whose every name below is allowed (``dict[str, Any]``)."""

    names: Mapping[str, Schema | None]
    open: bool = False

    @classmethod
    def of(cls, result: type, leave_out: tuple[str, ...] = ()) -> Schema:
        """The schema of a dataclass's ``asdict`` (its fields, less ``leave_out``)."""
        schema = _of_type(result)
        if schema is None:
            raise TypeError(f"{result.__name__} is not a dataclass or a mapping")
        names = {k: v for k, v in schema.names.items() if k not in leave_out}
        return cls(names)

    def unknown(self, metric: str) -> tuple[str, Schema] | None:
        """Where ``metric`` leaves the tree: the known prefix and the section it was
        looked up in; None when it may be in a result."""
        node: Schema | None = self
        parts = metric.split(".")
        for i, part in enumerate(parts):
            if node is None:  # a name below a leaf
                return ".".join(parts[:i]), Schema({})
            if node.open:
                return None
            if part in node.names:
                node = node.names[part]
            elif ANY_NAME in node.names:
                node = node.names[ANY_NAME]
            else:
                return ".".join(parts[:i]), node
        return None

    def declares(self, metric: str) -> bool:
        """Whether ``metric`` is a name the result's fields declare, section by section (not
        one only a run knows: below a ``*`` or an open section). A run that leaves such a
        name out (``decode_step.pipeline_bubble`` without a pipeline, ``kv_pool`` for static
        slots: ``RunSummary.to_dict``) has no value there, as a section it lacks holds none."""
        node: Schema | None = self
        for part in metric.split("."):
            if node is None or node.open or part not in node.names:
                return False
            node = node.names[part]
        return True

    def paths(self) -> list[str]:
        """Every name and section path, ``*`` standing for a name a run knows."""
        out: list[str] = []
        for name, below in self.names.items():
            out.append(name)
            if below is not None:
                out.extend(f"{name}.{p}" for p in below.paths())
        return out

    def problem(self, metric: str) -> str | None:
        """Why ``metric`` cannot be in a result, in words: the closest known name, or
        without one the names where it left the tree (``names at memory.hbm: ...``); None
        when it may be in a result."""
        where = self.unknown(metric)
        if where is None:
            return None
        prefix, section = where
        close = difflib.get_close_matches(metric, self._candidates(metric), n=1)
        if close:
            return f"not in the results: {metric} (did you mean {close[0]!r}?)"
        if not section.names:
            known = f"{prefix} has no names below it"
        else:
            at = f" at {prefix}" if prefix else ""
            shown = ", ".join(n for n in section.names if n != ANY_NAME)
            known = f"names{at}: {shown}" if shown else f"{prefix} holds names a run decides"
        return f"not in the results: {metric}; {known}"

    def _candidates(self, metric: str) -> list[str]:
        """Known paths with each ``*`` replaced by the metric's own name there."""
        mine = metric.split(".")
        out = []
        for path in self.paths():
            parts = path.split(".")
            out.append(
                ".".join(
                    mine[i] if p == ANY_NAME and i < len(mine) else p for i, p in enumerate(parts)
                )
            )
        return out


def _of_type(tp: Any) -> Schema | None:
    """The schema of a field's type: a dataclass's fields, a mapping's values under ``*``,
    ``Any`` open; None for a leaf."""
    if tp is Any:
        return Schema({}, open=True)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        schemas = [s for s in map(_of_type, members) if s is not None]
        return schemas[0] if len(members) == 1 and schemas else None
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        args = typing.get_args(tp)
        value = args[1] if len(args) == 2 else Any
        return Schema({ANY_NAME: _of_type(value)})
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return Schema({f.name: _of_type(hints[f.name]) for f in dataclasses.fields(tp)})
    return None
