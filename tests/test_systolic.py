"""One GEMM-efficiency formula: the compiler's stage-time estimate and the engine's timing
charge a stage's matrix work at the same efficiency (rdu_sim.systolic)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import rdu_sim.compiler.allocation as allocation
import rdu_sim.hw
import rdu_sim.hw.pcu_group
import rdu_sim.systolic
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.compile import _work
from rdu_sim.compiler.program import StageProgram
from rdu_sim.engine.tile_work import stage_efficiency
from rdu_sim.scenario import load_scenario
from rdu_sim.shapes import Gemm, StepShape

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [
    (1, 7168, 2048),
    (4, 1536, 7168),
    (32, 6, 64),
    (33, 7, 5),
    (7, 129, 512),
    (512, 512, 128),
    (8192, 8192, 8192),
    (3, 100000, 1),
]


def test_there_is_one_gemm_efficiency() -> None:
    assert rdu_sim.hw.gemm_efficiency is rdu_sim.systolic.gemm_efficiency
    assert rdu_sim.hw.pcu_group.gemm_efficiency is rdu_sim.systolic.gemm_efficiency
    assert rdu_sim.hw.pcu_group.DEFAULT_ARRAY_ROWS == rdu_sim.systolic.DEFAULT_ARRAY_ROWS
    assert not hasattr(allocation, "gemm_efficiency")


def _rdu_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.split(".")[0] == "rdu_sim"}


def test_shared_module_sits_below_compiler_and_hw() -> None:
    assert _rdu_imports(ROOT / "rdu_sim" / "systolic.py") == set()
    for path in (ROOT / "rdu_sim" / "compiler").glob("*.py"):
        assert not any(
            m.startswith("rdu_sim.hw") or m.startswith("rdu_sim.engine") for m in _rdu_imports(path)
        ), path


def _stage(gemm: Gemm | None, flops: float) -> StageProgram:
    return StageProgram(
        name="s",
        op="gemm",
        pcus=1,
        pmus=1,
        flops=flops,
        vector_flops=0.0,
        reads={},
        writes={},
        inputs=(),
        output_bytes=0.0,
        gemm=gemm,
    )


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_compiler_estimate_and_engine_agree(m: int, n: int, k: int) -> None:
    socket = load_scenario("workloads/deepseek-r1-128k-snapstream.yaml").hardware.socket
    pcu = socket.pcu
    flops = 2.0 * m * n * k
    stage = _stage(Gemm(m, n, k), flops)
    engine = stage_efficiency(stage, socket)
    compiler = _work(stage, {}, socket, 0.0, 0.0).compute
    assert compiler == flops / (pcu.peak_flops * engine)
    # padding only, beneath the ceiling: never above it, exactly it on aligned tiles
    assert 0 < engine <= pcu.max_gemm_efficiency
    rows, cols = pcu.systolic_rows, pcu.systolic_cols
    aligned = _stage(Gemm(rows * m, cols * n, k), flops)
    assert stage_efficiency(aligned, socket) == pcu.max_gemm_efficiency


def test_a_stage_without_a_gemm_runs_at_the_ceiling_in_both() -> None:
    socket = load_scenario("workloads/llama3.1-8b-1socket.yaml").hardware.socket
    stage = _stage(None, 1e9)
    assert stage_efficiency(stage, socket) == socket.pcu.max_gemm_efficiency
    assert _work(stage, {}, socket, 0.0, 0.0).compute == 1e9 / (
        socket.pcu.peak_flops * socket.pcu.max_gemm_efficiency
    )


@pytest.mark.parametrize(
    "workload", ["workloads/deepseek-r1-128k-snapstream.yaml", "workloads/llama3.1-8b-8socket.yaml"]
)
def test_every_compiled_stage_agrees(workload: str) -> None:
    scenario = load_scenario(workload)
    socket = scenario.hardware.socket
    compiler = Compiler(scenario)
    checked = 0
    for shape in (StepShape("decode", 3, 1, 4096), StepShape("prefill", 1, 40000, 0)):
        for kernel in compiler.program(shape).kernels:
            for stage in kernel.stages:
                if stage.gemm is None or not stage.flops:
                    continue
                pure = replace(stage, vector_flops=0.0, inputs=())  # matrix work only
                assert _work(pure, {}, socket, 0.0, 0.0).compute == pure.flops / (
                    socket.pcu.peak_flops * stage_efficiency(pure, socket)
                )
                checked += 1
    assert checked > 10
