"""`rdu-sim step` and the engine on Programs from the real compiler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.compiler import Compiler
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import simulate_step
from rdu_sim.engine.fast_forward import STATE_RTOL
from rdu_sim.scenario import load_scenario
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml")
DEEPSEEK = str(ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml")
DEEPSEEK_FULL = str(ROOT / "workloads" / "deepseek-r1-128k-full.yaml")
ZERO_OVERHEADS = [
    "hw.socket.hbm.latency=0 s",
    "hw.socket.ddr.latency=0 s",
    "hw.socket.kernel.program_load=0 s",
    "hw.socket.kernel.argument_load=0 s",
    "hw.socket.kernel.sync=0 s",
    "hw.socket.kernel.layer_loop=0 s",
    "stack.host.serial_per_step=0 s",
    "stack.host.serial_per_slot=0 s",
]


def test_batch_one_llama_8b_decode_is_hbm_bound() -> None:
    scenario = load_scenario(LLAMA, ZERO_OVERHEADS)
    program = Compiler(scenario).program(StepShape("decode", 1, 1, 8192))
    t = simulate_step(program, scenario.hardware)
    hbm = scenario.hardware.socket.hbm
    assert t.bytes_by_tier["hbm"] == program.bytes_by_tier()["hbm"]
    assert t.step_s == pytest.approx(
        t.bytes_by_tier["hbm"] / (hbm.bandwidth * hbm.efficiency), rel=0.03
    )


def test_compiled_deepseek_step_conserves_bytes_and_fast_forwards_exactly() -> None:
    # the full-attention step on the ring, link and HBM efficiency this was measured on
    # (test_engine_compiled.RING): SnapStream's MoE layers never repeat their state (with the
    # compiler's two-layer loop buffers) and are simulated in full
    ring = ["hw.system.topology=ring", "hw.system.collective_algorithm=ring"]
    two_nodes = "hw.system.sockets_per_node=8"
    link = "hw.system.intra_node_link.bandwidth=17.73 GB/s"
    scenario = load_scenario(
        DEEPSEEK_FULL, [*ring, two_nodes, link, "hw.socket.hbm.efficiency=0.9"]
    )
    compiler = Compiler(scenario)
    program = compiler.program(StepShape("decode", compiler.batch_slots(), 1, 32768))
    fast = simulate_step(program, scenario.hardware)
    full = simulate_step(program, scenario.hardware, EngineConfig(fast_forward=False))
    # On the ring over two nodes the MoE layers' state repeats from boundary ~20: the run is
    # cut at 23 of 58 layers and is the full simulation's to float rounding (fast_forward)
    assert fast.step_s == pytest.approx(full.step_s, rel=STATE_RTOL)
    assert fast.events < full.events * 0.8
    for tier, value in program.bytes_by_tier().items():
        assert fast.bytes_by_tier[tier] == pytest.approx(value, rel=1e-12)
        assert full.bytes_by_tier[tier] == pytest.approx(value, rel=1e-12)
    assert all(u <= 1 + 1e-9 for u in fast.utilization.values())


def test_step_json_has_the_contract_keys_and_writes_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "step.json"
    result = CliRunner().invoke(
        cli, ["step", LLAMA, "--json", "--batch", "2", "--context", "1000", "--trace", str(trace)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in (
        "step_s",
        "phase",
        "batch",
        "context",
        "flops",
        "bytes_by_tier",
        "hbm_bandwidth_fraction",
        "events",
        "kernels",
    ):
        assert key in data
    assert set(data["bytes_by_tier"]) >= {"hbm", "ddr", "sram", "p2p"}
    assert data["phase"] == "decode" and data["batch"] == 2
    assert data["context"] >= 1000  # rounded up to the policy's decode bucket
    assert [k["name"] for k in data["kernels"]] == ["embedding", "decoder", "lm_head"]
    assert data["step_s"] > 0 and data["events"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "C"}


def test_step_trace_holds_every_socket_at_the_same_step_time(tmp_path: Path) -> None:
    """--trace simulates all 8 sockets by default (a process each); --trace-sockets one keeps
    the symmetric shortcut; the step time is the same."""
    eight = str(Path(LLAMA).with_name("llama3.1-8b-8socket.yaml"))
    times, pids = {}, {}
    for sockets in ("all", "one"):
        trace = tmp_path / f"{sockets}.json"
        args = ["step", eight, "--json", "--trace", str(trace), "--trace-sockets", sockets]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        times[sockets] = json.loads(result.stdout)["step_s"]
        events = json.loads(trace.read_text())["traceEvents"]
        pids[sockets] = {e["pid"] for e in events if e["name"] == "process_name"}
    assert pids == {"all": set(range(8)), "one": {0}}
    assert times["all"] == pytest.approx(times["one"], rel=1e-9)


def test_step_prefill_defaults_to_the_typical_prompt() -> None:
    result = CliRunner().invoke(
        cli, ["step", LLAMA, "--json", "--phase", "prefill", "--tokens", "1024"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["phase"], data["batch"], data["tokens"], data["context"]) == (
        "prefill",
        1,
        1024,
        0,
    )
    assert data["flops_fraction"] > 0.3  # a 1k-token prefill is compute-heavy


def test_step_prints_tables() -> None:
    result = CliRunner().invoke(cli, ["step", LLAMA, "--batch", "1"])
    assert result.exit_code == 0, result.output
    for word in ("step time", "kernels", "decoder", "hbm", "busy (share of step)"):
        assert word in result.stdout


def test_step_header_says_what_a_sliding_window_layer_reads() -> None:
    """Mistral-7B slides every layer over 4,096 tokens: a step of 32,768 cached tokens reads
    at most 4,095 of them a layer, and the header says so beside the count."""
    from rdu_sim.cli.step_cmd import window_words

    mistral = load_scenario(LLAMA, {"model": "mistral-7b", "serving.max_context": 32768})
    assert window_words(mistral.model, 32768) == (
        " (every layer slides over a 4,096-token window, reading at most 4,095 of them)"
    )
    assert window_words(mistral.model, 2048) == ""  # the window holds the whole cache
    assert window_words(load_scenario(LLAMA).model, 32768) == ""  # full attention
    sets = ["--set", "model=mistral-7b", "--set", "serving.max_context=32768", "--batch", "1"]
    result = CliRunner().invoke(cli, ["step", LLAMA, *sets, "--context", "32768"])
    assert result.exit_code == 0, result.output
    assert "32,768 cached tokens (every layer slides over a 4,096-token window" in result.stdout


def test_step_over_the_event_budget_exits_2_naming_the_knobs() -> None:
    result = CliRunner().invoke(cli, ["step", LLAMA, "--set", "engine.max_events=1000"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "engine.max_events" in result.stderr and "engine.tiles_per_stage" in result.stderr
