"""The serving policies a workload names by registered name, checked against their
registries before anything runs: ``serving.prefill_priority`` (``serving.batching``) and
``serving.preemption`` (``serving.preemption``). The registries live in serving, which the
config below it cannot import: a run, ``rdu-sim check``, a sweep's points and a cluster's
pools check the names here, each giving the line where its field is written. No numpy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rdu_sim.serving.batching.base import check_batching
from rdu_sim.serving.preemption.base import check_preemption

if TYPE_CHECKING:
    from rdu_sim.config.workload import ServingConfig

FIELDS = ("serving.prefill_priority", "serving.preemption")
"""The fields that name a serving policy (what an error's ``field`` is one of)."""


def field_line(lines: Callable[[tuple[str, ...]], int | None]) -> Callable[[str], int | None]:
    """``line_of`` for :func:`check_named` from a file's line map's ``get``: a dotted field's
    line."""
    return lambda field: lines(tuple(field.split(".")))


def check_named(serving: ServingConfig, file: str, line_of: Callable[[str], int | None]) -> None:
    """ConfigError naming ``file`` (at ``line_of(field)``) and the first of :data:`FIELDS`
    whose name no registry holds, the valid names listed."""
    check_batching(serving.prefill_priority, file, line_of("serving.prefill_priority"))
    check_preemption(serving.preemption, file, line_of("serving.preemption"))
