"""Typed, validated description of a serving workload: model, parallelism, KV policy, traffic.

Field paths here are a contract that users' scripts, sweeps and the CLI's `--set` rely on:
`hardware`, `model`, `parallelism.tp` (the rest of `parallelism` in config/parallelism.py),
`kv.policy`, `kv.budget`, `kernel_looping`, `moe_expert_loading`, `serving.batch_slots`,
`serving.requests`, `serving.max_context`, `serving.seed`.
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, Discriminator, Field, Tag, model_validator

from rdu_sim.config.architecture import ConfigJsonKeys, ConfigJsonModel, ModelArchitecture
from rdu_sim.config.base import StrictModel
from rdu_sim.config.dtypes import DTYPE_BYTES as DTYPE_BYTES  # re-exported for callers
from rdu_sim.config.dtypes import ValueDtype, WeightDtype
from rdu_sim.config.errors import FieldProblem
from rdu_sim.config.experts import ExpertsConfig
from rdu_sim.config.parallelism import ParallelismConfig as ParallelismConfig  # re-exported
from rdu_sim.config.speculation import SpecDecodingConfig, SpecPrefillConfig
from rdu_sim.config.units import Tokens
from rdu_sim.shapes import Pooling


class DtypesConfig(StrictModel):
    """Storage precision of weights, KV cache and activations (rdu_sim/config/dtypes.py)."""

    weights: WeightDtype | None = Field(
        default=None,
        description="weights (plain formats carry no scales: int4 is 0.5 bytes a weight); "
        "default: the model's released dtype (its config.json), else bf16",
    )
    experts: WeightDtype | None = Field(
        default=None,
        description="routed-expert weights of MoE layers (gpt-oss: mxfp4); default: the "
        "model's released expert dtype, else dtypes.weights",
    )
    kv: ValueDtype = Field(default="bf16", description="storage type of the KV cache")
    activations: ValueDtype = Field(
        default="bf16", description="storage type of activations between operators"
    )


def _buckets_word(value: Any) -> Any:
    """A word other than 'pow2' for kv.context_buckets is one error, not one per branch of
    the union (a list, or 'pow2')."""
    if isinstance(value, str) and value != "pow2":
        raise ValueError(f"must be 'pow2' or a list of lengths, got {value!r}")
    return value


def named_only(where: str) -> BeforeValidator:
    """A policy is named, never configured: a mapping or a list (``{name: aging_spf, rate:
    100}``) is refused, saying ``where`` its parameters or variants go instead."""

    def name_or_refuse(value: Any) -> Any:
        if isinstance(value, dict | list):
            raise ValueError(f"expected a policy's registered name (a string); {where}")
        return value

    return BeforeValidator(name_or_refuse, json_schema_input_type=str)


class KVConfig(StrictModel):
    """KV-cache policy and its parameters (SnapKV / StreamingLLM defaults, see docs/kv.md)."""

    policy: Annotated[
        str,
        named_only(
            "its parameters are kv's other fields (kv.budget or kv.compression_ratio, "
            'kv.sinks, kv.recent, kv.observation_window, ...: docs/kv.md, "Parameters and '
            'defaults")'
        ),
    ] = Field(
        default="full",
        min_length=1,
        max_length=100,
        description="KV-cache policy by registered name (the registry in rdu_sim.kv is the "
        "one list of valid names; a Scenario refuses any other)",
    )
    budget: Tokens | None = Field(
        default=None,
        description="tokens kept per slot by a compressing policy (sinks + selected + recent)",
    )
    compression_ratio: float | None = Field(
        default=None,
        gt=1,
        le=1e6,
        description="alternative to budget: budget = max_context / compression_ratio",
    )
    sinks: int = Field(default=4, ge=0, le=1_000_000, description="attention-sink tokens kept")
    recent: int = Field(
        default=2048, ge=1, le=100_000_000, description="ring buffer of most recent tokens"
    )
    observation_window: int = Field(
        default=32, ge=1, le=1_000_000, description="SnapKV queries that score the prompt"
    )
    pooling: Pooling = Field(default="max", description="SnapKV 1-D pooling")
    kernel_size: int = Field(default=7, ge=1, le=1001, description="SnapKV pooling kernel")
    context_buckets: Annotated[
        list[int] | Literal["pow2"],
        BeforeValidator(_buckets_word, json_schema_input_type=list[int] | Literal["pow2"]),
    ] = Field(
        default="pow2",
        description="static decode cache lengths compiled for full attention ('pow2' doubles "
        "from min_bucket up to max_context)",
    )
    min_bucket: int = Field(
        default=1024, ge=1, le=100_000_000, description="smallest 'pow2' decode bucket, tokens"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.budget is not None and self.compression_ratio is not None:
            # at the ratio's field, so an override that set it is the one blamed (not the
            # first --set under kv)
            raise FieldProblem(
                "compression_ratio",
                f"give kv.budget or kv.compression_ratio, not both (kv.budget is "
                f"{self.budget}, kv.compression_ratio {self.compression_ratio:g})",
            )
        if self.kernel_size % 2 == 0:
            raise FieldProblem("kernel_size", f"must be odd (padding k//2), got {self.kernel_size}")
        return self


def fixed_shorthand(value: Any) -> Any:
    """Let `prompt_tokens: 8192` mean a fixed length."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"dist": "fixed", "value": value}
    return value


