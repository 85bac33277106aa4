"""Speculation in the server, against the step-by-step reference and the acceptance
arithmetic (formula step times: fast, exact).

- The batched server (rounds advanced many at a time, each slot by its own drawn tokens)
  gives every request exactly the times of ``reference_serve`` stepping one round at a time,
  whose round time is summed here from the shapes a round runs (the draft's catch-up step
  of 2 tokens, k - 1 steps of 1, the target's verify step of k + 1), independently of
  ``serving.speculative``.
- The served mean tokens per round matches (1 - a^(k+1)) / (1 - a) within sampling error.
- Speculative prefill: the draft's selection before the first step, the target prefilling
  the kept tokens only, its decode attending to them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_serving_batched import (
    ReferenceDraft,
    fake_step,
    kv_config,
    reference_serve,
    serving_config,
)

from rdu_sim.config.workload import SpeculationConfig
from rdu_sim.kv import make_policy
from rdu_sim.serving.acceptance import (
    expected_tokens_per_round,
    request_rates,
    request_rounds,
    tokens_variance,
)
from rdu_sim.serving.buckets import decode_rows, prefill_steps, prompt_bucket
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet, make_requests
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.speculative import DraftLink, Speculation
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import DecodeRows, StepShape, batches_live
from rdu_sim.speculation import kept_tokens

MAX_CONTEXT = 4096


def draft_step(shape: StepShape) -> StepCost:
    """A draft's step times: a fraction of the target's, other constants."""
    if shape.phase == "prefill":
        return StepCost(4.3e-4 + shape.tokens * 1.3e-7 + shape.cache_len * 2.9e-8)
    return StepCost(1.1e-3 + shape.batch * 1.7e-5 + shape.tokens * 3.1e-5 + shape.cache_len * 4e-8)


def speculation_config(**data: Any) -> SpeculationConfig:
    return SpeculationConfig.model_validate({"draft": "llama-3.2-1b", **data})


LINK = DraftLink(latency_s=2.5e-6, bandwidth=5e9, row_bytes=20)
"""A separate draft's link (made-up figures)."""


def run(
    case: dict[str, Any],
    spec: SpeculationConfig,
    slots: int = 4,
    requests: int = 40,
    rows: DecodeRows = "slots",
) -> tuple[RequestSet, ServingRecords, Speculation, StepCache]:
    """Serve a small workload with a speculating server (formula step times) whose stack
    runs ``rows`` rows a decode step (``StackConfig.decode_rows``)."""
    case = dict(case)
    policy = make_policy(
        kv_config(
            policy=case.pop("policy", "full"),
            min_bucket=256,
            budget=case.pop("budget", None),
            recent=256,
        ),
        MAX_CONTEXT,
    )
    serving = serving_config(
        max_context=MAX_CONTEXT,
        requests=requests,
        seed=11,
        prompt_tokens={"dist": "lognormal", "median": 700, "sigma": 0.8, "low": 1, "high": 3000},
        output_tokens={"dist": "uniform", "low": 1, "high": 600},
        **case,
    )
    request_set = make_requests(serving, slots)
    rates = None
    if spec.decoding is not None:
        rates = request_rates(spec.decoding.acceptance, requests, serving.seed)
    target = StepCache(fake_step)
    speculation = Speculation(
        config=spec,
        draft_cache=StepCache(draft_step),
        policy=policy,
        max_context=MAX_CONTEXT,
        chunk=serving.prefill_chunk_tokens,
        seed=serving.seed,
        rates=rates,
        link=LINK if spec.placement == "separate" else None,
        ragged=batches_live(rows),
    )
    config = ServerConfig(
        slots,
        MAX_CONTEXT,
        serving.prefill_priority,
        serving.prefill_chunk_tokens,
        decode_rows=rows,
    )
    records = serve(request_set, policy, target, config, speculation=speculation)
    return request_set, records, speculation, target


