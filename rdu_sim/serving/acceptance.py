"""Acceptance in speculative decoding: the arithmetic (a NumPy reference) and the draws.

A round drafts k tokens; the target accepts them in order, each with the request's
per-token acceptance rate ``a``, until the first rejection, then adds one token of its own
(the correction of the rejected one, or a bonus token when all k were accepted). So a
round's accepted drafts ``A`` take the values 0..k with

    P(A = j) = a^j (1 - a)   for j < k,        P(A = k) = a^k,

and it emits ``A + 1`` tokens, on average ``sum_{j=0..k} a^j = (1 - a^(k+1)) / (1 - a)``
(k + 1 at a = 1): :func:`expected_tokens_per_round`. This is the standard model of
Leviathan et al. (2023) with an i.i.d. per-token acceptance rate.

Draws are seeded and independent of the order a scheduler reaches requests in: a request's
acceptance rate comes from one generator of the workload's seed (:func:`request_rates`),
the accepted counts of its rounds from a generator of its own, keyed by the seed and its
id (:func:`request_rounds`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.speculation import (
    AcceptanceDistribution,
    BetaAcceptance,
    FixedAcceptance,
    UniformAcceptance,
)

RATE_STREAM = 0x5EC0
"""Spawn key of the generator drawing each request's acceptance rate from serving.seed."""
ROUND_STREAM = 0x5EC1
"""Spawn key (with the request id) of each request's generator of accepted counts."""


def expected_tokens_per_round(rate: float, draft_tokens: int) -> float:
    """Mean tokens a round emits: (1 - a^(k+1)) / (1 - a), or k + 1 at a = 1."""
    if rate >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - rate ** (draft_tokens + 1)) / (1.0 - rate)


def accepted_pmf(rate: float, draft_tokens: int) -> NDArray[np.float64]:
    """P(A = j) for j = 0..k: the accepted drafts of one round (sums to 1)."""
    j = np.arange(draft_tokens + 1, dtype=np.float64)
    pmf = rate**j * (1.0 - rate)
    pmf[-1] = rate**draft_tokens
    return pmf


def tokens_variance(rate: float, draft_tokens: int) -> float:
    """Variance of the tokens one round emits (A + 1, the same as A's)."""
    pmf = accepted_pmf(rate, draft_tokens)
    j = np.arange(draft_tokens + 1, dtype=np.float64)
    mean = float((pmf * j).sum())
    return float((pmf * (j - mean) ** 2).sum())


def draw_accepted(
    rng: np.random.Generator, rate: float, draft_tokens: int, rounds: int
) -> NDArray[np.int64]:
    """Accepted drafts of ``rounds`` rounds: acceptances before the first rejection
    (geometric), at most k."""
    if rate >= 1.0:
        return np.full(rounds, draft_tokens, dtype=np.int64)
    before_rejection = rng.geometric(1.0 - rate, size=rounds) - 1
    return np.minimum(before_rejection, draft_tokens).astype(np.int64)


def request_rounds(
    seed: int, request: int, rate: float, draft_tokens: int, tokens: int
) -> tuple[NDArray[np.int64], int]:
    """The rounds one request needs to emit ``tokens`` decode tokens: (the tokens emitted
    after each round, cumulative and capped at ``tokens``; the drafts accepted in them,
    uncapped). The last round may accept more than the request still needs: those tokens
    are never emitted (the request ends), but they were accepted, which is what the
    acceptance arithmetic counts."""
    if tokens < 1:
        return np.zeros(0, dtype=np.int64), 0
    sequence = np.random.SeedSequence(seed, spawn_key=(ROUND_STREAM, request))
    rng = np.random.default_rng(sequence)
    mean = expected_tokens_per_round(rate, draft_tokens)
    spread = math.sqrt(tokens_variance(rate, draft_tokens) * tokens / mean)
    blocks: list[NDArray[np.int64]] = []
    emitted = 0
    while emitted < tokens:  # usually one block: the expected rounds plus 4 sigma
        size = math.ceil((tokens - emitted) / mean + 4 * spread) + 4
        block = draw_accepted(rng, rate, draft_tokens, size)
        blocks.append(block)
        emitted += int(block.sum()) + size
    accepted = np.concatenate(blocks)
    cumulative = np.cumsum(accepted + 1)
    rounds = int(np.searchsorted(cumulative, tokens, side="left")) + 1
    return np.minimum(cumulative[:rounds], tokens), int(accepted[:rounds].sum())


def request_rates(
    acceptance: AcceptanceDistribution,
    requests: int,
    seed: int,
    column: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Each request's per-token acceptance rate: fixed, drawn (uniform, beta) from the
    workload's seed, or ``column`` (a trace's, already checked to lie in [0, 1])."""
    if isinstance(acceptance, FixedAcceptance):
        return np.full(requests, acceptance.rate, dtype=np.float64)
    if column is not None:
        return np.asarray(column[:requests], dtype=np.float64)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RATE_STREAM,)))
    if isinstance(acceptance, UniformAcceptance):
        return rng.uniform(acceptance.low, acceptance.high, size=requests)
    if isinstance(acceptance, BetaAcceptance):
        return rng.beta(*acceptance.shape, size=requests)
    raise ValueError(f"acceptance {acceptance.dist!r} needs the trace's column")
