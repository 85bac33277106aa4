"""compare at a batch whose KV cache leaves the weights too little HBM: under
``memory.weights: hbm`` (every weight in HBM) the SN40L column is refused with the plan's
words (a GPU's fits); under a hot set its columns carry the words a run gives
(``compiler.placement.placement_warnings``), and a DDR-bound step says its bytes and rate as
an HBM-bound one does. Llama 3.1 70B at 200 slots on SN40L-8 (128 fit)."""

from __future__ import annotations

import pytest

from rdu_sim import api, human
from rdu_sim.compare import compare
from rdu_sim.compiler.placement import WeightsSpilledWarning

WORKLOAD = "llama3.1-70b-decode"
HOT_SET = {"memory.weights": "hot_set", "memory.hot_set_fraction": 1.0}
"""A hot set of all HBM: the weights all pinned at the capacity, pushed out above it."""


def test_under_hbm_a_batch_beyond_the_weights_room_is_refused() -> None:
    result = compare(WORKLOAD, ["sn40l-8", "dgx-h200"], batch=200)  # (an H100 pool: 171)
    sn40l, h200 = result.columns
    assert not sn40l.fits and h200.fits and h200.warnings == []
    assert "short, and memory.weights hbm keeps every weight in HBM" in sn40l.reason
    assert "(memory.weights hot_set or streamed, now hbm)" in sn40l.reason


def test_a_spilled_batch_is_said_and_its_ddr_bound_has_bytes_and_rate() -> None:
    result = compare(WORKLOAD, ["sn40l-8", "sn40l-16"], HOT_SET, batch=200)
    sn40l, bigger = result.columns
    with pytest.warns(WeightsSpilledWarning):
        run = api.run(WORKLOAD, {**HOT_SET, "serving.batch_slots": 200, "serving.requests": 2})
    said = run.summary().warnings
    assert said and "of them from there" in said[0]
    assert sn40l.warnings == said == bigger.warnings  # the run's words
    assert result.to_dict()["columns"][0]["warnings"] == said
    assert f"sn40l-8: warning: {said[0]}" in result.lines
    # the DDR bound: its bytes at the rate it sustains make its time
    assert sn40l.bound == "ddr" and sn40l.ddr_bytes and sn40l.bound_s
    # the warning's bytes read from DDR are the step's (one rule: the trial found 16.71 GiB,
    # the embedding table whole, beside compare's 14.8 GiB; a step gathers its tokens' rows)
    assert f"reads {human.size(sn40l.ddr_bytes, 4)} of them from there" in said[0]
    rate = sn40l.peak_ddr_bandwidth * sn40l.ddr_efficiency
    assert sn40l.ddr_bytes / rate == pytest.approx(sn40l.bound_s, rel=1e-9)
    demand = (
        "14.8 GiB of weights read from DDR per device at 160 GB/s while streaming (80.0% of its "
        "200 GB/s peak)"
    )
    assert demand in result.lines[0]
    (verdict,) = result.verdicts
    assert f"bound by DDR bandwidth in both (97.2% vs 97.2% of their step time): {demand}" in (
        verdict
    )


def test_prompts_past_the_stacks_token_budget_are_said_as_a_run_says_them() -> None:
    """A run whose prompts pass its stack's ``prefill_batch_tokens`` with no chunking warns
    (``serving.limits.unchunked_words``); compare's columns of the same workload carry the
    same words (the trial's 60,000-token prompts on TensorRT-LLM: the run warned, compare's
    columns said nothing)."""
    from rdu_sim.serving.limits import UnchunkedPromptWarning

    sets = {
        "serving.max_context": 12288,
        "serving.prompt_tokens": {"dist": "fixed", "value": 10000},
        "serving.output_tokens": {"dist": "fixed", "value": 8},
        "serving.batch_slots": 4,
    }
    with pytest.warns(UnchunkedPromptWarning):
        run = api.run(
            "llama3.1-8b-1socket", {**sets, "hardware": "dgx-h100", "serving.requests": 2}
        )
    said = run.summary().warnings
    assert len(said) == 1 and "exceed the stack tensorrt-llm's prefill_batch_tokens" in said[0]
    result = compare("llama3.1-8b-1socket", ["dgx-h100", "dgx-h200"], sets)
    assert [c.warnings for c in result.columns] == [said, said]
    assert f"dgx-h200: warning: {said[0]}" in result.lines
    chunked = compare(
        "llama3.1-8b-1socket", ["dgx-h100"], {**sets, "serving.prefill_chunk_tokens": 8192}
    )
    assert chunked.columns[0].warnings == []