def reference_draft(
    requests: RequestSet, speculation: Speculation, target: StepCache, slots: int
) -> ReferenceDraft:
    """The reference's view of the draft: round times summed from the round's shapes here,
    the tokens of each round from the requests' own draws."""
    spec, draft = speculation.config, speculation.draft_cache
    decoding, prefill = spec.decoding, spec.prefill
    k = decoding.draft_tokens if decoding is not None else 0
    separate = spec.placement == "separate"

    def decode_ps(rows: int, bucket: int) -> int:
        if decoding is None:
            return target.step_ps(StepShape("decode", rows, 1, bucket))
        first = draft.step_ps(StepShape("decode", rows, 2, bucket))
        rest = (k - 1) * draft.step_ps(StepShape("decode", rows, 1, bucket + k - 1))
        verify = target.step_ps(StepShape("decode", rows, k + 1, bucket))
        link = round((2 * 2.5e-6 + rows * 20 / 5e9) * 1e12) if separate else 0
        return first + rest + link + verify

    increments: dict[int, np.ndarray] = {}

    def tokens(request: int, round_: int) -> int:
        if decoding is None:
            return 1
        if request not in increments:
            assert speculation.rates is not None
            output = int(requests.output_tokens[request])
            rate = float(speculation.rates[request])
            emitted, _ = request_rounds(speculation.seed, request, rate, k, output - 1)
            increments[request] = np.diff(emitted, prepend=0)
        return int(increments[request][round_])

    def prefill_ps(shape: StepShape, request: int) -> int:
        own = target.step_ps(shape)
        if decoding is None:
            return own
        return max(own, draft.step_ps(shape)) if separate else own + draft.step_ps(shape)

    def admission_ps(request: int) -> int:
        if prefill is None:
            return 0
        prompt = int(requests.prompt_tokens[request])
        bucket = prompt_bucket(prompt, MAX_CONTEXT, speculation.ragged)
        look = StepShape("decode", 1, 1, bucket + prefill.look_ahead - 1)
        shapes = prefill_steps(prompt, MAX_CONTEXT, speculation.chunk, False, speculation.ragged)
        mapping = round((prefill.token_mapping or 0.0) * prompt * 1e12)
        return (
            sum(draft.step_ps(s) for s in shapes)
            + prefill.look_ahead * draft.step_ps(look)
            + mapping
        )

    def prompt(tokens_: int) -> int:
        if prefill is None:
            return tokens_
        return kept_tokens(tokens_, prefill.keep_ratio, prefill.chunk_tokens)

    return ReferenceDraft(decode_ps, tokens, prefill_ps, admission_ps, prompt)


DECODING = {"decoding": {"draft_tokens": 3, "acceptance": 0.7}}
CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"arrival": {"process": "closed_loop"}}, DECODING),
    ({"arrival": {"process": "poisson", "rate": 4.0}}, DECODING),
    (
        {"arrival": {"process": "poisson", "rate": 30.0}, "prefill_priority": "decode_first"},
        {"decoding": {"draft_tokens": 5, "acceptance": {"dist": "uniform", "low": 0.2, "high": 1}}},
    ),
    (
        {"arrival": {"process": "all_at_once"}, "prefill_chunk_tokens": 300},
        {
            "decoding": {
                "draft_tokens": 1,
                "acceptance": {"dist": "beta", "mean": 0.6, "concentration": 4},
            }
        },
    ),
    (
        {"policy": "snapstream", "budget": 1024, "arrival": {"process": "closed_loop"}},
        DECODING,
    ),
    (
        {"arrival": {"process": "poisson", "rate": 5.0}},
        {"placement": "separate", "draft_tp": 1, **DECODING},
    ),
    (
        {"arrival": {"process": "poisson", "rate": 5.0}},
        {"prefill": {"keep_ratio": 0.3}},
    ),
    (
        {
            "policy": "snapstream",
            "budget": 512,
            "arrival": {"process": "closed_loop"},
            "prefill_chunk_tokens": 256,
        },
        {
            "prefill": {
                "keep_ratio": 0.5,
                "chunk_tokens": 16,
                "look_ahead": 4,
                "token_mapping": "1.3 us",
            }
        },
    ),
]


