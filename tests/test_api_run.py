"""The public API `rdu_sim.api.run`, its JSON contract, files, and the `rdu-sim run` command.

Most tests use a small analytic backend (memory and step times from closed formulas), so
the serving/report plumbing is tested without the compiler and engine; the end-to-end tests
at the bottom run the real compiler and engine on the shipped DeepSeek-R1 workloads.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rdu_sim import api
from rdu_sim.compiler.program import Placement, TierUsage
from rdu_sim.models import kv_bytes_per_token, weight_bytes
from rdu_sim.report.console import render
from rdu_sim.report.files import write_outputs
from rdu_sim.scenario import Scenario
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
FULL = ROOT / "workloads" / "deepseek-r1-128k-full.yaml"
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

CONTRACT_KEYS = {
    "kv_policy",
    "batch_capacity",
    "batch_slots",
    "decode_tokens_per_s",
    "decode_span_s",
    "prefill_s",
    "ttft_s",
    "tpot_s",
    "memory",
    "kv_bytes_per_slot",
    "requests_completed",
    "output_tokens",
    "queue_delay_s",
    "step_cache",
    "utilization",
    "model",
    "workload",
    "tp",
    "sockets",
    "seed",
    "version",
    "steady_decode_tokens_per_s",
    "steady_window_s",
}
TIER_KEYS = {
    "capacity_bytes",
    "used_bytes",
    "weights_bytes",
    "kv_bytes",
    "activations_bytes",
    "free_bytes",
}


class FakeBackend:
    """Memory from the model's figures; step times from a roofline-like formula."""

    def _slot_bytes(self, scenario: Scenario) -> int:
        policy = scenario.kv_policy
        per_token = kv_bytes_per_token(scenario.model, scenario.kv_dtype_bytes)
        return policy.slot_tokens() * per_token // scenario.tp

    def _weights(self, scenario: Scenario) -> int:
        return weight_bytes(scenario.model, scenario.weight_dtype_bytes) // scenario.tp

    def batch_capacity(self, scenario: Scenario) -> int:
        free = scenario.hardware.socket.hbm.capacity - self._weights(scenario)
        return max(0, int(free // self._slot_bytes(scenario)))

    def memory_capacity(self, scenario: Scenario) -> int:
        return self.batch_capacity(scenario)

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        hbm = TierUsage(
            int(scenario.hardware.socket.hbm.capacity),
            self._weights(scenario),
            batch_slots * self._slot_bytes(scenario),
            0,
        )
        ddr = TierUsage(int(scenario.hardware.socket.ddr.capacity))
        return Placement(batch_slots, {"hbm": hbm, "ddr": ddr})

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        if shape.phase == "prefill":
            return StepCost(0.01 + shape.tokens * 2e-5, 0.3, 0.9)
        return StepCost(0.01 + shape.batch * shape.cache_len * 1e-9, 0.8, 0.2)


def fake_run(path: Path, **overrides: Any) -> api.RunResult:
    return api.run(path, overrides, backend=FakeBackend())


def test_contract_keys_and_consistency() -> None:
    result = fake_run(SNAP, **{"serving.requests": 40})
    data = result.to_dict()
    assert set(data) >= CONTRACT_KEYS
    assert data["requests_completed"] == 40
    assert data["kv_policy"] == "snapstream"
    assert data["model"] == "deepseek-r1" and data["tp"] == 16 and data["seed"] == 0
    assert data["batch_slots"] == data["batch_capacity"] > 0
    for key in ("ttft_s", "tpot_s", "queue_delay_s"):
        assert set(data[key]) >= {"p50", "p90", "p99"}
        assert data[key]["p50"] <= data[key]["p90"] <= data[key]["p99"]
    for usage in data["memory"].values():
        assert set(usage) == TIER_KEYS
        assert usage["used_bytes"] == (
            usage["weights_bytes"] + usage["kv_bytes"] + usage["activations_bytes"]
        )
        assert usage["free_bytes"] == usage["capacity_bytes"] - usage["used_bytes"]
    assert data["output_tokens"] == int(result.records.output_tokens.sum())
    assert data["step_cache"]["hits"] + data["step_cache"]["misses"] == (
        data["steps"]["prefill"] + data["steps"]["decode"]
    )
    assert 0 < data["utilization"]["hbm"] <= 1 and 0 < data["utilization"]["pcu"] <= 1
    # prefill_s: the median prompt (4096 tokens) is its own bucket.
    assert data["prefill_s"] == pytest.approx(0.01 + 4096 * 2e-5)
    # decode tokens/s: output tokens over first first-token .. last completion.
    cols = result.requests()
    span = cols["finish_s"].max() - cols["first_token_s"].min()
    assert data["decode_tokens_per_s"] == pytest.approx(data["output_tokens"] / span, rel=1e-9)
    assert json.loads(result.to_json()) == data


def test_explicit_batch_slots_and_overrides_on_a_scenario() -> None:
    scenario = api.load(LLAMA, {"serving.requests": 30})
    result = api.run(scenario, {"serving.batch_slots": 3}, backend=FakeBackend())
    data = result.to_dict()
    assert data["batch_slots"] == 3 and data["batch_capacity"] > 3
    assert data["requests_completed"] == 30
    assert int(result.timeseries()["occupied"].max()) <= 3


def test_progress_callback_sees_every_completion() -> None:
    seen: list[tuple[int, int]] = []
    api.run(
        LLAMA, {"serving.requests": 25}, lambda d, t: seen.append((d, t)), backend=FakeBackend()
    )
    assert [d for d, _ in seen] == list(range(1, 26)) and {t for _, t in seen} == {25}


def test_no_room_for_one_sequence_is_a_capacity_error() -> None:
    class Full(FakeBackend):
        def batch_capacity(self, scenario: Scenario) -> int:
            return 0

    from rdu_sim.compiler import CapacityError

    # auto: the capacity is the batch, and none is no batch (an explicit batch_slots spills
    # weights to DDR instead: its memory plan decides, test_bound_critical)
    with pytest.raises(CapacityError, match="not even one sequence"):
        api.run(LLAMA, {"serving.batch_slots": "auto"}, backend=Full())


def test_bad_kv_parameters_are_a_config_error() -> None:
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(ConfigError, match="kv"):
        fake_run(SNAP, **{"kv.budget": None, "kv.compression_ratio": 1000})


def test_out_files(tmp_path: Path) -> None:
    result = fake_run(LLAMA, **{"serving.requests": 12})
    paths = write_outputs(tmp_path, result.to_dict(), result.requests(), result.timeseries())
    assert [p.name for p in paths] == ["result.json", "requests.csv", "timeseries.csv"]
    assert json.loads(paths[0].read_text()) == result.to_dict()
    rows = list(csv.DictReader(paths[1].open()))
    assert len(rows) == 12 and {"ttft_s", "tpot_s", "queue_delay_s"} <= set(rows[0])
    series = list(csv.DictReader(paths[2].open()))
    assert series and {"time_s", "occupied", "waiting", "decode_bucket"} <= set(series[0])
    again = tmp_path / "again"
    write_outputs(again, result.to_dict(), result.requests(), result.timeseries())
    for path in paths:
        assert (again / path.name).read_bytes() == path.read_bytes()


def test_console_report_renders() -> None:
    from rich.console import Console

    console = Console(record=True, width=120)
    summary = fake_run(LLAMA, **{"serving.requests": 5}).summary()
    console.print(render(summary))
    text = console.export_text()
    for words in ("Memory per socket", "time to first token", "capacity: ", "HBM", "load: 5"):
        assert words in text
    cache = summary.step_cache  # shapes simulated, for every step the run took
    steps = f"{cache.shapes:,} for {cache.hits + cache.misses:,} steps (each simulated once)"
    assert cache.hits > 0 and steps in text


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from test_api_run import FakeBackend
from rdu_sim import api
print(api.run({path!r}, {{"serving.requests": 30}}, backend=FakeBackend()).to_json())
"""


def test_json_is_byte_identical_across_processes() -> None:
    code = _CHILD.format(tests=str(ROOT / "tests"), path=str(SNAP))
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    outs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=ROOT,
        ).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1] and json.loads(outs[0])["requests_completed"] == 30


# --- end to end on the real compiler and engine ------------------------------------------------


def test_full_vs_snapstream_on_deepseek_r1() -> None:
    """The reference: SnapStream at 128k has a ~4x larger batch and more decode throughput.

    Enough requests to fill SnapStream's batch a few times over (a static decode graph
    with few requests is mostly padding); a fixed 4k prompt keeps the shapes few.
    """
    small = {"serving.requests": 400, "serving.prompt_tokens": 4096}
    full = api.run(FULL, small).to_dict()
    snap = api.run(SNAP, small).to_dict()
    assert full["batch_capacity"] >= 1
    assert 3 <= snap["batch_capacity"] / full["batch_capacity"] <= 5  # the paper: 4x
    assert snap["kv_bytes_per_slot"] * 3 < full["kv_bytes_per_slot"]
    # a full decode step of each (every slot, the longest context the policy keeps): 400
    # requests are too few for a steady window at SnapStream's batch, whose run is mostly
    # its prefills on the calibrated P2P link
    steps = [api.step(path).detail for path in (FULL, SNAP)]
    full_rate, snap_rate = (s.batch / s.step_s for s in steps)  # type: ignore[attr-defined]
    assert snap_rate > 1.2 * full_rate  # paper: 4.3x


def test_a_batch_that_cannot_hold_one_sequence_exits_2() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rdu_sim.cli.main",
            "run",
            str(FULL),
            "--json",
            "--set",
            "hw.socket.hbm.capacity=40 GiB",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_run_json_200_requests() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rdu_sim.cli.main",
            "run",
            str(SNAP),
            "--json",
            "--set",
            "serving.requests=200",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    data = json.loads(proc.stdout)
    assert set(data) >= CONTRACT_KEYS
    assert data["requests_completed"] == 200
    assert data["kv_policy"] == "snapstream"


def test_real_run_is_byte_identical_across_processes() -> None:
    args = [
        sys.executable,
        "-m",
        "rdu_sim.cli.main",
        "run",
        str(SNAP),
        "--json",
        "--set",
        "serving.requests=40",
        "--set",
        "serving.prompt_tokens=4096",
    ]
    outs = [
        subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=True).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1] and json.loads(outs[0])["requests_completed"] == 40


def test_cli_out_dir_and_step(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "rdu_sim.cli.main", "run", str(LLAMA)]
    proc = subprocess.run(
        [
            *base,
            "--set",
            "serving.requests=20",
            "--set",
            "serving.prompt_tokens=2048",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert "time to first token" in proc.stdout and "Traceback" not in proc.stderr
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["requests_completed"] == 20
    assert len(list(csv.DictReader((tmp_path / "requests.csv").open()))) == 20
    step = subprocess.run(
        [*base, "--step", "--json"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    timing = json.loads(step.stdout)
    assert timing["phase"] == "decode" and timing["batch"] == 16 and timing["step_s"] > 0


def test_trace_path_is_relative_to_the_workload_file(tmp_path: Path) -> None:
    hardware = ROOT / "hw_configs" / "sn40l.yaml"
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.jsonl").write_text(
        "".join(
            f'{{"arrival_s": {i * 0.5}, "prompt_tokens": {100 + i}, "output_tokens": {10 + i}}}\n'
            for i in range(8)
        )
    )
    workload = tmp_path / "w.yaml"
    workload.write_text(
        f"hardware: {hardware}\nmodel: llama-3.1-8b\nserving:\n"
        "  batch_slots: 2\n  trace: traces/t.jsonl\n"
        "  arrival: {process: poisson, rate: 1}\n"
    )
    result = fake_run(workload)
    data = result.to_dict()
    assert data["requests_completed"] == 8
    assert data["output_tokens"] == sum(10 + i for i in range(8))
    assert list(result.requests()["arrival_s"]) == [i * 0.5 for i in range(8)]
    (tmp_path / "traces" / "t.jsonl").write_text('{"prompt_tokens": 5}\n')
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"t\.jsonl:1: output_tokens: missing value"):
        fake_run(workload)


def test_more_requests_than_the_trace_holds_is_a_warning(tmp_path: Path) -> None:
    """A workload asking for 20 requests of an 8-row trace serves the 8 and says so (a sweep
    over the count would otherwise repeat one run silently); asking for 8, or leaving the
    count at its default, says nothing."""
    import warnings

    from rdu_sim.serving.requests import ShortTraceWarning

    (tmp_path / "t.csv").write_text(
        "prompt_tokens,output_tokens\n" + "".join(f"{100 + i},{10 + i}\n" for i in range(8))
    )
    hardware = ROOT / "hw_configs" / "sn40l.yaml"
    workload = tmp_path / "w.yaml"
    workload.write_text(
        f"hardware: {hardware}\nmodel: llama-3.1-8b\nserving:\n  batch_slots: 2\n  trace: t.csv\n"
    )
    words = "serving.requests asks for 20 requests; the trace t.csv holds 8: the run serves those 8"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asked = fake_run(workload, **{"serving.requests": 20})
    assert asked.to_dict()["requests_completed"] == 8
    assert words in asked.to_dict()["warnings"]
    said = [str(w.message) for w in caught if w.category is ShortTraceWarning]
    assert said == [f"{workload}: {words}"]  # emitted naming the workload
    for overrides in ({"serving.requests": 8}, {}):
        assert not any(
            "the trace" in w for w in fake_run(workload, **overrides).to_dict()["warnings"]
        )


def test_load_with_overrides_keeps_the_scenarios_earlier_hardware_overrides() -> None:
    """Re-loading a Scenario with more overrides must not re-read the hardware file."""
    from rdu_sim import api
    from rdu_sim.scenario import load_scenario

    base = load_scenario("workloads/llama3.1-8b-1socket.yaml", ["hw.socket.hbm.bandwidth=2.4 TB/s"])
    again = api.load(base, ["serving.requests=10"])
    assert again.hardware.socket.hbm.bandwidth == 2.4e12
    assert again.hardware == base.hardware
    assert again.workload.serving.requests == 10
    newer = api.load(base, ["hw.socket.hbm.bandwidth=3 TB/s"])
    assert newer.hardware.socket.hbm.bandwidth == 3e12
