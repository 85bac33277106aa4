"""The metrics of speculation in a run: accepted tokens per target step, the draft's share of
the time and memory, what speculative prefill saved. ``summary.py`` adds them to the run's
summary (``speculation``, ``accepted_tokens_per_step``); docs/serving.md defines them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rdu_sim.compiler.placement import DRAFT_PREFIX
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.serving.acceptance import expected_tokens_per_round
from rdu_sim.serving.run import ServingRun
from rdu_sim.serving.speculative import PrefillSaving
from rdu_sim.serving.step_cache import StepCache

__all__ = [
    "DraftMemory",
    "SpeculationSummary",
    "SpeculativeDecoding",
    "draft_devices",
    "speculation_summary",
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


@dataclass(frozen=True)
class SpeculationSummary:
    """Speculation in a run (None in a run without it)."""

    draft: str
    placement: str
    draft_tp: int
    draft_memory: DraftMemory
    draft_time_share: float
    decoding: SpeculativeDecoding | None
    prefill: PrefillSaving | None


def draft_devices(summary: SpeculationSummary | None) -> int:
    """Devices a separate draft runs on beside the target's replica; 0 when the draft shares
    the target's devices or the run has none."""
    return summary.draft_tp if summary is not None and summary.placement == "separate" else 0


def busy_seconds(cache: StepCache) -> float:
    """Time of every step the cache counted."""
    return float(sum(count * cache.step_s(shape) for shape, count in cache.steps.items()))


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

    return SpeculativeDecoding(
        draft_tokens=k,
        acceptance_rate_mean=float(np.mean(speculation.rates)) if len(records) else 0.0,
        expected_tokens_per_step=float((records.output_tokens - 1).sum() / weights.sum())
        if weights.sum() > 0
        else float(expected_tokens_per_round(float(np.mean(speculation.rates)), k)),
        accepted_tokens_per_step=float(emitted.sum() / total) if total else None,
        accepted_drafts_per_step=(
            float(records.accepted_drafts[done].sum() / total) if total else None
        ),
        per_request=Percentiles.of(emitted / np.maximum(rounds, 1)),
        rounds=records.decode_steps,
    )


def speculation_summary(run: ServingRun) -> SpeculationSummary | None:
    """The speculation section of a run's summary (None without speculation)."""
    speculation, draft = run.speculation, run.scenario.draft
    if speculation is None or draft is None:
        return None
    draft_busy = busy_seconds(speculation.draft_cache)
    target_busy = busy_seconds(run.cache)
    return SpeculationSummary(
        draft=draft.model.name,
        placement=speculation.config.placement,
        draft_tp=draft.tp,
        draft_memory=_draft_memory(run),
        draft_time_share=draft_busy / (draft_busy + target_busy) if draft_busy else 0.0,
        decoding=_decoding(run),
        prefill=run.prefill_saving,
    )
