"""KV-cache policies: full attention, SnapStream, and the StreamingLLM / SnapKV ablations.

Every policy answers, for one batch slot, the questions of :class:`rdu_sim.kv.policy.KVPolicy`:
how many tokens of cache are allocated (static, once), whether a prefill compresses, how many
tokens a decode step attends to, and which static cache length the decode graph is compiled
for.  The compiler uses the sizes and buckets; serving uses ``compresses``/``cache_at``/
``decode_bucket`` each step.  Sizes are tokens per slot (all layers share them); bytes are the
token count times the model's KV bytes per token (:func:`rdu_sim.models.kv_bytes_per_token`).

Conventions shared by every policy (documented in docs/kv.md):

* ``max_context`` bounds a sequence: ``prompt_tokens <= max_context`` always, and for the
  growing policies (``full``, ``snapkv``) the cache, ``prompt + generated`` (after the
  prefill compression, for SnapKV), must fit in the slot.  Violations raise ``ValueError``.
* A slot never holds more than ``max_context`` tokens: a budget larger than ``max_context``
  is clipped to it (compression then never triggers), so a compressing policy never uses
  more KV memory than ``full`` for the same slots.
* ``cache_at`` is the number of *valid* tokens; the decode graph runs over
  ``decode_bucket(...)`` tokens (static shape), masking the invalid tail.

Policies are built with :func:`make_policy` from a validated :class:`KVConfig` (each class's
``from_config``): every parameter's default is the config model's, so the constructors
take them all, with no defaults of their own. New ones register with :func:`register_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from rdu_sim import plugins
from rdu_sim.config.overrides import UnreadFieldWarning, override_for
from rdu_sim.config.overrides import unread_overrides as unread_fields
from rdu_sim.config.workload import KVConfig
from rdu_sim.kv.policy import KVPolicy, Selection
from rdu_sim.models.layers import window_tokens
from rdu_sim.shapes import Phase, SelectionError

__all__ = [
    "DEFAULT_BUDGET",
    "FullPolicy",
    "KeptCounts",
    "PolicyBase",
    "PolicyError",
    "Selection",
    "SnapKVPolicy",
    "SnapStreamPolicy",
    "StreamingLLMPolicy",
    "UnreadKVFieldWarning",
    "check_window_in_ring",
    "context_buckets",
    "kept_counts",
    "layer_selection_of",
    "make_policy",
    "paged_buckets",
    "policy_class",
    "policy_names",
    "policy_reads",
    "register_policy",
    "slot_wraps",
    "takes_budget",
    "unread_overrides",
    "wrap_keeps",
]

DEFAULT_BUDGET = 4096
"""Tokens kept per slot by SnapStream / SnapKV when neither kv.budget nor
kv.compression_ratio is given: SnapKV's largest LongBench budget (its experiments use
1024..4096), which also leaves room for a StreamingLLM-sized ring (kv.recent = 2048, close to
StreamingLLM's 2000-token Llama example) plus 4 sinks and 2044 selected tokens.  The 4x
memory figure of the SnapStream paper at 128k needs a budget of 32768 (kv.compression_ratio=4);
see docs/kv.md."""

GQA_SELECTION = "group_mean"
"""How the selection treats grouped-query attention: pooled scores averaged over each GQA
group, one selection per KV head (NVIDIA kvpress's choice; rdu_sim.kv.reference does this)."""


class PolicyError(ValueError):
    """A KV policy's parameters cannot work; ``field`` names the workload field to fix
    (``kv.budget``, ``serving.max_context``...), so config loading reports it there."""

    def __init__(self, field: str, message: str, also: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.also = also
        """Other fields the rule spans: :meth:`blamed` picks the one to name."""

    def blamed(self, overrides: Mapping[str, Any]) -> str:
        """The field an error line names: the first of ``field, *also`` an override set
        (the loader then ends it ``(from --set kv.recent)``), else ``field``."""
        fields = (self.field, *self.also)
        return next((f for f in fields if override_for(f, overrides) is not None), self.field)


def check_window_in_ring(observation_window: int, recent: int, why: str = "") -> None:
    """SnapStream's observation window is the last ``observation_window`` tokens of its ring
    of ``recent`` (the ring keeps it, as SnapKV keeps its window), so it must fit there: the
    one rule for the policy and for ``rdu-sim kv-demo``'s reference cache. ``why`` ends the
    message (the policy says why its budget compresses)."""
    if observation_window > recent:
        raise PolicyError(
            "kv.observation_window",
            f"kv.observation_window ({observation_window}) must be <= kv.recent ({recent}): "
            f"the window sits inside the ring buffer{why}",
            also=("kv.recent",),
        )


_REGISTRY: dict[str, type[PolicyBase]] = {}

P = TypeVar("P", bound="type[PolicyBase]")


def register_policy(name: str) -> Callable[[P], P]:
    """Class decorator registering a policy under ``name`` (kv.policy), by the plugins'
    registry rule (``rdu_sim.plugins.enroll``): a name held by another class is refused, the
    same class again (a reloaded plugin) replaces it."""

    def decorate(cls: P) -> P:
        plugins.enroll("KV policy", _REGISTRY, name, cls)  # type: ignore[misc]
        cls.name = name
        return cls

    return decorate


def policy_class(name: str) -> type[PolicyBase] | None:
    """The class registered as ``kv.policy: name``, the plugins loaded first when none is
    (``rdu_sim.plugins.lookup``, ``RDU_SIM_PLUGINS``); None when no plugin registers it."""
    return plugins.lookup(_REGISTRY, name)


def policy_names() -> list[str]:
    """Names of every registered policy, the plugins' too (loaded first), sorted."""
    return plugins.names(_REGISTRY)


def budget_determines(name: str) -> tuple[str, ...]:
    """The ``kv`` fields policy ``name`` derives from a given budget (none for an unknown
    name: :func:`make_policy` refuses it)."""
    cls = policy_class(name)
    return () if cls is None else cls.budget_determines


def policy_reads(name: str) -> tuple[str, ...] | None:
    """The ``kv`` fields policy ``name`` reads (its class's ``reads``; ``policy`` itself
    aside), or None for an unknown name (:func:`make_policy` refuses it)."""
    cls = policy_class(name)
    return None if cls is None else cls.reads


def takes_budget(name: str) -> bool:
    """Whether policy ``name`` keeps a budget of tokens a slot (it reads ``kv.budget``, so
    a study resizes it: ``rdu_sim.studies.point_settings``); False for an unknown name."""
    return "budget" in (policy_reads(name) or ())


@dataclass(frozen=True)
class KeptCounts:
    """What a KV policy kept over a run's requests (:func:`kept_counts`), for its report."""

    layout: str  # the policy's layout in words (``PolicyBase.layout``)
    prompts_compressed: int  # requests whose prompt the prefill cut to the slot
    slots_wrapped: int  # requests whose decode outgrew the slot (a ring overwrote tokens)
    # True when a full slot's decode steps choose what to drop by scores (the policy's
    # decode_selection), so a wrapped slot lost what they scored lowest, not its oldest
    # tokens; False (and left out of a run's JSON) for every shipped policy
    decode_evicts: bool = False
    # what a wrapped slot keeps beside its ring, in words (``4 sinks and 1,020 selected
    # tokens``; "" when nothing: a ring alone), so the report words a wrap per policy; not in
    # the JSON, whose layout says it
    stays: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Its JSON: ``decode_evicts`` only when true (only a policy evicting at decode says
        so), for a run's ``kv_kept`` and a cluster pool's alike."""
        data: dict[str, Any] = {
            "layout": self.layout,
            "prompts_compressed": self.prompts_compressed,
            "slots_wrapped": self.slots_wrapped,
        }
        if self.decode_evicts:
            data["decode_evicts"] = True
        return data


class UnreadKVFieldWarning(UnreadFieldWarning):
    """An override set a ``kv`` field the chosen policy does not read: it changes nothing."""


def unread_overrides(policy: str, overrides: Mapping[str, Any]) -> list[str]:
    """The ``kv.<field>`` keys of ``overrides`` that policy ``policy`` does not read
    (``config.overrides.unread_overrides`` of ``kv.policy``); none for an unknown policy."""
    return unread_fields("kv.policy", policy_reads(policy), overrides)


def make_policy(kv: KVConfig, max_context: int, page_tokens: int | None = None) -> KVPolicy:
    """The policy ``kv.policy`` resolved for sequences of at most ``max_context`` tokens.

    ``page_tokens``: the runtime pages the KV cache (the serving stack's ``kv_page_tokens``),
    so a growing cache's decode steps read :func:`paged_buckets` instead of the workload's
    static ``kv.context_buckets``.

    Raises :class:`PolicyError` (a ``ValueError``) naming the offending field when the
    parameters cannot work (for example a budget that leaves no room for selected tokens),
    and listing the registered names when ``kv.policy`` is unknown: the registry is the only
    list of valid policies.
    """
    cls = policy_class(kv.policy)
    if cls is None:
        raise PolicyError(
            "kv.policy",
            f"unknown kv.policy {kv.policy!r}{_meant(kv.policy)}; valid policies: "
            f"{', '.join(policy_names())}",
        )
    if page_tokens is not None and cls.grows:
        # the workload's own buckets are refused alike on every hardware, then replaced
        context_buckets(kv.context_buckets, kv.min_bucket, max_context)
        paged = paged_buckets(page_tokens, max_context)
        kv = kv.model_copy(update={"context_buckets": paged})
    try:
        return cls.from_config(kv, max_context)
    except PolicyError as exc:
        raise _from_derived_budget(exc, kv, max_context) from None


def _meant(name: str) -> str:
    """`` (did you mean 'snapstream'?)`` for a policy name close to a registered one (or
    one in another case: names are lower case), else ""."""
    import difflib  # here: only an unknown name needs it

    lower = name.lower()
    if lower in policy_names():
        return f" (did you mean {lower!r}? names are lower case)"
    close = difflib.get_close_matches(lower, policy_names(), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _from_derived_budget(exc: PolicyError, kv: KVConfig, max_context: int) -> PolicyError:
    """A budget error when no ``kv.budget`` was given says where the budget came from:
    ``max_context / kv.compression_ratio`` (and is the ratio's to fix), or the default."""
    if exc.field != "kv.budget" or kv.budget is not None:
        return exc
    budget = _resolve_budget(kv, max_context)
    if kv.compression_ratio is not None:
        return PolicyError(
            "kv.compression_ratio",
            f"{exc} (the budget {budget} is serving.max_context {max_context} / "
            f"kv.compression_ratio {kv.compression_ratio:g}: lower the ratio or give "
            "kv.budget)",
        )
    return PolicyError(
        exc.field,
        f"{exc} (the default budget {budget}: neither kv.budget nor kv.compression_ratio is given)",
    )


def paged_buckets(page_tokens: int, max_context: int) -> list[int]:
    """Decode cache lengths of a paged runtime: whole pages, at most 12.5% over the cache.

    A paged runtime reads the pages a sequence holds, so a step over a cache of c tokens
    reads ``ceil(c / page)`` pages. Up to 8 pages every page count is a length; beyond, 8
    lengths per octave of pages (16 pages: 18, 20, ...). That bounds the distinct step shapes
    a long context simulates (72 for 128k tokens of 64-token pages) at a read at most 12.5%
    above the sequence's own pages. The last length is ``max_context``.
    """
    _check_positive("stack.kv_page_tokens", page_tokens)
    out: list[int] = []
    pages = 1
    while pages * page_tokens < max_context:
        out.append(pages * page_tokens)
        pages += max(1, (1 << (pages.bit_length() - 1)) // 8)
    out.append(max_context)
    return out


def context_buckets(spec: list[int] | str, min_bucket: int, max_context: int) -> list[int]:
    """Static decode cache lengths for a growing cache, ascending, the last one ``max_context``.

    ``"pow2"``: ``min_bucket, 2*min_bucket, ...`` below ``max_context``, then ``max_context``.
    A list: sorted and de-duplicated; it must reach ``max_context`` (a step must always find
    a bucket); lengths above ``max_context`` are clipped to it, since a slot holds no more.
    """
    _check_positive("serving.max_context", max_context)
    if spec == "pow2":
        _check_positive("kv.min_bucket", min_bucket)
        out: list[int] = []
        b = min_bucket
        while b < max_context:
            out.append(b)
            b *= 2
        out.append(max_context)
        return out
    if isinstance(spec, str):
        raise PolicyError(
            "kv.context_buckets",
            f"kv.context_buckets must be 'pow2' or a list of lengths, got {spec!r}",
        )
    if not spec or any(b < 1 for b in spec):
        raise PolicyError(
            "kv.context_buckets",
            f"kv.context_buckets must be a non-empty list of lengths >= 1, got {spec}",
        )
    if max(spec) < max_context:
        raise PolicyError(
            "kv.context_buckets",
            f"kv.context_buckets {sorted(spec)} do not cover max_context={max_context}: the "
            f"largest bucket must be >= max_context (add {max_context})",
        )
    return sorted({min(b, max_context) for b in spec})


def _check_positive(field: str, value: int) -> None:
    if value < 1:
        raise PolicyError(field, f"{field} must be >= 1, got {value}")


def _resolve_budget(kv: KVConfig, max_context: int) -> int:
    """kv.budget, else max_context / kv.compression_ratio (floor), else DEFAULT_BUDGET."""
    if kv.budget is not None:
        return kv.budget
    if kv.compression_ratio is not None:
        budget = math.floor(max_context / kv.compression_ratio)
        if budget < 1:
            raise PolicyError(
                "kv.compression_ratio",
                f"kv.compression_ratio {kv.compression_ratio} leaves no cache at "
                f"max_context={max_context}",
            )
        return budget
    return DEFAULT_BUDGET


class PolicyBase:
    """Shared bookkeeping: the resolved ``max_context``, argument checks, bytes, buckets.

    Subclasses set ``name`` (by :func:`register_policy`) and implement ``from_config``,
    ``slot_tokens``, ``compresses``, ``cache_after_prefill``, ``cache_at``, ``buckets``.
    """

    name: str = ""
    grows: ClassVar[bool] = False
    """True when the cache grows with each generated token (decode buckets vary)."""
    reads: ClassVar[tuple[str, ...]] = ()
    """The ``kv`` fields this policy reads (``policy`` aside): the one list of them, so an
    override of another is refused (``rdu_sim.scenario``) instead of silently ignored."""
    budget_determines: ClassVar[tuple[str, ...]] = ()
    """``kv`` fields this policy derives from a given budget (StreamingLLM: ``recent``): a
    value for them set for another policy yields to the budget on a policy switch."""

    def __init__(self, max_context: int) -> None:
        _check_positive("serving.max_context", max_context)
        self.max_context = max_context

    @classmethod
    def from_config(cls, kv: KVConfig, max_context: int) -> PolicyBase:
        """Build the policy from the workload's kv section."""
        raise NotImplementedError

    # --- sizes ---------------------------------------------------------------------------
    def slot_tokens(self) -> int:
        """Tokens of cache allocated per batch slot (static)."""
        raise NotImplementedError

    def slot_bytes(self, kv_bytes_per_token: float) -> int:
        """Bytes of one slot's cache: ``slot_tokens * kv_bytes_per_token`` (rounded)."""
        return round(self.slot_tokens() * kv_bytes_per_token)

    def layer_slot_tokens(self, window: int | None) -> int:
        """Tokens one layer with attention ``window`` holds per slot: the slot under full
        attention; a sliding-window layer keeps at most its ring of the last ``window - 1``
        tokens (:func:`rdu_sim.models.window_tokens`), bounded like StreamingLLM's ring
        without sinks, whatever the policy keeps for the full-attention layers."""
        return window_tokens(self.slot_tokens(), window)

    def layer_selection(self, prompt_tokens: int, window: int | None) -> Selection | None:
        """The selection a layer with attention ``window`` runs at prefill: the policy's
        selection of what that layer holds (a sliding-window layer: its ring at most), so a
        window no longer than what the policy keeps is never compressed."""
        self._check_prompt(prompt_tokens)
        return self.selection(window_tokens(prompt_tokens, window))

    def decode_selection(self, cache_tokens: int) -> Selection | None:
        """The selection a decode step runs over each slot's cache of ``cache_tokens``
        tokens, or None: no shipped policy scores its cache at decode (SnapStream's and
        StreamingLLM's rings overwrite their oldest token unscored)."""
        if cache_tokens < 0:
            raise ValueError(f"cache_tokens must be >= 0, got {cache_tokens}")
        return None

    def layer_decode_selection(self, cache_tokens: int, window: int | None) -> Selection | None:
        """The decode selection a layer with attention ``window`` runs: the policy's decode
        selection of what that layer holds of the cache (a sliding-window layer: its ring
        at most), as :meth:`layer_selection` is the prefill's."""
        return self.decode_selection(window_tokens(cache_tokens, window))

    # --- per-request behaviour ---------------------------------------------------------------
    def _check_prompt(self, prompt_tokens: int) -> None:
        if prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
        if prompt_tokens > self.max_context:
            raise ValueError(
                f"prompt of {prompt_tokens} tokens exceeds max_context={self.max_context}"
            )

    def _check_generated(self, generated: int) -> None:
        if generated < 0:
            raise ValueError(f"generated must be >= 0, got {generated}")

    def _check_cache_args(self, prompt_tokens: int, generated: int) -> None:
        """``cache_at``'s arguments (asked per request: one comparison when they are good)."""
        if not 1 <= prompt_tokens <= self.max_context or generated < 0:
            self._check_prompt(prompt_tokens)
            self._check_generated(generated)

    def compresses(self, prompt_tokens: int) -> bool:
        """Whether prefill of this prompt runs the SnapKV selection."""
        self._check_prompt(prompt_tokens)
        return False

    def selection(self, prompt_tokens: int) -> Selection | None:
        """The SnapKV selection this prefill runs, or None when it runs none."""
        self._check_prompt(prompt_tokens)
        return None

    def cache_after_prefill(self, prompt_tokens: int) -> int:
        """Tokens in the slot's cache right after prefill of this prompt."""
        return self.cache_at(prompt_tokens, 0)

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """Valid tokens a decode step attends to after ``generated`` output tokens."""
        raise NotImplementedError

    def max_generated(self, prompt_tokens: int) -> int | None:
        """Most output tokens this slot can hold after this prompt; None means unbounded."""
        self._check_prompt(prompt_tokens)
        return None

    # --- decode shapes -----------------------------------------------------------------------
    def buckets(self) -> list[int]:
        """Every decode cache length a server compiles a graph for, ascending."""
        raise NotImplementedError

    def decode_bucket(self, longest_cache: int) -> int:
        """Smallest compiled cache length covering ``longest_cache`` (the batch's longest)."""
        if longest_cache < 0:
            raise ValueError(f"longest_cache must be >= 0, got {longest_cache}")
        for b in self.buckets():
            if b >= longest_cache:
                return b
        raise ValueError(
            f"cache of {longest_cache} tokens exceeds the slot of "
            f"{self.slot_tokens()} tokens ({self.name})"
        )

    def layout(self) -> str:
        """What a slot keeps, in words, for reports (``rdu-sim run`` and ``step``): the
        slot's tokens; a subclass says how they are laid out."""
        return f"{self.name}: {self.slot_tokens():,} tokens a slot"

    def decode_words(self, context: int) -> str | None:
        """What a decode step at a longest sequence of ``context`` tokens takes as its
        cache when the policy cannot know it from the context alone, or None."""
        return None

    def describe(self) -> dict[str, Any]:
        """Resolved parameters, for reports and JSON."""
        return {
            "policy": self.name,
            "max_context": self.max_context,
            "slot_tokens": self.slot_tokens(),
            "buckets": self.buckets(),
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "buckets")
        return f"{type(self).__name__}({params})"


@register_policy("full")
class FullPolicy(PolicyBase):
    """Full attention: the cache grows with the sequence, nothing is evicted.

    A slot is allocated for ``max_context`` tokens (static allocation); decode graphs exist
    for the context buckets (:func:`context_buckets`) and a step runs the smallest bucket
    covering the longest cache in the batch.
    """

    grows = True
    reads = ("context_buckets", "min_bucket")

    def __init__(self, max_context: int, *, bucket_spec: list[int] | str, min_bucket: int) -> None:
        super().__init__(max_context)
        self.bucket_spec = bucket_spec
        self.min_bucket = min_bucket
        context_buckets(bucket_spec, min_bucket, max_context)  # validate now, not mid-run

    @classmethod
    def from_config(cls, kv: KVConfig, max_context: int) -> FullPolicy:
        """Buckets from kv.context_buckets / kv.min_bucket; compression fields are unused."""
        return cls(max_context, bucket_spec=kv.context_buckets, min_bucket=kv.min_bucket)

    def slot_tokens(self) -> int:
        """``max_context``: every slot is allocated for the longest sequence."""
        return self.max_context

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """``prompt + generated``; ValueError when that exceeds the slot."""
        self._check_cache_args(prompt_tokens, generated)
        tokens = prompt_tokens + generated
        if tokens > self.max_context:
            raise ValueError(
                f"{self.name}: {prompt_tokens} + {generated} tokens exceed "
                f"max_context={self.max_context}"
            )
        return tokens

    def max_generated(self, prompt_tokens: int) -> int | None:
        """``max_context - prompt``: the slot is full after that."""
        self._check_prompt(prompt_tokens)
        return self.max_context - prompt_tokens

    def buckets(self) -> list[int]:
        """:func:`context_buckets` of kv.context_buckets up to ``max_context``."""
        return context_buckets(self.bucket_spec, self.min_bucket, self.max_context)

    def layout(self) -> str:
        """The context's tokens a slot, nothing evicted."""
        count = len(self.buckets())
        return (
            f"full: {self.slot_tokens():,} tokens a slot (the context), nothing evicted, "
            f"{count} decode bucket{'s' if count > 1 else ''}"
        )

    def describe(self) -> dict[str, Any]:
        """Policy, max_context, slot size and buckets."""
        return {
            **super().describe(),
            "context_buckets": self.bucket_spec,
            "min_bucket": self.min_bucket,
        }


class _FixedSlotPolicy(PolicyBase):
    """A fixed-size slot (sinks + optional top-K + ring): the decode bucket is the slot.

    ``cache_at = min(prompt + generated, slot)``: a prompt no longer than the slot is stored
    as is and the cache grows with each generated token until the slot is full; from then
    on each new token overwrites the oldest ring entry (sinks and selected tokens stay).  A
    longer prompt leaves the slot full at prefill.
    """

    def __init__(self, max_context: int, *, sinks: int, topk: int, recent: int) -> None:
        super().__init__(max_context)
        # the workload's fields forbid these; a policy built in Python names the field too
        if sinks < 0:
            raise PolicyError("kv.sinks", f"kv.sinks must be >= 0, got {sinks}")
        if topk < 0:  # the top-K is what the budget leaves after the sinks and the ring
            raise PolicyError("kv.budget", f"the top-K must be >= 0, got {topk}")
        if recent < 1:
            raise PolicyError("kv.recent", f"kv.recent must be >= 1, got {recent}")
        self.sinks = sinks
        self.topk = topk
        self.recent = recent

    @property
    def budget(self) -> int:
        """Tokens the layout holds: ``sinks + topk + recent``."""
        return self.sinks + self.topk + self.recent

    def slot_tokens(self) -> int:
        """``min(budget, max_context)``: no slot holds more than a sequence can have."""
        return min(self.budget, self.max_context)

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """``min(prompt + generated, slot_tokens)``; unbounded generation is fine."""
        self._check_cache_args(prompt_tokens, generated)
        tokens = prompt_tokens + generated
        slot = self.slot_tokens()
        return tokens if tokens < slot else slot

    def buckets(self) -> list[int]:
        """One static shape: ``[slot_tokens]``."""
        return [self.slot_tokens()]

    def layout(self) -> str:
        """``4 sinks + 30,716 selected + 2,048 ring = 32,768 tokens a slot``; a budget at or
        above the context says that nothing is compressed (and that it was clipped)."""
        parts = [f"{self.sinks:,} sinks"] if self.sinks else []
        if self.topk:
            parts.append(f"{self.topk:,} selected")
        parts.append(f"{self.recent:,} ring")
        words = f"{self.name}: {' + '.join(parts)} = {self.budget:,} tokens a slot"
        if self.budget > self.max_context:
            return (
                f"{self.name}: budget {self.budget:,} clipped to the {self.max_context:,}-token "
                f"context: nothing is compressed, {self.max_context:,} tokens a slot"
            )
        if self.budget == self.max_context:
            return f"{words} (the whole context: nothing is compressed)"
        return words

    def describe(self) -> dict[str, Any]:
        """Policy, max_context, slot size, and the sinks/top-K/ring layout."""
        return {
            **super().describe(),
            "budget": self.budget,
            "sinks": self.sinks,
            "topk": self.topk,
            "recent": self.recent,
        }


@register_policy("snapstream")
class SnapStreamPolicy(_FixedSlotPolicy):
    """SnapStream (arXiv 2511.03092): SnapKV at prefill into a static sinks + top-K + ring slot.

    ``budget = sinks + topk + recent`` tokens per slot (clipped to ``max_context``).  A prompt
    longer than the budget is compressed at prefill: the first ``sinks`` tokens, the last
    ``recent`` tokens (the observation window is the last ``observation_window`` of them), and
    the ``topk`` middle tokens ``[sinks, T - recent)`` with the best pooled observation scores.
    Shorter prompts are not compressed (see :class:`_FixedSlotPolicy` for the fill rule).
    """

    reads = (
        "budget",
        "compression_ratio",
        "sinks",
        "recent",
        "observation_window",
        "kernel_size",
        "pooling",
    )

    def __init__(
        self,
        max_context: int,
        *,
        budget: int,
        sinks: int,
        recent: int,
        observation_window: int,
        kernel_size: int,
        pooling: str,
    ) -> None:
        # the layout's rules bind only when a prompt can be compressed: a budget at or
        # above the context never runs the selection, so its window and split are moot
        compresses = min(budget, max_context) < max_context
        if compresses:
            check_window_in_ring(
                observation_window,
                recent,
                f", and the budget {budget} < serving.max_context {max_context} compresses "
                "long prompts",
            )
        if compresses and budget <= sinks + recent:
            # either part can give way: the larger first, where lowering it frees the most
            parts = ["kv.sinks", "kv.recent"] if sinks > recent else ["kv.recent", "kv.sinks"]
            raise PolicyError(
                "kv.budget",
                f"kv.budget {budget} leaves no room for selected tokens after "
                f"kv.sinks ({sinks}) + kv.recent ({recent}); raise the budget "
                f"or lower {parts[0]} or {parts[1]}",
                also=("kv.recent", "kv.sinks"),
            )
        if budget > sinks + recent:
            layout = (sinks, budget - sinks - recent, recent)
        else:  # budget >= max_context: nothing is ever evicted, the split is immaterial
            kept_sinks = min(sinks, budget - 1)
            layout = (kept_sinks, 0, budget - kept_sinks)
        super().__init__(max_context, sinks=layout[0], topk=layout[1], recent=layout[2])
        self.observation_window = observation_window
        self.kernel_size = kernel_size
        self.pooling = pooling

    @classmethod
    def from_config(cls, kv: KVConfig, max_context: int) -> SnapStreamPolicy:
        """Budget from kv.budget, else max_context / kv.compression_ratio, else 4096."""
        return cls(
            max_context,
            budget=_resolve_budget(kv, max_context),
            sinks=kv.sinks,
            recent=kv.recent,
            observation_window=kv.observation_window,
            kernel_size=kv.kernel_size,
            pooling=kv.pooling,
        )

    def compresses(self, prompt_tokens: int) -> bool:
        """True iff the prompt is longer than the slot (prompts that fit are kept whole)."""
        self._check_prompt(prompt_tokens)
        return prompt_tokens > self.slot_tokens()

    def selection(self, prompt_tokens: int) -> Selection | None:
        """Window x all prompt keys scored; top-K of the middle ``[sinks, T - recent)``."""
        if not self.compresses(prompt_tokens):
            return None
        return Selection(
            prompt_tokens=prompt_tokens,
            window=self.observation_window,
            scored_keys=prompt_tokens,
            candidates=prompt_tokens - self.sinks - self.recent,
            topk=self.topk,
            kept=self.slot_tokens(),
            kernel_size=self.kernel_size,
            pooling=self.pooling,
        )

    def describe(self) -> dict[str, Any]:
        """Layout plus SnapKV parameters and the GQA choice."""
        return {
            **super().describe(),
            "observation_window": self.observation_window,
            "kernel_size": self.kernel_size,
            "pooling": self.pooling,
            "gqa": GQA_SELECTION,
        }


@register_policy("streamingllm")
class StreamingLLMPolicy(_FixedSlotPolicy):
    """StreamingLLM (arXiv 2309.17453): ``sinks`` attention sinks + a ring of recent tokens.

    ``budget = sinks + recent``; no selection ever runs.  A prompt longer than the budget is
    truncated at prefill to its first ``sinks`` and last ``recent`` tokens.  When kv.budget
    (or kv.compression_ratio) is given, the ring is ``budget - sinks`` so the ablation can
    match SnapStream's memory; an explicit, inconsistent kv.recent is then an error (unless
    the policy was switched to this one and kv.recent was set for the other:
    :data:`budget_determines`, applied by ``rdu_sim.scenario``).
    """

    reads = ("budget", "compression_ratio", "sinks", "recent")
    budget_determines = ("recent",)

    def __init__(self, max_context: int, *, sinks: int, recent: int) -> None:
        super().__init__(max_context, sinks=sinks, topk=0, recent=recent)

    @classmethod
    def from_config(cls, kv: KVConfig, max_context: int) -> StreamingLLMPolicy:
        """sinks + recent, or sinks + (budget - sinks) when a budget is given."""
        recent = kv.recent
        if kv.budget is not None or kv.compression_ratio is not None:
            budget = _resolve_budget(kv, max_context)
            if budget <= kv.sinks:
                raise PolicyError(
                    "kv.budget",
                    f"kv.budget {budget} must exceed kv.sinks ({kv.sinks}) for streamingllm",
                )
            if "recent" in kv.model_fields_set and kv.sinks + kv.recent != budget:
                raise PolicyError(
                    "kv.recent",
                    f"streamingllm: kv.sinks ({kv.sinks}) + kv.recent ({kv.recent}) != "
                    f"kv.budget {budget}; give one of them: --set kv.recent="
                    f"{budget - kv.sinks} keeps the budget, --set kv.budget="
                    f"{kv.sinks + kv.recent} keeps the ring",
                )
            recent = budget - kv.sinks
        return cls(max_context, sinks=kv.sinks, recent=recent)


@register_policy("snapkv")
class SnapKVPolicy(PolicyBase):
    """SnapKV (arXiv 2404.14469): compress at prefill to the budget, then grow.

    A prompt longer than ``budget`` keeps the top ``budget - observation_window`` earlier
    tokens plus the window (no sinks, no ring); generated tokens are appended, so the slot
    is allocated for ``max_context`` (a prompt shorter than the budget followed by a long
    output needs it) and decode uses the same buckets as ``full``.
    """

    grows = True
    reads = (
        "budget",
        "compression_ratio",
        "observation_window",
        "kernel_size",
        "pooling",
        "context_buckets",
        "min_bucket",
    )

    def __init__(
        self,
        max_context: int,
        *,
        budget: int,
        observation_window: int,
        kernel_size: int,
        pooling: str,
        bucket_spec: list[int] | str,
        min_bucket: int,
    ) -> None:
        super().__init__(max_context)
        # no top-K left: the selection would be scored for nothing (the NumPy reference's
        # snapkv_select accepts it, as an ablation's degenerate layout)
        if budget <= observation_window:
            raise PolicyError(
                "kv.budget",
                f"kv.budget {budget} must exceed kv.observation_window "
                f"({observation_window}) for snapkv",
            )
        self.budget = budget
        self.observation_window = observation_window
        self.kernel_size = kernel_size
        self.pooling = pooling
        self.bucket_spec = bucket_spec
        self.min_bucket = min_bucket
        context_buckets(bucket_spec, min_bucket, max_context)

    @classmethod
    def from_config(cls, kv: KVConfig, max_context: int) -> SnapKVPolicy:
        """Budget as for SnapStream; buckets as for full; kv.sinks/kv.recent unused."""
        return cls(
            max_context,
            budget=_resolve_budget(kv, max_context),
            observation_window=kv.observation_window,
            kernel_size=kv.kernel_size,
            pooling=kv.pooling,
            bucket_spec=kv.context_buckets,
            min_bucket=kv.min_bucket,
        )

    def slot_tokens(self) -> int:
        """``max_context``: budget + the longest output must fit."""
        return self.max_context

    def compresses(self, prompt_tokens: int) -> bool:
        """True iff the prompt is longer than the budget."""
        self._check_prompt(prompt_tokens)
        return prompt_tokens > self.budget

    def selection(self, prompt_tokens: int) -> Selection | None:
        """Window x all prompt keys scored; top ``budget - window`` of the earlier tokens."""
        if not self.compresses(prompt_tokens):
            return None
        w = self.observation_window
        return Selection(
            prompt_tokens=prompt_tokens,
            window=w,
            scored_keys=prompt_tokens,
            candidates=prompt_tokens - w,
            topk=self.budget - w,
            kept=self.budget,
            kernel_size=self.kernel_size,
            pooling=self.pooling,
        )

    def cache_at(self, prompt_tokens: int, generated: int) -> int:
        """``min(prompt, budget) + generated``; ValueError when that exceeds the slot."""
        self._check_cache_args(prompt_tokens, generated)
        tokens = min(prompt_tokens, self.budget) + generated
        if tokens > self.max_context:
            raise ValueError(
                f"snapkv: cache of {tokens} tokens after {generated} generated "
                f"exceeds max_context={self.max_context}"
            )
        return tokens

    def max_generated(self, prompt_tokens: int) -> int | None:
        """``max_context - min(prompt, budget)``."""
        self._check_prompt(prompt_tokens)
        return self.max_context - min(prompt_tokens, self.budget)

    def buckets(self) -> list[int]:
        """Same as full: :func:`context_buckets` up to ``max_context``."""
        return context_buckets(self.bucket_spec, self.min_bucket, self.max_context)

    def layout(self) -> str:
        """A prompt above the budget keeps ``budget - window`` selected tokens plus the
        window, then the cache grows in a context-sized slot."""
        w = self.observation_window
        if self.budget >= self.max_context:
            kept = f"budget {self.budget:,} at or above the {self.max_context:,}-token context: "
            kept += "nothing is compressed"
        else:
            kept = (
                f"a prompt above {self.budget:,} tokens keeps {self.budget - w:,} selected + "
                f"the {w}-token window, then grows"
            )
        return f"snapkv: {kept}; {self.slot_tokens():,} tokens a slot (the context)"

    def decode_words(self, context: int) -> str | None:
        """Above the budget, what a sequence keeps depends on its prompt (``min(prompt,
        budget) + generated``): the step takes the whole context, the worst case (a
        prompt within the budget, every other token generated)."""
        if context <= self.budget:
            return None
        return (
            f"snapkv keeps min(prompt, {self.budget:,}) + generated tokens of a sequence of "
            f"{context:,}: the step attends to all {context:,}, the worst case (a prompt "
            "within the budget)"
        )

    def describe(self) -> dict[str, Any]:
        """Budget, SnapKV parameters, GQA choice and buckets."""
        return {
            **super().describe(),
            "budget": self.budget,
            "observation_window": self.observation_window,
            "kernel_size": self.kernel_size,
            "pooling": self.pooling,
            "gqa": GQA_SELECTION,
            "context_buckets": self.bucket_spec,
            "min_bucket": self.min_bucket,
        }


def layer_selection_of(
    policy: KVPolicy, phase: Phase, tokens: int, window: int | None
) -> Selection | None:
    """The selection the layers of attention ``window`` run in a ``phase`` step, checked as
    the compiler takes it: at prefill over a prompt of ``tokens`` (``layer_selection``), at
    decode over each slot's cache of ``tokens``, the step's static length
    (``layer_decode_selection``). A plugin's answer its contract refuses (a Selection its
    fields cannot make, ``kept`` above the tokens the layer holds, a ``topk`` not below the
    candidates, a ``window`` below 1, or at decode other than the step's one query a slot,
    anything but a Selection or None) is a
    :class:`rdu_sim.plugins.PolicyAnswerError` naming the policy, the question and the
    field: its defect, said in one line, not a traceback from the graph builder."""
    held = window_tokens(tokens, window)
    question = "selection" if phase == "prefill" else "decode_selection"
    asked = f"{question}({held})" if window is None else f"layer_{question}({tokens}, {window})"
    try:
        if phase == "prefill":
            answer: object = policy.layer_selection(tokens, window)
        else:
            answer = policy.layer_decode_selection(tokens, window)
    except SelectionError as exc:
        raise plugins.PolicyAnswerError(
            f"kv.policy {policy.name!r}: {asked} built a Selection with a bad {exc.field}: {exc}"
        ) from None
    if answer is None:
        return None
    if not isinstance(answer, Selection):
        raise plugins.PolicyAnswerError(
            f"kv.policy {policy.name!r}: {asked} returned {answer!r}, not a Selection or None"
        )
    if answer.prompt_tokens != held:
        where = "the cache's" if phase == "decode" else "the prompt's"
        raise plugins.PolicyAnswerError(
            f"kv.policy {policy.name!r}: {asked} returned a Selection with a bad prompt_tokens: "
            f"it must be the {held:,} tokens the layer holds ({where}), got "
            f"{answer.prompt_tokens:,}"
        )
    if phase == "decode" and answer.window != 1:
        raise plugins.PolicyAnswerError(
            f"kv.policy {policy.name!r}: {asked} returned a Selection with a bad window: a "
            f"decode step scores with the one new query each slot holds, so it must be 1, got "
            f"{answer.window:,}"
        )
    return answer


def slot_wraps(policy: KVPolicy, prompt_tokens: int, output_tokens: int) -> bool:
    """Whether a request of ``prompt_tokens`` and ``output_tokens`` outgrows its slot: what
    its prefill left (``cache_after_prefill``) plus what its decode wrote (``output - 1``
    tokens, the last token's KV never written) exceeds ``slot_tokens``, so a ring
    overwrote its oldest tokens (or a decode eviction dropped some). The per-request form of
    :func:`kept_counts`' ``slots_wrapped``."""
    written = output_tokens - 1 if output_tokens > 1 else 0
    return policy.cache_after_prefill(prompt_tokens) + written > policy.slot_tokens()


def wrap_keeps(policy: KVPolicy) -> tuple[int, int]:
    """The leading slot tokens an outgrown slot keeps in place, as (sinks, selected), from
    the policy's ``describe()`` (``sinks``, ``topk``: the fixed-slot layouts'; a plugin
    without them keeps nothing it states). A ring overwrites only the positions after them;
    a policy that selects at decode may drop any scored token, so it keeps its sinks
    alone."""
    described = policy.describe()
    sinks, topk = int(described.get("sinks") or 0), int(described.get("topk") or 0)
    if topk and layer_selection_of(policy, "decode", policy.slot_tokens(), None) is not None:
        topk = 0
    return sinks, topk


def kept_counts(policy: KVPolicy, prompts: Iterable[int], outputs: Iterable[int]) -> KeptCounts:
    """How many of a run's requests the policy cut: a prompt ``compressed`` when the cache
    after its prefill (``cache_after_prefill``) holds fewer tokens than the prompt
    (SnapStream's and SnapKV's selection, StreamingLLM's truncation); a slot ``wrapped``
    when what its prefill left plus what its decode wrote (``output - 1`` tokens, the last
    token's KV never written) outgrows the slot (``slot_tokens``), so a ring overwrote its
    oldest tokens, or, when the policy selects at decode over a full slot
    (``decode_evicts``), its eviction dropped what it scored lowest. The one rule for every
    policy, a plugin's too; the policy is asked once per distinct prompt (a million
    requests' counts in milliseconds)."""
    import numpy as np  # (the policies' own rules are per request, plain ints)

    prompt = np.fromiter(prompts, dtype=np.int64)
    output = np.fromiter(outputs, dtype=np.int64)
    if prompt.shape != output.shape:
        raise ValueError(f"{prompt.size} prompts against {output.size} outputs")
    distinct, each = np.unique(prompt, return_inverse=True)
    after = np.fromiter(
        (policy.cache_after_prefill(int(tokens)) for tokens in distinct),
        dtype=np.int64,
        count=len(distinct),
    )
    prefilled = after[each]
    written = np.maximum(output - 1, 0)
    compressed = int(np.count_nonzero(prefilled < prompt))
    slot = policy.slot_tokens()
    wrapped = int(np.count_nonzero(prefilled + written > slot))
    evicts = layer_selection_of(policy, "decode", slot, None) is not None
    return KeptCounts(policy.layout(), compressed, wrapped, evicts, _stays(policy))


def _stays(policy: KVPolicy) -> str:
    """What a full slot keeps beside its ring, in words (``wrap_keeps``; a plugin that
    states nothing, "")."""
    sinks, topk = wrap_keeps(policy)
    parts = [f"{sinks:,} sink{'s' * (sinks != 1)}"] if sinks else []
    if topk:
        parts.append(f"{topk:,} selected token{'s' * (topk != 1)}")
    return " and ".join(parts)
