"""Property-based tests: random valid hardware and workloads, run end to end, obey invariants.

Hypothesis draws a hardware variation (bandwidths, capacities, PCU/PMU counts and sizes,
latencies, kernel overheads of the 8-socket node scaled up and down), a model (small
Llama-style or DeepSeek-style architectures written inline, or the Llama 3.1 8B preset), a
tensor-parallel degree dividing the heads, one of the four KV policies, batch slots, context,
prompt/output length distributions, arrival process, prefill policy and seed. Each example
runs through ``rdu_sim.api.run`` with the real compiler and engine and must satisfy:

- time never goes backwards: per request arrival <= admission <= first token <= finish, the
  time series is ordered, and no decode is faster than its roofline allows;
- no memory tier is over capacity (the plan the run reports, per socket);
- the bytes the engine moved per tier are the bytes the compiled Program says, and its
  matrix FLOPs are the Program's;
- every request completes exactly once, and the tokens produced are the sum of the
  (context-clipped) output lengths;
- no step beats its roofline (bytes per tier over that tier's peak bandwidth, FLOPs over the
  socket's peak) and so aggregate decode throughput stays under the bound derived from the
  decode Programs: batch slots over the roofline time of the cheapest decode step;
- SnapStream never plans more KV memory than full attention for the same slots.

A configuration that is invalid by a cross-rule (a batch that does not fit, a KV budget the
policy rejects) must raise the documented input errors (ConfigError, CapacityError) and
nothing else. Examples are derandomized (the same ones on every run, as CI needs) and bounded
so the file runs in well under a minute and a half on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from rdu_sim import api
from rdu_sim.compiler import (
    CapacityError,
    batch_capacity,
    compile_program,
    kv_bytes,
    plan_memory,
)
from rdu_sim.compiler.program import TIERS, Program
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware import SocketConfig
from rdu_sim.scenario import Scenario, build_scenario
from rdu_sim.serving.records import UNSET, ServingRecords
from rdu_sim.serving.requests import clip_to_context

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_FILE = str(ROOT / "workloads" / "property.yaml")  # never read: names the origin
HARDWARE = str(ROOT / "hw_configs" / "sn40l-8.yaml")
SOCKETS = 8
INPUT_ERRORS = (ConfigError, CapacityError)
RTOL = 1e-9  # float sums in a different order; step times rounded to picoseconds

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- strategies ----------------------------------------------------------------------------


def _scaled(base: float, unit: str) -> st.SearchStrategy[str]:
    """A unit string of ``base`` times a factor between 1/8 and 8 (log-uniform)."""
    return st.floats(-3.0, 3.0).map(lambda e: f"{base * 2.0**e:.6g} {unit}")


@st.composite
def hardware_overrides(draw: st.DrawFn) -> dict[str, Any]:
    """``hw.`` overrides that vary every resource the engine times, within valid ranges."""
    return {
        "hw.socket.hbm.bandwidth": draw(_scaled(1.8, "TB/s")),
        "hw.socket.hbm.capacity": f"{draw(st.sampled_from([1, 4, 16, 64, 128]))} GiB",
        "hw.socket.hbm.latency": f"{draw(st.sampled_from([0, 100, 500, 2000]))} ns",
        "hw.socket.hbm.efficiency": draw(st.sampled_from([0.5, 0.9, 1.0])),
        "hw.socket.ddr.bandwidth": draw(_scaled(200, "GB/s")),
        "hw.socket.ddr.capacity": f"{draw(st.sampled_from([2, 64, 1536]))} GiB",
        "hw.socket.ddr.latency": f"{draw(st.sampled_from([0, 800]))} ns",
        "hw.socket.pcu.count": draw(st.sampled_from([64, 260, 1040, 2080])),
        "hw.socket.pcu.peak_flops": draw(_scaled(613.46, "GFLOP/s")),
        # SRAM from 1/8 to 2x the SN40L's 520 MiB: at less, the compiler tiles each layer so
        # finely (it must fit the PMUs) that an example costs minutes; test_compiler_sram
        # covers SRAM that limits.
        "hw.socket.pmu.count": draw(st.sampled_from([260, 520, 1040])),
        "hw.socket.pmu.sram": f"{draw(st.sampled_from([256, 512, 1024]))} KiB",
        "hw.socket.pmu.bandwidth": draw(_scaled(204.8, "GB/s")),
        "hw.socket.usable_fraction": draw(st.sampled_from([0.5, 0.9, 1.0])),
        "hw.socket.kernel.sync": f"{draw(st.sampled_from([0, 1, 10, 50]))} us",
        "hw.socket.kernel.program_load": f"{draw(st.sampled_from([0, 5]))} us",
        "hw.system.intra_node_link.bandwidth": draw(_scaled(64, "GB/s")),
        "hw.system.intra_node_link.latency": f"{draw(st.sampled_from([0, 1, 5]))} us",
        **draw(
            st.sampled_from(
                [
                    {"hw.system.collective_algorithm": "ring"},
                    {"hw.system.collective_algorithm": "bidirectional_ring"},
                    {
                        "hw.system.collective_algorithm": "tree",
                        "hw.system.topology": "fully_connected",
                    },
                ]
            )
        ),
    }


@st.composite
def llama_model(draw: st.DrawFn) -> dict[str, Any]:
    """A small Llama-style architecture (GQA: heads a multiple of kv_heads)."""
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    return {
        "family": "llama",
        "name": "tiny-llama",
        "vocab_size": draw(st.sampled_from([256, 4096, 32000])),
        "hidden_size": draw(st.sampled_from([heads * head_dim, 256, 1024])),
        "layers": draw(st.integers(1, 6)),
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "ffn_intermediate": draw(st.sampled_from([64, 512, 2816])),
        "max_context": 131072,
        "tie_embeddings": draw(st.booleans()),
    }


@st.composite
def deepseek_model(draw: st.DrawFn) -> dict[str, Any]:
    """A small DeepSeek-style architecture (MLA, dense then MoE layers)."""
    layers = draw(st.integers(1, 4))
    experts = draw(st.sampled_from([4, 8, 16]))
    return {
        "family": "deepseek",
        "name": "tiny-deepseek",
        "vocab_size": draw(st.sampled_from([256, 4096])),
        "hidden_size": draw(st.sampled_from([256, 512])),
        "layers": layers,
        "dense_layers": draw(st.integers(0, layers)),
        "heads": draw(st.sampled_from([2, 4, 8])),
        "q_lora_rank": 96,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "ffn_intermediate": 512,
        "moe_intermediate": 128,
        "routed_experts": experts,
        "experts_per_token": draw(st.sampled_from([1, 2, 4])),
        "shared_experts": draw(st.integers(0, 1)),
        "max_context": 131072,
    }


def _length(draw: st.DrawFn, top: int) -> dict[str, Any] | int:
    """A length distribution reaching at most ``top`` tokens (clipping may still apply)."""
    kind = draw(st.sampled_from(["fixed", "uniform", "lognormal", "int"]))
    if kind == "int":
        return draw(st.integers(1, top))
    if kind == "fixed":
        return {"dist": "fixed", "value": draw(st.integers(1, top))}
    low = draw(st.integers(1, top))
    high = draw(st.integers(low, top))
    if kind == "uniform":
        return {"dist": "uniform", "low": low, "high": high}
    return {
        "dist": "lognormal",
        "median": float(draw(st.integers(low, high))),
        "sigma": draw(st.sampled_from([0.0, 0.5, 1.5])),
        "low": low,
        "high": high,
    }


@st.composite
def workloads(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(workload data, hw overrides): small enough to simulate in well under a second."""
    model_kind = draw(st.sampled_from(["llama", "llama", "llama", "deepseek", "preset"]))
    model: dict[str, Any] | str
    if model_kind == "llama":
        model = draw(llama_model())
        heads = model["heads"]
    elif model_kind == "deepseek":
        model = draw(deepseek_model())
        heads = model["heads"]
    else:
        model, heads = "llama-3.1-8b", 32
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if heads % t == 0 and t <= SOCKETS]))
    max_context = draw(st.sampled_from([64, 256, 1024, 2048, 4096]))
    policy = draw(st.sampled_from(["full", "snapstream", "streamingllm", "snapkv"]))
    kv: dict[str, Any] = {"policy": policy}
    if policy != "full":
        kv["recent"] = draw(st.sampled_from([8, 64, 256]))
        kv["sinks"] = draw(st.sampled_from([0, 4]))
        kv["observation_window"] = draw(st.sampled_from([4, 32]))
        if policy != "streamingllm":  # StreamingLLM's budget is sinks + recent
            kv["budget"] = draw(st.sampled_from([300, 512, 1500]))
    if policy == "full" and draw(st.booleans()):
        kv["min_bucket"] = draw(st.sampled_from([16, 128, 1024]))
    arrival = draw(st.sampled_from(["poisson", "closed_loop", "all_at_once"]))
    arrival_cfg: dict[str, Any] = {"process": arrival}
    if arrival == "poisson":
        arrival_cfg["rate"] = draw(st.sampled_from([1.0, 100.0, 10_000.0]))
    elif arrival == "closed_loop" and draw(st.booleans()):
        arrival_cfg["concurrency"] = draw(st.integers(1, 6))
    serving: dict[str, Any] = {
        "batch_slots": draw(st.one_of(st.integers(1, 8), st.just("auto"))),
        "max_context": max_context,
        "prompt_tokens": _length(draw, max_context + 64),
        "output_tokens": _length(draw, min(max_context, 300)),
        "arrival": arrival_cfg,
        "requests": draw(st.integers(1, 10) if model_kind != "preset" else st.integers(1, 4)),
        "seed": draw(st.integers(0, 2**32)),
        "prefill_priority": draw(st.sampled_from(["prefill_first", "decode_first"])),
    }
    if draw(st.booleans()):
        serving["prefill_chunk_tokens"] = draw(st.sampled_from([32, 256, 1024]))
    data = {
        "name": "property",
        "hardware": HARDWARE,
        "model": model,
        "dtypes": {
            "weights": draw(st.sampled_from(["bf16", "fp8"])),
            "kv": draw(st.sampled_from(["bf16", "fp8"])),
        },
        "parallelism": {
            "tp": tp,
            "mla_cache_layout": draw(
                st.sampled_from(["replicated", "sequence_split", "head_split"])
            ),
        },
        "kv": kv,
        "kernel_looping": draw(st.booleans()),
        "serving": serving,
        "engine": {"tiles_per_stage": draw(st.sampled_from([1, 4, 8]))},
    }
    return data, draw(hardware_overrides())