def matches_the_reference(
    case: dict[str, Any], spec: dict[str, Any], slots: int, rows: DecodeRows = "slots"
) -> tuple[ServingRecords, StepCache]:
    """Serve ``case`` and check every request's times against ``reference_serve``."""
    requests, records, speculation, target = run(case, speculation_config(**spec), slots, rows=rows)
    expected = reference_serve(
        requests,
        speculation.policy,
        target,
        slots,
        MAX_CONTEXT,
        case.get("prefill_priority", "prefill_first"),
        case.get("prefill_chunk_tokens"),
        draft=reference_draft(requests, speculation, target, slots),
        rows=rows,
    )
    np.testing.assert_array_equal(records.arrival_ps, expected["arrival"])
    np.testing.assert_array_equal(records.admit_ps, expected["admit"])
    np.testing.assert_array_equal(records.first_token_ps, expected["first"])
    np.testing.assert_array_equal(records.finish_ps, expected["finish"])
    # every request emits exactly its tokens; rounds are advanced many at a time
    assert records.tokens_generated == int(requests.output_tokens.sum())
    assert records.decode_runs < records.decode_steps
    return records, target


@pytest.mark.parametrize(("case", "spec"), CASES, ids=lambda c: str(c)[:60])
def test_speculating_server_matches_the_round_by_round_reference(
    case: dict[str, Any], spec: dict[str, Any]
) -> None:
    _, target = matches_the_reference(case, spec, slots=4)
    # a static graph: every round runs every slot
    assert {s.batch for s in target.steps if s.phase == "decode"} == {4}


UNCHUNKED_DECODING = [
    (case, spec)
    for case, spec in CASES
    if "decoding" in spec and "prefill_chunk_tokens" not in case and "policy" not in case
]


@pytest.mark.parametrize("rows", ["ladder", "programs", "live"])
@pytest.mark.parametrize(("case", "spec"), UNCHUNKED_DECODING, ids=lambda c: str(c)[:60])
def test_rounds_run_the_rows_plain_decoding_would(
    case: dict[str, Any], spec: dict[str, Any], rows: DecodeRows
) -> None:
    """A stack that batches its live sequences (a paged cache's CUDA-graph ladder, reading
    each sequence's pages: the mean cache's bucket) or picks a program by the queue runs
    each round over the rows its plain decode step would (``decode_rows``), not every
    slot: the reference, which times each round at those rows, agrees to the picosecond."""
    slots = 12
    _, target = matches_the_reference(case, spec, slots, rows)
    batches = {s.batch for s in target.steps if s.phase == "decode"}
    assert batches <= {decode_rows(rows, live, slots) for live in range(1, slots + 1)}
    assert len(batches) > 1 and min(batches) < slots  # the runs' tails ran fewer rows


def test_rounds_count_the_draft_and_verify_steps() -> None:
    _, records, speculation, target = run(
        {"arrival": {"process": "closed_loop"}}, speculation_config(**DECODING)
    )
    verify = sum(n for shape, n in target.steps.items() if shape.phase == "decode")
    assert verify == records.decode_steps
    assert all(shape.tokens == 4 for shape in target.steps if shape.phase == "decode")
    # nor did it simulate a one-token decode step it never runs (the run's shape count)
    assert all(shape.tokens == 4 for shape in target.shapes if shape.phase == "decode")
    draft = speculation.draft_cache.steps
    catch_up = sum(n for shape, n in draft.items() if shape.phase == "decode" and shape.tokens == 2)
    single = sum(n for shape, n in draft.items() if shape.phase == "decode" and shape.tokens == 1)
    assert catch_up == records.decode_steps and single == 2 * records.decode_steps
    # the draft prefilled every prompt too, with the target's shapes
    assert {s for s in draft if s.phase == "prefill"} == {
        s for s in target.steps if s.phase == "prefill"
    }
    # per request: its rounds emitted its decode tokens
    done = records.output_tokens > 1
    assert (records.rounds[done] >= 1).all()
    assert (records.rounds[done] <= records.output_tokens[done] - 1).all()


