"""What ``rdu-sim compare`` measures of each variant (``Column``) and the comparison of them
all (``Comparison``, whose ``to_dict()`` is ``rdu-sim compare --json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Column:
    """One variant's figures for the workload (``fits`` False: ``reason`` says why and the
    timing fields are None; ``invalid`` too when the workload refuses the combination)."""

    hardware: str  # the hardware file's name field
    hardware_file: str
    kind: str  # rdu or gpu
    devices: int  # sockets or GPUs in the system
    tp: int  # tensor-parallel degree (inside one attention rank)
    instances: int  # model instances (replicas) the system holds: devices // instance_devices
    fusion: str  # the fusion level the compiler used
    fits: bool
    model: str = ""  # the model timed (the workload's, or a varied one)
    # the serving stack that ran (stacks/; 'none': the hardware alone), as a run's and a
    # step's JSON name it: the host time and batch limit it brings move the comparison
    stack: str = ""
    # hardware predicted, not measured (``config.origins.predicted_words``: its device
    # differs from the machine whose fitted values it keeps), in words; None otherwise
    predicted: str | None = None
    # the hardware kind that stack runs on (``rdu``, ``gpu``, ``any``: its ``runs_on``), so
    # compare advises ``--vary stack=...`` only where every stack named serves every column
    stack_runs_on: str = ""
    reason: str = ""
    # a combination of varied values the workload refuses (``reason`` says why; each value
    # runs in another combination): nothing was compiled, ``fits`` is False
    invalid: bool = False
    # the system refuses the workload in every combination, by a rule across the files
    # (``reason``: its tp beyond the system's devices, say) while another system runs it: a
    # column not run (``invalid`` True too)
    unsupported: bool = False
    # one instance's layout (``ParallelismConfig.layout``: tp, dp_attention, ep, pp,
    # micro_batches) and its devices (``config.parallelism.replica_devices``)
    layout: dict[str, int] = field(default_factory=dict)
    instance_devices: int = 0
    attention_ranks: int = 1  # dp_attention: ranks of one instance, each its own batch
    # one instance's slots, all its attention ranks' (a rank's: divide by attention_ranks)
    batch_capacity: int | None = None
    # the slots memory holds (an instance's, as ``batch_capacity``; at least it) and what
    # bounds the capacity (``StackConfig.batch_limit``): ``memory``, or the stack's
    # ``max_batch_slots`` or ``batch_programs`` below what memory holds
    memory_capacity: int | None = None
    capacity_limit: str | None = None
    batch: int | None = None
    context: int | None = None  # cached tokens the decode step attends to (its bucket)
    step_s: float | None = None
    # decode-step tokens/s: one decode step's tokens over its time, prefill left out (the
    # keys keep their names; the table and the verdicts say "decode-step")
    tokens_per_s_per_user: float | None = None
    tokens_per_s: float | None = None  # one model instance: batch / step_s
    system_tokens_per_s: float | None = None  # every instance
    # the typical request's output tokens (its median, within the context beside the
    # typical prompt): the decode steps each prefill is shared with in the served tokens/s
    output_tokens: int | None = None
    # served output tokens/s, prefill included (``compare.served_rate``): each request's
    # prefill and its output tokens' decode steps at the batch, in turn; one instance, and
    # every instance
    served_tokens_per_s: float | None = None
    system_served_tokens_per_s: float | None = None
    prefill_share: float | None = None  # prefill's share of that served time
    # the typical prompts one prefill step runs (the stack's ``prefill_batch_tokens`` packs
    # them; 1 without) and that step's time: a request's prefill is its share of it
    prefill_packed: int | None = None
    prefill_packed_s: float | None = None
    # the whole system's draw while serving (``report.energy.machine_watts``: every device
    # and its share of the hosts); None when the hardware file gives no power
    power_w: float | None = None
    # what that draw is (``power.figure``: ``average`` or ``maximum``, a datasheet's, whose
    # tokens per joule are a lower bound); None with no power
    power_figure: str | None = None
    tokens_per_joule: float | None = None  # decode-step tokens/s (whole system) / power_w
    served_tokens_per_joule: float | None = None  # served tokens/s (whole system) / power_w
    # the stored types of the weights, the KV cache and the activations (``dtypes``)
    dtypes: dict[str, str] = field(default_factory=dict)
    hbm_bandwidth_fraction: float | None = None  # of one device's peak HBM bandwidth
    flops_fraction: float | None = None  # of one device's peak matrix FLOP/s (peak_flops)
    peak_hbm_bandwidth: float = 0.0  # bytes/s of one device
    hbm_capacity: float = 0.0  # bytes of one device's HBM
    # the share of that peak the HBM sustains (``hbm.efficiency``): its time in the bound is
    # the bytes at peak x efficiency, the rate the verdict's arithmetic states
    hbm_efficiency: float = 1.0
    # matrix FLOP/s of one device at ``peak_flops_type`` (``engine.for_hardware``: a GPU's
    # tensor rate at its weights' type, fp8 for fp8 weights; SN40L's bf16 whatever they are)
    peak_flops: float = 0.0
    peak_flops_type: str = ""
    kernel_calls: int | None = None  # kernel calls in one decode step
    # the typical prompt's prefill as a server runs it (``serving.run.prefill_seconds``, a
    # run's ``prefill_s``): padded to its prompt bucket, or in chunks
    prefill_s: float | None = None
    # that prompt's tokens (``serving.step_shape.typical_prefill``): the workload's typical
    # prompt, the same one in every column whatever its KV policy
    prefill_tokens: int | None = None
    prefill_bucket: int | None = None  # tokens of its step (its prompt bucket) or of a chunk
    prefill_steps: int | None = None  # 1, or the chunks it is cut into
    prefill_compressed: bool = False  # the column's KV policy compresses that prompt
    # that prompt's (first) prefill step, packed as the stack packs it (``prefill_packed``),
    # against its bounds as the decode step's below
    # (``report.bound``): its time, what binds it, that resource's time, its link class
    prefill_step_s: float | None = None
    prefill_bound: str | None = None
    prefill_bound_s: float | None = None
    prefill_bound_link: str | None = None
    # a compressing policy's longer prompts (``serving.step_shape.long_prompts``): the prefill
    # of their median as a server runs it, its tokens, bucket (or chunk) and their share of
    # the requests; None when the policy compresses no prompt the workload sends
    long_prefill_s: float | None = None
    long_prefill_tokens: int | None = None
    long_prefill_bucket: int | None = None
    long_prefill_share: float | None = None
    label: str = ""  # what differs (``Variant.label``; the hardware's name when only it varies)
    settings: dict[str, Any] = field(default_factory=dict)  # what the variant sets
    kv_policy: str = ""
    # the serving stack pages its KV cache (``StackConfig.dynamic_batch``): in a run its
    # decode steps read each sequence's own context, not the one context timed here
    paged_kv: bool = False
    slot_tokens: int | None = None  # the most tokens a slot's KV cache keeps
    bound: str | None = None  # what binds the decode step (``report.bound``)
    bound_s: float | None = None  # that resource's time in the step
    # the link class whose busiest direction took longest (``report.bound.StepBound.link``,
    # a system.* field); None when no link was busy
    bound_link: str | None = None
    # every resource's time alone in the step (``report.bound``: compute, hbm, ... host)
    resource_s: dict[str, float] = field(default_factory=dict)
    hbm_bytes: float | None = None  # HBM bytes one device moves in the decode step
    ddr_bytes: float | None = None  # DDR bytes one device reads in it (weights spilled there)
    # the DDR bandwidth of one device and the share of it it sustains (``ddr.efficiency``;
    # 0 for a GPU, which has no DDR tier): its time in the bound is the bytes at their product
    peak_ddr_bandwidth: float = 0.0
    ddr_efficiency: float = 1.0
    # what a reader must be told of the column, in the words a run's report gives: its
    # memory plan (``compiler.placement.placement_warnings``: weights its batch pushed to
    # DDR) and its requests' prompts past the stack's token budget, each one prefill step
    # (``serving.limits.unchunked_words``)
    warnings: list[str] = field(default_factory=list)
    flops: float | None = None  # matrix FLOPs of one device in the decode step
    runtime_s: float | None = None  # the serving runtime's host time in the step
    # a pipelined decode step's bubble, its stages' idle share (``report.bound``); None
    # without a pipeline
    pipeline_bubble: float | None = None
    # the busiest device's token-expert pairs over the mean (``ExpertLoad.imbalance``: the
    # experts' load and placement) in the decode step and in the typical prefill step; None
    # where no routed experts are spread over devices
    expert_imbalance: float | None = None
    prefill_expert_imbalance: float | None = None
    # speculation's draft model, whose part compare does not time (``why.not_compared``);
    # None without a draft
    draft: str | None = None
    # a Composition of Experts' experts: compare times one of them (its decode step at the
    # batch, its prefill) at the batch capacity its CoE memory plan leaves, not the turns,
    # switches and router prefills a run times (``why.not_compared``); None without one
    coe_experts: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (field names are the JSON keys)."""
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A workload under each variant, in the order given."""

    workload: str
    model: str
    columns: tuple[Column, ...]
    lines: tuple[str, ...] = ()  # per variant, what differs and what binds it (compare.why)
    verdicts: tuple[str, ...] = ()  # each variant against the first that fits
    # what the verdicts compare (one decode step at one context) against a serving run
    # (``why.scope``); "" when fewer than two variants fit
    scope: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of ``rdu-sim compare --json``: the columns, and in words what
        differs and binds each (``lines``), why one wins (``verdicts``) and what those
        compare (``scope``)."""
        return {
            "workload": self.workload,
            "model": self.model,
            "columns": [c.to_dict() for c in self.columns],
            "lines": list(self.lines),
            "verdicts": list(self.verdicts),
            "scope": self.scope,
        }
