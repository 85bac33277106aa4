"""Batch-1 decode steps of Llama 3.1 for the Kernel Looping figures: how much looping speeds
decode up, how decode scales from 8 to 16 sockets, and what share of peak it reaches.

[KL] (Koeplinger et al., "Kernel Looping", arXiv 2410.23668, abstract): kernel looping "speeds
up the decode phase of a wide array of powerful open-source models by up to 2.2x on SN40L",
"allows scaling of decode performance over multiple SN40L sockets, achieving speedups of up to
2.5x", and lets SN40L "achieve over 90% of peak performance on 8 and 16 sockets". The paper's
own model set and settings are not in the abstract; we read them as (docs/calibration.md):

* models: Llama 3.1 8B and 70B on 8 and 16 sockets, 405B on 16 (BF16 does not fit 8 sockets'
  HBM); BF16 weights and KV; batch 1; a 4,096-token context (the paper's Table 1, first row);
  tensor parallel over all sockets of one node (the shipped hardware's wiring);
* the device's steps, with no serving stack (``stack=none``): the paper times the decode
  kernels on the hardware, not a served endpoint's requests;
* looping speedup: decode step time without kernel looping over with it, the largest over
  those (model, sockets) pairs ("up to");
* multi-socket scaling: decode tokens/s on 16 sockets with looping over 8 sockets without it,
  the largest over the models that fit both ("up to"); looping is what lets 16 sockets pay
  off, so the baseline is the 8-socket system before it. The other reading, 16 over 8 sockets
  both looped, is reported beside it (``scaling_both_looped``): a memory-bound step whose
  weights fit 8 sockets cannot gain more than 2x from twice the sockets;
* share of peak: HBM bytes per second over the HBM peak (1.8 TB/s), the memory roofline of the
  step's own bytes, for the largest Llama 3.1 each system holds in BF16 (70B on 8 sockets,
  405B on 16) with looping.

Every step runs through ``rdu_sim.api.step`` on ``workloads/llama3.1-8b-8socket.yaml`` with
overrides (``decode_overrides``): the code path of ``rdu-sim step``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rdu_sim import api

LLAMA_WORKLOAD = "llama3.1-8b-8socket"
"""The Kernel Looping steps' workload, by shipped name (``rdu_sim.config.shipped``)."""
CONTEXT = 4096
"""Cached tokens of the batch-1 decode step ([KL] Table 1's first row)."""
SYSTEMS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (8, ("llama-3.1-8b", "llama-3.1-70b")),
    (16, ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")),
)
"""(sockets, the Llama 3.1 models that fit them in BF16)."""
PEAK_MODELS = {8: "llama-3.1-70b", 16: "llama-3.1-405b"}
"""The largest Llama 3.1 each system holds in BF16: the share-of-peak steps."""


@dataclass(frozen=True)
class DecodePoint:
    """One batch-1 decode step: which model on how many sockets, looped or not, and its time."""

    model: str
    sockets: int
    looped: bool
    step_s: float
    hbm_fraction: float  # HBM bytes per second over the HBM peak


@dataclass(frozen=True)
class DecodeScaling:
    """The Kernel Looping figures as measured (see the module docstring)."""

    points: tuple[DecodePoint, ...]
    looping_speedup: float
    multi_socket_scaling: float
    scaling_both_looped: float
    peak_share: dict[int, float]  # sockets -> share of peak of PEAK_MODELS[sockets]


def decode_overrides(model: str, sockets: int, looped: bool) -> list[str]:
    """The overrides of ``LLAMA_WORKLOAD`` for one point: the model in BF16 over ``sockets``
    sockets of one node, one slot of ``CONTEXT`` tokens (the suite's own: ``SUITE``)."""
    from rdu_sim.config.overrides import SUITE, given

    texts = [
        f"model={model}",
        f"hw.system.sockets={sockets}",
        f"hw.system.sockets_per_node={sockets}",
        f"parallelism.tp={sockets}",
        f"kernel_looping={'true' if looped else 'false'}",
        "dtypes.weights=bf16",
        "dtypes.kv=bf16",
        "serving.batch_slots=1",
        f"serving.max_context={CONTEXT}",
        "stack=none",
    ]
    return given(texts, SUITE)


def measure_decode_scaling(overrides: Sequence[str] = ()) -> DecodeScaling:
    """Every point of ``SYSTEMS``, looped and not (``overrides`` first: ``hw.`` ones edit the
    hardware file), and the figures read from them."""
    points: list[DecodePoint] = []
    for sockets, models in SYSTEMS:
        for model in models:
            for looped in (True, False):
                ovr = [*overrides, *decode_overrides(model, sockets, looped)]
                cost = api.step(LLAMA_WORKLOAD, ovr, batch=1, context=CONTEXT)
                points.append(DecodePoint(model, sockets, looped, cost.step_s, cost.hbm_util))
    return summarize(points)


def summarize(points: Sequence[DecodePoint]) -> DecodeScaling:
    """The figures read from ``points`` (module docstring)."""
    step = {(p.model, p.sockets, p.looped): p for p in points}
    speedups = [
        step[m, s, False].step_s / step[m, s, True].step_s
        for m, s, looped in step
        if looped and (m, s, False) in step
    ]
    both = [m for m, s, looped in step if s == 16 and looped and (m, 8, False) in step]
    return DecodeScaling(
        points=tuple(points),
        looping_speedup=max(speedups),
        multi_socket_scaling=max(step[m, 8, False].step_s / step[m, 16, True].step_s for m in both),
        scaling_both_looped=max(step[m, 8, True].step_s / step[m, 16, True].step_s for m in both),
        peak_share={s: step[m, s, True].hbm_fraction for s, m in PEAK_MODELS.items()},
    )