# --- helpers -------------------------------------------------------------------------------


def _scenario(data: dict[str, Any], hw: dict[str, Any]) -> Scenario | None:
    """The validated scenario, or None when a cross-rule rejects it (with a ConfigError)."""
    try:
        return build_scenario(data, workload_file=WORKLOAD_FILE, overrides=hw)
    except ConfigError as exc:
        assert str(exc)
        event(f"rejected: {str(exc).splitlines()[-1].split(':')[-1].strip()[:40]}")
        return None


def _run(scenario: Scenario) -> api.RunResult | None:
    """``api.run``, or None when it refuses the input with a documented input error."""
    try:
        return api.run(scenario)
    except INPUT_ERRORS as exc:
        assert str(exc), "an input error must say what is wrong"
        event(f"refused: {type(exc).__name__}")
        return None


def roofline_s(program: Program, socket: SocketConfig) -> float:
    """The least time one step of ``program`` can take on one socket: every tier's bytes at
    that tier's peak bandwidth, and the matrix FLOPs at the socket's peak FLOP/s."""
    moved = program.bytes_by_tier()
    return max(
        moved["hbm"] / socket.hbm.bandwidth,
        moved["ddr"] / socket.ddr.bandwidth,
        moved["sram"] / (socket.pmu.count * socket.pmu.bandwidth),
        program.flops / socket.peak_flops,
    )


