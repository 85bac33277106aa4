"""A paged KV pool in a cluster and in `rdu-sim check`: a request bigger than a pool's whole
pool is refused before simulating (run and check alike), and every replica's pool holds no
more than its pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
L8 = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
GPU_SMALL_POOL = (
    "{hardware: dgx-h100, stack: tensorrt-llm, serving.batch_slots: auto, "
    "serving.max_context: 131072, stack.kv_memory_fraction: 0.05}"
)
BIG_REQUESTS = """\
traffic:
  rate: 5
  requests: 20
  prompt_tokens: {dist: uniform, low: 100, high: 120000}
  output_tokens: 100
  seed: 3
slo: {ttft: 3 s, tpot: 50 ms, attainment: 0.9}
"""


def _mixed_big(tmp_path: Path) -> Path:
    path = tmp_path / "mixed_big.yaml"
    path.write_text(
        f"name: mixed-big\npools:\n  serve:\n    workload: {L8}\n    replicas: 1\n"
        f"    set: {GPU_SMALL_POOL}\nrouter: {{policy: least_outstanding}}\n{BIG_REQUESTS}"
    )
    return path


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_cluster_request_bigger_than_a_pool_is_refused(tmp_path: Path, command: str) -> None:
    """Before, the run deadlocked into "cluster lost or duplicated requests (scheduler bug)"
    and check said OK: now both refuse in the lone run's words, naming the pool."""
    path = _mixed_big(tmp_path)
    result = CliRunner().invoke(cli, [command, str(path)])
    assert result.exit_code == 2, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(f"error: {L8}: serving.max_context: 12 of 20 requests reserve")
    assert "the pool has 415 (26,560 tokens" in first
    assert first.endswith(f"(pool 'serve' of {path})")
    assert "Traceback" not in result.output and "scheduler bug" not in result.output


def test_check_refuses_a_workload_whose_requests_outgrow_its_pool(tmp_path: Path) -> None:
    """`rdu-sim check` said OK to a workload its run refuses: it now makes the run's
    requests and asks the same ``check_pool``, the same one line, exit 2."""
    stack = (REPO / "stacks" / "tensorrt-llm.yaml").read_text()
    stack = stack.replace("name: tensorrt-llm\n", "name: trt-small\n")
    stack = stack.replace("kv_memory_fraction: 0.9\n", "kv_memory_fraction: 0.05\n")
    assert "kv_memory_fraction: 0.05" in stack
    (tmp_path / "trt-small.yaml").write_text(stack)
    workload = tmp_path / "big.yaml"
    workload.write_text(
        "name: big\nhardware: dgx-h100\nstack: trt-small.yaml\nmodel: llama-3.1-8b\n"
        "dtypes: {weights: bf16, kv: bf16, activations: bf16}\nparallelism: {tp: 1}\n"
        "kv: {policy: full}\nserving:\n  batch_slots: auto\n  max_context: 131072\n"
        "  prompt_tokens: {dist: uniform, low: 100, high: 120000}\n  output_tokens: 100\n"
        "  prefill_chunk_tokens: 8192\n  arrival: {process: poisson, rate: 1.0}\n"
        "  requests: 20\n  seed: 0\n"
    )
    runner = CliRunner()
    checked, ran = (
        runner.invoke(cli, ["check", str(workload)]),
        runner.invoke(cli, ["run", str(workload)]),
    )
    assert checked.exit_code == ran.exit_code == 2, checked.output
    words = f"error: {workload}:10: serving.max_context: 16 of 20 requests reserve more KV pages"
    assert checked.output.splitlines()[0] == ran.output.splitlines()[0]
    assert checked.output.startswith(words), checked.output
