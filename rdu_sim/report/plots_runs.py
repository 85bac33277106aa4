"""Build the runs a plot needs by calling the in-process API (placeholder until it lands)."""

from __future__ import annotations

from typing import Any


def runs_over_contexts(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    raise NotImplementedError


def runs_over_batches(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    raise NotImplementedError


def decode_step_timing(*args: Any, **kwargs: Any) -> dict[str, Any]:
    raise NotImplementedError