@dataclass(frozen=True)
class _Rooflines:
    """The least step time of the run's cheapest decode and prefill shapes (s, inf if none)."""

    decode_s: float
    prefill_s: float


def _check_steps(result: api.RunResult) -> _Rooflines:
    """Every simulated shape: engine bytes and FLOPs are the Program's; step >= roofline."""
    scenario, socket = result.scenario, result.scenario.hardware.socket
    least = {"decode": float("inf"), "prefill": float("inf")}
    assert result.cache.shapes, "a run simulates at least one shape"
    for shape in result.cache.shapes:
        program = compile_program(scenario, shape)
        timing: Any = result.cache.cost(shape).detail
        expected = program.bytes_by_tier()
        for tier in TIERS:
            assert timing.bytes_by_tier[tier] == pytest.approx(
                expected[tier], rel=RTOL, abs=1e-6
            ), (shape, tier)
        assert timing.flops == pytest.approx(program.flops, rel=RTOL, abs=1e-6), shape
        bound = roofline_s(program, socket)
        assert timing.step_s >= bound * (1 - RTOL), (shape, timing.step_s, bound)
        assert result.cache.step_s(shape) >= bound * (1 - RTOL) - 1e-12, shape
        for kind, value in timing.utilization.items():
            assert 0.0 <= value <= 1 + 1e-9, (shape, kind, value)
        least[shape.phase] = min(least[shape.phase], bound)
    return _Rooflines(least["decode"], least["prefill"])


