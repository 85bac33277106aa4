"""Warnings raised in worker processes come back and print as the in-process ones do, once
each (``sim_warnings.kept``, ``say``); a measured row's prompts past its stack's token budget
are told for the measurement, not as advice to edit a workload it does not have."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

ROWS = """hardware,stack,model,tp,batch,requests,input_tokens,output_tokens,metric,measured
dgx-h100,tensorrt-llm,llama-3.2-1b,1,1,1,9000,4,e2e_s,0.05
dgx-h100,tensorrt-llm,llama-3.2-1b,1,2,2,9000,4,e2e_s,0.06
"""
"""Two rows whose 9,000-token prompts pass TensorRT-LLM's 8,192-token budget: each run warns."""

TOLD = (
    "warning: rows.csv: its rows' prompts of up to 9,000 tokens pass the stack tensorrt-llm's "
    "prefill_batch_tokens (8,192); the measurement does not say its runtime cut them into "
    "chunks, so each is simulated as one prefill step (--set serving.prefill_chunk_tokens=8192 "
    "simulates them chunked)"
)


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if "Warning" in line or "warning:" in line]


@pytest.fixture
def rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # rows.csv, as the warning names it
    (tmp_path / "rows.csv").write_text(ROWS)


def test_a_measured_rows_unchunked_prompts_are_told_for_the_measurement(rows: None) -> None:
    """In this process: one line, what the model assumes for the rows."""
    result = CliRunner().invoke(cli, ["validate", "--suite", "deployment", "rows.csv"])
    assert result.exit_code == 0, result.output
    assert [w for w in _warnings(result.stderr) if "prefill" in w] == [TOLD]


def test_a_workers_warnings_print_as_this_process_does_once(rows: None) -> None:
    """Two workers each simulate a row that warns: the parent prints the warning once, as
    its `warning:` line (a worker printed Python's raw two lines, pool.py:125, to its own
    standard error, once per worker)."""
    fit = "tensorrt-llm:stack.host.serial_per_step=0:2ms"
    runner = CliRunner()
    args = ["calibrate", "rows.csv", "--fit", fit, "--max-evaluations", "1", "-o", "o"]
    serial = runner.invoke(cli, args)
    pooled = runner.invoke(cli, [*args[:-1], "p", "--workers", "2"])
    assert serial.exit_code == 0 and pooled.exit_code == 0, pooled.output
    assert [w for w in _warnings(serial.stderr) if "prefill" in w] == [TOLD]
    assert [w for w in _warnings(pooled.stderr) if "prefill" in w] == [TOLD]
