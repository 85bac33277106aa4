"""The experts' all-to-all under data-parallel attention: what a device sends, and the
busiest device's share of the routed experts' work.

With ``dp_attention`` ranks of ``tp`` devices and whole experts over all ``D = tp x dp``
devices of a stage (``config.parallelism``, exchange ``all_to_all``), a MoE layer runs so on
every device:

1. attention on its rank's batch (``tp``-sliced), its all-reduce inside the rank;
2. the router, the shared experts and the weighted combine on the device's share of its
   rank's tokens, ``rows / tp`` of them (weights whole on every device);
3. dispatch: an all-to-all sends each of those tokens' hidden states to the devices holding
   its experts (``dispatch_dtype``, with the routing's indices and weights);
4. the routed experts of the device, ``E / D`` of them, on the tokens of every rank routed
   there: ``dp x rows x k / D`` token-expert pairs on average, more on the busiest device,
   which the layer waits for (``compiler.expert_load``);
5. combine: an all-to-all brings each token's expert outputs back (``dtypes.activations``);
6. an all-gather inside the rank when ``tp > 1``, so every device of the rank holds its
   rank's whole output again.

Which devices a token needs is a matter of routing (``graph.moe.token_hit_probability``), and
how the bytes cross nodes a matter of the wiring: both are for the engine's all-to-all
(``hw.all_to_all``), handed the ``AllToAllSpec`` and one copy of each token here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rdu_sim.compiler.expert_load import ExpertLoad, ExpertLoadModel, expert_load_model
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.config.dtypes import DTYPE_BYTES
from rdu_sim.graph import Operator
from rdu_sim.graph.moe import static_schedule, token_hit_probability
from rdu_sim.graph.shape import FP32, INDEX
from rdu_sim.models.layers import MoeArchitecture
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import AllToAllSpec, Phase, StepShape

FP8_SCALE_GROUP = 128
"""FP8 dispatch quantizes each token per 128 channels, one FP32 scale each (DeepEP's
``per_token_cast_to_fp8``, as SGLang dispatches DeepSeek-V3)."""


def dispatch_value_bytes(dtype: str) -> float:
    """Bytes a dispatched hidden-state value takes, its scales included."""
    return DTYPE_BYTES[dtype] + (FP32 / FP8_SCALE_GROUP if dtype == "fp8" else 0.0)


@dataclass(frozen=True)
class ExpertExchange:
    """A scenario's all-to-all experts: the degrees, the routing, the payloads per token."""

    tp: int
    dp: int
    experts: int
    per_token: int
    groups: int
    groups_per_token: int
    mode: str  # auto | throughput | low_latency (parallelism.all_to_all)
    # auto resolved by the engine's estimates (SN40L: its compiler holds both forms), not by
    # DeepEP's convention alone (GPUs: what SGLang's --deepep-mode auto runs, `spec`)
    by_estimate: bool
    dispatch_bytes: float  # per token: hidden state at the dispatch dtype, routing metadata
    combine_bytes: float  # per token: hidden state at the activations' dtype
    load_model: ExpertLoadModel  # the experts' placement and the busiest device's load

    @property
    def devices(self) -> int:
        """Devices of the stage, each holding experts / devices whole experts."""
        return self.tp * self.dp

    def device_tokens(self, rows: int) -> int:
        """The device's share of its rank's ``rows`` tokens (the last devices of a rank may
        hold one fewer: the busiest's)."""
        return math.ceil(rows / self.tp)

    def load(self, rows: int, joint_tokens: int = 0) -> ExpertLoad:
        """The busiest device's routed work when every rank runs ``rows`` tokens (or the
        ranks send ``joint_tokens`` together)."""
        return self.load_model.load(rows, joint_tokens)

    def _need(self, size: int) -> float:
        """The probability a token needs ``size`` consecutive devices: exact under the group
        limit when the devices hold whole blocks of experts, else each of the token's experts
        on them with probability size / devices (copies of experts spread the rest)."""
        if self.experts % self.devices == 0:
            block = size * (self.experts // self.devices)
            return token_hit_probability(
                block, self.experts, self.per_token, self.groups, self.groups_per_token
            )
        return 1 - (1 - size / self.devices) ** self.per_token

    def spec(self, phase: Phase, direction: str) -> AllToAllSpec:
        """How a step of ``phase`` sends in ``direction``: the routing's figures for every
        block of consecutive devices that divides the stage
        (``graph.moe.token_hit_probability``), and the form. ``all_to_all`` auto leaves the
        form to the engine's estimates for the layer's calls together
        (``AllToAllSpec.choose``, ``engine.collective_port.plan_all_to_alls``), ties to
        DeepEP's convention: throughput for prefill, low latency for decode. On GPUs ``auto``
        is the convention itself, as SGLang's ``--deepep-mode auto`` runs it: the normal
        kernels wait on the host for their receive counts, which keeps them out of a decode
        step's CUDA graph, a cost the estimate does not see (it would pick them in decode)."""
        hierarchical = self.mode == "throughput" or (self.mode == "auto" and phase == "prefill")
        needs = tuple(
            (size, self._need(size))
            for size in range(1, self.devices + 1)
            if self.devices % size == 0
        )
        return AllToAllSpec(
            "hierarchical" if hierarchical else "direct",
            "dispatch" if direction == "dispatch" else "combine",
            self.per_token / self.devices,
            needs,
            choose=self.mode == "auto" and self.by_estimate,
        )


def micro_batch_shapes(shape: StepShape) -> tuple[StepShape, ...]:
    """The two micro-batches of two-batch overlap: the slots halved (the first the larger),
    or a lone prompt's tokens halved (the second attending to the first as cached); none
    when the step cannot be cut (one decode slot). A mixed step's decode rows are halved
    too (the first the larger)."""
    decode = shape.decode_batch
    first_rows, second_rows = (decode + 1) // 2, decode // 2
    if shape.batch >= 2:
        half = (shape.batch + 1) // 2
        return (
            shape.part(batch=half, decode_batch=first_rows),
            shape.part(batch=shape.batch - half, decode_batch=second_rows),
        )
    if shape.tokens >= 2:
        half = (shape.tokens + 1) // 2
        second = shape.part(
            tokens=shape.tokens - half,
            cache_len=shape.cache_len + half,
            decode_batch=second_rows,
        )
        return (shape.part(tokens=half, select=False, decode_batch=first_rows), second)
    return ()


def expert_exchange(scenario: Scenario, all_experts: bool = False) -> ExpertExchange | None:
    """The scenario's all-to-all experts, or None when its MoE layers exchange no tokens
    (``all_experts``: the static schedule streaming every expert, `graph.moe`)."""
    parallelism, arch = scenario.workload.parallelism, scenario.model
    if parallelism.exchange != "all_to_all":
        return None
    assert isinstance(arch, MoeArchitecture)  # the scenario checks the model has experts
    groups = (
        (arch.expert_groups, arch.groups_per_token)
        if isinstance(arch, DeepSeekArchitecture)
        else (1, 1)
    )
    act = scenario.activation_dtype_bytes
    dispatch = parallelism.dispatch_dtype or scenario.workload.dtypes.activations
    routing = arch.experts_per_token * (INDEX + FP32)  # each expert's index and weight
    return ExpertExchange(
        tp=parallelism.tp,
        dp=parallelism.dp_attention,
        experts=arch.routed_experts,
        per_token=arch.experts_per_token,
        groups=groups[0],
        groups_per_token=groups[1],
        mode=parallelism.all_to_all,
        by_estimate=scenario.hardware.kind != "gpu",
        dispatch_bytes=arch.hidden_size * dispatch_value_bytes(dispatch) + routing,
        combine_bytes=arch.hidden_size * act,
        load_model=expert_load_model(
            scenario.workload.experts,
            arch.routed_experts,
            arch.experts_per_token,
            parallelism.stage_devices,
            parallelism.dp_attention,
            static_schedule(scenario.workload.moe_expert_loading, all_experts),
        ),
    )


def exchange_role(node: Operator) -> str | None:
    """What an operator of a MoE layer is under an all-to-all exchange: ``token`` (it runs
    on the socket's share of its rank's tokens: the router, top-k, shared experts, the
    weighted combine), ``experts`` (the routed experts, on the pairs dispatched to the
    socket) or None (everything else: as under tensor parallelism)."""
    if node.kind in ("router", "topk", "moe_combine") or ".shared." in f".{node.name}":
        return "token"
    if node.split.compute == "experts":
        return "experts"
    return None
