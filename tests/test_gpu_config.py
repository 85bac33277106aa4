"""A second kind of hardware: GPU systems (`kind: gpu`) load, validate and plan memory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler import CapacityError, batch_capacity, plan_memory
from rdu_sim.config import ConfigError, HardwareConfig, load_model
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware_file import validate_hardware
from rdu_sim.config.loader import read_yaml
from rdu_sim.scenario import Scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
DGX = REPO / "hw_configs" / "dgx-h100.yaml"
WORKLOAD = REPO / "workloads" / "llama3.1-8b-8socket.yaml"


def gpu_scenario(**overrides: object) -> Scenario:
    """Llama 3.1 8B on the DGX H100 (8-way tensor parallel)."""
    return load_scenario(WORKLOAD, {"hardware": str(DGX), **overrides})


def test_dgx_h100_holds_the_public_figures() -> None:
    data, lines = read_yaml(DGX)
    hardware = validate_hardware(data, str(DGX), lines)
    assert isinstance(hardware, GpuHardwareConfig)
    gpu = hardware.gpu
    assert gpu.bf16_flops == 989e12 and gpu.fp8_flops == 1979e12
    assert hardware.peak_flops == 989e12
    assert gpu.vector_flops == 67e12
    assert gpu.hbm.bandwidth == 3.35e12 and hardware.hbm is gpu.hbm
    assert gpu.hbm.capacity == 80 * 2**30
    assert hardware.system.sockets == hardware.system.sockets_per_node == 8
    assert hardware.system.intra_node_link.bandwidth == 370e9  # NCCL's share of 450 GB/s
    assert (hardware.system.topology, hardware.system.collective_algorithm) == ("switched", "auto")
    assert hardware.kind == "gpu"


def test_a_file_without_kind_is_sn40l_and_its_dump_has_no_kind() -> None:
    path = REPO / "hw_configs" / "sn40l.yaml"
    data, lines = read_yaml(path)
    hardware = validate_hardware(data, str(path), lines)
    assert isinstance(hardware, HardwareConfig) and hardware.kind == "rdu"
    # SN40L configurations dump (and so hash, in sweep keys) as they did before GPUs
    assert "kind" not in hardware.model_dump(mode="json")
    explicit = validate_hardware({**data, "kind": "rdu"}, str(path), lines)
    assert explicit == hardware


def test_unknown_kind_is_named_with_the_valid_ones(tmp_path: Path) -> None:
    data, lines = read_yaml(DGX)
    with pytest.raises(ConfigError) as info:
        validate_hardware({**data, "kind": "tpu"}, "x.yaml", lines)
    issue = info.value.issues[0]
    assert issue.field == "kind" and issue.line == 1
    assert "'tpu'" in issue.message and "gpu, rdu" in issue.message


def test_gpu_file_is_strict_like_every_config(tmp_path: Path) -> None:
    target = tmp_path / "gpu.yaml"
    text = DGX.read_text().replace("  max_gemm_efficiency:", "  max_gemm_eficiency:")
    target.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_model(GpuHardwareConfig, target)
    message = str(info.value)
    assert "gpu.max_gemm_eficiency" in message and "max_gemm_efficiency" in message
    target.write_text(DGX.read_text().replace("bandwidth: 3.35 TB/s", "bandwidth: -3 TB/s"))
    with pytest.raises(ConfigError, match=r"gpu\.hbm\.bandwidth"):
        load_model(GpuHardwareConfig, target)


def test_a_workload_runs_on_either_kind_by_its_hardware_field(tmp_path: Path) -> None:
    shutil.copy(DGX, tmp_path / "dgx-h100.yaml")
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD.read_text().replace("../hw_configs/sn40l-8.yaml", "dgx-h100.yaml"))
    scenario = load_scenario(workload)
    assert scenario.hardware.kind == "gpu" and scenario.hardware.name == "dgx-h100"
    with pytest.raises(ConfigError, match=r"parallelism\.tp"):
        load_scenario(workload, {"parallelism.tp": 16})  # 8 GPUs


def test_gpu_memory_plan_is_hbm_only() -> None:
    scenario = gpu_scenario(stack="none")  # a stack that gives its KV cache all it can
    capacity = batch_capacity(scenario)
    placement = plan_memory(scenario, capacity)
    assert placement.tiers["ddr"].capacity_bytes == 0
    assert placement.tiers["sram"].capacity_bytes == 0
    hbm = placement.tiers["hbm"]
    assert hbm.capacity_bytes == 80 * 2**30 and hbm.used_bytes <= hbm.capacity_bytes
    assert all(t.tier == "hbm" for t in placement.tensors)
    with pytest.raises(CapacityError):
        plan_memory(scenario, capacity + 1)


def test_the_stack_decides_how_much_of_the_memory_its_kv_cache_takes() -> None:
    """A stack's kv_memory_fraction scales what is left beside the weights and activations,
    and its max_batch_slots caps the batch whatever the memory holds."""
    whole = batch_capacity(gpu_scenario(stack="none"))
    half = batch_capacity(gpu_scenario(stack="none", **{"stack.kv_memory_fraction": 0.5}))
    assert whole // 2 - 2 <= half <= whole // 2 + 2  # activations shrink with the slots too
    capped = gpu_scenario(stack="none", **{"stack.max_batch_slots": 7})
    assert batch_capacity(capped) == 7
    assert batch_capacity(gpu_scenario()) <= gpu_scenario().stack.max_batch_slots  # type: ignore[operator]


def test_a_model_the_gpus_cannot_hold_says_so_without_ddr_advice() -> None:
    scenario = gpu_scenario(model="llama-3.1-405b", **{"serving.batch_slots": 1})
    with pytest.raises(CapacityError) as info:
        plan_memory(scenario, 1)
    message = str(info.value)
    assert "do not fit" in message and "hw.system.sockets" in message
    assert "DDR (hw.socket" not in message
    with pytest.raises(CapacityError, match="the weights alone do not fit"):
        batch_capacity(scenario)


def test_dgx_h200_is_the_h100_with_its_datasheet_memory() -> None:
    """dgx-h200 restates only its HBM (141 GB at 4.8 TB/s): compute, links, power and the
    default stack are dgx-h100's, and a memory-bound decode step speeds up by at most the
    bandwidth ratio (the step's fixed costs do not shrink)."""
    h100 = gpu_scenario()
    h200 = gpu_scenario(hardware="dgx-h200")
    a, b = h100.hardware, h200.hardware
    assert isinstance(a, GpuHardwareConfig) and isinstance(b, GpuHardwareConfig)
    assert (b.gpu.hbm.capacity, b.gpu.hbm.bandwidth) == (141 * 2**30, 4.8e12)
    assert b.gpu.hbm.efficiency == a.gpu.hbm.efficiency
    assert b.gpu.model_dump(exclude={"hbm"}) == a.gpu.model_dump(exclude={"hbm"})
    assert b.system == a.system and b.power == a.power and h200.stack == h100.stack
    step = {s.hardware.name: api.step(s, batch=32).detail.device_s for s in (h100, h200)}  # type: ignore[attr-defined]
    speedup = step["dgx-h100"] / step["dgx-h200"]
    assert 1.0 < speedup <= 4.8 / 3.35 + 1e-9
