"""What a step's work is, beside its timing: the model's own FLOPs and the experts it streams.

- Model FLOPs. A step's ``flops`` (``StepTiming.flops``) are one socket's matrix FLOPs, work
  repeated on several sockets included: the MoE router, MLA's q_a_proj and kv_a_proj and an
  MTP module's input projection run whole on every TP socket, GQA's K/V projections on each
  of the sockets sharing a KV head when they outnumber the heads (docs/architecture.md, TP),
  so a DeepSeek prefill socket multiplies about 30% more than its share of the model. The model's
  own FLOPs (``model_flops``) are the unsharded graphs' (``compiler.fusion.step_groups``):
  each product once, for the batch the step's devices run (a pipeline's reported stage over its
  micro-batches, both micro-batches of a two-batch overlap). Over the TP sockets they are
  what model FLOP/s utilisation (MFU) counts: ``model_flops_fraction`` = model_flops / tp
  over the step's time and the socket's peak, the share ``flops_fraction`` is of.
- Experts. A MoE layer streams the weights of the experts its tokens touch
  (``graph.moe.experts_loaded``): under routed loading the expected distinct experts of
  uniform routing, E (1 - (1 - k/E)^tokens); under static loading the worst case of slots
  gathered after the router, min(E, tokens x k), or every expert (the compiler's choice,
  ``Program.expert_schedule``). ``expert_streams`` says it per routing of a layer: one per
  micro-batch. With whole experts over ``ep`` devices (expert parallelism) a device streams
  those of its own among them. Whole experts paced by their busiest device under an expert
  load model (an all-to-all exchange of every rank's tokens, or the workload's ``experts``)
  stream what that model says instead (``Program.expert_balance``, the step JSON's
  ``expert_balance``): no layer-wide count from one rank's tokens is given then.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from rdu_sim.compiler.fusion import step_groups
from rdu_sim.compiler.program import Program
from rdu_sim.compiler.stages import PipelineStage, scenario_stages
from rdu_sim.config.architecture import LlamaArchitecture
from rdu_sim.graph import expected_distinct_experts, experts_loaded, totals
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape

__all__ = ["ExpertStreams", "expert_streams", "model_flops", "model_flops_fraction"]


def _parts(
    scenario: Scenario, program: Program, stage: int = 0
) -> list[tuple[StepShape, PipelineStage | None]]:
    """The (shape, pipeline stage) of each batch the step's reported devices run once: a
    pipeline's stage ``stage`` once per micro-batch, each micro-batch of a two-batch overlap,
    else the step's own shape."""
    if program.pipeline:
        held = scenario_stages(scenario)[stage]
        return [(program.pipeline[stage].shape, held)] * program.pipeline_micro_batches
    return [(micro.shape, None) for micro in program.micro_batches] or [(program.shape, None)]


def model_flops(scenario: Scenario, program: Program, stage: int = 0) -> float:
    """The model's own matrix FLOPs in the step ``program`` runs (module docstring): the
    unsharded graphs' sum, no product counted twice, for the batch its devices run (of a
    pipeline, stage ``stage``'s: the step report's, its binding stage)."""
    every = program.expert_schedule == "all"
    return sum(
        totals(step_groups(scenario, shape, held, every)).flops
        for shape, held in _parts(scenario, program, stage)
    )


def model_flops_fraction(own: float, tp: int, flops: float, flops_fraction: float) -> float:
    """Model FLOP/s utilisation (module docstring): ``own`` model FLOPs over ``tp`` sockets,
    as a share of peak, from a step's per-socket ``flops`` and their ``flops_fraction``
    (the same time and peak divide both); 0 for a step with no matrix work."""
    return flops_fraction * own / tp / flops if flops > 0 else 0.0


