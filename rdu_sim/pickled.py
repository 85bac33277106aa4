"""Pickling a compiled frozen dataclass: as a call of its constructor with its fields.

The core is compiled with mypyc (``rdu_sim.native``). A compiled frozen dataclass unpickles
by default by assigning its fields one by one, which its frozen ``__setattr__`` refuses
(``FrozenInstanceError``): a step's cost or a run's result holding one could not come back
from a worker process (``concurrent.futures.ProcessPoolExecutor``), whose pool then broke.
So every frozen dataclass of a compiled module defines ``__reduce__`` as ``return
by_fields(self)`` (tests/test_api_library.py checks that each does); the pure build pickles the
same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Reduced", "by_fields"]

Reduced = tuple[Callable[..., Any], tuple[Any, ...]]
"""What ``__reduce__`` returns here: a callable and its arguments."""


def by_fields(obj: DataclassInstance) -> Reduced:
    """``obj``'s ``__reduce__``: its class and its fields in order, the constructor's
    positional arguments (each field is one: none is ``init=False`` or keyword-only)."""
    return type(obj), tuple(getattr(obj, field.name) for field in fields(obj))
