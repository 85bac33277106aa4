"""Tier placement: where weights, KV cache and activations live on each socket.

Rules (SN40L's compiler, SN §V, as the project models it):
1. Activations (the step's peak HBM working set, see `activation_bytes`) and the KV cache
   of every batch slot live in HBM: they are touched every step. If they do not fit beside
   nothing else, that is a CapacityError naming the batch capacity.
2. Weights fill the rest of HBM, highest bandwidth need first: need = bytes read per decode
   step / bytes resident (1 for dense weights, touched/E for routed experts, rows/vocab for
   the embedding gather), up to what the workload's `memory.weights` lets HBM pin
   (`pinned_limit`: all of them for `hbm`, `hot_set_fraction` of HBM for `hot_set`, none
   for `streamed`). The rest live in DDR and the steps read them from there; the weights
   with the lowest need go to DDR first; one tensor may straddle (its reads split in
   proportion). Under `hbm` none does: slots that leave the weights less HBM than they need
   are a CapacityError (`_keep_weights_in_hbm`; a GPU has no DDR either).
3. If the weights in DDR do not fit it: CapacityError saying what, by how much, and how to
   shrink it.
SRAM (the PMUs) holds no persistent tensor; it is the stage buffers of the running kernel,
which `compile_program` reports.

`batch_capacity` is the largest number of slots whose KV cache and activations fit in HBM
beside the weights HBM pins (all of them for `memory.weights: hbm`, so no weight spills at
that batch) and that the serving stack runs (`StackConfig.runnable_batch`: its cap, and a
batch it has a program for). Capacity errors suggest only what applies to the workload
(`shrink_hints`).

Under the MLA sequence_split layout a plan may hold q_b_proj and kv_b_proj whole on every
socket, so that its steps can make every head's queries themselves and project the partial
outputs through W_UV before combining them (`compiler.mla_queries`): the plan
for S slots does (`whole_queries`) when its largest decode step would replicate the queries
and the whole weights fit beside the S slots, else the slices. So S slots fit without
spilling exactly when they fit beside the slices: that is what memory holds (more HBM, never
fewer). The batch ``auto`` picks is fewer when the step of the most slots beside the whole
weights replicates (those steps are faster than the gathering ones of more slots), else the
most beside the slices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rdu_sim import human
from rdu_sim.compiler.errors import (
    FEWER_SLOTS,
    CapacityError,
    HardwareCapacityError,
    SlotsCapacityError,
    WeightsCapacityError,
    join_remedies,
)
from rdu_sim.compiler.fusion import KernelGraph, kernel_graphs, step_groups
from rdu_sim.compiler.layout import ShardPlan, kv_slot_bytes_per_socket, mla_cache_form, shard_plan
from rdu_sim.compiler.mla_queries import chooses_queries
from rdu_sim.compiler.program import (
    Placement,
    TensorPlacement,
    Tier,
    TierUsage,
)
from rdu_sim.compiler.query_choice import StepEstimate, replicates, step_estimate, wiring_key
from rdu_sim.compiler.stages import PipelineStage, scenario_stages
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.config.dtypes import DTYPE_BYTES
from rdu_sim.config.hardware import HardwareConfig, SystemConfig
from rdu_sim.config.hardware_file import device_noun
from rdu_sim.config.overrides import override_for
from rdu_sim.config.parallelism import replica_devices
from rdu_sim.config.workload import FixedLength, LengthDistribution
from rdu_sim.graph import GraphGroup, operators
from rdu_sim.graph.operator import Axis
from rdu_sim.graph.shape import INDEX
from rdu_sim.kv.paged import PagedKV, gives_on_demand, held_output, reserved_pages
from rdu_sim.kv.policies import layer_selection_of
from rdu_sim.models.layers import layer_kinds, window_layer_counts
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape
from rdu_sim.sim_warnings import RduSimWarning
from rdu_sim.speculation import (
    DRAFT_CATCH_UP,
    rollback_tokens,
    shared_draft,
    shared_weights,
    target_prompt,
    verify_tokens,
)

MAX_SLOTS = 1_000_000  # serving.batch_slots' own upper bound
DRAFT_PREFIX = "draft/"  # a shared draft's tensors in a Placement: "draft/<kernel>/<weight>"

KernelSource = Callable[[StepShape], list[KernelGraph]]
"""The kernel graphs of a step of the scenario at hand (``Compiler.kernels`` keeps them, so
the memory plan's decode step and the same step's Program build them once)."""


@dataclass(frozen=True)
class WeightTensor:
    """One weight tensor of one kernel, over all its calls, on one socket."""

    key: str  # "<kernel>/<weight name>", e.g. "decoder_moe/moe.experts_down"
    bytes: int  # resident
    reads: float  # bytes read per decode step

    @property
    def need(self) -> float:
        """Bandwidth need per resident byte (reads per step / bytes)."""
        return self.reads / self.bytes if self.bytes else 0.0


def slot_tokens(scenario: Scenario) -> int:
    """Tokens of KV cache each slot is given (the KV policy's static slot)."""
    return scenario.kv_policy.slot_tokens()


def weight_inventory(
    scenario: Scenario,
    batch: int = 1,
    kernels: KernelSource | None = None,
    stage: PipelineStage | None = None,
    whole_queries: bool = False,
) -> list[WeightTensor]:
    """Every weight tensor of one socket (of a pipeline ``stage``), with its reads in a
    decode step of `batch` slots (``kernels``: where that step's kernel graphs come from, by
    default built afresh on a plan holding MLA's query weights whole or not,
    ``whole_queries``, whose full step makes the queries on every socket when it holds them
    whole: `whole_queries`)."""
    shape = StepShape("decode", max(1, batch), 1, slot_tokens(scenario))
    tensors: dict[str, list[float]] = {}
    if kernels is None:
        graphs = kernel_graphs(
            scenario, shape, stage, whole_queries=whole_queries, replicate_queries=whole_queries
        )
    else:
        graphs = kernels(shape)
    for kernel in graphs:
        for node in operators(kernel.graph):
            if not node.weight_params and not node.weight_read_bytes:
                continue
            entry = tensors.setdefault(f"{kernel.group}/{node.weight_name}", [0.0, 0.0])
            entry[0] += kernel.calls * node.weight_bytes
            entry[1] += kernel.calls * node.weight_read_bytes
    return [
        WeightTensor(key, math.ceil(size), reads)
        for key, (size, reads) in tensors.items()
        if size > 0
    ]


class PlanFacts:
    """What the memory rules ask of one scenario more than once, each computed once for the
    holder: a decode step's weight inventory of one slot (`weight_inventory` of the slices,
    or of MLA's query weights whole) and whether the largest decode step of some slots
    replicates the queries (`_replicates`). The batch capacity, the plans' `whole_queries`
    and the memory plans each ask them (~10 ms of a cold step: every answer shards the
    step's graphs), so a Compiler keeps one for its scenario; a rule called without one
    makes its own."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._inventories: dict[tuple[PipelineStage | None, bool], tuple[WeightTensor, ...]] = {}
        self._replicates: dict[tuple[int, PipelineStage | None, tuple[object, ...]], bool] = {}

    def inventory(
        self, stage: PipelineStage | None = None, whole_queries: bool = False
    ) -> tuple[WeightTensor, ...]:
        """`weight_inventory` of one slot (a pipeline ``stage``'s), on a plan holding MLA's
        query weights whole or their slices (shared by every caller, so a tuple)."""
        key = (stage, whole_queries)
        if key not in self._inventories:
            self._inventories[key] = tuple(
                weight_inventory(self.scenario, stage=stage, whole_queries=whole_queries)
            )
        return self._inventories[key]

    def replicates(self, slots: int, stage: PipelineStage | None, system: SystemConfig) -> bool:
        """`_replicates` of ``slots`` slots (a pipeline ``stage``'s) on ``system``'s links."""
        key = (slots, stage, wiring_key(system))
        if key not in self._replicates:
            self._replicates[key] = _replicates(self.scenario, slots, stage, system)
        return self._replicates[key]


def max_prompt_tokens(scenario: Scenario) -> int:
    """The longest prompt the workload sends (the distribution's upper bound, or max_context)."""
    serving = scenario.workload.serving
    dist = serving.prompt_tokens
    longest = serving.max_context
    if serving.trace is None:
        longest = dist.value if dist.dist == "fixed" else dist.high
    return max(1, min(longest, serving.max_context))


def packed_prefill_tokens(scenario: Scenario, tokens: int, batch_slots: int) -> int:
    """Token rows of the largest prefill step when the runtime packs prompts of ``tokens``
    tokens or fewer into one step (the serving stack's ``prefill_batch_tokens``): at most the
    budget and a prompt a slot, at least the one prompt."""
    budget = scenario.stack.prefill_batch_tokens
    if budget is None:
        return tokens
    return max(tokens, min(budget, batch_slots * tokens))


def _step_bytes(scenario: Scenario, rows: int, logit_rows: int) -> float:
    """A step's activations between kernels: the hidden state in and out of a layer kernel
    for ``rows`` token rows, their token ids, and ``logit_rows`` rows of logits."""
    arch, act = scenario.model, scenario.activation_dtype_bytes
    return 2 * rows * arch.hidden_size * act + rows * INDEX + logit_rows * arch.vocab_size * act


def activation_bytes(
    scenario: Scenario,
    batch_slots: int,
    stage: PipelineStage | None = None,
    chunk_tokens: int | None = None,
) -> int:
    """Peak HBM working set of a step on one socket (activations between kernels);
    ``chunk_tokens``: a prefill chunk in place of serving.prefill_chunk_tokens (what a
    smaller one would need: `_chunk_hint`).

    The larger of a decode step of `batch_slots` slots (k + 1 tokens each in a speculative
    verify step) and a prefill of one longest prompt (chunked when
    serving.prefill_chunk_tokens is set; as many as the runtime packs into one step, when it
    batches prefills: `packed_prefill_tokens`; with every slot's decode row beside them when
    the stack runs mixed steps): the hidden state in and out of a layer kernel, the
    token ids, the gathered logits, and, when the prompt is compressed, the scratch holding
    the whole prompt's KV (all layers, this socket's share) until the SnapKV selection has
    gathered it into the slot, plus the window queries (`_window_queries_bytes`); when the
    policy evicts by scores at decode, each decoding slot's eviction scratch
    (`_eviction_bytes`), in the decode step and beside a mixed step's prompts alike. A shared
    draft's steps run between the target's, so its working set counts when it is the larger
    (`_draft_activation_bytes`).
    """
    serving = scenario.workload.serving
    rows = batch_slots * verify_tokens(scenario)
    evicting = _eviction_bytes(scenario)
    decode = _step_bytes(scenario, rows, rows) + batch_slots * evicting
    prompt = max_prompt_tokens(scenario)
    chunk = min(prompt, chunk_tokens or serving.prefill_chunk_tokens or prompt)
    packed = packed_prefill_tokens(scenario, chunk, batch_slots)
    # a packed step's logits: a row a prompt, at most one a slot
    prompts_logits = 1 if packed == chunk else batch_slots
    # a mixed step also carries every slot's decode row and its logits (stack.mixed_batching)
    carried = batch_slots if scenario.stack.mixed_batching else 0
    prefill = _step_bytes(scenario, packed + carried, prompts_logits + carried)
    prefill += carried * evicting
    selection = layer_selection_of(scenario.kv_policy, "prefill", prompt, None)
    if selection is not None and _some_layer_selects(scenario, prompt):
        window = _window_queries_bytes(scenario, selection.window)
        # a packed step holds every compressed prompt's scratch at once: as many longest
        # prompts as fit, or its rows of shorter ones
        prompts = max(1, packed // prompt)
        scratch = max(
            prompts * kv_slot_bytes_per_socket(scenario, prompt, stage),
            kv_slot_bytes_per_socket(scenario, packed, stage),
        )
        prefill += scratch + prompts * window
    own = math.ceil(max(decode, prefill))
    draft = shared_draft(scenario)
    return own if draft is None else max(own, _draft_activation_bytes(scenario, draft, batch_slots))


def _some_layer_selects(scenario: Scenario, prompt: int) -> bool:
    """Whether the prefill of a ``prompt``-token prompt runs the SnapKV selection on any
    layer: a sliding-window layer whose ring is no longer than what the policy keeps never
    compresses (`KVPolicy.layer_selection`), so a model whose every layer is one (Mistral-7B
    under a 4,096-token budget) runs no snapkv_* kernel and needs no scratch for them."""
    policy = scenario.kv_policy
    return any(
        layer_selection_of(policy, "prefill", prompt, window) is not None
        for window in window_layer_counts(scenario.model)
    )


def _window_queries_bytes(scenario: Scenario, window: int) -> float:
    """The queries one prompt's (or one decoding slot's) selection scores with, which the
    step's attention stashes for its score kernel (`graph.stash`): ``window`` of them a
    layer, every layer's (the selection's kernels run after all the layers), this socket's
    share of the heads. The one rule for a prefill's SnapKV selection and a decode step's
    eviction."""
    arch, act = scenario.model, scenario.activation_dtype_bytes
    if isinstance(arch, DeepSeekArchitecture):
        query = arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
    else:
        query = arch.heads * arch.head_dim
    return arch.layers * window * query * act / scenario.tp


def _eviction_bytes(scenario: Scenario) -> float:
    """One decoding slot's scratch for the selection its decode steps run when the policy
    evicts by scores (`KVPolicy.decode_selection`; 0 when it never does): its window queries
    (`_window_queries_bytes`, the prefill's rule) and a layer's kept tokens, this socket's
    share: the compaction cannot gather into the cache it reads (at prefill neither: the
    prompt's scratch is its source), so it gathers each layer into a spare layer buffer that
    then takes the layer's place (the compactions run layer after layer, so one spare
    serves them all). The worst over the policy's decode lengths (``buckets``) and the
    model's attention windows."""
    policy, arch = scenario.kv_policy, scenario.model
    kinds = {kind.window: kind for kind in layer_kinds(arch)}
    worst = 0.0
    for cache in policy.buckets():
        for window, kind in kinds.items():
            selection = layer_selection_of(policy, "decode", cache, window)
            if selection is None:
                continue
            spare = kv_slot_bytes_per_socket(scenario, selection.kept, kinds=(kind,))
            worst = max(worst, _window_queries_bytes(scenario, selection.window) + spare)
    return worst


def _draft_activation_bytes(scenario: Scenario, draft: Scenario, batch_slots: int) -> int:
    """A shared draft's peak working set. Speculative decoding: its steps of
    ``DRAFT_CATCH_UP`` tokens per slot, and its prefill of a prompt. Speculative prefill: its
    prefill of the longest prompt, whose KV cache it keeps (a scratch, never a slot) until
    its look-ahead tokens have scored the prompt."""
    spec = scenario.workload.speculation
    assert spec is not None
    if spec.prefill is None:
        return activation_bytes(draft, batch_slots * DRAFT_CATCH_UP)
    prompt = max_prompt_tokens(scenario)
    chunk = min(prompt, scenario.workload.serving.prefill_chunk_tokens or prompt)
    scratch = kv_slot_bytes_per_socket(draft, prompt + spec.prefill.look_ahead)
    return math.ceil(_step_bytes(draft, chunk, 1)) + scratch


def kv_bytes(scenario: Scenario, batch_slots: int, stage: PipelineStage | None = None) -> int:
    """KV cache of `batch_slots` static slots on one socket (of a pipeline ``stage``: its
    layers'): the policy's slot plus the verify step's rollback positions, and a shared
    draft's own slots beside them."""
    tokens = slot_tokens(scenario) + rollback_tokens(scenario)
    own = batch_slots * kv_slot_bytes_per_socket(scenario, tokens, stage)
    return own + draft_kv_bytes(scenario, batch_slots)


def page_bytes(scenario: Scenario, stage: PipelineStage | None = None) -> int:
    """Bytes one socket holds for one page of a paged KV cache (the stack's
    ``kv_page_tokens`` tokens, all layers of a pipeline ``stage``), a shared draft's page
    beside it."""
    page = scenario.stack.kv_page_tokens
    assert page is not None, "a page is a paged stack's"
    return kv_slot_bytes_per_socket(scenario, page, stage) + draft_page_bytes(scenario)


def draft_page_bytes(scenario: Scenario) -> int:
    """A shared drafter's share of one page of a paged KV cache on one socket: its KV of
    the page's tokens (speculative decoding; 0 without a shared draft, as `draft_kv_bytes`)."""
    page = scenario.stack.kv_page_tokens
    assert page is not None, "a page is a paged stack's"
    draft = shared_draft(scenario)
    if draft is None or verify_tokens(scenario) == 1:
        return 0
    return kv_slot_bytes_per_socket(draft, page)


def smallest_request_pages(scenario: Scenario) -> int:
    """Pages the workload's smallest possible request takes at admission
    (`kv.paged.reserved_pages`: its distributions' least prompt and output; a trace's, one
    token each; of the prompt, the tokens the target caches, `speculation.target_prompt`, as
    the scheduler takes them): its reservation, or where the pool gives pages on demand
    (`pages_on_demand`) its prompt's pages alone, as vLLM's scheduler admits while the free
    pages less a prompt's leave the watermark (growth met by preemption). The most sequences
    a paged pool admits at once is its pages (less that watermark) over these."""
    page = scenario.stack.kv_page_tokens
    assert page is not None, "a reservation is a paged stack's"
    serving = scenario.workload.serving

    def least(dist: LengthDistribution) -> int:
        return dist.value if isinstance(dist, FixedLength) else dist.low

    prompt = 1 if serving.trace is not None else least(serving.prompt_tokens)
    output = 1 if serving.trace is not None else least(serving.output_tokens)
    prompt = max(1, min(prompt, serving.max_context - 1))
    output = max(1, min(output, serving.max_context - prompt))
    cached = target_prompt(scenario.workload.speculation, prompt)
    output = held_output(output, scenario.role)  # a prefill server holds the first token
    if pages_on_demand(scenario):
        output = 0  # admitted on its prompt's pages
    return reserved_pages(cached, output, slot_tokens(scenario), page, rollback_tokens(scenario))


def admission_watermark(scenario: Scenario, pages: int) -> int:
    """Pages of a pool of ``pages`` an admission leaves free: the stack's ``kv_watermark``
    of them, rounded down, where the pool gives pages on demand (`pages_on_demand`); none
    where requests reserve (a reservation never grows)."""
    return watermark_pages(scenario, pages) if pages_on_demand(scenario) else 0


def watermark_pages(scenario: Scenario, pages: int) -> int:
    """The stack's ``kv_watermark`` of a pool of ``pages``, in whole pages (rounded down)."""
    return int(scenario.stack.kv_watermark * pages)


def reserved_words(scenario: Scenario, output: bool = True) -> str:
    """What a request reserves of a paged pool, in words: its prompt and output tokens (on a
    prefill server its first output token), or under speculative prefill the prompt tokens
    the target keeps (`smallest_request_pages`);
    ``output`` False: the prompt's alone (an admission under pages on demand)."""
    spec = scenario.workload.speculation
    # a prefill server holds the first output token (`kv.paged.held_output`)
    outputs = "first output token" if scenario.role == "prefill" else "output tokens"
    if spec is None or spec.prefill is None:
        return f"prompt and {outputs}" if output else "prompt tokens"
    kept = "kept prompt tokens (speculative prefill)"
    return f"{kept} and {outputs}" if output else kept


def pages_on_demand(scenario: Scenario) -> bool:
    """Whether a server of ``scenario`` gets its pages on demand (`kv.paged.gives_on_demand`:
    the stack's ``kv_allocation`` on_demand, a server of the ``role`` mixed, a lone run's or a
    mixed cluster pool's, and decode a token a step, no speculative rounds)."""
    return gives_on_demand(scenario.stack.pages_on_demand, scenario.role, verify_tokens(scenario))


def admission_words(scenario: Scenario) -> str:
    """How a paged pool's requests take their pages, for `capacity_words`: at admission, all
    of `reserved_words`; or, where the pool gives pages on demand (`pages_on_demand`), their
    prompt's at admission, leaving the watermark free, and the rest page by page as they
    decode (what `smallest_request_pages` sizes the batch by)."""
    if pages_on_demand(scenario):
        share = human.percent(scenario.stack.kv_watermark)
        return (
            f"each request admitted on the pages of its {reserved_words(scenario, output=False)}, "
            f"leaving the stack's kv_watermark ({share} of the pool) free; the stack gives "
            "pages on demand as requests decode, preempting when they run out "
            "(kv_allocation: on_demand)"
        )
    return f"each request reserves its {reserved_words(scenario)} at admission"


def pool_pages(
    scenario: Scenario, batch_slots: int, weights: int, stage: PipelineStage | None = None
) -> int:
    """Pages of a paged KV cache's pool on one socket: the room the serving stack gives its
    KV cache (``StackConfig.kv_room``) beside ``weights`` and the activations of a batch of
    ``batch_slots``, in whole pages (0 when there is none)."""
    room = scenario.stack.kv_room(
        scenario.hardware.hbm.capacity, weights, activation_bytes(scenario, batch_slots, stage)
    )
    return max(0, int(room // page_bytes(scenario, stage)))


def paged_kv(scenario: Scenario, pages: int, stage: PipelineStage | None = None) -> PagedKV:
    """The pool of ``pages`` pages a paged stack's run admits requests into
    (`kv.paged.PagedKV`)."""
    page = scenario.stack.kv_page_tokens
    assert page is not None, "a pool is a paged stack's"
    return PagedKV(
        page_tokens=page,
        pages=pages,
        slot_tokens=slot_tokens(scenario),
        extra_tokens=rollback_tokens(scenario),
        page_bytes=page_bytes(scenario, stage),
        on_demand=scenario.stack.pages_on_demand,
        watermark_pages=watermark_pages(scenario, pages),
        step_tokens=verify_tokens(scenario),
    )


def draft_kv_bytes(scenario: Scenario, batch_slots: int) -> int:
    """A shared drafter's KV cache on one socket: a slot of its own per batch slot, as long
    as the target's (speculative decoding; a speculative-prefill draft keeps a prompt's
    cache only while it scores it, counted with the activations)."""
    draft = shared_draft(scenario)
    if draft is None or verify_tokens(scenario) == 1:
        return 0
    tokens = slot_tokens(scenario) + rollback_tokens(scenario)
    return batch_slots * kv_slot_bytes_per_socket(draft, tokens)


def draft_weights(scenario: Scenario) -> list[WeightTensor]:
    """A shared draft's weight tensors on one socket (keys ``draft/<kernel>/<weight>``);
    none without one. They always sit in HBM: the draft reads them k times a round, and
    its own Programs are compiled with them there. A draft that shares the target's
    embedding table and LM head (``shares_embeddings``) holds neither again."""
    draft = shared_draft(scenario)
    if draft is None:
        return []
    shared = shared_weights(scenario)
    return [
        WeightTensor(f"{DRAFT_PREFIX}{w.key}", w.bytes, w.reads)
        for w in weight_inventory(draft)
        if not (shared and w.key.startswith(shared))
    ]


def _layout_hint(scenario: Scenario) -> str:
    layout = scenario.workload.parallelism.mla_cache_layout
    if not isinstance(scenario.model, DeepSeekArchitecture) or layout == "sequence_split":
        return ""
    return f"use parallelism.mla_cache_layout sequence_split (now {layout}), "


def slot_words(scenario: Scenario) -> str:
    """What one slot holds and where its size comes from: ``max_context`` for a policy whose
    slot grows to it (full, SnapKV), else the policy's budget and whether ``kv.budget``, or
    ``max_context / kv.compression_ratio``, or the default set it (SnapStream, StreamingLLM
    clip their slot to it)."""
    kv, policy = scenario.workload.kv, scenario.kv_policy
    context = scenario.workload.serving.max_context
    slot = policy.slot_tokens()
    if slot >= context:
        return f"a slot of max_context {context} tokens, kv.policy {kv.policy}"
    if kv.budget is not None:
        source = f"kv.budget {kv.budget}"
    elif kv.compression_ratio is not None:
        source = (
            f"max_context {context} / kv.compression_ratio {human.number(kv.compression_ratio)}"
        )
    else:
        source = "the default kv.budget"
    return f"a slot of {slot} tokens, {source} of kv.policy {kv.policy}"


def _budget_hint(scenario: Scenario) -> str | None:
    """Shrinking a fixed slot (a policy whose slot is below ``max_context``): lower
    ``kv.budget``, or raise ``kv.compression_ratio`` when the budget comes from it."""
    kv = scenario.workload.kv
    slot = scenario.kv_policy.slot_tokens()
    if slot >= scenario.workload.serving.max_context:
        return None
    if kv.budget is None and kv.compression_ratio is not None:
        ratio = human.number(kv.compression_ratio)
        return f"raise kv.compression_ratio (now {ratio}: a slot of {slot} tokens)"
    return f"lower kv.budget (now {slot})"


CHUNK_HINT_SHARE = 0.01
"""Least share of a device's HBM that chunking the prefill in halves must free for a capacity
error to suggest it (`_chunk_hint`): below it the chunk is already small, its activations a
rounding error of what overflows."""


def _chunk_hint(scenario: Scenario, slots: int) -> str | None:
    """Chunking the prefill (or a smaller chunk), when a step's activations beside ``slots``
    slots are its prefill's and halving its chunk frees at least `CHUNK_HINT_SHARE` of HBM
    (not when the chunk is already small, nor when the decode step or the stack's packed
    prefill budget sets the peak: a smaller chunk would not lower it)."""
    chunk = scenario.workload.serving.prefill_chunk_tokens
    prompt = max_prompt_tokens(scenario)
    now = min(prompt, chunk or prompt)
    if now < 2:
        return None
    freed = activation_bytes(scenario, slots) - activation_bytes(
        scenario, slots, chunk_tokens=math.ceil(now / 2)
    )
    if freed < CHUNK_HINT_SHARE * tier_capacities(scenario)["hbm"]:
        return None
    if chunk is None:
        return "chunk the prefill (serving.prefill_chunk_tokens, now unset)"
    return f"lower serving.prefill_chunk_tokens (now {chunk})"


def shrink_hints(
    scenario: Scenario,
    *,
    kv: bool,
    weights: bool,
    ddr: bool = False,
    activations: bool = False,
    slots: int = 1,
) -> list[str]:
    """Ways out of a capacity error that apply to this workload (never what is already set):
    for the KV cache (``kv``: activations of ``slots`` slots share HBM with it; what shrinks
    a sequence's share is what sets it, :func:`sequence_kv_set_by`), the weights in HBM
    (``weights``) or in DDR (``ddr``), a step's activations beside them (``activations``:
    tp splits the heads and the MLP)."""
    w = scenario.workload
    gpu = scenario.hardware.kind == "gpu"
    hints: list[str] = []
    if kv:
        by = sequence_kv_set_by(scenario)
        if by == "page":  # a shorter sequence still reserves the page
            page = scenario.stack.kv_page_tokens
            hints.append(f"lower stack.kv_page_tokens (now {page}: a page longer than a sequence)")
        elif by == "request":  # the smallest request's own tokens: no slot hint shrinks them
            pass
        elif (budget := _budget_hint(scenario)) is not None:  # a fixed slot below the context
            hints.append(budget)
        else:  # a slot of the whole context (or growing to it)
            hints.append(f"reduce serving.max_context (now {w.serving.max_context})")
            if w.kv.policy != "snapstream":
                hints.append(f"use kv.policy snapstream (now {w.kv.policy})")
        if _layout_hint(scenario):
            hints.append(_layout_hint(scenario).removesuffix(", "))
        if scenario.kv_dtype_bytes > 1:  # wider than 8 bits: fp8 halves the cache at least
            hints.append(f"store the KV cache in fp8 (dtypes.kv, now {w.dtypes.kv})")
    if kv or activations:
        chunk = _chunk_hint(scenario, slots)
        if chunk is not None:
            hints.append(chunk)
    if weights and not ddr and not gpu and w.memory.weights != "streamed":
        hints.append(
            f"serve the weights from DDR (memory.weights hot_set or streamed, now "
            f"{w.memory.weights})"
        )
    if weights and DTYPE_BYTES[scenario.weight_dtype] >= 2:  # 16 bits or more
        hints.append(f"store weights in fp8 (dtypes.weights, now {scenario.weight_dtype})")
    experts = getattr(scenario.model, "routed_experts", 0)
    if weights and experts and scenario.expert_dtype_bytes > DTYPE_BYTES["mxfp4"]:
        hints.append(
            f"store the routed experts in 4 bits (dtypes.experts mxfp4 or int4, now "
            f"{scenario.expert_dtype})"
        )
    if not kv or weights or ddr or activations or _kv_shrinks_with_tp(scenario):
        hints += _device_hints(scenario)  # (never a tp that cannot shrink what overflows)
    if ddr and not gpu:
        hints.append("give each socket more DDR (hw.socket.ddr.capacity)")
    return hints


def sequence_kv_set_by(scenario: Scenario) -> str:
    """What sets the KV memory one sequence takes, so what a capacity error may offer to
    shrink it: ``slot``, a static slot (or a paged request that reserves a whole slot: the
    context, or a fixed slot's budget); ``page``, a paged stack's page longer than a
    sequence, which every request reserves whole; ``request``, the pages of the workload's
    smallest request, its own tokens below the slot (a shorter context or slot leaves them
    as they are)."""
    page = scenario.stack.kv_page_tokens
    if page is None:
        return "slot"
    sequence = slot_tokens(scenario) + rollback_tokens(scenario)
    if page > sequence:
        return "page"
    full = reserved_pages(sequence, 0, sequence, page)  # a reservation of the whole slot
    return "slot" if smallest_request_pages(scenario) >= full else "request"


def _kv_shrinks_with_tp(scenario: Scenario) -> bool:
    """Whether more tp shrinks a device's KV cache (twice the tp, a smaller share): GQA's
    cache splits by KV head, so past ``kv_heads`` devices each holds a whole head's copy;
    MLA's replicated latent is on every device whatever the tp."""
    plan = shard_plan(scenario)
    deepseek = isinstance(scenario.model, DeepSeekArchitecture)
    axis: Axis = "mla_cache" if deepseek else "kv_heads"
    if deepseek and mla_cache_form(scenario) == "per_head":
        return True  # per-head K/V: split by query heads, over every device
    return replace(plan, tp=2 * plan.tp).divisor(axis) > plan.divisor(axis)


def _device_hints(scenario: Scenario) -> list[str]:
    """Spreading the model over more devices, as far as this layout can on this hardware:
    tp up to the devices the replica's other degrees leave (dp_attention x pp), the experts
    over more attention ranks (ep = tp x dp_attention grows with dp_attention), else more
    devices."""
    parallelism = scenario.workload.parallelism
    layout = parallelism.layout()
    devices = scenario.hardware.system.sockets
    unit = "GPUs" if scenario.hardware.kind == "gpu" else "sockets"
    others = layout["dp_attention"] * layout["pp"]
    most_tp = devices // others
    hints = []
    if parallelism.tp < most_tp:
        beside = [f"{name} {layout[name]}" for name in ("dp_attention", "pp") if layout[name] > 1]
        room = f"{most_tp} with {' and '.join(beside)} on the" if beside else "the"
        hints.append(f"raise parallelism.tp (now {parallelism.tp}, up to {room} {devices} {unit})")
    if layout["dp_attention"] > 1 and layout["ep"] > 1:  # the experts' share shrinks with ep
        where = (
            f"up to the {devices} {unit}"
            if replica_devices(layout) < devices
            else f"on more {unit}: hw.system.sockets, now {devices}, or a hardware file with more"
        )
        hints.append(
            f"spread the experts over more ranks: raise parallelism.dp_attention with "
            f"parallelism.ep (now {layout['dp_attention']} and {layout['ep']}; ep = tp x "
            f"dp_attention, {where})"
        )
    if not hints:  # the layout fills the hardware: more devices first
        hints.append(
            f"raise parallelism.tp on more {unit} (hw.system.sockets, now {devices}, or a "
            f"hardware file with more)"
        )
    return hints


LAYOUT_FIELDS = (
    "parallelism.tp",
    "parallelism.dp_attention",
    "parallelism.ep",
    "parallelism.moe_experts",
    "parallelism.pp",
)
"""The fields of the layout a device's share of the weights comes from (``layout_words``):
an override of any of them is named as a cause of weights that do not fit."""


def layout_words(scenario: Scenario) -> str:
    """The layout a device's share comes from, for a capacity error: ``tp=8``, with
    ``dp_attention``, ``ep`` and ``pp`` where above 1 (``tp=1, dp_attention=8, ep=8``)."""
    layout = scenario.workload.parallelism.layout()
    degrees = [f"tp={layout['tp']}"] + [
        f"{name}={layout[name]}" for name in ("dp_attention", "ep", "pp") if layout[name] > 1
    ]
    return ", ".join(degrees)


_join = join_remedies


def pinned_limit(scenario: Scenario) -> int:
    """Most weight bytes per socket HBM may pin under ``memory.weights``: all of HBM for
    ``hbm`` (the only placement a GPU, without DDR, accepts), ``hot_set_fraction`` of it, or
    none."""
    memory, hbm = scenario.workload.memory, scenario.hardware.hbm.capacity
    if memory.weights == "hbm":
        return hbm
    if memory.weights == "hot_set":
        return math.floor(memory.hot_set_fraction * hbm)
    return 0


def tier_capacities(scenario: Scenario) -> dict[Tier, int]:
    """Bytes one device offers per tier: a GPU places everything in HBM (no DDR tier, and
    no software-managed on-chip memory the compiler places into)."""
    hardware = scenario.hardware
    if isinstance(hardware, HardwareConfig):
        sock = hardware.socket
        return {"sram": sock.sram_bytes, "hbm": sock.hbm.capacity, "ddr": sock.ddr.capacity}
    return {"sram": 0, "hbm": hardware.hbm.capacity, "ddr": 0}


def weights_outgrow_hbm(
    scenario: Scenario, stage: PipelineStage | None = None, facts: PlanFacts | None = None
) -> bool:
    """Whether one device's weights (a pipeline ``stage``'s) alone fill its HBM under
    ``memory.weights: hbm``, which keeps every one there: then no batch runs
    (`WeightsCapacityError`, raised by `batch_capacity` and every memory plan). ``facts``:
    the scenario's, when its caller keeps them."""
    if scenario.workload.memory.weights != "hbm":
        return False
    facts = PlanFacts(scenario) if facts is None else facts
    total = sum(w.bytes for w in facts.inventory(stage))
    return total >= scenario.hardware.hbm.capacity


def spill_absorbs(scenario: Scenario, exc: CapacityError | None = None) -> bool:
    """Whether not one slot fitting beside the weights HBM pins (the batch capacity's
    ``exc``, or a capacity of 0 when None) leaves the workload's batch to its memory plan
    rather than refusing it: the one rule of `Compiler.batch_capacity` and
    `resolve_batch_slots`. An explicit ``serving.batch_slots`` on hardware with DDR (not a
    GPU) under ``memory.weights`` ``hot_set`` or ``streamed``: weights live in DDR there, and
    the plan shrinks the hot set its slots leave no room for (`plan_memory`), so there is no
    cliff where a slot stops fitting beside it. Never under ``hbm``, which keeps every weight
    in HBM (slots that leave them no room are refused by the capacity or the plan, as weights
    that alone outgrow HBM are: `WeightsCapacityError`), nor a kernel the hardware cannot
    hold (`HardwareCapacityError`). ``auto`` runs the capacity, so none is no batch."""
    if isinstance(exc, HardwareCapacityError):
        return False
    return (
        scenario.workload.serving.batch_slots != "auto"
        and scenario.workload.memory.weights != "hbm"
        and tier_capacities(scenario)["ddr"] > 0
    )


def plan_memory(
    scenario: Scenario,
    batch_slots: int,
    kernels: KernelSource | None = None,
    stage: PipelineStage | None = None,
    system: SystemConfig | None = None,
    facts: PlanFacts | None = None,
) -> Placement:
    """Place one socket's (of a pipeline ``stage``) weights, KV cache and activations for
    `batch_slots` slots (``kernels``: as for :func:`weight_inventory`, on this plan's
    `whole_queries`; ``system``: the links MLA's query choice weighs, by default the
    scenario's; ``facts``: the scenario's, when its caller keeps them)."""
    if batch_slots < 1:
        raise ValueError(f"batch_slots must be >= 1, got {batch_slots}")
    facts = PlanFacts(scenario) if facts is None else facts
    if kernels is None:
        whole = whole_queries(scenario, batch_slots, stage, system, facts)

        def kernels(shape: StepShape) -> list[KernelGraph]:
            return kernel_graphs(
                scenario, shape, stage, whole_queries=whole, replicate_queries=whole
            )

    capacities = tier_capacities(scenario)
    hbm_cap, ddr_cap = capacities["hbm"], capacities["ddr"]
    if weights_outgrow_hbm(scenario, stage, facts):  # no plan of any slots: the capacity's
        raise none_fit_error(scenario, stage, facts)
    act = activation_bytes(scenario, batch_slots, stage)
    pool: PagedKV | None = None
    if scenario.stack.dynamic_batch:  # the pool the room holds, whatever the batch
        pinned = _pinned(scenario, sum(w.bytes for w in facts.inventory(stage)))
        pool = paged_kv(scenario, pool_pages(scenario, batch_slots, pinned, stage), stage)
        kv = pool.pages * pool.page_bytes
    else:
        kv = kv_bytes(scenario, batch_slots, stage)
    gpu = scenario.hardware.kind == "gpu"
    if act + kv > hbm_cap:
        hints = [
            *_fewer_slots_hint(scenario, batch_slots, stage, system),
            *shrink_hints(scenario, kv=True, weights=False, slots=batch_slots),
            more_hbm_hint(scenario),
        ]
        weights = sum(w.bytes for w in draft_weights(scenario)) + sum(
            w.bytes for w in facts.inventory(stage)
        )
        where = (
            "which a GPU keeps in HBM too"
            if gpu
            else "which memory.weights hbm keeps in HBM too"
            if scenario.workload.memory.weights == "hbm"
            else "which may spill to DDR"
        )
        raise SlotsCapacityError.of(
            f"the KV cache of {human.count(batch_slots, 'slot')} ({human.size(kv, 4)}: "
            f"{slot_words(scenario)}) and activations ({human.size(act, 4)}), which must be "
            f"in HBM, need {human.size(act + kv, 4)} per {device_noun(scenario.hardware)}, "
            f"more than its whole HBM ({human.size(hbm_cap, 4)}) even without the weights "
            f"({human.size(weights, 4)}, {where}: {human.size(weights + kv + act, 4)} in all)",
            hints,
            slot_tokens(scenario),
            slots_sizes(scenario, weights=False),
        )
    room = hbm_cap - act - kv
    # a shared draft's KV: its slots, or its share of every page of the pool
    draft_kv = (
        draft_kv_bytes(scenario, batch_slots)
        if pool is None
        else pool.pages * draft_page_bytes(scenario)
    )
    tensors: list[TensorPlacement] = [
        TensorPlacement("kv_cache", "kv", "hbm", kv - draft_kv),
        *([TensorPlacement(f"{DRAFT_PREFIX}kv_cache", "kv", "hbm", draft_kv)] if draft_kv else []),
        TensorPlacement("activations", "activations", "hbm", act),
    ]
    in_hbm = in_ddr = 0
    for weight in draft_weights(scenario):
        if in_hbm + weight.bytes > room:
            raise CapacityError(
                f"the draft's weights ({scenario.draft and scenario.draft.model.name}) do not "
                f"fit in the {human.size(room, 4)} of HBM per "
                f"{device_noun(scenario.hardware)} the KV cache and "
                f"activations of {human.count(batch_slots, 'slot')} leave: lower "
                "serving.batch_slots or use speculation.placement separate"
            )
        tensors.append(TensorPlacement(weight.key, "weights", "hbm", weight.bytes))
        in_hbm += weight.bytes
    room = min(room, in_hbm + pinned_limit(scenario))  # the target's weights HBM may pin
    inventory = weight_inventory(scenario, batch_slots, kernels, stage)
    if scenario.workload.memory.weights == "hbm" and not gpu:  # (a GPU's: no DDR, below)
        left = room - in_hbm  # beside the slots and a shared draft's weights
        _keep_weights_in_hbm(scenario, inventory, (batch_slots, kv, act), left, stage, system)
    for weight in sorted(inventory, key=lambda w: -w.need):  # stable: ties keep model order
        here = min(weight.bytes, room - in_hbm)
        if here > 0:
            tensors.append(TensorPlacement(weight.key, "weights", "hbm", here))
            in_hbm += here
        if weight.bytes > here:
            tensors.append(TensorPlacement(weight.key, "weights", "ddr", weight.bytes - here))
            in_ddr += weight.bytes - here
    if in_ddr > ddr_cap:
        total = in_hbm + in_ddr
        beside = f"beside the KV cache of {human.count(batch_slots, 'slot')} and activations"
        rest = (
            f"{beside}, and a GPU has no DDR, so the other {human.size(in_ddr, 4)} do not fit"
            if gpu
            else f"{beside} and DDR {human.size(ddr_cap, 4)}, so "
            f"{human.size(in_ddr - ddr_cap, 4)} do not fit"
        )
        hints = [
            *_fewer_slots_hint(scenario, batch_slots, stage, system),
            *shrink_hints(scenario, kv=False, weights=True, ddr=True),
        ]
        problem = (
            f"{scenario.model.name} weights need {human.size(total, 4)} per "
            f"{device_noun(scenario.hardware)} ({layout_words(scenario)}, "
            f"{scenario.weight_dtype}); HBM holds {human.size(in_hbm, 4)} of them {rest}: "
            f"{_join(hints)}"
        )
        raise CapacityError(scenario.at_field("parallelism", problem, LAYOUT_FIELDS))
    if pool is not None and pool.pages < 1:  # the weights fit, and leave no page
        raise SlotsCapacityError(
            f"the stack's KV pool has not one page ({pool.page_tokens} tokens, "
            f"{human.size(pool.page_bytes, 4)} per {device_noun(scenario.hardware)}) beside "
            f"the weights and the activations of {human.count(batch_slots, 'slot')} "
            f"({human.size(act, 4)}){scenario.stack.kv_share_words()}; "
            f"{_join(shrink_hints(scenario, kv=False, weights=True, slots=batch_slots))}"
        )
    tiers: dict[Tier, TierUsage] = {
        "sram": TierUsage(capacity_bytes=capacities["sram"]),
        "hbm": TierUsage(
            capacity_bytes=hbm_cap, weights_bytes=in_hbm, kv_bytes=kv, activations_bytes=act
        ),
        "ddr": TierUsage(capacity_bytes=ddr_cap, weights_bytes=in_ddr),
    }
    replicas, replica_bytes = _replicas(facts, inventory, stage)
    return Placement(
        batch_slots=batch_slots,
        tiers=tiers,
        tensors=tuple(tensors),
        pipeline_stage=-1 if stage is None else stage.index,
        kv_pool=pool,
        replicas=replicas,
        replica_bytes=replica_bytes,
    )


def _keep_weights_in_hbm(
    scenario: Scenario,
    inventory: Sequence[WeightTensor],
    slots: tuple[int, int, int],
    room: int,
    stage: PipelineStage | None,
    system: SystemConfig | None,
) -> None:
    """Refuse a plan of ``slots`` (batch slots, their KV cache and activations bytes) that
    leaves the target's weights (``inventory``) less than they need of HBM (``room``)
    under ``memory.weights: hbm``, which keeps every weight there (`SlotsCapacityError`, at
    the slots: fewer of them, or ``hot_set``, which reads the least-read weights from DDR,
    are ways out). Weights that alone outgrow HBM are refused before (`none_fit_error`)."""
    total = sum(w.bytes for w in inventory)
    if total <= room:
        return
    batch_slots, kv, act = slots
    hbm = tier_capacities(scenario)["hbm"]
    taken = (
        f"the KV cache of {human.count(batch_slots, 'slot')} ({human.size(kv, 4)}: "
        f"{slot_words(scenario)})"
        + (", activations" if draft_weights(scenario) else " and activations")
        + f" ({human.size(act, 4)})"
        + (" and the draft's weights" if draft_weights(scenario) else "")
    )
    hints = [
        *_fewer_slots_hint(scenario, batch_slots, stage, system),
        *shrink_hints(scenario, kv=True, weights=True, slots=batch_slots),
        more_hbm_hint(scenario),
    ]
    raise SlotsCapacityError.of(
        f"{taken} leave {human.size(max(0, room), 4)} of the "
        f"{human.size(hbm, 4)} HBM per {device_noun(scenario.hardware)} for "
        f"{scenario.model.name} weights that need {human.size(total, 4)} "
        f"({layout_words(scenario)}, {scenario.weight_dtype}), {human.size(total - room, 4)} "
        "short, and memory.weights hbm keeps every weight in HBM",
        hints,
        slot_tokens(scenario),
        slots_sizes(scenario, weights=True),
    )


def _replicas(
    facts: PlanFacts, inventory: Sequence[WeightTensor], stage: PipelineStage | None
) -> tuple[tuple[str, ...], int]:
    """The weights of ``inventory`` held whole on every socket beyond the slices the layout
    gives them (MLA's query and value weights, when the plan holds them whole:
    `whole_queries`), by name, and those extra bytes per socket: measured against the
    inventory of the slices (of the scenario of ``facts``)."""
    if not chooses_queries(facts.scenario):
        return (), 0
    slices = {w.key: w.bytes for w in facts.inventory(stage)}
    grown = {w.key: w.bytes - slices.get(w.key, 0) for w in inventory}
    grown = {key: extra for key, extra in grown.items() if extra > 0}
    names = tuple(dict.fromkeys(key.split("/", 1)[-1] for key in grown))
    return names, sum(grown.values())


def _fewer_slots_hint(
    scenario: Scenario,
    batch_slots: int,
    stage: PipelineStage | None,
    system: SystemConfig | None,
) -> list[str]:
    """Lowering ``serving.batch_slots``, with how many fit (`capacity_words`), when fewer
    slots than ``batch_slots`` fit beside the weights; nothing when not even one does (the
    weights alone are too big: lowering the batch is no way out)."""
    holds = batch_capacity(scenario, strict=False, stage=stage, system=system, runnable=False)
    if not 0 < holds < batch_slots:
        return []
    capacity = batch_capacity(scenario, strict=False, stage=stage, system=system)
    words = capacity_words(scenario, holds, capacity, stage=stage, system=system)
    return [f"{FEWER_SLOTS} ({words})"]


def capacity_words(
    scenario: Scenario,
    holds: int,
    runs: int,
    slots: int | None = None,
    stage: PipelineStage | None = None,
    system: SystemConfig | None = None,
) -> str:
    """What bounds the batch, in words, for a run's report and the capacity error alike:
    ``holds`` slots fit in memory beside the weights (`batch_capacity` with
    ``runnable=False``: within the room the stack gives its KV cache,
    ``StackConfig.kv_room``), ``runs`` of them the serving stack runs (`batch_capacity`,
    what ``auto`` picks) and why (`StackConfig.batch_limit`: memory, its ``max_batch_slots`` or its
    ``batch_programs``; or fewer, beside MLA's query weights held whole:
    `_whole_queries_batch`; SRAM never bounds it, a kernel's tiles are cut to fit). With
    ``slots``, an explicit ``serving.batch_slots``: that it was set; beyond ``holds``,
    where the extra slots' KV cache is (`_beyond_words`); and beyond what the stack runs,
    that it runs them as if the stack did (`_unrunnable_words`). Under MLA's sequence_split
    layout, how many fit beside its query weights held whole and what a slot more costs
    (`whole_queries_words`, of a pipeline ``stage`` on ``system``'s links)."""
    stack = scenario.stack
    explicit = slots is not None and scenario.workload.serving.batch_slots != "auto"
    picks = "'auto' would pick" if explicit else "'auto' picks"
    beside = "beside the weights" + stack.kv_share_words()
    if stack.dynamic_batch:  # a paged pool holds requests, not slots of max_context
        least = smallest_request_pages(scenario)
        beside = (
            f"in the KV pool beside the weights{stack.kv_share_words()} at the workload's "
            f"smallest request ({human.count(least, 'page')} of {stack.kv_page_tokens:,} tokens; "
            f"{admission_words(scenario)})"
        )
    whole = whole_queries_words(scenario, holds, stage, system)
    if not holds:
        fit = f"not even one fits {beside}"
    elif holds == runs:
        fit = f"at most {holds:,} fit {beside}; {picks} that{whole}"
    elif runs < stack.runnable_batch(holds):  # `_whole_queries_batch`
        them = whole.replace(WHOLE_QUERY_WEIGHTS, "them", 1)
        most = _whole_slots(PlanFacts(scenario), stage)
        runs_words = "" if runs == most else f" (its {_limit_words(scenario, most)})"
        fit = (
            f"at most {holds:,} fit {beside}; {picks} {runs:,}, the most the stack runs beside "
            f"{WHOLE_QUERY_WEIGHTS}{runs_words}{them}"
            if whole
            else f"at most {holds:,} fit {beside}; {picks} {runs:,}, the most beside "
            f"{WHOLE_QUERY_WEIGHTS}, so that its decode steps make every head's queries "
            "instead of gathering them"
        )
    else:
        fit = (
            f"at most {holds:,} fit {beside}; {picks} {runs:,}, the most of them the stack runs "
            f"(its {_limit_words(scenario, holds)}){whole}"
        )
    if not explicit or slots is None:
        return fit
    return (
        f"serving.batch_slots sets {slots:,}; {fit}"
        f"{_beyond_words(scenario, holds, slots)}{_unrunnable_words(scenario, slots)}"
    )


WHOLE_QUERY_WEIGHTS = "MLA's query and value weights held whole"
"""How the capacity words name q_b_proj and kv_b_proj held whole on every socket."""


def whole_queries_words(
    scenario: Scenario,
    holds: int,
    stage: PipelineStage | None = None,
    system: SystemConfig | None = None,
) -> str:
    """The cliff inside the ``holds`` slots that fit beside the slices of MLA's query and
    value weights, for `capacity_words`: fewer slots fit beside them held whole, whose decode
    steps make every head's queries (`whole_queries`); a plan of more slots holds the slices
    and gathers the queries, its decode step as long as the compiler's estimate of both says
    (`compiler.query_choice`, on ``system``'s links, by default the scenario's). Nothing when
    the layout never holds them whole, or the most beside them gather anyway; else a
    clause, ``; 136 fit beside`` `WHOLE_QUERY_WEIGHTS` ``(...)``."""
    if not chooses_queries(scenario):
        return ""
    facts = PlanFacts(scenario)
    whole = _whole_slots(facts, stage)
    links = scenario.hardware.system if system is None else system
    if not 0 < whole < holds or not facts.replicates(whole, stage, links):
        return ""
    names, extra = _replicas(facts, facts.inventory(stage, whole_queries=True), stage)
    held = _decode_estimate(scenario, whole, stage, links, whole=True).time_s
    gathered = _decode_estimate(scenario, whole + 1, stage, links, whole=False).time_s
    return (
        f"; {whole:,} fit beside {WHOLE_QUERY_WEIGHTS} ({' and '.join(names)} on every "
        f"{device_noun(scenario.hardware)}: {human.size(extra, 3)} of replicas), whose decode "
        f"steps make every head's queries; from {whole + 1:,} the plan holds their slices and "
        f"gathers the queries, a decode step {human.ratio(gathered / held, 2)} as long (the "
        f"compiler's estimate: {human.duration(gathered)} at {whole + 1:,} slots, "
        f"{human.duration(held)} at {whole:,})"
    )


def _limit_words(scenario: Scenario, holds: int) -> str:
    """Which of the stack's fields bounds the batch below the ``holds`` that fit
    (`StackConfig.batch_limit`), with its value."""
    stack = scenario.stack
    if stack.batch_limit(holds) == "max_batch_slots":
        return f"max_batch_slots: {stack.max_batch_slots}"
    return f"batch_programs: {stack.batch_programs}"


def coe_capacity_words(scenario: Scenario, holds: int, runs: int, slots: int | None) -> str:
    """`capacity_words` for a Composition of Experts (``serving.coe``, whose plan is not the
    compiler's): its slots' KV cache shares HBM with the router and the expert region, so
    ``holds`` counts the slots that leave the region one expert (``coe_room``), and more
    are refused, not spilled; it names its slots (``auto`` is refused at load)."""
    fit = (
        f"at most {holds:,} fit beside the router's weights{scenario.stack.kv_share_words()} "
        "with room left for one expert in the HBM region (a Composition of Experts names its "
        "slots: no 'auto')"
    )
    if runs < holds:
        fit += f"; the stack runs at most {runs:,} of them (its {_limit_words(scenario, holds)})"
    if slots is None:
        return fit
    return f"serving.batch_slots sets {slots:,}; {fit}{_unrunnable_words(scenario, slots)}"


def _beyond_words(scenario: Scenario, holds: int, slots: int) -> str:
    """Where the KV cache of an explicit batch's ``slots`` beyond the ``holds`` that fit
    beside the weights is, for a batch `plan_memory` placed (one that does not fit is a
    CapacityError): outside the stack's share of HBM (``StackConfig.kv_room``), when it keeps one
    (a GPU's whole batch is then in HBM: it has no DDR for weights); on SN40L in HBM the
    weights would have had, which the steps read from DDR instead (the run's warning says
    how much)."""
    if slots <= holds or not holds:
        return ""
    if scenario.stack.dynamic_batch:  # a pool of pages: no slot holds memory of its own
        return (
            f"; the {human.count(slots - holds, 'slot')} beyond them take a request only "
            "when the pool's free pages hold its reservation"
        )
    beyond = f"; the KV cache of the {human.count(slots - holds, 'slot')} beyond them takes"
    spills = "HBM the weights would have had, which the steps read from DDR instead"
    # weights pushed to DDR: not a GPU's (no DDR), nor under hbm (every weight in HBM)
    keeps = scenario.hardware.kind == "gpu" or scenario.workload.memory.weights == "hbm"
    if not scenario.stack.kv_share_words():
        return "" if keeps else f"{beyond} {spills}"
    outside = "HBM outside that share"
    return f"{beyond} {outside}" if keeps else f"{beyond} {outside} or {spills}"


def _unrunnable_words(scenario: Scenario, slots: int) -> str:
    """For an explicit batch the stack does not run (`StackConfig.has_program`), why and
    that it runs as if it did: above its ``max_batch_slots``, or no program of that batch
    (``batch_programs``; docs/serving.md, "Slots": a what-if)."""
    stack = scenario.stack
    if stack.has_program(slots):
        return ""
    if stack.batch_limit(slots) == "max_batch_slots":
        return (
            f"; the stack batches at most {stack.max_batch_slots:,} (its max_batch_slots), so "
            f"it runs {slots:,} as if its max_batch_slots were {slots:,}"
        )
    return (
        f"; the stack has no {slots:,}-slot program, so it runs {slots:,} as if one were compiled "
        "for it"
    )


def unrunnable_note(scenario: Scenario, slots: int) -> str | None:
    """That the serving stack does not run a batch of ``slots`` and runs it as if it did
    (`_unrunnable_words`, a clause of the run's capacity words), as a sentence for a report
    that names the batch elsewhere (a cluster's pool, a plan's row); None when it runs it."""
    return _unrunnable_words(scenario, slots).removeprefix("; ") or None


def hbm_fractions(placement: Placement) -> dict[str, float]:
    """Share of each weight tensor that sits in HBM (the rest is in DDR)."""
    sizes: dict[str, list[int]] = {}
    for tensor in placement.tensors:
        if tensor.kind == "weights":
            entry = sizes.setdefault(tensor.name, [0, 0])
            entry[0 if tensor.tier == "hbm" else 1] += tensor.bytes
    return {key: hbm / (hbm + ddr) for key, (hbm, ddr) in sizes.items() if hbm + ddr}


def _pinned(scenario: Scenario, total: int) -> int:
    """Weight bytes HBM pins on one socket: the target's ``total`` up to `pinned_limit`,
    and a shared draft's."""
    return sum(w.bytes for w in draft_weights(scenario)) + min(total, pinned_limit(scenario))


def _pinned_weights(
    facts: PlanFacts, whole_queries: bool, stage: PipelineStage | None = None
) -> int:
    """`_pinned` for the target's weights (a pipeline ``stage``'s) with MLA's query weights
    whole or not (of the scenario of ``facts``)."""
    inventory = facts.inventory(stage, whole_queries)
    return _pinned(facts.scenario, sum(w.bytes for w in inventory))


def _fits(scenario: Scenario, slots: int, weights: int, stage: PipelineStage | None = None) -> bool:
    """Whether the KV cache of ``slots`` slots (of a pipeline ``stage``'s layers) fits in the
    room the serving stack gives it (``StackConfig.kv_room``) beside ``weights`` and the
    activations in HBM."""
    if scenario.stack.dynamic_batch:  # a pool of pages: each slot's least admission
        pages = pool_pages(scenario, slots, weights, stage)
        return (
            slots * smallest_request_pages(scenario) + admission_watermark(scenario, pages) <= pages
        )
    room = scenario.stack.kv_room(
        scenario.hardware.hbm.capacity, weights, activation_bytes(scenario, slots, stage)
    )
    return kv_bytes(scenario, slots, stage) <= room


def _replicates(
    scenario: Scenario, slots: int, stage: PipelineStage | None, system: SystemConfig
) -> bool:
    """Whether the largest decode step of ``slots`` slots (a verify step's tokens each; a
    pipeline ``stage``'s layers of it) would make every head's MLA queries on every socket,
    given their weights whole."""
    groups, plan = _decode_step(scenario, slots, stage)
    return replicates(scenario, groups, replace(plan, whole_queries=True), system)


def _decode_step(
    scenario: Scenario, slots: int, stage: PipelineStage | None
) -> tuple[list[GraphGroup], ShardPlan]:
    """The largest decode step of ``slots`` slots (a verify step's tokens each; a pipeline
    ``stage``'s layers of it): its graphs, and the plan that shards them."""
    shape = StepShape("decode", slots, verify_tokens(scenario), slot_tokens(scenario))
    return step_groups(scenario, shape, stage), shard_plan(scenario, shape)


def _decode_estimate(
    scenario: Scenario,
    slots: int,
    stage: PipelineStage | None,
    system: SystemConfig,
    whole: bool,
) -> StepEstimate:
    """The compiler's estimate (`query_choice.step_estimate`) of the largest decode step of
    ``slots`` slots on a plan holding MLA's query weights ``whole`` (then making every head's
    queries) or their slices (then gathering them)."""
    groups, plan = _decode_step(scenario, slots, stage)
    plan = replace(plan, whole_queries=whole, replicate_queries=whole)
    return step_estimate(scenario, groups, plan, system)


def whole_queries(
    scenario: Scenario,
    batch_slots: int,
    stage: PipelineStage | None = None,
    system: SystemConfig | None = None,
    facts: PlanFacts | None = None,
) -> bool:
    """Whether the memory plan for ``batch_slots`` slots (of a pipeline ``stage``'s sockets)
    holds MLA's query and value weights (q_b_proj, kv_b_proj) whole on every socket: under the
    sequence_split layout, when its largest decode step replicates the queries on
    ``system``'s links (default: the scenario's; `compiler.query_choice`) and the whole
    weights fit beside the slots in HBM."""
    if not chooses_queries(scenario):
        return False
    facts = PlanFacts(scenario) if facts is None else facts
    links = scenario.hardware.system if system is None else system
    if not facts.replicates(batch_slots, stage, links):
        return False
    return _fits(scenario, batch_slots, _pinned_weights(facts, True, stage), stage)


def batch_capacity(
    scenario: Scenario,
    *,
    strict: bool = True,
    stage: PipelineStage | None = None,
    system: SystemConfig | None = None,
    runnable: bool = True,
    facts: PlanFacts | None = None,
) -> int:
    """Most slots whose KV cache and activations fit in HBM beside the weights it pins (on a
    pipeline ``stage``'s sockets: its layers'), within the room the serving stack gives its KV
    cache (``StackConfig.kv_room``), and of those the most the stack runs (at most its
    ``max_batch_slots``, a batch it has a program for: ``batch_programs``; ``runnable=False``:
    what memory holds, the most an explicit ``serving.batch_slots`` runs with all the weights
    HBM pins: a plan holds MLA's query weights whole only beside its slots, `whole_queries`,
    so beside the slices). Under the MLA sequence_split layout the runnable batch is the most
    beside the whole weights when its decode step replicates the queries
    (`_whole_queries_batch`).

    `strict` raises CapacityError when not even one slot fits (with the ways out;
    `WeightsCapacityError` when the weights alone outgrow HBM under ``memory.weights:
    hbm``); otherwise 0 is returned. ``facts``: the scenario's, when its caller keeps them.
    """
    facts = PlanFacts(scenario) if facts is None else facts
    weights = _pinned(scenario, sum(w.bytes for w in facts.inventory(stage)))

    def fits(slots: int) -> bool:
        return _fits(scenario, slots, weights, stage)

    if not fits(1):
        if strict:
            raise none_fit_error(scenario, stage, facts)
        return 0
    if not runnable:  # a plan holds the whole query weights only beside its slots: slices
        return most_slots(fits)
    return _whole_queries_batch(facts, stage, system) or scenario.stack.runnable_batch(
        most_slots(fits)
    )


def hbm_field(scenario: Scenario) -> str:
    """The field of a device's HBM capacity: ``hw.socket.hbm.capacity`` (a GPU's under
    ``hw.gpu``)."""
    return f"hw.{'gpu' if scenario.hardware.kind == 'gpu' else 'socket'}.hbm.capacity"


def more_hbm_hint(scenario: Scenario) -> str:
    """The way out of a capacity error that more HBM per device is, with the HBM it has."""
    hbm = human.size(scenario.hardware.hbm.capacity, 4)
    return f"give each {device_noun(scenario.hardware)} more HBM ({hbm_field(scenario)}, now {hbm})"


def slots_sizes(scenario: Scenario, weights: bool) -> tuple[str, ...]:
    """The fields whose values size a plan of batch slots in HBM (`SlotsCapacityError.sizes`):
    the HBM, what sets a slot's tokens and bytes, the layout and the model, and with
    ``weights`` (slots that leave the weights HBM keeps too little room) what sizes the
    weights and where they go; an override of any of them is named as a cause of slots
    that do not fit (a sweep of the HBM capacity, not the base file's line of
    ``serving.batch_slots``)."""
    weight_fields = ("memory.weights", "dtypes.weights", "dtypes.experts") if weights else ()
    return (
        hbm_field(scenario),
        "serving.max_context",
        "kv",
        "dtypes.kv",
        *weight_fields,
        *LAYOUT_FIELDS,
        "model",
    )


def none_fit_error(
    scenario: Scenario, stage: PipelineStage | None = None, facts: PlanFacts | None = None
) -> CapacityError:
    """Why not one slot fits in HBM beside the weights it pins (on a pipeline ``stage``'s
    sockets), with the ways out: `WeightsCapacityError` when the weights alone outgrow HBM
    under ``memory.weights: hbm`` (`weights_outgrow_hbm`), else a CapacityError at the
    field that sizes what does not fit. ``facts``: the scenario's, when its caller keeps
    them."""
    facts = PlanFacts(scenario) if facts is None else facts
    hbm = scenario.hardware.hbm.capacity
    total = sum(w.bytes for w in facts.inventory(stage))
    target = min(total, pinned_limit(scenario))
    weights = _pinned(scenario, total)
    device = device_noun(scenario.hardware)
    more_hbm = hbm_field(scenario)
    # weights HBM must keep whole that fill it: only what shrinks them helps
    alone = weights_outgrow_hbm(scenario, stage, facts)
    page = scenario.stack.kv_page_tokens
    # a page longer than any sequence: every request reserves it whole, so it sets
    # the smallest reservation, not the context
    oversized = sequence_kv_set_by(scenario) == "page"
    hints = [
        *shrink_hints(scenario, kv=not alone, weights=weights > 0, activations=not alone),
        more_hbm_hint(scenario),
    ]
    # at the first of the fields it names that an override set, else at what sizes
    # a sequence's KV cache (an oversized page, or the slot), or the model when its
    # weights alone do not fit; its "(from --set)" note names that override and
    # every other that sizes what does not fit (all but the HBM's own)
    involved = (
        more_hbm,
        *(() if alone or page is None else ("stack.kv_page_tokens",)),
        *(() if alone else ("serving.max_context", "kv.policy")),
        "memory.weights",
        "dtypes.weights",
        *LAYOUT_FIELDS,
        "hardware",
        "model",
    )
    field = next(
        (
            f
            for f in involved
            if override_for(f, scenario.overrides) is not None
            and (f != "stack.kv_page_tokens" or _page_overridden(scenario))
        ),
        "model" if alone else "stack.kv_page_tokens" if oversized else "serving.max_context",
    )
    weights_words = (
        f"{scenario.model.name} weights need {human.size(total, 4)} per {device} "
        f"({layout_words(scenario)}, {scenario.weight_dtype}), "
        f"{_weights_placed(scenario, total, target)}"
    )
    problem = (
        f"the weights alone do not fit, so not one sequence does: {weights_words} "
        f"(its {human.size(hbm, 4)} of HBM per {device})"
        if alone
        else f"cannot fit even one sequence ({slot_words(scenario)}): {weights_words}, "
        f"which leaves {human.size(max(0, hbm - weights), 4)} of the "
        f"{human.size(hbm, 4)} HBM per {device}, and {_one_sequence_kv(scenario, stage)} "
        f"and a step's activations "
        f"{human.size(activation_bytes(scenario, 1, stage), 4)} (the prefill of a "
        f"{max_prompt_tokens(scenario):,}-token prompt)"
    )
    sizes = (field, *(f for f in involved if f not in (more_hbm, "hardware")))
    kind = WeightsCapacityError if alone else CapacityError
    return kind(scenario.at_field(field, f"{problem}; {_join(hints)}", sizes))


def _page_overridden(scenario: Scenario) -> bool:
    """Whether an override chose the page size: ``stack.kv_page_tokens`` or a stack named,
    not ``stack: null``, the hardware's default stack (what ``compare`` serves each machine
    by, unless told): that one picks no page of the user's, so the capacity error is at the
    memory shortfall's field instead (it still names the override among its causes)."""
    path = override_for("stack.kv_page_tokens", scenario.overrides)
    return path is not None and not (path == "stack" and scenario.overrides[path] is None)


def _one_sequence_kv(scenario: Scenario, stage: PipelineStage | None) -> str:
    """What one sequence's KV cache takes, for the capacity error: a static slot's bytes,
    or on a paged stack the pages the smallest request reserves."""
    if scenario.stack.kv_page_tokens is None:
        return f"one slot's KV cache is {human.size(kv_bytes(scenario, 1, stage), 4)}"
    least = smallest_request_pages(scenario)
    return (
        f"the smallest request {'takes' if pages_on_demand(scenario) else 'reserves'} "
        f"{human.count(least, 'page')} of "
        f"{scenario.stack.kv_page_tokens:,} tokens "
        f"({human.size(least * page_bytes(scenario, stage), 4)})"
    )


def _whole_queries_batch(
    facts: PlanFacts, stage: PipelineStage | None, system: SystemConfig | None
) -> int:
    """The batch ``auto`` picks beside MLA's query weights held whole (the most of them the
    stack runs), when its decode step replicates the queries on ``system``'s links (default:
    the scenario's): fewer slots than beside the slices, but steps that make every head's
    queries instead of gathering them. 0 when the layout never holds them whole, or that
    batch's step gathers (then the slices' count stands; of the scenario of ``facts``)."""
    scenario = facts.scenario
    if not chooses_queries(scenario):
        return 0
    beside = scenario.stack.runnable_batch(_whole_slots(facts, stage))
    links = scenario.hardware.system if system is None else system
    return beside if beside and facts.replicates(beside, stage, links) else 0


def _whole_slots(facts: PlanFacts, stage: PipelineStage | None) -> int:
    """The most slots that fit beside MLA's query and value weights held whole (a
    pipeline ``stage``'s; of the scenario of ``facts``)."""
    whole = _pinned_weights(facts, True, stage)
    return most_slots(lambda slots: _fits(facts.scenario, slots, whole, stage))


def _weights_placed(scenario: Scenario, total: int, pinned: int) -> str:
    """What ``memory.weights`` does with one device's ``total`` weight bytes, of which HBM
    pins ``pinned`` (``pinned_limit``), in the setting's own terms, for the capacity error:
    ``hbm`` keeps every weight in HBM (weights beyond it do not fit, whatever DDR holds),
    ``hot_set`` pins the most-read ones and reads the rest from DDR, ``streamed`` reads them
    all from DDR."""
    setting = scenario.workload.memory.weights
    if setting == "hbm":
        if pinned >= total:
            return f"memory.weights hbm keeps all of them in HBM ({human.size(total, 4)})"
        return (
            f"memory.weights hbm keeps all of them in HBM, {human.size(total - pinned, 4)} "
            "more than it holds"
        )
    if setting == "hot_set":
        return (
            f"memory.weights hot_set pins {human.size(pinned, 4)} of them in HBM "
            f"(hot_set_fraction {human.number(scenario.workload.memory.hot_set_fraction)}) and "
            "reads the rest from DDR"
        )
    return "memory.weights streamed reads them all from DDR (none in HBM)"


def _every_batch(slots: int) -> int:
    """What memory holds, run as it is."""
    return slots


def most_slots(fits: Callable[[int], bool]) -> int:
    """The largest slot count ``fits`` accepts (at most ``MAX_SLOTS``; 0 if not even one),
    for a ``fits`` that holds up to some count and fails above it (memory grows with
    slots): doubling, then bisection."""
    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        if high >= MAX_SLOTS:
            return MAX_SLOTS
        low, high = high, min(high * 2, MAX_SLOTS + 1)
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def weights_spilled(scenario: Scenario, placement: Placement) -> tuple[int, int]:
    """The target's weight bytes ``placement`` holds in HBM, and those ``memory.weights``
    pins there (``pinned_limit``); fewer held than pinned: batch slots pushed the rest out
    to DDR (a shared draft's weights always sit in HBM, so they are left out)."""
    target = [
        t for t in placement.tensors if t.kind == "weights" and not t.name.startswith(DRAFT_PREFIX)
    ]
    wanted = min(sum(t.bytes for t in target), pinned_limit(scenario))
    held = sum(t.bytes for t in target if t.tier == "hbm")
    return held, wanted


def weights_placement(scenario: Scenario, placement: Placement) -> str:
    """Where the weights are, in the workload's terms: ``memory.weights`` (``hbm``,
    ``hot_set``, ``streamed``), ``_spilled`` added when batch slots pushed some of the
    weights it pins to DDR (``weights_spilled``): a ``hot_set`` smaller than the setting pins
    (``hbm`` never spills: `plan_memory` refuses such slots)."""
    held, wanted = weights_spilled(scenario, placement)
    setting: str = scenario.workload.memory.weights
    return f"{setting}_spilled" if held < wanted else setting


class WeightsSpilledWarning(RduSimWarning):
    """Batch slots pushed weights out of the HBM share ``memory.weights`` gives them: the
    steps read those from DDR every step (:func:`placement_warnings` says how much)."""


def placement_warnings(
    scenario: Scenario, placement: Placement, option: str | None = None
) -> list[str]:
    """What a reader of a run must be told about where the weights ended up: batch slots
    that push weights out of the HBM share ``memory.weights`` gives them (the steps then
    read those weights from DDR). ``option``: the name of what set the plan's slots when
    not ``serving.batch_slots`` (``api.step``'s ``batch`` beyond them), its value the
    plan's slots."""
    held, wanted = weights_spilled(scenario, placement)
    if held >= wanted:
        return []
    memory = scenario.workload.memory
    share = (
        "all the weights"
        if memory.weights == "hbm"
        else f"a hot set of {human.size(wanted, 4)} (memory.weights hot_set)"
    )
    read = weights_read_from_ddr(scenario, placement)
    slots = placement.batch_slots
    given, remedy = (
        (f"serving.batch_slots {slots}", "lower serving.batch_slots or set it to auto")
        if option is None
        else (f"{option} {slots}", f"a smaller {option}")
    )
    return [
        f"{given} leaves HBM room for "
        f"{human.size(held, 4)} of weights instead of {share}: the other "
        f"{human.size(wanted - held, 4)} per socket sit in DDR, and a decode step of "
        f"{human.count(slots, 'slot')} reads {human.size(read, 4)} of them from "
        f"there ({remedy})"
    ]


def weights_read_from_ddr(scenario: Scenario, placement: Placement) -> float:
    """The weight bytes a decode step of ``placement``'s batch reads from DDR per socket:
    each weight's reads in that step (``weight_inventory``: a dense weight whole, the
    embedding table only its tokens' rows, the routed experts those touched) times the share
    of it in DDR (``hbm_fractions``), the rule the compiled step's reads follow
    (``compile._hbm_share``), so the warning says what ``compare`` and ``step`` report."""
    index = placement.pipeline_stage
    stage = None if index < 0 else scenario_stages(scenario)[index]
    fractions = hbm_fractions(placement)
    inventory = weight_inventory(scenario, placement.batch_slots, stage=stage)
    return sum(w.reads * (1.0 - fractions.get(w.key, 1.0)) for w in inventory)
