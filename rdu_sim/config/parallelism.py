"""How a model is split over the devices of one replica, and where each part of it lives.

A replica runs on ``pp`` pipeline stages of ``tp x dp_attention`` devices each:

- ``tp``: tensor parallelism inside one attention rank (heads, FFN columns, vocabulary);
- ``dp_attention``: attention ranks per stage, each with its own requests, batch and KV cache
  (attention data-parallel); the ranks step together, joined by the routed experts;
- ``ep``: expert parallelism, whole routed experts over every device of a stage (1: every
  expert sliced over them instead);
- ``pp``: pipeline stages, consecutive runs of layers on devices of their own, a step's
  batch cut into ``micro_batches`` that follow each other through the stages.

Where each part of a layer lives follows from those degrees, here and only here
(:func:`part_placements`): a part is split ``tensor`` ways into slices, ``data`` ways into
batches (each device its own rows) and ``expert`` ways into whole experts. Today's
tensor-parallel run is ``dp_attention = ep = pp = 1``: every part sliced over ``tp``.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from rdu_sim.config.base import StrictModel, as_tuple
from rdu_sim.config.errors import FieldProblem

MAX_DEVICES = 4096
"""Devices of one replica at most: ``system.sockets``' own bound."""

Part = Literal[
    "embedding", "attention", "dense_ffn", "router", "shared_experts", "routed_experts", "lm_head"
]
PARTS: tuple[Part, ...] = (
    "embedding",
    "attention",
    "dense_ffn",
    "router",
    "shared_experts",
    "routed_experts",
    "lm_head",
)
"""The parts of a model whose placement the parallelism decides, in layer order."""

Exchange = Literal["none", "all_reduce", "all_to_all"]
"""How a MoE layer's tokens reach their experts' devices and come back: ``none`` (one device,
or every expert sliced over the devices, each computing its slice for every token, summed by
an all-reduce), ``all_reduce`` (whole experts, every device holding every token after the
attention's all-reduce: each computes its own experts, summed by the same all-reduce) or
``all_to_all`` (whole experts, each device holding its own tokens: a dispatch all-to-all
sends each token to its experts' devices and a combine all-to-all brings the results
back)."""


OverlapSchedule = Literal["first_come", "stage_order"]
"""The order two-batch overlap's micro-batches take the SMs and the network
(``ParallelismConfig.overlap_schedule``)."""


@dataclass(frozen=True)
class PartPlacement:
    """How one part of the model is split over a pipeline stage's devices: ``tensor`` ways
    into slices of its weights, ``data`` ways into batches of rows, ``expert`` ways into whole
    experts (tensor x data x expert = the stage's devices, or fewer: replicated beyond)."""

    tensor: int
    data: int
    expert: int = 1

    def describe(self) -> str:
        """The placement in words, for reports."""
        splits = ((self.tensor, "slices"), (self.data, "batches"), (self.expert, "experts"))
        ways = [f"{n} ways by {what}" for n, what in splits if n > 1]
        return ", ".join(ways) or "whole on one device"


