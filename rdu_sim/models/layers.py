"""The per-layer view of an architecture: what each decoder layer is, and how they repeat.

A layer's kind is its attention (MLA or GQA, full or with a sliding window) and its FFN
(dense or MoE). Models differ per layer: DeepSeek-V3's first 3 layers are dense, gpt-oss
alternates sliding-window and full attention. `layer_segments` cuts the stack into runs of
a repeating body (one layer, or a short pattern such as gpt-oss's [sliding, full]), which
is what the compiler turns into one looped kernel each.

The sliding-window rule lives here, once: a layer with window W attends to at most W
tokens, itself included, so it keeps the W - 1 most recent tokens in a ring
(`window_tokens`), as Hugging Face's sliding-window cache does. The KV policies, the graph
builders and the memory plan all take it from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rdu_sim.config.architecture import (
    DeepSeekArchitecture,
    GqaMoeArchitecture,
    LlamaArchitecture,
)

Architecture = LlamaArchitecture | GqaMoeArchitecture | DeepSeekArchitecture
GqaArchitecture = LlamaArchitecture | GqaMoeArchitecture
MoeArchitecture = GqaMoeArchitecture | DeepSeekArchitecture
FfnKind = Literal["dense", "moe"]

MAX_BODY = 4
"""Longest repeating body `layer_segments` looks for (gpt-oss needs 2)."""


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is: its FFN and its attention window (None: full)."""

    ffn: FfnKind
    window: int | None = None

    @property
    def attention(self) -> str:
        """ "sliding" or "full"."""
        return "full" if self.window is None else "sliding"


@dataclass(frozen=True)
class Segment:
    """`repeats` consecutive copies of `body`, a run of layers."""

    body: tuple[LayerKind, ...]
    repeats: int

    @property
    def layers(self) -> int:
        return len(self.body) * self.repeats


def window_tokens(tokens: int, window: int | None) -> int:
    """Cached tokens a layer keeps when `tokens` have gone by: all under full attention, the
    ring of the last window - 1 under a sliding window (the new token makes W)."""
    return tokens if window is None else min(tokens, window - 1)


def layer_kinds(arch: Architecture) -> tuple[LayerKind, ...]:
    """The kind of every layer, in order."""
    if isinstance(arch, DeepSeekArchitecture):
        return tuple(LayerKind("moe" if m else "dense") for m in arch.moe_layer_flags())
    windows = arch.attention_windows()
    if isinstance(arch, LlamaArchitecture):
        return tuple(LayerKind("dense", w) for w in windows)
    return tuple(
        LayerKind("moe" if m else "dense", w)
        for m, w in zip(arch.moe_layer_flags(), windows, strict=True)
    )


def layer_segments(kinds: tuple[LayerKind, ...]) -> tuple[Segment, ...]:
    """The stack as runs of a repeating body, greedily: at each point the body (of at most
    MAX_BODY layers; a longer body must repeat) whose repeats cover the most layers, the
    shortest on a tie."""
    segments: list[Segment] = []
    start = 0
    while start < len(kinds):
        best = Segment((kinds[start],), 1)
        for size in range(1, MAX_BODY + 1):
            body = kinds[start : start + size]
            if len(body) < size:
                break
            repeats = 1
            while kinds[start + repeats * size : start + (repeats + 1) * size] == body:
                repeats += 1
            if (size == 1 or repeats > 1) and repeats * size > best.layers:
                best = Segment(body, repeats)
        segments.append(best)
        start += best.layers
    return tuple(segments)


def body_starts(arch: Architecture) -> tuple[int, ...]:
    """The first layer of every body of `layer_segments`, in order: the whole units a
    pipeline cuts the stack between (a body's layers loop as one kernel, so it stays on one
    stage). As many as the layers unless a body holds several (gpt-oss's pairs: half)."""
    starts = []
    layer = 0
    for segment in layer_segments(layer_kinds(arch)):
        for _ in range(segment.repeats):
            starts.append(layer)
            layer += len(segment.body)
    return tuple(starts)


def stage_layers_problem(arch: Architecture, stage_layers: Sequence[int]) -> str | None:
    """What is wrong with a pipeline's layer split ``stage_layers`` (each stage's layers, in
    order) for ``arch``, or None: the counts must add up to its layers, and every cut fall
    at a body's start (``body_starts``: a body's layers loop as one kernel, on one stage)."""
    total = len(layer_kinds(arch))
    if sum(stage_layers) != total:
        return (
            f"{list(stage_layers)} add up to {sum(stage_layers)} layers; the {arch.name} "
            f"model has {total}"
        )
    starts, cut = set(body_starts(arch)), 0
    for count in stage_layers[:-1]:
        cut += count
        if cut not in starts:
            return (
                f"{list(stage_layers)} cuts the {arch.name} model at layer {cut}, inside a "
                "body of layers kept whole on one stage (they loop as one kernel)"
            )
    return None


def segment_name(segment: Segment, kinds: tuple[LayerKind, ...]) -> str:
    """The kernel name of a segment: "decoder", plus what tells its layers apart from the
    model's others ("decoder_dense", "decoder_moe", "decoder_sliding+full")."""
    vary_ffn = len({k.ffn for k in kinds}) > 1
    vary_attention = len({k.attention for k in kinds}) > 1
    labels = []
    for kind in segment.body:
        parts = ([kind.attention] if vary_attention else []) + ([kind.ffn] if vary_ffn else [])
        labels.append("_".join(parts))
    label = "+".join(labels)
    return f"decoder_{label}" if label.strip("+") else "decoder"


def window_layer_counts(arch: Architecture) -> dict[int | None, int]:
    """Layers per attention window (None: full attention), in first-seen order."""
    counts: dict[int | None, int] = {}
    for kind in layer_kinds(arch):
        counts[kind.window] = counts.get(kind.window, 0) + 1
    return counts