def _check_requests(
    records: ServingRecords, clipped_output: np.ndarray[Any, Any], roof: _Rooflines
) -> None:
    """Each request ran once, in time order, no faster than the decode roofline."""
    assert (records.completions == 1).all(), "every request completes exactly once"
    for column in (
        records.arrival_ps,
        records.admit_ps,
        records.first_token_ps,
        records.finish_ps,
        records.slot,
    ):
        assert (column != UNSET).all()
    assert (records.arrival_ps >= 0).all()
    assert (records.arrival_ps <= records.admit_ps).all()
    assert (records.admit_ps < records.first_token_ps).all()
    assert (records.first_token_ps <= records.finish_ps).all()
    assert (records.output_tokens == clipped_output).all()
    decode_steps = records.output_tokens - 1
    if decode_steps.any():
        least_ps = np.floor(decode_steps * roof.decode_s * 1e12 * (1 - 1e-6))
        assert (records.finish_ps - records.first_token_ps >= least_ps).all()
    times = records.series_array()
    assert len(times) > 0
    assert (np.diff(times[:, 0]) >= 0).all(), "the time series goes back in time"
    assert (times[:, 1:4] >= 0).all()


def _check_throughput(result: api.RunResult, data: dict[str, Any], roof: _Rooflines) -> None:
    """Tokens produced after the first first-token need steps, each no faster than its
    roofline: at most ``batch_slots`` tokens per decode step, one per prefill step."""
    records, slots = result.records, result.batch_slots
    span = (records.finish_ps.max() - records.first_token_ps.min()) / 1e12
    tokens = int(records.output_tokens.sum())
    best_rate = max(slots / roof.decode_s, 1 / roof.prefill_s)
    assert tokens - 1 <= best_rate * span * (1 + 1e-6) + 1e-9, (tokens, span, best_rate)
    if span > 0:
        assert data["decode_tokens_per_s"] <= (best_rate + 1 / span) * (1 + 1e-6)
        assert data["decode_tokens_per_s"] == pytest.approx(tokens / span, rel=1e-9)


def _check_memory(result: api.RunResult, data: dict[str, Any]) -> None:
    """No tier over capacity, in the plan and in the reported JSON."""
    for tier, usage in result.placement.tiers.items():
        assert 0 <= usage.used_bytes <= usage.capacity_bytes, (tier, usage)
    for tier, row in data["memory"].items():
        assert row["used_bytes"] <= row["capacity_bytes"], (tier, row)
        assert row["free_bytes"] >= 0
        assert row["used_bytes"] == (
            row["weights_bytes"] + row["kv_bytes"] + row["activations_bytes"]
        )
    # Explicit slots may exceed the capacity (which keeps every weight in HBM) by spilling
    # weights to DDR; 'auto' is exactly the capacity.
    assert data["batch_slots"] == result.batch_slots >= 1
    if result.scenario.workload.serving.batch_slots == "auto":
        assert result.batch_slots == result.batch_capacity
    if result.scenario.workload.serving.batch_slots == "auto":
        assert result.batch_slots == result.batch_capacity


# --- the properties ------------------------------------------------------------------------


def _check_run(result: api.RunResult) -> None:
    """Every invariant of one finished run (see the module docstring)."""
    scenario, out = result.scenario, result.to_dict()
    n = scenario.workload.serving.requests
    _, clipped = clip_to_context(
        result.requests_in.prompt_tokens,
        result.requests_in.output_tokens,
        scenario.workload.serving.max_context,
    )
    assert out["requests"] == n == len(result.records)
    assert out["requests_completed"] == n
    assert out["output_tokens"] == int(clipped.sum()) == result.records.tokens_generated
    roof = _check_steps(result)
    _check_requests(result.records, clipped, roof)
    _check_throughput(result, out, roof)
    _check_memory(result, out)
    assert out["occupancy"] <= 1 + 1e-9 and out["decode_slot_fill"] <= 1 + 1e-9
    for value in out["utilization"].values():
        assert 0.0 <= value <= 1 + 1e-9