@pytest.mark.parametrize(("rate", "k"), [(0.5, 2), (0.8, 4), (0.9, 7)])
def test_served_tokens_per_round_match_the_formula(rate: float, k: int) -> None:
    """The served mean of accepted drafts + 1 per round, over all rounds, against
    (1 - a^(k+1)) / (1 - a). The bound: 4 standard errors of a mean of that many rounds,
    sqrt(Var / rounds) with the round's exact variance (a request's rounds stop at a
    stopping time, so by Wald's identity the ratio of sums has that mean). The emitted tokens
    per round are at most that (a request's last round is cut at its end)."""
    spec = speculation_config(decoding={"draft_tokens": k, "acceptance": rate})
    _, records, _, _ = run({"arrival": {"process": "closed_loop"}}, spec, slots=8, requests=300)
    rounds = int(records.rounds.sum())
    drawn = (int(records.accepted_drafts.sum()) + rounds) / rounds
    emitted = int((records.output_tokens - 1).sum()) / rounds
    expected = expected_tokens_per_round(rate, k)
    sigma = math.sqrt(tokens_variance(rate, k) / rounds)
    assert abs(drawn - expected) < 4 * sigma, (drawn, expected, sigma, rounds)
    assert emitted <= drawn
    assert rounds > 10_000  # enough rounds for a tight bound


def test_rounds_do_not_depend_on_the_batch() -> None:
    """Acceptance belongs to the request: the same requests draw the same rounds at any
    batch size and arrival order."""
    spec = speculation_config(**DECODING)
    _, one, _, _ = run({"arrival": {"process": "closed_loop"}}, spec, slots=1)
    _, four, _, _ = run({"arrival": {"process": "closed_loop"}}, spec, slots=4)
    np.testing.assert_array_equal(one.rounds, four.rounds)
    np.testing.assert_array_equal(one.accepted_drafts, four.accepted_drafts)


def test_speculative_prefill_keeps_chunks_and_decodes_over_them() -> None:
    spec = speculation_config(prefill={"keep_ratio": 0.25, "chunk_tokens": 64})
    requests, records, speculation, target = run({"arrival": {"process": "closed_loop"}}, spec)
    kept = records.target_prompt_tokens
    prompts = requests.prompt_tokens
    assert (kept <= prompts).all() and (kept >= np.minimum(prompts, 1)).all()
    assert kept.sum() < 0.4 * prompts.sum()
    # the target prefilled buckets of the kept tokens only; the draft the whole prompts
    target_prefill = {s.tokens for s in target.steps if s.phase == "prefill"}
    assert target_prefill == {prompt_bucket(int(p), MAX_CONTEXT) for p in kept}
    draft_prefill = {s.tokens for s in speculation.draft_cache.steps if s.phase == "prefill"}
    assert draft_prefill == {prompt_bucket(int(p), MAX_CONTEXT) for p in prompts}
    # nobody decodes speculatively: one token per decode step
    assert records.tokens_generated == int(requests.output_tokens.sum())


@pytest.mark.parametrize(
    ("prompt", "ratio", "chunk", "kept"),
    [
        (1000, 0.3, 32, 320),
        (1000, 1.0, 32, 1000),
        (64, 0.3, 32, 32),
        (10, 0.1, 32, 10),
        (320, 0.3, 32, 96),
        (33, 0.5, 32, 32),
        (65536, 0.3, 32, 19680),
    ],
)
def test_kept_tokens(prompt: int, ratio: float, chunk: int, kept: int) -> None:
    """Whole chunks covering keep_ratio of the prompt, at most the prompt."""
    assert kept_tokens(prompt, ratio, chunk) == kept
    assert kept_tokens(prompt, ratio, 1) == min(prompt, math.ceil(prompt * ratio - 1e-9))


def test_a_runs_kv_kept_counts_the_prompts_the_target_prefills() -> None:
    """Under speculative prefill the KV policy sees the kept chunks, not the whole prompt:
    the run's ``kv_kept`` counts a prompt compressed when what the target prefills exceeds
    the 32,768-token SnapStream slot (1 of 12 here), not when the request's prompt does (12)."""
    from rdu_sim import api

    scenario = api.load("deepseek-r1-128k-snapstream-specprefill", {"serving.requests": 12})
    result = api.run(scenario)
    records = result.records
    kept = result.to_dict()["kv_kept"]
    slot = scenario.kv_policy.slot_tokens()
    assert kept["prompts_compressed"] == int((records.target_prompt_tokens > slot).sum()) == 1
    assert int((records.prompt_tokens > slot).sum()) == 12
