"""A serving stack: the software between the hardware and the user, its own file beside the
hardware (``stacks/``).

A machine's hardware file holds what the silicon and its wiring do; a stack (SambaStudio as
Argonne measured it in 2024, SambaStack, TensorRT-LLM, vLLM) holds what its runtime adds to
every step and how it lays out and batches the work: host time on the critical path (a
decode step's input is the token the previous step sampled), host time it overlaps with the
device, how its KV cache is paged and whether it packs prompts. A workload names its stack
(``stack:``); without one it runs the stack its hardware file names (``default_stack:``),
and ``none`` is the device alone (:data:`NONE_WORDS`): no host time, but every other field at
its default, the plainest static runtime: decode programs over every batch slot at the
workload's context buckets, each decode step reading every slot's KV cache whether or not it
is decoding, and one prompt per prefill step. So it bounds the host time a stack adds, not
how fast the hardware can serve: at low occupancy a runtime that decodes only the live
sequences (``decode_program: live``, a paged KV cache) is faster. A stack's values are
fitted on that stack's measurements only (docs/calibration.md).
"""

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from rdu_sim import human
from rdu_sim.config.base import StrictModel
from rdu_sim.config.units import ShortSeconds
from rdu_sim.shapes import DecodeRows

_MAX_HOST_S = 1.0

NONE = "none"
"""The name of the built-in stack that adds no host time: the device alone (module
docstring)."""

NONE_WORDS = (
    "the device alone: no host time; static decode programs over every batch slot (each "
    "decode step reads every slot's KV cache, decoding or not) and one prompt per prefill step"
    ", padded to its prompt bucket; each slot's KV cache held whole (no paged pool: a GPU "
    "holds fewer slots than under a paged stack)"
)
"""What the stack ``none`` keeps and drops, in words: its description, the docs', and
``rdu-sim compare``'s where it suggests ``--set stack=none`` (more than the host time moves:
on an H100 the 70B's batch capacity falls from TensorRT-LLM's 2,048 to the 197 static slots
its memory holds, and its 2,304-token prefill, padded, takes 152 ms against 115 ms)."""

RunsOn = Literal["rdu", "gpu", "any"]


def serves(runs_on: str, kind: str) -> bool:
    """Whether a stack that runs on ``runs_on`` (``rdu``, ``gpu``, ``any``) serves hardware
    of ``kind``: the one rule of a stack's refusal (``stack_file.runs_on_problem``) and of
    ``rdu-sim compare``'s advice to run each column under each stack."""
    return runs_on in ("any", kind)


@dataclass(frozen=True)
class HostTime:
    """The host's time around one step: ``serial_s`` the device waits for (it adds to the
    step), ``overlapped_s`` run while the device runs, of which ``exposed_s`` outlasts the
    device's step (and adds to it too); ``transfer_s`` is the part of ``serial_s`` spent
    sending the host what it samples from over the host link (not the stack's own work)."""

    serial_s: float
    overlapped_s: float
    exposed_s: float
    transfer_s: float = 0.0

    @property
    def added_s(self) -> float:
        """What the host adds to the device's step."""
        return self.serial_s + self.exposed_s


