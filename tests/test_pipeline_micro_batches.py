"""A decode pipeline's micro-batches each re-read their stage's weights: the step says what
the re-reads cost beside the bubble, and when fewer micro-batches would be faster, by an
estimate from the step's own weight reads that the simulation of that count confirms."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.engine.pipeline import micro_batch_estimate
from rdu_sim.report.console import serving_table

LLAMA8 = "workloads/llama3.1-8b-8socket.yaml"
PP2 = {"parallelism.tp": 4, "parallelism.pp": 2}


def _device_s(overrides: dict[str, object], batch: int, context: int) -> tuple[float, dict]:
    timing = api.step(LLAMA8, overrides, batch=batch, context=context).detail
    assert timing.pipeline is not None
    return timing.step_s - timing.runtime_s, dict(timing.pipeline)


def test_fewer_micro_batches_is_said_when_the_weights_dominate() -> None:
    # two sequences of 1,024 tokens: a micro-batch is mostly its stage's weights
    now_s, pipeline = _device_s(PP2, 2, 1024)
    weights, stages = pipeline["weights_read_s"], pipeline["stage_s"]
    assert all(0 < w < t for w, t in zip(weights, stages, strict=True))
    fewer = pipeline["fewer_micro_batches"]
    assert fewer is not None and fewer["micro_batches"] == 1
    one_s, _ = _device_s({**PP2, "parallelism.micro_batches": 1}, 2, 1024)
    assert one_s < now_s  # the simulation agrees
    assert fewer["device_s"] == pytest.approx(one_s, rel=0.05)
    assert fewer["now_s"] == pytest.approx(now_s, rel=0.01)  # the estimate's own check


def test_fewer_micro_batches_is_not_said_when_the_cache_dominates() -> None:
    now_s, pipeline = _device_s(PP2, 32, 32768)
    assert pipeline["weights_read_s"] and pipeline["fewer_micro_batches"] is None
    one_s, _ = _device_s({**PP2, "parallelism.micro_batches": 1}, 32, 32768)
    assert one_s > now_s


def test_the_estimate_is_the_flow_of_micro_batches_through_stages() -> None:
    # no weights: the stages' time splits evenly, sum(t) + (k - 1) max(t) at k micro-batches
    assert micro_batch_estimate([2.0, 4.0], [0.0, 0.0], 2, 1) == pytest.approx(12.0)
    # all weights: a micro-batch takes as long at any count
    assert micro_batch_estimate([2.0, 4.0], [2.0, 4.0], 2, 1) == pytest.approx(6.0)
    assert micro_batch_estimate([2.0, 4.0], [1.0, 1.0], 2, 2) == pytest.approx(10.0)


def test_the_step_and_run_reports_name_the_setting() -> None:
    result = CliRunner().invoke(
        cli,
        ["step", LLAMA8, "--batch", "2", "--context", "1024"]
        + [f"--set={k}={v}" for k, v in PP2.items()],
        terminal_width=400,
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("pipeline:"))
    assert "each micro-batch re-reads its stage's weights" in line
    assert "parallelism.micro_batches: 1 would take about" in line
    run = api.run(
        LLAMA8,
        {
            **PP2,
            "serving.batch_slots": 2,
            "serving.requests": 4,
            "serving.prompt_tokens": {"dist": "uniform", "low": 512, "high": 1024},
            "serving.output_tokens": {"dist": "uniform", "low": 32, "high": 64},
        },
    )
    summary = run.summary()
    step = summary.decode_step
    assert step is not None and step.fewer_micro_batches is not None
    assert step.fewer_micro_batches["micro_batches"] == 1
    assert "fewer_micro_batches" in summary.to_dict()["decode_step"]
    caption = serving_table(summary).caption
    assert isinstance(caption, str)
    assert caption.startswith("Decode step: parallelism.micro_batches: 1 would take about")
