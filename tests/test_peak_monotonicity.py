"""A faster resource never makes a step slower: the step time of GPU decode and prefill
steps never rises as a tensor-core peak (``bf16_flops``, ``fp8_flops``) or the GEMM
efficiency (``max_gemm_efficiency``) rises, all else equal; nor SN40L's as ``peak_flops``
does.

Why: a GPU kernel's tile prefetches used to share the HBM fairly with each other, so the
loads a fast tile loop issued together ended together, and the next ones waited a whole
latency on an idle HBM: more FLOP/s made a memory-bound decode step slower (70B on a DGX
H100 at batch 32: 16.68 ms at 400 TFLOP/s, 16.80 ms at 4,000). A kernel's reads now arrive
in order (``engine.gpu.kernel``).
"""

from __future__ import annotations

from typing import Any

import pytest

from rdu_sim.api import default_step_shape
from rdu_sim.compiler import Compiler
from rdu_sim.engine.for_hardware import engine_for
from rdu_sim.scenario import load_scenario

GPU_70B = {"hardware": "dgx-h100", "serving.batch_slots": 32}
GPU_8B = {"hardware": "dgx-h100", "parallelism.tp": 1, "serving.batch_slots": 32}
FP8 = {"dtypes.weights": "fp8", "dtypes.kv": "fp8"}

CASES: list[tuple[str, str, dict[str, Any], str, str, tuple[Any, ...]]] = [
    # (id, workload, overrides, phase, the peak swept, its values in increasing order)
    (
        "70b-tp8-decode-bf16",
        "llama3.1-70b-decode",
        GPU_70B,
        "decode",
        "hw.gpu.bf16_flops",
        ("400 TFLOP/s", "989 TFLOP/s", "1600 TFLOP/s", "4000 TFLOP/s"),
    ),
    (
        "8b-1gpu-decode-bf16-whole",
        "llama3.1-8b-1socket",
        {**GPU_8B, "stack.decode_attention_split": "whole"},
        "decode",
        "hw.gpu.bf16_flops",
        ("400 TFLOP/s", "989 TFLOP/s", "4000 TFLOP/s"),
    ),
    (
        "70b-tp8-decode-fp8",
        "llama3.1-70b-decode",
        {**GPU_70B, **FP8},
        "decode",
        "hw.gpu.fp8_flops",
        ("990 TFLOP/s", "1979 TFLOP/s", "4000 TFLOP/s"),
    ),
    (
        "70b-tp8-decode-efficiency",
        "llama3.1-70b-decode",
        GPU_70B,
        "decode",
        "hw.gpu.max_gemm_efficiency",
        (0.3, 0.6, 0.9),
    ),
    (
        "8b-1gpu-prefill-bf16",
        "llama3.1-8b-1socket",
        GPU_8B,
        "prefill",
        "hw.gpu.bf16_flops",
        ("400 TFLOP/s", "989 TFLOP/s", "4000 TFLOP/s"),
    ),
    (
        "8b-1gpu-prefill-efficiency",
        "llama3.1-8b-1socket",
        GPU_8B,
        "prefill",
        "hw.gpu.max_gemm_efficiency",
        (0.3, 0.6, 0.9),
    ),
    (
        "sn40l-8b-decode-peak",
        "llama3.1-8b-1socket",
        {"serving.batch_slots": 32},
        "decode",
        "hw.socket.pcu.peak_flops",
        ("300 GFLOP/s", "613.4615385 GFLOP/s", "1200 GFLOP/s"),
    ),
]


def step_s(workload: str, overrides: dict[str, Any], phase: str) -> float:
    """The simulated device step time of ``workload`` with ``overrides``."""
    scenario = load_scenario(workload, overrides)
    shape = default_step_shape(scenario, phase)
    return engine_for(scenario).simulate_step(Compiler(scenario).program(shape)).step_s


@pytest.mark.parametrize(
    ("workload", "overrides", "phase", "field", "values"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_step_never_gets_slower_as_a_peak_rises(
    workload: str, overrides: dict[str, Any], phase: str, field: str, values: tuple[Any, ...]
) -> None:
    times = [step_s(workload, {**overrides, field: value}, phase) for value in values]
    for (low, slow), (high, fast) in zip(
        zip(values, times, strict=True), zip(values[1:], times[1:], strict=True), strict=False
    ):
        assert fast <= slow * (1 + 1e-12), (
            f"{field} {low} -> {high}: step {slow * 1e3:.6f} -> {fast * 1e3:.6f} ms"
        )