class FixedLength(StrictModel):
    """Every request has the same length."""

    dist: Literal["fixed"] = Field(default="fixed", description="the distribution: fixed")
    value: int = Field(ge=1, le=100_000_000, description="every request's length, in tokens")


class UniformLength(StrictModel):
    """Lengths uniform on [low, high] (integers)."""

    dist: Literal["uniform"] = Field(description="the distribution: uniform")
    low: int = Field(ge=1, le=100_000_000, description="shortest length, in tokens")
    high: int = Field(ge=1, le=100_000_000, description="longest length, in tokens")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LognormalLength(StrictModel):
    """Lengths lognormal with the given median and log-space sigma, clipped to [low, high]."""

    dist: Literal["lognormal"] = Field(description="the distribution: lognormal")
    median: float = Field(gt=0, le=1e8, description="median length, in tokens")
    sigma: float = Field(ge=0, le=10, description="standard deviation of the log length")
    low: int = Field(default=1, ge=1, le=100_000_000, description="lengths clip to at least")
    high: int = Field(ge=1, le=100_000_000, description="lengths clip to at most")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


LengthDistribution = Annotated[
    FixedLength | UniformLength | LognormalLength,
    BeforeValidator(
        fixed_shorthand,
        json_schema_input_type=int | FixedLength | UniformLength | LognormalLength,
    ),
    Field(discriminator="dist"),
]


PolicyName = Annotated[
    str,
    named_only(
        "policies take no parameters: a variant (aging_spf at another rate, say) is a subclass "
        'registered under a name of its own, from a plugin (docs/architecture.md, "Where to add '
        'a batching policy")'
    ),
]
"""A registered policy's name (``serving.prefill_priority``, ``serving.preemption``)."""


ArrivalProcess = Literal["poisson", "closed_loop", "all_at_once"]

ARRIVAL_READS: dict[str, tuple[str, ...]] = {
    "poisson": ("rate",),
    "closed_loop": ("concurrency",),
    "all_at_once": (),
}
"""The ``serving.arrival`` fields each process reads (``process`` itself aside); an override
of another warns that it changes nothing (``scenario._warn_unread``, the rule ``kv`` fields
follow under their policy)."""


class ArrivalConfig(StrictModel):
    """When requests arrive."""

    process: ArrivalProcess = Field(
        default="closed_loop",
        description="poisson: arrivals at rate per second; closed_loop: each user sends its "
        "next request when the last finishes; all_at_once: every request at time 0",
    )
    rate: float | None = Field(
        default=None, gt=0, le=1e9, description="requests per second (poisson)"
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="users in the closed loop (default: the batch slots)",
    )

    @model_validator(mode="after")
    def _rate_for_poisson(self) -> Self:  # (a field a process does not read: ARRIVAL_READS)
        if self.process == "poisson" and self.rate is None:
            raise FieldProblem("rate", "is required for process 'poisson'")
        return self