class ParallelismConfig(StrictModel):
    """How the model is split across the devices of a replica (module docstring)."""

    tp: int = Field(
        default=1,
        ge=1,
        le=MAX_DEVICES,
        description="tensor-parallel degree (sockets or GPUs): of attention, dense FFNs and "
        "the LM head inside one attention rank, and of everything with no other parallelism",
    )
    dp_attention: int = Field(
        default=1,
        ge=1,
        le=MAX_DEVICES,
        description="attention data-parallel ranks per pipeline stage: each holds its own "
        "requests' batch and KV cache on tp devices of its own",
    )
    ep: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DEVICES,
        description="expert-parallel degree: 1 slices every routed expert over the stage's "
        "tp x dp_attention devices, tp x dp_attention places whole experts on each of them; "
        "given, it decides over moe_experts; default: from moe_experts",
    )
    pp: int = Field(
        default=1,
        ge=1,
        le=256,
        description="pipeline stages: consecutive runs of layers, each on tp x dp_attention "
        "devices of its own",
    )
    stage_layers: Annotated[tuple[int, ...] | None, BeforeValidator(as_tuple)] = Field(
        default=None,
        max_length=256,
        description="with pp > 1: each stage's decoder layers, in order (pp of them, each "
        ">= 1, summing to the model's layers; vLLM's VLLM_PP_LAYER_PARTITION); default: the "
        "layers split by count, stage s starting at layer round(layers x s / pp)",
    )
    micro_batches: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="with pp > 1: micro-batches a step's batch is cut into, following each "
        "other through the stages (default: pp); a step of fewer sequences runs one a "
        "sequence, and the step report says so",
    )
    all_to_all: Literal["auto", "throughput", "low_latency"] = Field(
        default="auto",
        description="how the experts' all-to-all sends (DeepEP's two kinds): 'throughput' "
        "sends a token once to each node it needs over the network, then on to its devices "
        "inside the node; 'low_latency' sends each of its experts' copies straight to their "
        "devices; 'auto' runs, for a kernel's all-to-alls together (fusion full: a layer's "
        "dispatch and combine), the forms that take "
        "the least time on the ports they share (the busiest port's load, or the slower call's "
        "idle-link estimate if longer; ties: the smaller sum of the estimates, then throughput "
        "for prefill, low_latency for decode), and on GPUs that convention itself (SGLang's "
        "--deepep-mode auto)",
    )
    dispatch_dtype: Literal["fp8", "bf16"] | None = Field(
        default=None,
        description="type the dispatch all-to-all sends the hidden states in (fp8: one FP32 "
        "scale per 128 values, DeepEP's); default: dtypes.activations. The combine sends "
        "dtypes.activations",
    )
    two_batch_overlap: bool = Field(
        default=False,
        description="a GPU step as two micro-batches, one's all-to-alls beside the other's "
        "kernels (SGLang's two-batch overlap); costs each layer's weights read twice, GEMMs "
        "on half the rows and comm_sms SMs held by the communication kernels",
    )
    comm_sms: int = Field(
        default=20,
        ge=0,
        le=10_000,
        description="with two_batch_overlap: SMs the all-to-all kernels hold while they "
        "overlap the other micro-batch's kernels (DeepEP's Buffer.num_sms, 20 by default); "
        "another value without two_batch_overlap is refused",
    )
    overlap_schedule: OverlapSchedule = Field(
        default="first_come",
        description="two-batch overlap's schedule (the order its micro-batches' calls take "
        "the SMs and the network). 'first_come': each runs the calls as they become ready; "
        "it matches SGLang's measured prefill points within ~5%, but is not monotone in the "
        "calls' times (Graham's anomalies: ep72's prefill step 9% shorter on a slower link, "
        "290.7 ms at 0.7 us against 319.5 ms at 0.55 us). 'stage_order': SGLang's yield "
        "points, the micro-batches' stages interleaved; monotone, but it hides the "
        "all-to-alls almost fully, 30-37% faster than the measured points, whose overlap "
        "pays costs not modelled (the all-to-alls' HBM traffic, DeepEP normal mode's host "
        "wait for its receive counts; docs/parallelism.md). Another value without "
        "two_batch_overlap is refused",
    )
    mla_cache_layout: Literal["replicated", "sequence_split", "head_split"] = Field(
        default="sequence_split",
        description=(
            "MLA latent cache under TP: replicated on every socket, split by sequence "
            "(each socket holds 1/tp of the tokens), or per-head after up-projection"
        ),
    )
    moe_experts: Literal["tensor", "expert"] = Field(
        default="tensor",
        description=(
            "MoE routed experts under TP: 'tensor' slices every expert tp ways (each socket "
            "streams 1/tp of every selected expert, balanced); 'expert' places E/tp whole "
            "experts per socket, so a step waits for the socket holding the most selected "
            "experts (expected over uniform routing, one token within its expert groups); "
            "the same as ep 1 and ep tp x dp_attention"
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        devices = self.tp * self.dp_attention * self.pp
        if devices > MAX_DEVICES:
            raise ValueError(
                f"tp x dp_attention x pp = {self.tp} x {self.dp_attention} x {self.pp} = "
                f"{devices} devices, more than a replica's {MAX_DEVICES}"
            )
        stage = self.tp * self.dp_attention
        if self.ep is not None and self.ep not in (1, stage):
            raise FieldProblem(
                "ep",
                f"must be 1 (every routed expert sliced over the stage's {stage} devices) or "
                f"tp x dp_attention = {stage} (whole experts on each), got {self.ep}",
            )
        exchange_only = (
            "all_to_all",
            "dispatch_dtype",
            "two_batch_overlap",
            "comm_sms",
            "overlap_schedule",
        )
        fields = type(self).model_fields
        given = [f for f in exchange_only if getattr(self, f) != fields[f].default]
        if given and self.exchange != "all_to_all":
            raise FieldProblem(
                given[0],
                "sets the experts' all-to-all, which runs only with data-parallel attention "
                "and whole experts (dp_attention > 1, ep = tp x dp_attention)",
            )
        # Given as above: other than the default, so the shipped two-batch-overlap files'
        # `comm_sms: 20` (DeepEP's default) still runs with two_batch_overlap set false.
        if "comm_sms" in given and not self.two_batch_overlap:
            raise FieldProblem(
                "comm_sms",
                f"sets the SMs two-batch overlap's all-to-all kernels hold (a GPU's); it needs "
                f"two_batch_overlap: true, got {self.comm_sms} without it",
            )
        if "overlap_schedule" in given and not self.two_batch_overlap:
            raise FieldProblem(
                "overlap_schedule",
                f"orders two-batch overlap's micro-batches; it needs two_batch_overlap: true, "
                f"got {self.overlap_schedule!r} without it",
            )
        if self.stage_layers is not None:
            if self.pp == 1:
                raise FieldProblem(
                    "stage_layers",
                    f"splits the layers among a pipeline's stages; {list(self.stage_layers)} "
                    "needs pp > 1 (pp 1 runs every layer in one stage)",
                )
            if len(self.stage_layers) != self.pp:
                raise FieldProblem(
                    "stage_layers",
                    f"gives {len(self.stage_layers)} stages' layers for pp={self.pp} stages "
                    "(one count a stage)",
                )
            if any(n < 1 for n in self.stage_layers):
                raise FieldProblem(
                    "stage_layers",
                    f"must give every stage at least one layer, got {list(self.stage_layers)}",
                )
        if self.micro_batches is not None and self.micro_batches > 1 and self.pp == 1:
            raise FieldProblem(
                "micro_batches",
                f"cuts a step for the pipeline's stages; {self.micro_batches} needs pp > 1 "
                "(1, a step whole, is what pp 1 runs)",
            )
        return self

    def _ep_of(self, moe_experts: str) -> int:
        return self.stage_devices if moe_experts == "expert" else 1

    @property
    def stage_devices(self) -> int:
        """Devices of one pipeline stage: tp x dp_attention."""
        return self.tp * self.dp_attention

    @property
    def devices(self) -> int:
        """Devices of one replica (:func:`replica_devices`)."""
        return replica_devices(self.layout())

    @property
    def expert_ways(self) -> int:
        """Ways the routed experts are split whole (the effective ep)."""
        return self.ep if self.ep is not None else self._ep_of(self.moe_experts)

    @property
    def pipeline_micro_batches(self) -> int:
        """Micro-batches of a pipelined step (1 without a pipeline)."""
        if self.pp == 1:
            return 1
        return self.micro_batches if self.micro_batches is not None else self.pp

    def step_micro_batches(self, batch: int) -> int:
        """Micro-batches a pipelined step of ``batch`` sequences is cut into:
        ``pipeline_micro_batches``, but never more than the sequences (a micro-batch is one
        sequence at least), so a batch smaller than ``micro_batches`` runs one micro-batch a
        sequence instead of failing: a run's small batches and a sweep over the batch go
        through (docs/parallelism.md; reports say when a step ran fewer)."""
        return min(self.pipeline_micro_batches, batch)

    def layout(self) -> dict[str, int]:
        """The degrees a replica runs with, by their ``parallelism.*`` names: ``tp``,
        ``dp_attention``, ``ep`` (the ways whole experts are split: ``expert_ways``, 1 for a
        model without routed experts), ``pp`` and ``micro_batches`` (a step's at most, 1
        without a pipeline). What every report's JSON names the layout by; its words are
        :func:`describe_layout`'s."""
        return {
            "tp": self.tp,
            "dp_attention": self.dp_attention,
            "ep": self.expert_ways,
            "pp": self.pp,
            "micro_batches": self.pipeline_micro_batches,
        }

    @property
    def exchange(self) -> Exchange:
        """How a MoE layer's tokens reach their experts (``Exchange``)."""
        if self.expert_ways == 1:
            return "none"
        return "all_to_all" if self.dp_attention > 1 else "all_reduce"

    @property
    def tensor_parallel_only(self) -> bool:
        """Whether this is plain tensor parallelism (no data, expert or pipeline split)."""
        return self.dp_attention == 1 and self.pp == 1 and self.exchange != "all_to_all"


def part_placements(parallelism: ParallelismConfig) -> dict[Part, PartPlacement]:
    """Where each part of the model lives on a pipeline stage's devices: the one statement of
    it (module docstring). Attention, dense FFNs, the embedding and the LM head are sliced
    ``tp`` ways inside each of the ``dp_attention`` ranks (each rank its own batch). The
    router and the shared experts follow them, except under an all-to-all exchange, where
    each device of a rank takes 1/tp of its rank's tokens whole (``data`` = the stage's
    devices) and dispatches them. Routed experts are whole over ``ep`` devices, or sliced
    over every device of the stage (ep 1)."""
    tp, dp, stage = parallelism.tp, parallelism.dp_attention, parallelism.stage_devices
    ranked = PartPlacement(tensor=tp, data=dp)
    ep = parallelism.expert_ways
    token_split = PartPlacement(tensor=1, data=stage)
    exchanged = parallelism.exchange == "all_to_all"
    return {
        "embedding": PartPlacement(tensor=1, data=dp),
        "attention": ranked,
        "dense_ffn": ranked,
        "router": token_split if exchanged else PartPlacement(tensor=1, data=dp),
        "shared_experts": token_split if exchanged else ranked,
        "routed_experts": PartPlacement(tensor=stage // ep, data=1, expert=ep),
        "lm_head": ranked,
    }


def replica_devices(layout: Mapping[str, int]) -> int:
    """Devices one replica of a layout (:meth:`ParallelismConfig.layout`) runs on: tp x
    dp_attention x pp (expert parallelism splits the experts over those same devices)."""
    return layout["tp"] * layout["dp_attention"] * layout["pp"]


def replica_batch(layout: Mapping[str, int], batch: int) -> int:
    """Sequences one replica of a layout runs in a step whose ``batch`` is what a step's
    ``batch`` means (``StepShape.batch``, ``serving.batch_slots``, ``rdu-sim step
    --batch``): an attention rank's under data-parallel attention (every rank steps in
    lockstep with as many: ``rdu-sim step``'s ``batch_of``), so ``dp_attention`` times it;
    the whole replica's otherwise (a pipeline cuts that batch into its micro-batches)."""
    return batch * layout["dp_attention"]


def describe_layout(layout: Mapping[str, int]) -> str:
    """A layout (:meth:`ParallelismConfig.layout`) in the names ``--set`` takes: ``tp``
    always, each other degree when it splits something (``micro_batches`` with a pipeline):
    ``tp=16``, ``tp=1 dp_attention=16 ep=16``, ``tp=8 pp=2 micro_batches=2``. The one
    rendering of a layout as text: the step, run and cluster reports and ``rdu-sim check``
    all say it so."""
    shown = [f"tp={layout['tp']}"]
    shown += [f"{name}={layout[name]}" for name in ("dp_attention", "ep", "pp") if layout[name] > 1]
    if layout["pp"] > 1:
        shown.append(f"micro_batches={layout['micro_batches']}")
    return " ".join(shown)
