"""The acceptance arithmetic of speculative decoding (rdu_sim.serving.acceptance): the closed
form against its distribution, the draws against the distribution, a request's rounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.speculation import SpecDecodingConfig
from rdu_sim.config.workload import ServingConfig
from rdu_sim.serving.acceptance import (
    accepted_pmf,
    draw_accepted,
    expected_tokens_per_round,
    request_rates,
    request_rounds,
    tokens_variance,
)
from rdu_sim.serving.requests import make_requests
from rdu_sim.serving.traces import read_trace

SPECDEC = (
    Path(__file__).resolve().parents[1] / "workloads/speculative/llama3.1-70b-16socket-specdec.yaml"
)

RATES = [0.0, 0.3, 0.6, 0.8, 0.95, 1.0]


def test_expected_tokens_exact_values() -> None:
    assert expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    assert expected_tokens_per_round(0.5, 1) == pytest.approx(1.5, abs=1e-12)
    assert expected_tokens_per_round(0.0, 7) == 1.0
    assert expected_tokens_per_round(1.0, 7) == 8.0


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_closed_form_is_the_mean_of_the_distribution(rate: float, k: int) -> None:
    pmf = accepted_pmf(rate, k)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert (pmf >= 0).all()
    mean = float((pmf * np.arange(k + 1)).sum()) + 1  # A accepted + the target's own token
    assert expected_tokens_per_round(rate, k) == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize(("rate", "k"), [(0.3, 2), (0.8, 4), (0.95, 6)])
def test_draws_follow_the_distribution(rate: float, k: int) -> None:
    """Each count's frequency within 5 standard errors of its probability."""
    n = 200_000
    draws = draw_accepted(np.random.default_rng(1), rate, k, n)
    assert draws.min() >= 0 and draws.max() <= k
    counts = np.bincount(draws, minlength=k + 1)
    pmf = accepted_pmf(rate, k)
    sigma = np.sqrt(n * pmf * (1 - pmf))
    assert (np.abs(counts - n * pmf) <= 5 * sigma + 1).all(), (counts, n * pmf)
    assert draws.var() == pytest.approx(tokens_variance(rate, k), rel=0.03)


def test_certain_and_impossible_acceptance() -> None:
    rng = np.random.default_rng(0)
    assert (draw_accepted(rng, 1.0, 5, 100) == 5).all()
    assert (draw_accepted(rng, 0.0, 5, 100) == 0).all()


@pytest.mark.parametrize("rate", [0.0, 0.5, 0.9, 1.0])
def test_a_requests_rounds_emit_exactly_its_tokens(rate: float) -> None:
    k, tokens = 4, 1000
    emitted_after, accepted = request_rounds(3, 17, rate, k, tokens)
    steps = np.diff(emitted_after, prepend=0)
    assert emitted_after[-1] == tokens  # the last round is cut at the request's end
    assert (steps >= 1).all() and (steps <= k + 1).all()
    # every round but the last emits all it accepted plus one; the last may be cut short
    assert accepted + len(steps) >= tokens
    assert accepted + len(steps) - tokens <= k
    if rate == 1.0:
        assert len(steps) == -(-tokens // (k + 1))
    if rate == 0.0:
        assert len(steps) == tokens and accepted == 0


def test_rounds_are_the_requests_own() -> None:
    """Seeded per request: the same request gets the same rounds whatever else runs; two
    requests (or two seeds) get different ones."""
    a, _ = request_rounds(5, 3, 0.7, 4, 500)
    b, _ = request_rounds(5, 3, 0.7, 4, 500)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, request_rounds(5, 4, 0.7, 4, 500)[0])
    assert not np.array_equal(a, request_rounds(6, 3, 0.7, 4, 500)[0])
    assert len(request_rounds(5, 3, 0.7, 4, 0)[0]) == 0


def test_request_rates() -> None:
    fixed = SpecDecodingConfig.model_validate({"acceptance": 0.65}).acceptance
    np.testing.assert_array_equal(request_rates(fixed, 4, 0), np.full(4, 0.65))
    uniform = SpecDecodingConfig.model_validate(
        {"acceptance": {"dist": "uniform", "low": 0.5, "high": 0.9}}
    ).acceptance
    rates = request_rates(uniform, 20_000, 1)
    assert rates.min() >= 0.5 and rates.max() <= 0.9
    assert rates.mean() == pytest.approx(0.7, abs=0.005)
    np.testing.assert_array_equal(rates, request_rates(uniform, 20_000, 1))
    beta = SpecDecodingConfig.model_validate(
        {"acceptance": {"dist": "beta", "mean": 0.75, "concentration": 20}}
    ).acceptance
    rates = request_rates(beta, 20_000, 2)
    assert rates.mean() == pytest.approx(0.75, abs=0.005)
    # Beta(mean m, concentration c): variance m(1-m)/(c+1)
    assert rates.var() == pytest.approx(0.75 * 0.25 / 21, rel=0.05)
    trace = SpecDecodingConfig.model_validate({"acceptance": {"dist": "trace"}}).acceptance
    column = np.array([0.1, 0.2, 0.3])
    np.testing.assert_array_equal(request_rates(trace, 2, 0, column), column[:2])


def test_trace_acceptance_column(tmp_path: Path) -> None:
    """A trace's acceptance column: read in request order (sorted by arrival for poisson),
    checked like every column, and the rates a run gives its requests."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens,acceptance\n0.2,100,40,0.9\n0.1,200,50,0.25\n"
    )
    read = read_trace(trace)
    assert read.acceptance is not None
    np.testing.assert_array_equal(read.acceptance, [0.9, 0.25])
    serving = ServingConfig.model_validate(
        {"trace": "t.csv", "requests": 2, "arrival": {"process": "poisson", "rate": 1.0}}
    )
    requests = make_requests(serving, 1, tmp_path)
    assert requests.trace_acceptance is not None
    np.testing.assert_array_equal(requests.trace_acceptance, [0.25, 0.9])  # arrival order
    np.testing.assert_array_equal(requests.prompt_tokens, [200, 100])
    for bad, words in (("1.5", "rate in 0..1"), ("", "missing value"), ("x", "rate in 0..1")):
        trace.write_text(f"prompt_tokens,output_tokens,acceptance\n100,40,0.5\n100,40,{bad}\n")
        with pytest.raises(ConfigError) as info:
            read_trace(trace)
        [issue] = info.value.issues
        assert (issue.field, issue.line) == ("acceptance", 3)
        assert words in issue.message


def test_a_run_takes_its_rates_from_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"prompt_tokens": 128, "output_tokens": 64, "acceptance": 0.95}\n'
        '{"prompt_tokens": 128, "output_tokens": 64, "acceptance": 0.35}\n'
    )
    overrides = {
        "serving.trace": str(trace),
        "serving.requests": 2,
        "speculation.decoding.acceptance": {"dist": "trace"},
    }
    result = api.run(SPECDEC, overrides)
    speculation = result.speculation
    assert speculation is not None and speculation.rates is not None
    np.testing.assert_array_equal(speculation.rates, [0.95, 0.35])
    # the likelier request needs fewer rounds for the same tokens
    assert result.records.rounds[0] < result.records.rounds[1]
    summary = result.summary().speculation
    assert summary is not None and summary.decoding is not None
    assert summary.decoding.acceptance_rate_mean == pytest.approx(0.65)
    # without the column, {dist: trace} is refused naming the trace
    trace.write_text('{"prompt_tokens": 128, "output_tokens": 64}\n')
    with pytest.raises(ConfigError, match="which has none"):
        api.run(SPECDEC, overrides)