TraceFormat = Literal["auto", "csv", "jsonl", "azure", "mooncake", "burstgpt"]
"""The trace formats a workload's or a cluster's trace may name (``serving.traces.registry``
registers one reader each; a test keeps the two lists equal)."""


class ServingConfig(StrictModel):
    """Traffic and the server's static batch."""

    batch_slots: int | Literal["auto"] = Field(
        default="auto", description="static batch slots, or 'auto' for the batch capacity"
    )
    max_context: Tokens = Field(
        default=8192,
        description="longest sequence a slot holds (prompt + output), in tokens",
    )
    prompt_tokens: LengthDistribution = Field(default_factory=lambda: FixedLength(value=1024))
    output_tokens: LengthDistribution = Field(default_factory=lambda: FixedLength(value=256))
    trace: str | None = Field(
        default=None,
        description="request trace, relative to the file, or a shipped one by name: the "
        "project's CSV/JSONL of arrival_s, prompt_tokens, output_tokens, or a published "
        "Azure, Mooncake or BurstGPT trace (docs/serving.md)",
    )
    trace_format: TraceFormat = Field(
        default="auto",
        description="serving.trace's format: 'csv' or 'jsonl' (the project's), 'azure', "
        "'mooncake', 'burstgpt'; 'auto' reads a published trace off the file's first line, "
        "else the project's format by its suffix",
    )
    arrival: ArrivalConfig = Field(default_factory=ArrivalConfig)
    requests: int = Field(default=100, ge=1, le=1_000_000, description="requests to serve")
    seed: int = Field(
        default=0, ge=0, le=2**63 - 1, description="seed of the request lengths and arrivals"
    )
    prefill_priority: PolicyName = Field(
        default="prefill_first",
        min_length=1,
        max_length=100,
        description="the batching policy by registered name (the registry in "
        "rdu_sim.serving.batching is the one list of valid names, a plugin's included: "
        "rdu_sim.plugins; an unknown name is refused listing them; docs/serving.md describes "
        "the shipped ones)",
    )
    preemption: PolicyName = Field(
        default="latest_arrival",
        min_length=1,
        max_length=100,
        description="which running request a decode step short of KV pages preempts, where "
        "the stack gives pages on demand (stack.kv_allocation: on_demand), by registered name "
        "(the registry in rdu_sim.serving.preemption, a plugin's included: rdu_sim.plugins; "
        "docs/serving.md describes the shipped ones)",
    )
    prefill_chunk_tokens: int | None = Field(
        default=None,
        ge=1,
        le=100_000_000,
        description="split long prompts into chunks, interleaved with decode steps",
    )
    max_work: int = Field(
        default=10_000_000,
        ge=1000,
        le=10**12,
        description="refuse a run whose estimated scheduler work exceeds this (one unit ~ one "
        "state change: ~25 us and ~250 bytes; slots and step shapes add; see "
        "rdu_sim/serving/limits.py)",
    )

    @model_validator(mode="after")
    def _check_slots(self) -> Self:
        if isinstance(self.batch_slots, int) and not 1 <= self.batch_slots <= 1_000_000:
            raise FieldProblem(
                "batch_slots", f"must be in 1..1000000 or 'auto', got {self.batch_slots}"
            )
        if self.trace_format != "auto" and self.trace is None:
            raise FieldProblem(
                "trace_format",
                f"{self.trace_format!r} names the format of serving.trace, and there is none",
            )
        return self

    def slots_for(self, capacity: Callable[[], int]) -> int:
        """The batch slots a server runs: ``batch_slots``, or for 'auto' the batch capacity
        (``capacity()``, asked only then: computing it plans memory)."""
        return capacity() if self.batch_slots == "auto" else self.batch_slots


