"""Typed, validated description of a capacity-planning spec (`rdu-sim plan SPEC`).

A plan starts from a cluster file (its traffic, SLO, router, classes, prefix cache and KV
link, the last used by the disaggregated configurations only; its one pool's workload is the
template every configuration edits) and searches
tensor parallelism x batch slots x KV policy x disaggregation for the configuration that
meets the SLO on the fewest sockets, the replica count of each being searched too.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from rdu_sim.config.base import StrictModel
from rdu_sim.config.cluster import SLOOverride
from rdu_sim.config.parallelism import ParallelismConfig as ParallelismChoice

_RATIO = re.compile(r"^([1-9][0-9]{0,2}):([1-9][0-9]{0,2})$")


def parse_ratio(text: str) -> tuple[int, int] | None:
    """'none' -> None (mixed replicas); 'P:D' -> (P, D) prefill and decode replicas per unit."""
    if text == "none":
        return None
    match = _RATIO.match(text)
    if match is None:
        raise ValueError(f"a disaggregation is 'none' or 'P:D' such as '1:3', got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _distinct(values: list[object]) -> None:
    """A search axis's values: at least one, none twice (a field validator's rule: its error
    is already at the field, so the message does not name it)."""
    if not values:
        raise ValueError("needs at least one value (or omit it)")
    if len(set(map(str, values))) != len(values):
        raise ValueError("repeats a value")


class PlanSearch(StrictModel):
    """The space searched; an omitted axis keeps the template workload's value."""

    tp: list[int] | None = Field(
        default=None, description="tensor-parallel degrees of a replica (its sockets)"
    )
    parallelism: list[ParallelismChoice] | None = Field(
        default=None,
        max_length=256,
        description="ways to split the model over a replica's devices, each a parallelism "
        "section ({tp: 16}, {tp: 1, dp_attention: 32, ep: 32}, {tp: 8, pp: 2}: "
        "config/parallelism.py); a replica's devices are tp x dp_attention x pp (instead "
        "of search.tp)",
    )
    batch_slots: list[int | Literal["auto"]] | None = Field(
        default=None, description="static batch slots of a replica ('auto': its capacity)"
    )
    kv_policy: list[str] | None = Field(
        default=None,
        description="KV policies by registered name, checked against rdu_sim.kv's registry "
        "when the plan is loaded (the template's other kv fields are kept)",
    )
    disaggregation: list[str] = Field(
        default_factory=lambda: ["none"],
        description="'none' (mixed replicas) or 'P:D': P prefill and D decode replicas per "
        "unit, units searched like replicas",
    )
    max_replicas: int = Field(
        default=64, ge=1, le=100_000, description="most replicas tried for one configuration"
    )

    @field_validator("tp")
    @classmethod
    def _tp(cls, values: list[int] | None) -> list[int] | None:
        if values is not None:
            _distinct(list(values))
            if any(not 1 <= v <= 4096 for v in values):
                raise ValueError("values must be in 1..4096")
        return values

    @field_validator("parallelism")
    @classmethod
    def _parallelism(cls, values: list[ParallelismChoice] | None) -> list[ParallelismChoice] | None:
        if values is not None:
            _distinct([v.model_dump(exclude_unset=True) for v in values])
        return values

    @model_validator(mode="after")
    def _one_split(self) -> Self:
        if self.tp is not None and self.parallelism is not None:
            raise ValueError(
                "give search.tp or search.parallelism, not both ({tp: N} is a parallelism)"
            )
        return self

    @field_validator("batch_slots")
    @classmethod
    def _slots(cls, values: list[int | str] | None) -> list[int | str] | None:
        if values is not None:
            _distinct(list(values))
            if any(isinstance(v, int) and not 1 <= v <= 1_000_000 for v in values):
                raise ValueError("values must be in 1..1000000 or 'auto'")
        return values

    @field_validator("kv_policy")
    @classmethod
    def _policies(cls, values: list[str] | None) -> list[str] | None:
        if values is not None:
            _distinct(list(values))
        return values

    @field_validator("disaggregation")
    @classmethod
    def _ratios(cls, values: list[str]) -> list[str]:
        _distinct(list(values))
        for value in values:
            parse_ratio(value)
        return values


class PlanSpec(StrictModel):
    """A plan spec file."""

    name: str | None = Field(
        default=None, min_length=1, max_length=200, description="default: the file's name"
    )
    description: str = Field(default="", description="what the plan is for (free text)")
    cluster: str = Field(
        min_length=1, description="cluster file (traffic, SLO, router; one pool as template)"
    )
    slo: SLOOverride | None = Field(
        default=None,
        description="the SLO's fields to change: each one given replaces the cluster file's, "
        "each omitted keeps it (slo: {attainment: 0.99} tightens the attainment alone)",
    )
    search: PlanSearch = Field(default_factory=PlanSearch)