@pytest.mark.slow
@SETTINGS
@given(case=workloads())
def test_random_workloads_obey_the_invariants(
    case: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Small custom models and the Llama 3.1 8B preset on varied hardware, end to end."""
    data, hw = case
    scenario = _scenario(data, hw)
    assume(scenario is not None)
    assert scenario is not None
    result = _run(scenario)
    assume(result is not None)
    assert result is not None
    _check_run(result)


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    workload=st.sampled_from(sorted((ROOT / "workloads").glob("*.yaml"))),
    policy=st.sampled_from(["full", "snapstream", "streamingllm", "snapkv"]),
    max_context=st.sampled_from([2048, 8192]),
    requests=st.integers(1, 4),
    slots=st.sampled_from([1, 3, "auto"]),
    seed=st.integers(0, 1000),
)
def test_shipped_presets_obey_the_invariants(
    workload: Path, policy: str, max_context: int, requests: int, slots: int | str, seed: int
) -> None:
    """The shipped workloads (DeepSeek-R1 and Llama 3.1 presets) at a few requests."""
    overrides: dict[str, Any] = {
        "kv.policy": policy,
        "serving.max_context": max_context,
        "serving.requests": requests,
        "serving.batch_slots": slots,
        "serving.seed": seed,
        "serving.prompt_tokens": {"dist": "uniform", "low": 1, "high": max_context},
        "serving.output_tokens": {"dist": "uniform", "low": 1, "high": 64},
    }
    if policy != "full":
        overrides.update({"kv.budget": 1024, "kv.recent": 256})
    try:
        scenario = api.load(workload, overrides)
    except ConfigError:
        return
    result = _run(scenario)
    assume(result is not None)
    assert result is not None
    _check_run(result)


def _with_policy(data: dict[str, Any], policy: str) -> dict[str, Any]:
    kv = dict(data["kv"], policy=policy)
    if policy == "full":
        kv = {"policy": "full"}
    return dict(data, kv=kv)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=workloads(), slots=st.integers(1, 64))
def test_snapstream_never_holds_more_kv_than_full(
    case: tuple[dict[str, Any], dict[str, Any]], slots: int
) -> None:
    """For the same slots, SnapStream's KV bytes (and its plan's) <= full attention's, and
    its batch capacity >= full's."""
    data, hw = case
    data = dict(data, serving=dict(data["serving"], batch_slots=slots))
    snap_data = _with_policy(data, "snapstream")
    snap_data["kv"].setdefault("budget", 512)
    snap_data["kv"].setdefault("recent", 64)
    snap = _scenario(snap_data, hw)
    full = _scenario(_with_policy(data, "full"), hw)
    assume(snap is not None and full is not None)
    assert snap is not None and full is not None
    assert kv_bytes(snap, slots) <= kv_bytes(full, slots)
    try:
        full_plan = plan_memory(full, slots)
    except CapacityError:
        return  # full does not fit: nothing to compare the plan with
    snap_plan = plan_memory(snap, slots)  # fits if full fits: CapacityError here fails
    assert sum(t.kv_bytes for t in snap_plan.tiers.values()) <= sum(
        t.kv_bytes for t in full_plan.tiers.values()
    )
    assert batch_capacity(snap, strict=False) >= batch_capacity(full, strict=False)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=workloads(), hbm_gib=st.sampled_from([1, 2, 4]), slots=st.integers(1, 100_000))
def test_oversized_batches_raise_capacity_error_only(
    case: tuple[dict[str, Any], dict[str, Any]], hbm_gib: int, slots: int
) -> None:
    """A batch or model that does not fit is a CapacityError from api.run, never anything
    else (and never a silently overfull plan)."""
    data, hw = case
    data = dict(
        data,
        serving=dict(
            data["serving"], batch_slots=slots, requests=1, output_tokens=1, prompt_tokens=8
        ),
    )
    hw = dict(hw, **{"hw.socket.hbm.capacity": f"{hbm_gib} GiB", "hw.socket.ddr.capacity": "1 GiB"})
    scenario = _scenario(data, hw)
    assume(scenario is not None)
    assert scenario is not None
    result = _run(scenario)
    if result is not None:
        for usage in result.placement.tiers.values():
            assert usage.used_bytes <= usage.capacity_bytes