class EngineConfig(StrictModel):
    """Kernel-level simulation: granularity (fidelity vs speed) and how stages buffer."""

    tiles_per_stage: int = Field(
        default=8,
        ge=1,
        le=4096,
        description="fewest tiles a stage streams per kernel call: the compiler cuts a "
        "kernel finer when its stages' buffers do not fit their PMUs at this many, or when "
        "finer tiles (doubling, at most a row each) leave its GEMMs room to re-read their "
        "weights less and so estimate it faster",
    )
    all_sockets: bool = Field(
        default=False,
        description="simulate every TP socket instead of one socket plus its links",
    )
    max_events: int = Field(
        default=20_000_000,
        ge=1000,
        le=10**10,
        description="refuse a step whose simulation would exceed this many events",
    )
    # How a stage buffers its streams (not public; SN §IV-B says PMUs hold stage inputs, the
    # parameters being streamed and intermediates, not how they split). Defaults: double
    # buffering, half of a stage's PMU SRAM for streamed weight/KV tiles.
    buffer_tiles: int = Field(
        default=2,
        ge=1,
        le=64,
        description="slots of each stage-to-stage buffer (2 = double buffering)",
    )
    prefetch_tiles: int = Field(
        default=2,
        ge=1,
        le=64,
        description="fewest weight/KV tiles a stage keeps loaded or loading ahead of its "
        "compute (2 = double buffering); never more than one layer's tiles_per_stage",
    )
    operand_buffer_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="share of a stage's PMU SRAM holding streamed weight/KV tiles; a stage "
        "runs ahead of its compute by as many tiles as fit (the rest holds its input/output "
        "tiles and intermediates)",
    )
    fast_forward: bool = Field(
        default=True,
        description="simulate one of identical kernel calls and stop a looped kernel once its "
        "layers repeat, extrapolating the rest (step times within 5e-4 of the full simulation, "
        "work totals exact); false simulates every layer and call",
    )


WeightsPlacement = Literal["hbm", "hot_set", "streamed"]


class MemoryConfig(StrictModel):
    """Where the weights live on each socket (SN40L's three tiers; docs/memory.md)."""

    weights: WeightsPlacement = Field(
        default="hbm",
        description="'hbm': every weight lives in HBM and the batch slots fit beside them "
        "(slots that leave the weights no room are refused, explicit or auto); "
        "'hot_set': the weights live in DDR and HBM pins the most-read ones (up to "
        "hot_set_fraction of HBM; explicit slots that leave no room for it pin fewer, with a "
        "warning), the rest read from DDR every step; 'streamed': every "
        "weight is read from DDR every step, HBM holds only the KV cache and activations",
    )
    hot_set_fraction: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="with weights 'hot_set': the share of HBM pinned for weights; the rest "
        "holds the batch slots' KV cache and activations (a serving choice, not hardware)",
    )


WEIGHTS_READS: dict[str, tuple[str, ...]] = {
    "hbm": (),
    "hot_set": ("hot_set_fraction",),
    "streamed": (),
}
"""The ``memory`` fields each ``memory.weights`` placement reads (``weights`` itself aside:
``compiler.placement.pinned_limit``); an override of another warns that it changes nothing
(``scenario._warn_unread``, the rule ``kv`` fields follow under their policy)."""


class ZipfPopularity(StrictModel):
    """Expert popularity: expert ``i`` (from 0) is asked for with weight ``1 / (i + 1)^s``."""

    dist: Literal["zipf"] = Field(default="zipf", description="the distribution: zipf")
    exponent: float = Field(default=1.0, ge=0.0, le=10.0, description="s; 0 is uniform")


class TracePopularity(StrictModel):
    """Each request's expert from the ``expert`` column of ``serving.trace``."""

    dist: Literal["trace"] = Field(description="the experts come from the trace")


Popularity = Annotated[ZipfPopularity | TracePopularity, Field(discriminator="dist")]


def _model_kind(value: Any) -> str | None:
    """A preset name is a string; a config.json reference a mapping with `config_json`; a
    custom architecture any other mapping."""
    if isinstance(value, str):
        return "preset"
    if isinstance(value, ConfigJsonModel) or (
        isinstance(value, Mapping) and "config_json" in value
    ):
        return "hf_config"  # a tag, not a key: error paths drop it
    if isinstance(value, ConfigJsonKeys) or (
        isinstance(value, Mapping) and "model_type" in value and "family" not in value
    ):
        return "hf_keys"  # a config.json's keys inline, mapped by rdu_sim.models.hf_config
    if isinstance(value, Mapping | BaseModel):
        return "custom"
    return None


