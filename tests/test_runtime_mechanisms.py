"""What a runtime that pages its KV cache and packs prefills asks of the rest of the
simulator: the memory plan, the run-size estimate, the policy's checks, CoE."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler.placement import _step_bytes, activation_bytes, packed_prefill_tokens
from rdu_sim.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
COE = REPO / "workloads" / "samba-coe-150x8b-8socket.yaml"


def test_the_memory_plan_reserves_the_largest_packed_prefill() -> None:
    """Prompts of up to 4,096 tokens (the workload's 8k bound, clipped) packed into 8,192
    tokens: the plan holds two of them and a logit row a slot; without packing, one."""
    packed = api.load(LLAMA, ["hardware=dgx-h100", "serving.prompt_tokens=4096"])
    alone = api.load(
        LLAMA,
        ["hardware=dgx-h100", "serving.prompt_tokens=4096", "stack.prefill_batch_tokens=null"],
    )
    assert packed_prefill_tokens(packed, 4096, 16) == 8192
    assert packed_prefill_tokens(packed, 4096, 1) == 4096  # a prompt a slot
    assert packed_prefill_tokens(alone, 4096, 16) == 4096
    # TensorRT-LLM's prefill steps carry the decode rows: the prompt and a row (and logits)
    # for the one slot; a stack that prefills alone holds the prompt only
    assert activation_bytes(alone, 1) == pytest.approx(_step_bytes(alone, 4096 + 1, 2), abs=1)
    unmixed = api.load(
        LLAMA,
        [
            "hardware=dgx-h100",
            "serving.prompt_tokens=4096",
            "stack.prefill_batch_tokens=null",
            "stack.mixed_batching=false",
        ],
    )
    assert activation_bytes(unmixed, 1) == pytest.approx(_step_bytes(unmixed, 4096, 1), abs=1)
    assert activation_bytes(packed, 16) >= _step_bytes(packed, 8192, 16)
    assert activation_bytes(packed, 16) > activation_bytes(alone, 16)


def test_the_run_estimate_counts_a_shape_per_packed_batch_size() -> None:
    import numpy as np

    from rdu_sim.serving.limits import _prefill_counts

    prompts = np.array([100, 120, 300], dtype=np.int64)  # buckets 128 and 512
    assert _prefill_counts(prompts, 8192, None)[1] == 4
    # 128: up to min(16, 8192 // 128) = 16 batch sizes; 512: 16; each with and without selection
    assert _prefill_counts(prompts, 8192, None, 8192, 16)[1] == 2 * (16 + 16)
    assert _prefill_counts(prompts, 8192, None, 1024, 16)[1] == 2 * (8 + 2)


def test_a_paged_runtime_refuses_bad_buckets_as_a_static_one_does() -> None:
    bad = "kv.context_buckets=[100]"
    for hardware in ("sn40l", "dgx-h100"):
        with pytest.raises(ConfigError, match="do not cover max_context"):
            api.load(LLAMA, [f"hardware={hardware}", bad])


def test_a_coe_node_packs_prefills_when_its_runtime_does() -> None:
    """All at once, 16 prompts: packing takes fewer prefill steps and no later first token."""
    base = ["serving.arrival.process=all_at_once", "serving.requests=16"]
    one = api.run(COE, base).summary()
    packed = api.run(COE, [*base, "stack.prefill_batch_tokens=8192"]).summary()
    assert packed.steps.prefill < one.steps.prefill
    assert packed.requests_completed == one.requests_completed == 16
