"""The metrics of speculation in a run: accepted tokens per target step, the draft's share of
a round and of memory, what speculative prefill saved. ``summary.py`` adds them to the run's
summary (``speculation``, ``accepted_tokens_per_step``); docs/serving.md defines them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rdu_sim import human
from rdu_sim.compiler.placement import DRAFT_PREFIX
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.serving.acceptance import expected_tokens_per_round
from rdu_sim.serving.run import ServingRun
from rdu_sim.serving.speculative import PrefillSaving
from rdu_sim.serving.step_cache import PS_PER_S
from rdu_sim.sim_warnings import RduSimWarning

__all__ = [
    "DraftMemory",
    "SpeculationSummary",
    "SpeculativeDecoding",
    "draft_devices",
    "speculation_summary",
    "speculation_warnings",
]


@dataclass(frozen=True)
class DraftMemory:
    """The draft's bytes on one of the sockets it runs on."""

    weights_bytes: int
    kv_bytes: int


@dataclass(frozen=True)
class SpeculativeDecoding:
    """Rounds of speculative decoding: k, the acceptance the requests were given, what the
    acceptance arithmetic expects per round and what the run emitted per round."""

    draft_tokens: int
    acceptance_rate_mean: float
    expected_tokens_per_step: float
    accepted_tokens_per_step: float | None
    accepted_drafts_per_step: float | None
    per_request: Percentiles  # of each request's tokens per round
    rounds: int
    # each against the target's plain decode step at the rounds' buckets, weighted by the
    # rounds run at each (``_against_plain``); None before any round ran
    round_s: float | None = None  # a round's mean time: the draft's steps, link, verify
    plain_step_s: float | None = None  # the plain decode step's, at the same buckets
    speedup: float | None = None  # tokens per round x plain_step_s / round_s
    # the draft's steps' share of round_s (their mean time over the rounds', the same weights)
    draft_share_of_round: float | None = None


@dataclass(frozen=True)
class SpeculationSummary:
    """Speculation in a run (None in a run without it)."""

    draft: str
    placement: str
    draft_tp: int
    draft_memory: DraftMemory
    decoding: SpeculativeDecoding | None
    prefill: PrefillSaving | None
    # the draft's own step cache: shapes simulated and steps run (the run's step_cache is
    # the target's)
    draft_shapes: int = 0
    draft_steps: int = 0


def draft_devices(summary: SpeculationSummary | None) -> int:
    """Devices a separate draft runs on beside the target's replica; 0 when the draft shares
    the target's devices or the run has none."""
    return summary.draft_tp if summary is not None and summary.placement == "separate" else 0


def _draft_memory(run: ServingRun) -> DraftMemory:
    """A shared draft's tensors in the target's plan, or a separate draft's own plan."""
    if run.draft_placement is not None:
        hbm = run.draft_placement.tiers["hbm"]
        return DraftMemory(int(hbm.weights_bytes), int(hbm.kv_bytes))
    mine = [t for t in run.placement.tensors if t.name.startswith(DRAFT_PREFIX)]
    return DraftMemory(
        sum(t.bytes for t in mine if t.kind == "weights"),
        sum(t.bytes for t in mine if t.kind == "kv"),
    )


def _against_plain(run: ServingRun) -> tuple[float, float, float] | None:
    """(a round's mean time, the target's plain decode step's mean time, the draft's steps'
    mean time in a round), in seconds, over the rounds the run ran, each verify shape (its
    rows and bucket) weighted by its rounds: the times the serving level advanced by
    (``Speculation.round_ps``, of which ``Speculation.draft_ps`` the draft's), and the step
    it would have advanced by without the draft (``Speculation.plain_shape``: the same rows,
    the live sequences' of a paged stack, at the same bucket; simulated for the comparison,
    not counted among the run's steps). None before any round ran."""
    speculation, target = run.speculation, run.cache
    assert speculation is not None
    rounds = round_ps = plain_ps = draft_ps = 0
    for shape, count in target.steps.items():
        rows, bucket = shape.batch, shape.cache_len
        if shape.phase != "decode" or shape != speculation.round_shapes(rows, bucket)[0]:
            continue
        rounds += count
        round_ps += count * speculation.round_ps(target, rows, bucket)
        plain_ps += count * target.times.timed(speculation.plain_shape(rows, bucket)).step_ps
        draft_ps += count * speculation.draft_ps(rows, bucket)
    if not rounds:
        return None
    return round_ps / rounds / PS_PER_S, plain_ps / rounds / PS_PER_S, draft_ps / rounds / PS_PER_S