# Validate only the branch the input meant, so a custom architecture with a typo reports
# the typo (model.hiden_size), not also "model: should be a string".
ModelField = Annotated[
    Annotated[str, Tag("preset")]
    | Annotated[ConfigJsonModel, Tag("hf_config")]
    | Annotated[ConfigJsonKeys, Tag("hf_keys")]
    | Annotated[ModelArchitecture, Tag("custom")],
    Discriminator(
        _model_kind,
        custom_error_type="model_kind",
        custom_error_message="expected a preset name, {config_json: path}, a config.json's "
        "keys (with model_type) or an architecture (with family)",
    ),
]


class CoEConfig(StrictModel):
    """Composition of Experts (SN40L paper §VI-C, Fig. 9): many expert models of the
    workload's architecture live in DDR; a router model, always in HBM, picks each
    request's expert; an HBM region caches the active experts (docs/memory.md)."""

    experts: int = Field(ge=1, le=100_000, description="expert models resident in DDR")
    router: ModelField = Field(
        description="the router model, given as `model` is (a preset name, {config_json: "
        "path}, a config.json's keys or an architecture): it prefills every prompt once "
        "before the expert serves it, and its weights stay in HBM",
    )
    popularity: Popularity = Field(
        default_factory=ZipfPopularity,
        description="how requests pick their expert: {dist: zipf, exponent} (seeded by "
        "serving.seed) or {dist: trace}, the expert column of serving.trace",
    )
    eviction: Literal["lru", "lfu", "fifo"] = Field(
        default="lru",
        description="which cached expert a switch evicts: 'lru' (least recently used), "
        "'lfu' (least often used), 'fifo' (least recently admitted)",
    )
    prefetch: bool = Field(
        default=True,
        description="copy the next queued request's expert into HBM while the current "
        "expert serves (the copy shares DDR and HBM with the steps' own traffic)",
    )
    switch: Literal["bounded", "drain"] = Field(
        default="bounded",
        description="when the sockets go to another expert: 'drain' (the holding expert "
        "keeps admitting its arriving requests until none is waiting or running), "
        "'bounded' (it stops admitting once its turn is older than coe.turn_s and another "
        "expert's request waits; its running requests finish, then the switch)",
    )
    turn_s: float = Field(
        default=2.0,
        gt=0.0,
        le=1e6,
        description="with switch 'bounded': seconds an expert's turn may admit new requests "
        "while another expert's request waits",
    )

    @model_validator(mode="after")
    def _turn_bounded(self) -> Self:
        """A turn's bound is read only by the bounded policy: set to anything but its default
        under 'drain', it would change no result (the parallelism fields' rule)."""
        if self.switch == "drain" and self.turn_s != type(self).model_fields["turn_s"].default:
            raise FieldProblem(
                "turn_s",
                f"bounds a turn under switch 'bounded'; switch 'drain' never reads it (a turn "
                f"admits while its expert has requests), got {self.turn_s:g} s",
            )
        return self


