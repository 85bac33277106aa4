"""The base of every config model: strict (unknown keys are errors), immutable, typed.

The modules of the models a step validates (workload, hardware and what they hold) do
without ``from __future__ import annotations``: their annotations are types when the class
is made, where strings would each be compiled and evaluated by pydantic (~3 ms of a
command's start; tests/test_import_graph.py)."""

from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Refuses unknown fields (so a typo like `hbm_bandwith` is an error) and never mutates.

    Types are strict too: YAML already gives ints, floats and bools, so coercion would only
    hide mistakes (`requests: yes` silently meaning 1 request, `seed: "7"` a string seed).
    Ints are still accepted where a float is expected.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, strict=True, defer_build=True
    )


def as_tuple(value: Any) -> Any:
    """YAML and JSON give lists; a config field of a sequence keeps a tuple (frozen,
    hashable): its ``BeforeValidator``."""
    return tuple(value) if isinstance(value, list) else value