@dataclass(frozen=True)
class ExpertStreams:
    """The routed experts one MoE layer streams in a step, per routing (micro-batch)."""

    routed_experts: int  # E
    experts_per_token: int  # k
    loading: str  # "routed", "static" (the gather of min(E, tokens x k) slots) or "all"
    devices: int  # devices the experts are whole over (expert parallelism); 1: sliced
    tokens: tuple[int, ...]  # the tokens of each routing of the layer in the step
    expected_distinct: tuple[float, ...]  # E (1 - (1 - k/E)^tokens) of each
    streamed: tuple[float, ...]  # experts (or static slots) streamed, each

    def to_dict(self) -> dict[str, Any]:
        """JSON: E, k, the loading and, for each group of equal routings, their tokens,
        count, expected distinct experts and experts streamed."""
        groups = Counter(zip(self.tokens, self.expected_distinct, self.streamed, strict=True))
        return {
            "routed_experts": self.routed_experts,
            "experts_per_token": self.experts_per_token,
            "loading": self.loading,
            "whole_over_devices": self.devices,
            "routings": [
                {"tokens": t, "count": n, "expected_distinct": d, "streamed": s}
                for (t, d, s), n in groups.items()
            ],
        }

    def words(self) -> str:
        """The console's line: what each MoE layer streams and why (and, with whole experts,
        that a device streams its own among them)."""
        whole = (
            f"; whole experts over {self.devices} devices, {self.routed_experts // self.devices:,}"
            " each: a device streams its own among them"
            if self.devices > 1
            else ""
        )
        return self._layer_words() + whole

    def _layer_words(self) -> str:
        e, k = self.routed_experts, self.experts_per_token
        many = len(self.tokens) > 1
        tokens = ", ".join(f"{t:,}" for t in sorted(set(self.tokens)))
        batch = (
            f"{len(self.tokens)} micro-batches of {tokens} tokens" if many else f"{tokens} tokens"
        )
        expected = _experts(self.expected_distinct)
        streamed = _experts(self.streamed)
        each = " per micro-batch" if many else ""
        if self.loading == "routed":
            return (
                f"routed experts: each MoE layer streams {streamed} of its {e:,} experts{each}, "
                f"the distinct experts its {batch} x {k} touch on average under uniform "
                "routing, E(1 - (1 - k/E)^tokens), loaded after its router"
            )
        if self.loading == "static":
            return (
                "routed experts (static loading): each MoE layer gathers the worst case of "
                f"expert slots after the router, {streamed} of {e:,}{each} ({batch} x {k}), "
                f"where uniform routing touches {expected} distinct experts on average"
            )
        return (
            "routed experts (static loading): each MoE layer streams every expert, "
            f"prefetched: all {e:,}{each}, where uniform routing of its {batch} x {k} touches "
            f"{expected} distinct experts on average"
        )


def _experts(values: tuple[float, ...]) -> str:
    """Expert counts to one decimal, a whole one without it: ``29.1``, ``32``."""
    return ", ".join(f"{v:,.1f}".removesuffix(".0") for v in sorted(set(values)))


def expert_streams(scenario: Scenario, program: Program) -> ExpertStreams | None:
    """What each MoE layer of the step streams (module docstring); None for a model
    without MoE layers, or whole experts paced by an expert load model."""
    arch = scenario.model
    if isinstance(arch, LlamaArchitecture) or arch.moe_layers == 0:
        return None
    inner = (program, *program.micro_batches, *program.pipeline)
    if any(p.expert_balance is not None for p in inner):
        return None  # paced by an expert load model (module docstring)
    e, k = arch.routed_experts, arch.experts_per_token
    every = program.expert_schedule == "all"
    loading = "all" if every else scenario.workload.moe_expert_loading
    tokens = tuple(shape.rows for shape, _ in _parts(scenario, program))
    return ExpertStreams(
        routed_experts=e,
        experts_per_token=k,
        loading=loading,
        devices=scenario.workload.parallelism.expert_ways,
        tokens=tokens,
        expected_distinct=tuple(expected_distinct_experts(t, e, k) for t in tokens),
        streamed=tuple(experts_loaded(t, e, k, loading) for t in tokens),
    )