def _decoding(run: ServingRun) -> SpeculativeDecoding | None:
    """Tokens per round over the completed requests: emitted (the run's), accepted drafts
    plus one (uncapped), and what the acceptance arithmetic expects for the requests'
    rates, weighted as the run's mean is (each request by its expected rounds)."""
    speculation, records = run.speculation, run.records
    if speculation is None or speculation.config.decoding is None:
        return None
    assert speculation.rates is not None
    k = speculation.config.decoding.draft_tokens
    done = records.completed & (records.rounds > 0)
    rounds = records.rounds[done]
    emitted = records.output_tokens[done] - 1
    expected = np.array([expected_tokens_per_round(float(a), k) for a in speculation.rates])
    weights = (records.output_tokens - 1) / expected  # expected rounds of each request
    total = int(rounds.sum())
    tokens_per_round = float(emitted.sum() / total) if total else None
    times = _against_plain(run)
    round_s, plain_s, draft_s = times if times is not None else (None, None, None)

    return SpeculativeDecoding(
        draft_tokens=k,
        acceptance_rate_mean=float(np.mean(speculation.rates)) if len(records) else 0.0,
        expected_tokens_per_step=float((records.output_tokens - 1).sum() / weights.sum())
        if weights.sum() > 0
        else float(expected_tokens_per_round(float(np.mean(speculation.rates)), k)),
        accepted_tokens_per_step=tokens_per_round,
        accepted_drafts_per_step=(
            float(records.accepted_drafts[done].sum() / total) if total else None
        ),
        per_request=Percentiles.of(emitted / np.maximum(rounds, 1)),
        rounds=records.decode_steps,
        round_s=round_s,
        plain_step_s=plain_s,
        speedup=tokens_per_round * plain_s / round_s
        if tokens_per_round is not None and plain_s is not None and round_s is not None
        else None,
        draft_share_of_round=draft_s / round_s if draft_s is not None and round_s else None,
    )


class SlowSpeculationWarning(RduSimWarning):
    """Speculative decoding made decoding slower than the plain step would have
    (:func:`speculation_warnings` says by how much and why)."""


def speculation_warnings(summary: SpeculationSummary | None) -> list[str]:
    """A sentence when speculative decoding made decoding slower than the plain step would
    have (speedup below 1); none otherwise."""
    decoding = summary.decoding if summary is not None else None
    if decoding is None or decoding.speedup is None or not decoding.speedup < 1:
        return []
    assert summary is not None and decoding.round_s is not None
    assert decoding.plain_step_s is not None and decoding.accepted_tokens_per_step is not None
    assert decoding.draft_share_of_round is not None
    return [
        f"speculation makes decoding slower: a round ({human.duration(decoding.round_s)}, the "
        f"draft's steps and the verify step) emits {decoding.accepted_tokens_per_step:.3g} "
        f"tokens a slot where the plain decode step ({human.duration(decoding.plain_step_s)}) "
        f"emits 1, {human.ratio(decoding.speedup)} the plain rate; the draft's steps "
        f"({summary.draft}) take {human.percent(decoding.draft_share_of_round)} of a round"
    ]


def speculation_summary(run: ServingRun) -> SpeculationSummary | None:
    """The speculation section of a run's summary (None without speculation)."""
    speculation, draft = run.speculation, run.scenario.draft
    if speculation is None or draft is None:
        return None
    return SpeculationSummary(
        draft=draft.model.name,
        placement=speculation.config.placement,
        draft_tp=draft.tp,
        draft_memory=_draft_memory(run),
        decoding=_decoding(run),
        prefill=run.prefill_saving,
        draft_shapes=len(speculation.draft_cache.shapes),
        draft_steps=speculation.draft_cache.hits + speculation.draft_cache.misses,
    )
