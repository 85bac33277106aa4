"""Quality proxy for KV-cache compression: SnapStream vs StreamingLLM vs full attention.

The simulator models the *cost* of SnapStream; this module gives a cheap, deterministic
argument about its *quality*, using the NumPy reference in :mod:`rdu_sim.kv.reference`.  No
model weights are involved: attention is synthetic, built so that a few "needle" tokens matter.

Synthetic attention (one layer, per KV head ``g``):

* a random unit "topic" direction ``u_g`` and a "sink" direction ``s_g`` (orthogonal to it);
* background keys, values and query noise are i.i.d. standard normal;
* every query (the prompt's observation window and the decode queries alike) is
  ``gamma * u_g + delta * s_g + noise``; ``gamma`` and ``delta`` are set so that a needle's
  logit is about ``needle_logit`` above the background and a sink's about ``sink_logit``;
* ``n_needles`` needle tokens, at random positions in the prompt (after the sinks and before
  the observation window), have keys ``background + gamma * u_g``; the first ``sinks`` tokens
  have keys ``background + delta * s_g`` (StreamingLLM's attention sinks).

Because the observation-window queries attend the needles the way the decode queries do (the
premise of SnapKV), SnapKV finds them and SnapStream keeps them, whereas StreamingLLM keeps
them only if they happen to be recent.  The metric is the relative error of the attention
output over a few decode steps against full attention, plus the fraction of needles kept.

``budget`` is the static cache capacity in tokens for both compressed policies (the same
memory): SnapStream uses ``sinks + topk + ring`` with ``ring = window`` by default and
``topk = budget - sinks - ring``; StreamingLLM uses ``sinks + (budget - sinks)`` ring slots.
Nothing is ever evicted once ``budget >= prompt_len + decode_steps``, so the error is 0 up to
round-off (~1e-16: a static cache sums its slots in another order than the growing reference);
at ``budget == prompt_len`` the decode steps already evict a few recent tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.workload import KVConfig
from rdu_sim.kv.policies import check_window_in_ring
from rdu_sim.kv.reference import FullCache, KVCache, SnapStreamCache, StreamingLLMCache
from rdu_sim.sim_warnings import RduSimWarning, warn

__all__ = [
    "POLICIES",
    "DemoCompressionWarning",
    "DemoInputError",
    "QualityRow",
    "demo_budgets",
    "demo_prompt",
    "demo_ring",
    "format_table",
    "quality_curve",
    "settings_lines",
    "smallest_budget",
]

POLICIES = ("snapstream", "streamingllm", "full")
"""Policy names in the rows, in table order (``full`` ignores the budget: it is the baseline,
reported at every budget as a sanity check that its error is 0)."""

DEMO_KV = KVConfig(observation_window=16)
"""The demo's SnapStream settings: the workload defaults (sinks, pooling and its kernel),
with a 16-query observation window, sized for its 1,024-token prompts (SnapKV's 32 is sized
for LongBench's thousands of tokens)."""

LEFT_OUT = (
    "snapkv is left out: its budget bounds only the prefill selection (SnapStream's with no "
    "sinks and no ring), after which its cache grows with every token like full "
    "attention's, so at a budget it does not hold the fixed memory the other two compare at"
)
"""Why the demo has no SnapKV rows (printed with its settings)."""

QualityRow = dict[str, Any]
"""One result row: ``policy`` (str), ``budget`` (int), ``relative_error`` and
``needle_recall`` (float)."""


def _orthonormal_pair(rng: np.random.Generator, d: int) -> tuple[NDArray[np.float64], ...]:
    """Two random orthonormal directions of R^d (Gram-Schmidt on Gaussian vectors)."""
    a = rng.standard_normal(d)
    a /= np.linalg.norm(a)
    b = rng.standard_normal(d)
    b -= (b @ a) * a
    b /= np.linalg.norm(b)
    return a, b


class DemoInputError(ValueError):
    """An argument of :func:`quality_curve` that cannot work; ``parameter`` names it
    (``budgets``, ``n_needles``, ``decode_steps``, ``prompt_len``), so a caller blames its
    own option."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class DemoCompressionWarning(RduSimWarning):
    """The demo runs another compression than the one its settings suggest: a budget whose
    top-K is 0 (SnapStream then keeps what StreamingLLM keeps: their rows are equal), or a
    prompt capped below four times the budget (a lower ratio than the demo aims at)."""


def smallest_budget(kv: KVConfig = DEMO_KV, ring: int | None = None) -> int:
    """The smallest budget SnapStream has a layout for: ``sinks + ring`` (no top-K left)."""
    return kv.sinks + (kv.observation_window if ring is None else ring)


def demo_ring(kv: KVConfig) -> int | None:
    """SnapStream's ring in the demo: ``kv.recent`` when a workload or ``--set`` gave it,
    else None (the observation window: the workload default of 2,048 would leave a
    1,024-token prompt nothing to compress)."""
    return kv.recent if "recent" in kv.model_fields_set else None


def demo_budgets(kv: KVConfig, prompt_len: int) -> list[int] | None:
    """The budget a workload's ``kv`` gives the demo: ``kv.budget``, or the prompt over
    ``kv.compression_ratio`` (the demo's sequence stands for the context); None when it
    gives neither (the demo's range of budgets)."""
    if kv.budget is not None:
        return [kv.budget]
    if kv.compression_ratio is not None:
        return [max(1, math.floor(prompt_len / kv.compression_ratio))]
    return None


def demo_prompt(kv: KVConfig, most: int) -> int:
    """The demo's prompt when none is asked for: 1,024 tokens, or four times the smallest
    layout or the budget ``kv`` gives when larger (so the budget compresses), at most
    ``most``. With ``kv.compression_ratio`` the budget is the prompt over the ratio, so the
    prompt is long enough for that budget to be twice the smallest layout (top-K gets half
    of it: at four times the smallest layout and a ratio of 4 it would get none).

    Warns (:class:`DemoCompressionWarning`) when ``most`` cuts a prompt of four times
    ``kv.budget``: the budget then compresses it by less than 4x."""
    smallest = smallest_budget(kv, demo_ring(kv))
    wanted = max(1024, 4 * smallest, 4 * (kv.budget or 0))
    if kv.compression_ratio is not None:
        wanted = max(wanted, math.ceil(2 * smallest * kv.compression_ratio))
    if kv.budget is not None and most < 4 * kv.budget:
        warn(
            DemoCompressionWarning(
                f"kv-demo: the prompt is capped at {most:,} tokens, so kv.budget "
                f"{kv.budget:,} compresses it {most / kv.budget:.3g}x, not the 4x the demo "
                "runs a budget at (a smaller kv.budget runs 4x)"
            )
        )
    return min(most, wanted)


def _default_budgets(prompt_len: int, decode_steps: int, smallest: int) -> list[int]:
    """Budgets from 1/16 of the prompt to a size that holds everything (error 0 up to
    round-off), none below ``smallest`` (:func:`smallest_budget`: a short prompt's fractions
    are raised to it, and the duplicates that makes dropped)."""
    fractions = [prompt_len // 16, prompt_len // 8, prompt_len // 4, prompt_len // 2]
    budgets = [max(smallest, b) for b in [*fractions, prompt_len + decode_steps]]
    return list(dict.fromkeys(budgets))


def settings_lines(
    prompt_len: int,
    n_needles: int,
    decode_steps: int,
    seed: int,
    *,
    kv: KVConfig = DEMO_KV,
    ring: int | None = None,
) -> list[str]:
    """What a :func:`quality_curve` run compares, in words: its input, each policy's layout
    at a budget (SnapStream's ring is the demo's, not a workload's ``kv.recent``), why SnapKV
    is not among them, and that full attention is the reference."""
    ring_size = kv.observation_window if ring is None else ring
    where = (
        f"the {kv.observation_window}-token observation window, not a workload's kv.recent "
        f"of {KVConfig().recent:,}"
        if ring is None
        else "kv.recent"
    )
    return [
        f"prompt {prompt_len:,} tokens with {n_needles} needles, {decode_steps} decode steps, "
        f"seed {seed}",
        f"snapstream: {kv.sinks} sinks + top-K + a {ring_size}-token ring ({where}); "
        f"{kv.observation_window}-query observation window, {kv.pooling} pooling, kernel "
        f"{kv.kernel_size}; top-K = budget - {kv.sinks + ring_size}",
        f"streamingllm: {kv.sinks} sinks + a ring of budget - {kv.sinks}",
        "full: the reference (keeps every token whatever the budget; its rows check that its "
        "error is 0)",
        LEFT_OUT,
    ]


def quality_curve(
    prompt_len: int = 1024,
    budgets: Sequence[int] | None = None,
    seed: int = 0,
    *,
    n_kv_heads: int = 2,
    gqa_group: int = 2,
    head_dim: int = 32,
    n_needles: int = 8,
    decode_steps: int = 8,
    kv: KVConfig = DEMO_KV,
    ring: int | None = None,
    needle_logit: float = 6.0,
    sink_logit: float = 4.0,
) -> list[QualityRow]:
    """Relative attention-output error and needle recall of each policy at each budget.

    Args:
        prompt_len: prompt length in tokens.
        budgets: cache capacities to evaluate (tokens per KV head); default: 1/16, 1/8, 1/4
            and 1/2 of the prompt and ``prompt_len + decode_steps`` (nothing evicted), each
            at least :func:`smallest_budget`.  Each must be at least ``sinks + ring`` so
            SnapStream has a valid layout.
        seed: seed of the ``numpy.random.default_rng`` that draws everything.
        n_kv_heads, gqa_group, head_dim: attention shape (``n_q_heads = n_kv_heads *
            gqa_group``).
        n_needles: number of planted needle tokens (same positions for every KV head).
        decode_steps: decode steps measured; each appends a fresh background token.
        kv: SnapStream's parameters (``sinks``, ``observation_window``, ``kernel_size``,
            ``pooling``: a workload's ``kv``); StreamingLLM uses the same ``sinks``.
        ring: SnapStream's ring (default: the observation window).
        needle_logit, sink_logit: how far above the background a needle's / sink's attention
            logit sits (about ``e**needle_logit`` times a background token's weight).

    Raises:
        DemoInputError: an argument that cannot work, named by its ``parameter``.
        PolicyError: the observation window is longer than the ring (SnapStream's rule,
            ``kv.policies.check_window_in_ring``).

    Warns:
        DemoCompressionWarning: a budget that compresses the prompt leaves top-K no slot.

    Returns:
        For each budget, one row per policy in :data:`POLICIES` order: ``policy``, ``budget``,
        ``relative_error`` (``sqrt(sum ||o - o_full||^2 / sum ||o_full||^2)`` over all decode
        steps and query heads) and ``needle_recall`` (fraction of (KV head, needle) pairs held
        in the cache after the last decode step).
    """
    sinks, window = kv.sinks, kv.observation_window
    ring_size = window if ring is None else ring
    smallest = smallest_budget(kv, ring)
    budget_list = (
        list(budgets)
        if budgets is not None
        else _default_budgets(prompt_len, decode_steps, smallest)
    )
    if decode_steps < 1:
        raise DemoInputError("decode_steps", f"decode_steps must be >= 1, got {decode_steps}")
    check_window_in_ring(window, ring_size)  # SnapStreamCache's rule, said as the policy says it
    for b in budget_list:
        if b < smallest:
            raise DemoInputError(
                "budgets",
                f"budget {b} is below sinks + ring = {sinks} + {ring_size} = {smallest} "
                "(SnapStream's smallest layout)",
            )
    lo, hi = sinks, prompt_len - window  # needle range: after the sinks, before the window
    if hi - lo < 1:  # no room for any needle: the prompt, not their number, is too short
        raise DemoInputError(
            "prompt_len",
            f"a {prompt_len}-token prompt leaves no token for a needle between its {sinks} "
            f"sinks and its {window}-token observation window: it must be longer than "
            f"{sinks + window} (or lower kv.sinks or kv.observation_window)",
        )
    if hi - lo < n_needles:
        raise DemoInputError(
            "n_needles",
            f"{n_needles} needles do not fit in a {prompt_len}-token prompt: at most "
            f"{max(0, hi - lo)} (the tokens between the {sinks} sinks and the "
            f"{window}-token observation window)",
        )

    rng = np.random.default_rng(seed)
    n_q_heads = n_kv_heads * gqa_group
    d = head_dim
    scale = math.sqrt(d)
    gamma = math.sqrt(needle_logit * scale)  # q.k / sqrt(d) ~ gamma^2 / sqrt(d) = needle_logit
    delta = math.sqrt(sink_logit * scale)
    dirs = [_orthonormal_pair(rng, d) for _ in range(n_kv_heads)]
    topic = np.stack([u for u, _ in dirs])  # (n_kv, d)
    sink_dir = np.stack([s for _, s in dirs])  # (n_kv, d)
    needles = np.sort(rng.choice(np.arange(lo, hi), size=n_needles, replace=False))

    def queries(n: int) -> NDArray[np.float64]:
        """``n`` queries per query head, ``(n_q_heads, n, d)``, aimed at needles and sinks."""
        base = gamma * topic + delta * sink_dir  # (n_kv, d)
        base_q = np.repeat(base, gqa_group, axis=0)[:, None, :]
        return base_q + rng.standard_normal((n_q_heads, n, d))

    k = rng.standard_normal((n_kv_heads, prompt_len, d))
    v = rng.standard_normal((n_kv_heads, prompt_len, d))
    k[:, :sinks] += delta * sink_dir[:, None, :]
    k[:, needles] += gamma * topic[:, None, :]
    q = queries(prompt_len)
    dec_k = rng.standard_normal((decode_steps, n_kv_heads, d))
    dec_v = rng.standard_normal((decode_steps, n_kv_heads, d))
    dec_q = queries(decode_steps)  # (n_q, steps, d)

    empty = [b for b in budget_list if b == smallest and b < prompt_len]
    if empty:
        warn(
            DemoCompressionWarning(
                f"kv-demo: at budget {empty[0]:,} SnapStream's top-K is 0 (budget = sinks + "
                f"ring = {sinks} + {ring_size}): it keeps what StreamingLLM keeps, so their "
                "rows are equal (a larger budget or a smaller kv.recent leaves top-K room)"
            )
        )
    rows: list[QualityRow] = []
    for budget in budget_list:
        caches: dict[str, KVCache] = {
            "snapstream": SnapStreamCache(
                n_kv_heads,
                d,
                sinks=sinks,
                topk=budget - sinks - ring_size,
                ring=ring_size,
                kv=kv,
            ),
            "streamingllm": StreamingLLMCache(n_kv_heads, d, sinks=sinks, ring=budget - sinks),
            "full": FullCache(n_kv_heads, d),
        }
        reference = FullCache(n_kv_heads, d)
        reference.prefill(k, v)
        for cache in caches.values():
            cache.prefill(k, v, q=q)
        err2 = dict.fromkeys(caches, 0.0)
        ref2 = 0.0
        for step in range(decode_steps):
            reference.append(dec_k[step], dec_v[step])
            truth = reference.attend(dec_q[:, step])
            ref2 += float(np.sum(truth**2))
            for name, cache in caches.items():
                cache.append(dec_k[step], dec_v[step])
                err2[name] += float(np.sum((cache.attend(dec_q[:, step]) - truth) ** 2))
        for name in POLICIES:
            held = caches[name].positions  # (n_kv, slots)
            recall = float(np.mean([np.isin(needles, held[h]).mean() for h in range(n_kv_heads)]))
            rows.append(
                {
                    "policy": name,
                    "budget": int(budget),
                    "relative_error": math.sqrt(err2[name] / ref2),
                    "needle_recall": recall,
                }
            )
    return rows


SYNTHETIC = (
    "The attention is synthetic (random keys and values; no model's weights): the decode "
    "queries attend the planted needles the way the observation window's queries do, the "
    "premise of SnapKV, so SnapStream's needle recall is good by construction. It shows how "
    "the policies' choices (budget, sinks, ring, window, pooling) move the error of one "
    "such layer, not a model's accuracy."
)
"""What the demo's numbers are and are not, printed under its table."""


def format_table(rows: Sequence[QualityRow]) -> str:
    """Render rows of :func:`quality_curve` as a fixed-width text table, one line per row."""
    header = f"{'policy':<14}{'budget':>8}{'rel. error':>12}{'needle recall':>15}"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['policy']:<14}{row['budget']:>8d}"
            f"{row['relative_error']:>12.4f}{row['needle_recall']:>15.2f}"
        )
    return "\n".join(lines)
