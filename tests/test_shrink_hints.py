"""A capacity error suggests an 8-bit KV cache and chunked prefill where they apply
(``compiler.placement.shrink_hints``): fp8 for a cache wider than 8 bits, chunking when a
prefill's activations are a share of HBM worth freeing; neither when already so. A 1M-token
Llama-8B on 12 GiB of HBM with its weights streamed from DDR is refused, and the two hints
together make it run."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rdu_sim.cli.main import cli

LONG = """\
name: llama8b-1m
hardware: sn40l-8
model:
  model_type: llama
  vocab_size: 128256
  hidden_size: 4096
  intermediate_size: 14336
  num_hidden_layers: 32
  num_attention_heads: 32
  num_key_value_heads: 8
  max_position_embeddings: 1048576
  rope_theta: 500000
  tie_word_embeddings: false
dtypes: {weights: bf16, kv: bf16, activations: bf16}
parallelism: {tp: 8}
kv: {policy: full}
memory: {weights: streamed}
serving:
  batch_slots: auto
  max_context: 1048576
  prompt_tokens: {dist: uniform, low: 500000, high: 1000000}
  output_tokens: {dist: uniform, low: 128, high: 512}
  arrival: {process: closed_loop}
  requests: 2
  seed: 0
"""
SMALL_HBM = "hw.socket.hbm.capacity=12GiB"
FP8 = "store the KV cache in fp8 (dtypes.kv, now bf16)"
CHUNK = "chunk the prefill (serving.prefill_chunk_tokens, now unset)"


def _run(workload: Path, *sets: str) -> tuple[int, str]:
    args = [a for s in sets for a in ("--set", s)]
    result = CliRunner().invoke(cli, ["run", str(workload), *args])
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split())


def _long(tmp_path: Path) -> Path:
    path = tmp_path / "l8b1m.yaml"
    path.write_text(LONG)
    return path


def test_the_hints_name_fp8_kv_and_chunking_and_together_they_run(tmp_path: Path) -> None:
    workload = _long(tmp_path)
    code, said = _run(workload, SMALL_HBM)
    assert code == 2
    assert "cannot fit even one sequence" in said
    assert f"use kv.policy snapstream (now full), {FP8}, {CHUNK}, raise parallelism.tp" in said
    code, _ = _run(workload, SMALL_HBM, "dtypes.kv=fp8", "serving.prefill_chunk_tokens=65536")
    assert code == 0  # what the hints said is enough


def test_no_fp8_hint_for_a_cache_already_8_bits_or_fewer(tmp_path: Path) -> None:
    workload = _long(tmp_path)
    for dtype in ("fp8", "int8", "int4"):
        code, said = _run(workload, SMALL_HBM, f"dtypes.kv={dtype}")
        assert code == 2
        assert "dtypes.kv" not in said and CHUNK in said


def test_a_long_chunk_is_to_be_lowered_a_small_one_is_not(tmp_path: Path) -> None:
    """A 300,000-token chunk's activations (4.6 GiB) are worth halving; a 4,096-token
    chunk's (tens of MiB) are not: a smaller one frees under 1% of HBM."""
    workload = _long(tmp_path)
    code, said = _run(workload, SMALL_HBM, "serving.prefill_chunk_tokens=300000")
    assert code == 2
    assert "lower serving.prefill_chunk_tokens (now 300000)" in said
    code, said = _run(workload, "hw.socket.hbm.capacity=8GiB", "serving.prefill_chunk_tokens=4096")
    assert code == 2
    assert "prefill_chunk_tokens" not in said


def test_no_chunk_hint_where_the_prompts_are_short() -> None:
    """Llama-70B's 4,096-token prompts: its slots' KV overflows, its activations do not
    matter (the hint of fp8 KV stays)."""
    code, said = _run(Path("llama3.1-70b-decode"), "serving.max_context=131072")
    assert code == 2
    assert FP8 in said and "prefill_chunk_tokens" not in said