class HostWorkConfig(StrictModel):
    """Host time the runtime spends per step, and whether the device waits for it.

    A decode step's input is the token the last step sampled, so what the host must do
    between the two (hand the sampled tokens back, launch the next step) is serial with the
    device. What a runtime prepares for the next step while the device runs this one (an
    overlap scheduler: the batch's bookkeeping, detokenizing and streaming last step's
    tokens) costs the device nothing until it takes longer than the device's step.
    """

    serial_per_step: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per step on the device's critical path: the scheduler, the "
        "step's launch and the wait for its end, the sampled tokens' trip to the host",
    )
    serial_per_slot: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per batch slot of a step on the critical path (every slot of "
        "the step): one sequence's token sampled, detokenized and streamed before the next "
        "step starts",
    )
    serial_per_prompt: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per prompt a prefill step starts, on the critical path: the "
        "request's admission (parsing, tokenizing, scheduling it) and the switch to its "
        "prefill program",
    )
    serial_per_page_sent: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per KV-cache page of the step's sequences on the critical "
        "path when the step runs on more than one device: the driver serializes the step's "
        "metadata, every sequence's page table, and broadcasts it to the other workers "
        "(vLLM 2024's broadcast_object_list); 0 on one device",
    )
    overlapped_per_step: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per step spent while the device runs the step before (an "
        "overlap scheduler preparing the next batch): the device waits only for what "
        "exceeds its own step",
    )
    overlapped_per_slot: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per batch slot spent while the device runs (a sequence's "
        "bookkeeping, its last token detokenized and streamed), shared by the threads",
    )
    threads: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="host threads sharing the overlapped per-slot work (a step's slots are "
        "dealt out to them, so its time is that of the most loaded thread)",
    )

    def time(
        self,
        batch: int,
        device_s: float,
        transfer_s: float = 0.0,
        prompts: int = 0,
        pages_sent: int = 0,
    ) -> HostTime:
        """The host's time around one step of ``batch`` slots whose device time is
        ``device_s``, of which ``prompts`` start their prefill; ``transfer_s`` is what the
        step sends the host on the critical path (sampling on the host: the logits' trip over
        the host link); ``pages_sent`` the KV-cache pages whose page tables the driver sends
        the step's other devices (0 on one device)."""
        serial = (
            self.serial_per_step
            + batch * self.serial_per_slot
            + prompts * self.serial_per_prompt
            + pages_sent * self.serial_per_page_sent
            + transfer_s
        )
        per_thread = -(-batch // self.threads)  # ceil: the most loaded thread's slots
        overlapped = self.overlapped_per_step + per_thread * self.overlapped_per_slot
        return HostTime(serial, overlapped, max(0.0, overlapped - device_s), transfer_s)


Sampling = Literal["host", "device"]
SpeculativeRounds = Literal["one_program", "step_by_step"]
BatchPrograms = Literal["any", "powers_of_two"]
DecodeProgram = Literal["all_slots", "live"]
KVAllocation = Literal["reserve", "on_demand"]
"""When a paged KV cache gives a request its pages (`StackConfig.kv_allocation`)."""
BatchLimit = Literal["memory", "max_batch_slots", "batch_programs"]
"""What bounds a stack's batch capacity (`StackConfig.batch_limit`)."""
_MOST_SPLIT_TOKENS = 1 << 24


def _attention_split(value: object) -> object:
    """``decode_attention_split``'s one rule: 'whole', 'fill' or a number of tokens."""
    if value in ("whole", "fill"):
        return value
    if type(value) is int and 1 <= value <= _MOST_SPLIT_TOKENS:
        return value
    raise ValueError(
        "must be 'whole', 'fill' or the tokens of a sequence's context one thread block "
        f"streams (a whole number, 1 to {_MOST_SPLIT_TOKENS:,}); got {value!r}"
    )


AttentionSplit = Annotated[
    Literal["whole", "fill"] | Annotated[int, Field(ge=1, le=_MOST_SPLIT_TOKENS)],
    BeforeValidator(_attention_split),
]


class StackConfig(StrictModel):
    """A complete serving stack file."""

    name: str = Field(min_length=1, max_length=200, description="the name reports show")
    description: str = Field(default="", description="what the stack is (free text)")
    runs_on: RunsOn = Field(
        description="the hardware kind it runs on: 'rdu' (SN40L), 'gpu', or 'any'"
    )
    host: HostWorkConfig = Field(
        default_factory=HostWorkConfig,
        description="host time per step and per slot, and what of it the device waits for",
    )
    sampling: Sampling = Field(
        default="device",
        description="where a step's next tokens are drawn from its logits: 'device' (a "
        "sampling operator in the step, reading the logits where they are) or 'host' (the "
        "logits cross the host link first, serial with the device; the host's sampling is "
        "then part of host.serial_per_slot)",
    )
    speculative_rounds: SpeculativeRounds = Field(
        default="step_by_step",
        description="how a round of speculative decoding (the draft's k steps, then the "
        "target's verify step) is launched: 'one_program', the whole round one compiled "
        "program launched once (SambaStack's public program mapping compiles "
        "speculative-decoding programs per (sequence length, batch, sd{k}): the drafted "
        "tokens never return to the host between draft steps), so the host's time is that "
        "of one step, paid by the verify step, and the draft's steps take their device "
        "time alone; 'step_by_step', every step of the round launched on its own and paying "
        "the host's time of a step (a two-model draft/target loop: TensorRT-LLM's, vLLM's)",
    )
    kv_page_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="tokens per page of a paged KV cache: a decode step's attention reads "
        "each sequence's pages (its cache rounded up to a page), not a static graph's "
        "context bucket, and the step runs only the decoding sequences; none: static "
        "decode graphs at the workload's kv.context_buckets over the rows decode_program "
        "says",
    )
    decode_program: DecodeProgram | None = Field(
        default=None,
        description="which compiled batch a static decode step runs: 'all_slots', the "
        "program of the run's batch slots every step, whether or not each slot is "
        "decoding; 'live', the smallest batch it has a program for (batch_programs) that "
        "holds the decoding sequences, the batch picked by the queue's length and padded "
        "up to a compiled size; none: all_slots. Not with kv_page_tokens (a paged cache "
        "runs the decoding sequences)",
    )

    @field_validator("decode_program")
    @classmethod
    def _static_programs(
        cls, value: DecodeProgram | None, info: ValidationInfo
    ) -> DecodeProgram | None:
        """A program choice is a static runtime's: refused beside a paged cache (validated
        first), the error at this field."""
        if value is not None and info.data.get("kv_page_tokens") is not None:
            raise ValueError(
                f"{value!r} chooses among static programs, and this stack pages its KV "
                "cache (kv_page_tokens), so its decode steps run the decoding sequences: "
                "leave it out, or set kv_page_tokens null"
            )
        return value

    prefill_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1 << 24,
        description="the runtime packs waiting prompts of one static prefill shape into one "
        "prefill step, up to this many (padded) tokens, the decode rows a mixed step "
        "carries counted in; none: one prompt per prefill step",
    )
    mixed_batching: bool = Field(
        default=False,
        description="a step that prefills prompts (or a chunk of one) also decodes one "
        "token for every generating sequence, in one forward pass (TensorRT-LLM's "
        "in-flight batching; vLLM's and SGLang's mixed chunked prefill); false: prefill "
        "steps run alone and the generating sequences wait for them",
    )
    max_batch_slots: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="the most sequences the runtime batches in a step (TensorRT-LLM's "
        "max_batch_size, vLLM's max_num_seqs): batch_slots auto is the smaller of this and "
        "what fits in memory; none: what fits",
    )
    batch_programs: BatchPrograms = Field(
        default="any",
        description="the batch sizes the runtime has compiled step programs for: "
        "'powers_of_two' (static programs compiled per batch size, as SambaStack's public "
        "program mapping lists 1, 2, 4, ... 128), so batch_slots auto is the largest power "
        "of two that fits; 'any': every batch (a runtime batching sequences per step). An "
        "explicit serving.batch_slots runs as given, a program compiled for it",
    )
    decode_attention_split: AttentionSplit = Field(
        default="fill",
        description="how a GPU's decode attention deals one sequence's cached keys and "
        "values (per KV head) out to thread blocks: 'whole' (one block streams the whole "
        "context: TensorRT-LLM engines built without multi_block_mode), a number of tokens "
        "per block (vLLM's PagedAttention v2 partitions of 512), or 'fill' (the context "
        "split until the blocks fill the SMs: TensorRT-LLM's multi-block mode, FlashInfer's "
        "and FlashMLA's split-KV); a block streams at gpu.thread_block_bandwidth",
    )
    kv_memory_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the share of device memory left by the weights and activations that "
        "the runtime gives its KV cache (TensorRT-LLM's free_gpu_memory_fraction); none: "
        "all of it",
    )
    memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the share of device memory the runtime uses in all, its weights, "
        "activations and KV cache together, the KV cache taking what the others leave of it "
        "(vLLM's gpu_memory_utilization); none: all of it. Not with kv_memory_fraction",
    )

    @field_validator("memory_utilization")
    @classmethod
    def _one_memory_share(cls, value: float | None, info: ValidationInfo) -> float | None:
        """One bound on the KV cache: refused beside ``kv_memory_fraction`` (validated
        first), the error at this field."""
        fraction = info.data.get("kv_memory_fraction")
        if value is not None and fraction is not None:
            raise ValueError(
                f"{human.number(value)} and kv_memory_fraction {human.number(fraction)} "
                "both bound the KV cache (a share of all the memory, a share of what the "
                "weights and activations leave): set one, the other null (--set "
                "stack.memory_utilization=null)"
            )
        return value

    kv_allocation: KVAllocation = Field(
        default="reserve",
        description="when a paged KV cache (kv_page_tokens) gives a request its pages: "
        "'reserve', all of them at admission, its prompt plus output tokens rounded up to "
        "pages, so no request is ever preempted (TensorRT-LLM's default capacity scheduler, "
        "GUARANTEED_NO_EVICT); 'on_demand', its prompt's pages at admission and one page "
        "more as its decode crosses each page boundary, and when a decode step needs a "
        "page and none is free the running request that arrived last is preempted: its "
        "pages are freed, it returns to the front of the queue and is prefilled again, its "
        "prompt and the tokens it had generated, when it is readmitted (vLLM's block "
        "manager, preemption by recompute). Read only with kv_page_tokens (static slots "
        "hold a whole sequence each); not with mixed_batching",
    )

    @field_validator("kv_allocation")
    @classmethod
    def _pages_on_demand(cls, value: KVAllocation, info: ValidationInfo) -> KVAllocation:
        """Decode steps apart from prefill steps (a mixed step's decode rows growing is not
        modelled): refused beside mixed_batching (validated first), the error at this
        field. Static slots have no pages to give: there it is not read."""
        if value == "on_demand" and info.data.get("mixed_batching"):
            raise ValueError(
                "'on_demand' with mixed_batching is not modelled (a prefill step's decode "
                "rows would grow pages mid-step): use 'reserve', or set mixed_batching false"
            )
        return value

    kv_watermark: float = Field(
        default=0,
        ge=0,
        lt=1,
        description="under kv_allocation on_demand, the share of the pool's pages an "
        "admission leaves free (whole pages, rounded down): a request is admitted only when "
        "the free pages less its prompt's are at least this many (vLLM's block manager "
        "watermark, 0.01 by default, against preempting what it just admitted); read only "
        "under on_demand (a reserving pool admits a request whole: it never grows)",
    )

    def kv_room(self, memory: float, weights: float, activations: float) -> float:
        """Bytes of ``memory`` the runtime gives its KV cache beside ``weights`` and
        ``activations`` (the one rule of ``kv_memory_fraction`` and ``memory_utilization``)."""
        if self.memory_utilization is not None:
            return self.memory_utilization * memory - weights - activations
        free = memory - weights - activations
        return free if self.kv_memory_fraction is None else self.kv_memory_fraction * free

    def kv_share_words(self) -> str:
        """The KV cache's share in words, for capacity texts: '' when it has all the memory
        left, else which setting bounds it."""
        if self.memory_utilization is not None:
            return (
                " within the stack's share of memory (memory_utilization "
                f"{human.number(self.memory_utilization)})"
            )
        if self.kv_memory_fraction is not None:
            return (
                " in the stack's KV share (kv_memory_fraction "
                f"{human.number(self.kv_memory_fraction)})"
            )
        return ""

    def runnable_batch(self, fits: int) -> int:
        """The largest batch this stack runs when ``fits`` slots fit in memory: at most
        ``max_batch_slots``, and a batch it has a program for (0 stays 0)."""
        slots = fits if self.max_batch_slots is None else min(fits, self.max_batch_slots)
        if self.batch_programs == "powers_of_two" and slots > 0:
            return 1 << (slots.bit_length() - 1)
        return slots

    def batch_limit(self, fits: int) -> BatchLimit:
        """What bounds :meth:`runnable_batch` of ``fits``: ``memory`` when the stack runs all
        that fits, else ``max_batch_slots`` (its cap, when that is a batch it runs) or
        ``batch_programs`` (the largest batch it has a program for)."""
        runs = self.runnable_batch(fits)
        if runs == fits:
            return "memory"
        if self.max_batch_slots is not None and runs == self.max_batch_slots:
            return "max_batch_slots"
        return "batch_programs"

    def has_program(self, slots: int) -> bool:
        """Whether the stack runs a batch of ``slots`` (at most its ``max_batch_slots``, a
        batch it has a program for); an explicit ``serving.batch_slots`` that is not runs
        as if the stack had one (docs/serving.md, "Slots")."""
        return self.runnable_batch(slots) == slots

    @property
    def pages_on_demand(self) -> bool:
        """Whether the stack gives a paged pool's pages on demand (``kv_allocation``), on the
        servers `kv.paged.gives_on_demand` says; never without pages (static slots hold a
        whole sequence each, whatever ``kv_allocation`` says)."""
        return self.dynamic_batch and self.kv_allocation == "on_demand"

    @property
    def dynamic_batch(self) -> bool:
        """Whether a decode step runs only the live sequences (a paged KV cache: the
        runtime batches sequences per step), not a static graph over every slot."""
        return self.kv_page_tokens is not None

    @property
    def decode_rows(self) -> DecodeRows:
        """The rows a decode step runs (``DecodeRows``): the one rule from the paged cache,
        ``decode_program`` and ``batch_programs`` (``serving.decode_rounds`` applies it)."""
        if self.dynamic_batch:
            return "ladder"
        if self.decode_program != "live":
            return "slots"
        return "programs" if self.batch_programs == "powers_of_two" else "live"


NO_STACK = StackConfig(name=NONE, runs_on="any", description=NONE_WORDS)
"""The stack named ``none``."""
