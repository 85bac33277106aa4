"""Pipeline stages: which of a model's layers each of ``parallelism.pp`` stages holds.

The decoder's layers are cut into ``pp`` consecutive runs of as nearly equal a number of
layers as the bodies allow (a body of several layers, gpt-oss's sliding and full pair, stays
whole, in the stage its first layer falls in): stage ``s`` starts at the first body at or
after layer ``round(L x s / pp)``, or the nearest body that leaves no stage empty (what vLLM
and Megatron do by default); ``parallelism.stage_layers`` gives each stage's layers instead
(vLLM's ``VLLM_PP_LAYER_PARTITION``), to balance stages of unequal layers. The first
stage also holds the embedding, the last the LM head. Each stage's devices hold only its
layers' weights and KV cache; a step's batch is cut into
micro-batches that follow each other through the stages (``engine.pipeline``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rdu_sim.graph import GraphGroup
from rdu_sim.graph.snapkv import selection_kernel
from rdu_sim.models.layers import (
    Architecture,
    LayerKind,
    body_starts,
    layer_kinds,
    layer_segments,
    stage_layers_problem,
)

if TYPE_CHECKING:
    from rdu_sim.scenario import Scenario


@dataclass(frozen=True)
class PipelineStage:
    """One stage: its index of ``stages``, its decoder layers ``[first_layer, end_layer)``."""

    index: int
    stages: int
    first_layer: int
    end_layer: int

    @property
    def first(self) -> bool:
        """Whether it holds the embedding."""
        return self.index == 0

    @property
    def last(self) -> bool:
        """Whether it holds the LM head."""
        return self.index == self.stages - 1

    @property
    def layers(self) -> int:
        """Its decoder layers."""
        return self.end_layer - self.first_layer

    def kinds(self, arch: Architecture) -> tuple[LayerKind, ...]:
        """Its layers' kinds, in order."""
        return layer_kinds(arch)[self.first_layer : self.end_layer]


def pipeline_stages(
    arch: Architecture, pp: int, stage_layers: Sequence[int] | None = None
) -> tuple[PipelineStage, ...]:
    """The ``pp`` stages of ``arch``'s layers (module docstring); one stage holds them all.
    ``stage_layers`` (``parallelism.stage_layers``) gives each stage's layers instead, as
    serving engines let a deployment do; the config has checked that it gives each of the
    ``pp`` stages a layer or more (``ParallelismConfig``: asserted here) and the scenario
    that it splits the model (``models.layers.stage_layers_problem``: here an error).

    Every stage holds at least one body: a cut that would meet the one before it (or leave
    too few bodies for the stages after it) moves to the nearest body that keeps them all
    non-empty. ``pp`` above the bodies (``body_starts``) has no such cut: the scenario
    refuses it (``scenario._layout_problem``), and here it is an error."""
    if stage_layers is not None:
        assert len(stage_layers) == pp and min(stage_layers) >= 1, (stage_layers, pp)
        problem = stage_layers_problem(arch, stage_layers)
        if problem is not None:
            raise ValueError(problem)
        bounds = [sum(stage_layers[:s]) for s in range(pp + 1)]
        return tuple(PipelineStage(s, pp, bounds[s], bounds[s + 1]) for s in range(pp))
    starts = body_starts(arch)
    total, bodies = len(layer_kinds(arch)), len(starts)
    if not 1 <= pp <= bodies:
        raise ValueError(f"{pp} pipeline stages of {bodies} layer bodies leave a stage empty")
    picks = [0]  # the body each stage starts at
    for s in range(1, pp):
        target = round(total * s / pp)
        body = next((i for i, b in enumerate(starts) if b >= target), bodies)
        picks.append(min(max(body, picks[-1] + 1), bodies - (pp - s)))
    bounds = [starts[i] for i in picks] + [total]
    stages = tuple(PipelineStage(s, pp, bounds[s], bounds[s + 1]) for s in range(pp))
    assert all(stage.layers > 0 for stage in stages), stages
    return stages


def scenario_stages(scenario: Scenario) -> tuple[PipelineStage, ...]:
    """The pipeline stages of ``scenario``'s model under its ``parallelism`` (``pp`` and
    ``stage_layers``): the one call every room makes (one stage when ``pp`` is 1)."""
    parallelism = scenario.workload.parallelism
    return pipeline_stages(scenario.model, parallelism.pp, parallelism.stage_layers)


def stage_groups(
    groups: list[GraphGroup], arch: Architecture, stage: PipelineStage
) -> list[GraphGroup]:
    """The graph groups of one step that ``stage`` runs: the embedding on the first stage,
    each decoder group's bodies that fall in it, the SnapKV selection of its layers, the LM
    head on the last (groups in ``compiler.fusion.graph_groups``' order and names)."""
    kinds = layer_kinds(arch)
    layer = 0
    segments = iter(layer_segments(kinds))
    out: list[GraphGroup] = []
    for group in groups:
        if group.name == "embedding":
            if stage.first:
                out.append(group)
            continue
        if group.name == "lm_head":
            if stage.last:
                out.append(group)
            continue
        selection = selection_kernel(group.name)
        if selection is not None:
            window = selection[1]
            mine = sum(1 for kind in stage.kinds(arch) if kind.window == window)
            if mine:
                out.append(replace(group, count=mine))
            continue
        segment = next(segments)
        size = len(segment.body)
        held = sum(
            1
            for body in range(group.count)
            if stage.first_layer <= layer + body * size < stage.end_layer
        )
        layer += group.count * size
        if held:
            out.append(replace(group, count=held))
    return out