class SpeculationConfig(StrictModel):
    """A draft model, where it runs, and the speculative mechanisms it serves
    (docs/serving.md, "Speculation")."""

    draft: ModelField = Field(
        description="the draft model, given as `model` is: a preset name, {config_json: "
        "path}, a config.json's keys or an architecture"
    )
    placement: Literal["shared", "separate"] = Field(
        default="shared",
        description="'shared': the draft runs on the target's sockets, between its steps, "
        "its weights and KV cache in their memory; 'separate': on draft_tp sockets of its "
        "own, beside the target's",
    )
    draft_tp: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="tensor-parallel degree of the draft (default: parallelism.tp)",
    )
    shares_embeddings: bool = Field(
        default=False,
        description="the draft reads the target's embedding table and LM head instead of "
        "its own, so they are not held twice (DeepSeek's multi-token-prediction module, "
        "preset deepseek-r1-mtp); needs placement shared and the target's vocabulary and "
        "hidden size",
    )
    same_tokenizer: bool | None = Field(
        default=None,
        description="whether the draft shares the target's tokenizer (speculative decoding "
        "needs it; speculative prefill without it needs token_mapping). Unset: when their "
        "vocab_size are equal. true for a family whose models pad their embedding tables "
        "differently (Qwen2.5-0.5B and -14B: 151,936 and 152,064 rows, one tokenizer)",
    )
    decoding: SpecDecodingConfig | None = Field(
        default=None, description="speculative decoding (unset: plain decoding)"
    )
    prefill: SpecPrefillConfig | None = Field(
        default=None, description="speculative prefill (unset: the target prefills it all)"
    )

    @model_validator(mode="after")
    def _one_mechanism(self) -> Self:
        if self.decoding is None and self.prefill is None:
            raise ValueError(
                "speculation needs decoding, prefill or both: a draft that does nothing "
                "changes nothing (remove the section instead)"
            )
        if self.shares_embeddings and self.placement != "shared":
            raise ValueError(
                "shares_embeddings needs placement shared: a draft on other sockets cannot "
                "read the target's embedding table and LM head"
            )
        if self.decoding is not None and self.prefill is not None:
            raise ValueError(
                "speculative decoding and speculative prefill together are not modelled: "
                "the draft's cache would hold the whole prompt while the target's holds "
                "the kept tokens; use one of them"
            )
        return self


class WorkloadConfig(StrictModel):
    """A complete workload file."""

    name: str = Field(
        default="workload", min_length=1, max_length=200, description="the name reports show"
    )
    description: str = Field(default="", description="what the workload is for (free text)")
    hardware: str = Field(min_length=1, description="hardware file, relative to this file")
    stack: str | None = Field(
        default=None,
        min_length=1,
        description="the serving stack: a shipped stack's name (stacks/), a stack file "
        "relative to this file, or 'none' (the device alone: no host time; static decode "
        "programs over every batch slot, one prompt per prefill step); absent: the hardware "
        "file's default_stack",
    )
    model: ModelField = Field(
        description="a preset name (see `rdu-sim inspect model --list`), a Hugging Face "
        "config.json ({config_json: path}) or its keys inline (with model_type), or an "
        "architecture (with family)"
    )
    dtypes: DtypesConfig = Field(default_factory=DtypesConfig)
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    kv: KVConfig = Field(default_factory=KVConfig)
    kernel_looping: bool = Field(
        default=True,
        description="run a stack of identical decoder layers as one looped kernel call (SN40L "
        "Kernel Looping) instead of one call per layer",
    )
    fusion: Literal["auto", "none", "partial", "full"] = Field(
        default="auto",
        description="operators per kernel: 'none' one operator per kernel, 'partial' the "
        "fusions GPU serving stacks do (flash attention, GEMM epilogues, merged projections, "
        "fused add-norm), 'full' a decoder layer per kernel (what kernel_looping loops); "
        "'auto' is full on SN40L and partial on a GPU (docs/gpu.md)",
    )
    cuda_graphs: bool = Field(
        default=True,
        description="GPU hardware: the host launches each step as one CUDA graph instead of "
        "one launch per kernel (SN40L ignores it)",
    )
    moe_expert_loading: Literal["routed", "static"] = Field(
        default="routed",
        description=(
            "MoE expert weights a step streams: 'routed' gathers the experts the batch's "
            "tokens touch (expected count under uniform routing); 'static' has compile-time "
            "loop bounds: it gathers the worst case min(experts, tokens x k) after the router, "
            "or streams every expert, prefetched, whichever the engine times faster "
            "(compiler/expert_schedule.py)"
        ),
    )
    experts: ExpertsConfig = Field(
        default_factory=ExpertsConfig,
        description="the load on a MoE model's whole experts and their placement (with "
        "parallelism.ep > 1: config/experts.py)",
    )
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    coe: CoEConfig | None = Field(
        default=None, description="serve a Composition of Experts (absent: one model)"
    )
    serving: ServingConfig = Field(default_factory=ServingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    speculation: SpeculationConfig | None = Field(
        default=None, description="a draft model for speculative decoding or prefill"
    )
