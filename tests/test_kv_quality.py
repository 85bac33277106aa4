"""Tests of the synthetic needle quality proxy (SnapStream vs StreamingLLM vs full)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rdu_sim.kv.quality import POLICIES, format_table, quality_curve


def by_policy(rows: list[dict[str, Any]], budget: int) -> dict[str, dict[str, Any]]:
    return {str(r["policy"]): r for r in rows if r["budget"] == budget}


def test_rows_shape_and_defaults_are_fast() -> None:
    start = time.perf_counter()
    rows = quality_curve()
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    assert rows and all(
        set(r) == {"policy", "budget", "relative_error", "needle_recall"} for r in rows
    )
    budgets = sorted({int(r["budget"]) for r in rows})
    assert len(rows) == len(budgets) * len(POLICIES)
    for r in rows:
        assert r["policy"] in POLICIES
        assert r["relative_error"] >= 0.0
        assert 0.0 <= r["needle_recall"] <= 1.0
        if r["policy"] == "full":
            assert r["relative_error"] == 0.0 and r["needle_recall"] == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_snapstream_beats_streamingllm_at_moderate_budget(seed: int) -> None:
    rows = quality_curve(prompt_len=1024, budgets=[256], seed=seed)
    got = by_policy(rows, 256)
    snap, stream = got["snapstream"], got["streamingllm"]
    assert snap["needle_recall"] >= stream["needle_recall"]
    assert snap["needle_recall"] == 1.0
    assert snap["relative_error"] < stream["relative_error"]
    assert snap["relative_error"] < 0.5


def test_error_vanishes_when_everything_fits() -> None:
    steps = 4
    rows = quality_curve(prompt_len=256, budgets=[256 + steps, 400], decode_steps=steps)
    for r in rows:
        assert r["relative_error"] == pytest.approx(0.0, abs=1e-12)
        assert r["needle_recall"] == 1.0


def test_error_shrinks_with_budget() -> None:
    rows = quality_curve(prompt_len=1024, budgets=[64, 512], seed=0)
    small, large = by_policy(rows, 64), by_policy(rows, 512)
    for policy in ("snapstream", "streamingllm"):
        assert small[policy]["relative_error"] > large[policy]["relative_error"]


def test_deterministic_per_seed() -> None:
    a = quality_curve(prompt_len=512, budgets=[64, 128], seed=7)
    b = quality_curve(prompt_len=512, budgets=[64, 128], seed=7)
    c = quality_curve(prompt_len=512, budgets=[64, 128], seed=8)
    assert a == b
    assert a != c


def test_invalid_budget_rejected() -> None:
    with pytest.raises(ValueError, match="sinks"):
        quality_curve(prompt_len=256, budgets=[10])  # below sinks 4 + ring 16


def test_format_table_lists_every_row() -> None:
    rows = quality_curve(prompt_len=512, budgets=[64, 128])
    table = format_table(rows)
    lines = table.splitlines()
    assert "policy" in lines[0] and "budget" in lines[0]
    assert len(lines) == 2 + len(rows)
    for policy in POLICIES:
        assert policy in table


def test_error_is_0_up_to_round_off_not_exactly_once_nothing_is_evicted() -> None:
    """A static cache sums its slots in another order than the growing reference: ~1e-16,
    not 0.0 (the docstring says so); full attention is the reference itself, exactly 0."""
    rows = quality_curve(prompt_len=256, budgets=[264], decode_steps=8)
    got = by_policy(rows, 264)
    assert 0.0 < got["snapstream"]["relative_error"] < 1e-12
    assert got["full"]["relative_error"] == 0.0


def test_a_prompt_with_no_room_for_needles_names_the_prompt() -> None:
    from rdu_sim.config.workload import KVConfig
    from rdu_sim.kv.quality import DemoInputError

    with pytest.raises(DemoInputError) as exc:
        quality_curve(prompt_len=64, budgets=[64], n_needles=1, kv=KVConfig(observation_window=60))
    assert exc.value.parameter == "prompt_len"
    with pytest.raises(DemoInputError) as many:
        quality_curve(prompt_len=64, budgets=[64], n_needles=50)
    assert many.value.parameter == "n_needles"


def test_a_budget_with_no_top_k_warns_and_matches_streamingllm() -> None:
    from rdu_sim.kv.quality import DemoCompressionWarning

    with pytest.warns(DemoCompressionWarning, match="top-K is 0"):
        rows = quality_curve(prompt_len=256, budgets=[20], decode_steps=2)
    got = by_policy(rows, 20)
    assert got["snapstream"]["relative_error"] == got["streamingllm"]["relative_error"]
