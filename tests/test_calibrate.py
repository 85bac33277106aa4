"""The serving runtime's host time, measured deployments, `calibrate` and the deployment
suite of `validate`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError
from rdu_sim.validate.argonne import convert
from rdu_sim.validate.calibrate import Calibration, FitParameter, parse_fit, split_holdout
from rdu_sim.validate.deployment import (
    COLUMNS,
    MeasuredPoint,
    read_points,
    shipped_files,
    simulate,
)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "reference" / "measurements"
HEADER = ",".join(COLUMNS)
SMALL = "sn40l,llama-3.2-1b,1,{batch},64,{out},e2e_s,{value}"


def _write(tmp_path: Path, rows: list[str], name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text("# a comment\n" + HEADER + "\n" + "".join(r + "\n" for r in rows))
    return path


def test_runtime_host_time_is_added_to_each_step_exactly() -> None:
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    zero = ["stack.host.serial_per_step=0", "stack.host.serial_per_slot=0"]
    bare = api.step(workload, zero, batch=4).detail
    served = api.step(
        workload,
        ["stack.host.serial_per_step=300 us", "stack.host.serial_per_slot=20 us"],
        batch=4,
    ).detail
    assert bare.runtime_s == 0.0  # type: ignore[attr-defined]
    assert served.runtime_s == pytest.approx(300e-6 + 4 * 20e-6, rel=1e-12)  # type: ignore[attr-defined]
    assert served.device_s == pytest.approx(bare.step_s, rel=1e-12)  # type: ignore[attr-defined]
    assert served.step_s == pytest.approx(bare.step_s + 380e-6, rel=1e-12)  # type: ignore[attr-defined]
    shown = served.to_dict()  # type: ignore[attr-defined]
    assert shown["runtime_s"] == served.runtime_s and shown["device_s"] == served.device_s  # type: ignore[attr-defined]


def test_shipped_hardware_runs_a_stack_by_default() -> None:
    """Every shipped machine names its default stack; the stack, not the hardware, holds
    the host time and the KV and prefill layout."""
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    for name in ("sn40l-8", "sn40l-16", "dgx-h100"):
        data = yaml.safe_load((REPO / "hw_configs" / f"{name}.yaml").read_text())
        assert "runtime" not in data, name
        stack = api.load(workload, [f"hardware={name}"]).stack
        assert stack.host.serial_per_step > 0, name
        paged = stack.kv_page_tokens, stack.prefill_batch_tokens
        # SambaStack's static graphs, one prompt a prefill step; TensorRT-LLM's defaults
        assert paged == ((64, 8192) if name == "dgx-h100" else (None, None)), name


def test_read_points_and_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, [SMALL.format(batch=2, out=8, value=0.5)])
    (point,) = read_points(path)
    assert (point.hardware, point.batch, point.output_tokens, point.measured_s) == (
        "sn40l",
        2,
        8,
        0.5,
    )
    assert point.source == f"{path}:3"
    bad = {
        "metric": SMALL.format(batch=2, out=8, value=0.5).replace("e2e_s", "tpot"),
        "batch": SMALL.format(batch="two", out=8, value=0.5),
        "measured_s": SMALL.format(batch=2, out=8, value=-1),
    }
    for field, row in bad.items():
        with pytest.raises(ConfigError, match=rf"m.csv:3: {field}:"):
            read_points(_write(tmp_path, [row]))
    lacking = tmp_path / "lacking.csv"
    lacking.write_text("hardware,model\nsn40l,llama-3.2-1b\n")
    with pytest.raises(ConfigError, match=r"lacks column"):
        read_points(lacking)


def test_parse_fit_and_holdout() -> None:
    assert parse_fit("stack.host.serial_per_step=0:2ms") == FitParameter(
        "stack.host.serial_per_step", 0.0, 2e-3
    )
    assert parse_fit("hw.system.intra_node_link.bandwidth=8 GB/s:64 GB/s").high == 64e9
    for bad in ("runtime.step_overhead=0:1", "hw.x=1", "hw.x=2:1", "hw.x=a:b"):
        with pytest.raises(ConfigError):
            parse_fit(bad)
    train, held = split_holdout(22, 0.25, 0)
    assert len(held) == 6 and sorted(train + held) == list(range(22))
    assert split_holdout(22, 0.25, 0) == (train, held)
    assert split_holdout(3, 0.9, 0)[0]  # always something to fit


def test_fit_recovers_a_known_parameter(tmp_path: Path) -> None:
    """Points simulated with a known step overhead are measurements the fit must explain:
    it finds the overhead back from a start at the middle of its bounds."""
    truth = ["stack.host.serial_per_step=0.0004"]
    points = [
        MeasuredPoint("sn40l", "llama-3.2-1b", 1, batch, 64, out, "e2e_s", 1.0, source=f"p{i}")
        for i, (batch, out) in enumerate([(1, 16), (2, 32), (4, 8)])
    ]
    measured = [MeasuredPoint(**{**p.__dict__, "measured_s": simulate(p, truth)}) for p in points]
    calibration = Calibration(
        measured,
        [FitParameter("stack.host.serial_per_step", 0.0, 1e-3)],
        cache=tmp_path / "cache.jsonl",
    )
    result = calibration.fit([0, 1, 2], [], max_evaluations=30)
    assert result.values["stack.host.serial_per_step"] == pytest.approx(4e-4, rel=0.01)
    assert max(abs(r.relative_error) for r in result.results) < 0.005
    # the same fit again replays its cache: no evaluation simulates anything
    replay = Calibration(
        measured,
        [FitParameter("stack.host.serial_per_step", 0.0, 1e-3)],
        cache=tmp_path / "cache.jsonl",
        simulate_point=lambda point, sets: pytest.fail("simulated on a cached evaluation"),
    )
    assert replay.fit([0, 1, 2], [], max_evaluations=30).values == result.values


def test_calibrate_command_writes_a_usable_hardware_file(tmp_path: Path) -> None:
    truth = ["stack.host.serial_per_step=0.0003"]
    rows = []
    for batch, out in [(1, 16), (2, 32), (4, 8), (2, 8)]:
        point = MeasuredPoint("sn40l", "llama-3.2-1b", 1, batch, 64, out, "e2e_s", 1.0)
        rows.append(SMALL.format(batch=batch, out=out, value=simulate(point, truth)))
    path = _write(tmp_path, rows)
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", str(path), "--fit", "stack.host.serial_per_step=0:1ms", "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--holdout", "0.25", "--json"])
    assert result.exit_code == 0, result.output
    fit = json.loads(result.stdout)
    assert fit["values"]["stack.host.serial_per_step"] == pytest.approx(3e-4, rel=0.01)
    assert sum(p["held_out"] for p in fit["points"]) == 1
    assert {e["group"] for e in fit["errors"]} >= {"fitted", "held out"}
    text = out.read_text()
    assert text.startswith("# Calibrated by: rdu-sim calibrate")
    assert (tmp_path / "fitted.yaml.cache.jsonl").is_file()
    workload = yaml.safe_load((REPO / "workloads" / "llama3.1-8b-1socket.yaml").read_text())
    workload["hardware"] = str(out)
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(workload))
    step = api.step(tmp_path / "wl.yaml", batch=1).detail
    stack_text = (tmp_path / "fitted.stack.yaml").read_text()
    host = yaml.safe_load(stack_text)["host"]
    assert yaml.safe_load(text)["default_stack"] == "fitted.stack.yaml"
    assert host["serial_per_step"] == fit["values"]["stack.host.serial_per_step"]
    slot = api.load(tmp_path / "wl.yaml").stack.host.serial_per_slot
    assert step.runtime_s == pytest.approx(host["serial_per_step"] + slot, rel=1e-12)  # type: ignore[attr-defined]
    again = CliRunner().invoke(cli, [*args, "--holdout", "0.25", "--json"])
    assert json.loads(again.stdout)["values"] == fit["values"]  # deterministic
    assert out.read_text() == text  # the same file, whoever invoked the command
    assert "--fit=stack.host.serial_per_step=0:1ms" in text.splitlines()[0]


def test_calibrate_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, [SMALL.format(batch=1, out=8, value=0.5)])
    runner = CliRunner()
    for args, message in [
        (["--fit", "hw.x=1"], "expected hw.FIELD=LOW:HIGH"),
        (["--fit", "stack.host.serial_per_step=0:1ms", "--holdout", "1.5"], "--holdout"),
        (["--fit", "stack.host.serial_per_step=0:1ms", "--hardware", "dgx-h100"], "no measured"),
    ]:
        result = runner.invoke(cli, ["calibrate", str(path), *args])
        assert result.exit_code == 2 and message in result.output, result.output
    result = runner.invoke(cli, ["calibrate", "no-such-file", "--fit", "hw.a=0:1"])
    assert result.exit_code == 2 and "no-such-file" in result.output, result.output
    assert "argonne-sn40l" in result.output  # the shipped names that would have worked


def test_shipped_measurements_convert_from_the_shared_files() -> None:
    """The shipped files are the conversion of the published CSVs (when shared/ is beside
    the checkout, as in CI and development)."""
    if not SHARED.is_dir():
        pytest.skip("shared/reference/measurements is not beside this checkout")
    import csv

    for shipped in shipped_files():
        source = SHARED / shipped.name
        rows = [
            r
            for r in csv.reader(
                line for line in shipped.read_text().splitlines() if not line.startswith("#")
            )
        ]
        assert rows == list(convert(source)), shipped.name
    kinds = {p.stem: len(read_points(p)) for p in shipped_files()}
    assert kinds == {"argonne-h100": 151, "argonne-sn40l": 20, "argonne-sn40l-ttft": 2}
    engines = Counter(p.hardware for p in read_points(REPO / "measurements" / "argonne-h100.csv"))
    assert engines == {"dgx-h100": 71, "dgx-h100-vllm": 80}  # TensorRT-LLM's rows, vLLM's


@pytest.mark.slow
def test_validate_deployment_suite_meets_its_limits() -> None:
    """The issue's bar: median |error| at most 10% per system; no point beyond 25% but the
    one docs/calibration.md names (Mistral's batch-16 2,048-token point on SN40L, measured
    32% slower than Llama 3's at the same shape): a second, or that one healed, fails here."""
    result = CliRunner().invoke(cli, ["validate", "--suite", "deployment", "--json"])
    assert result.exit_code in (0, 1), result.output
    suite = json.loads(result.stdout)
    systems = {s["group"]: s for s in suite["systems"]}
    assert set(systems) == {"sn40l-8", "dgx-h100", "dgx-h100-vllm"}
    for system in systems.values():
        assert system["median_abs_error"] <= 0.10, system
    points = suite["points"]
    beyond = {
        (p["hardware"], p["tp"], p["batch"], p["input_tokens"])
        for p in points
        if abs(p["relative_error"]) > 0.25
    }
    assert beyond == {("sn40l-8", 8, 16, 2048)}
    ratio = _sn40l_over_h100(points)
    assert ratio == pytest.approx(4.522 / 1.584, rel=0.15)


def _sn40l_over_h100(points: list[dict[str, object]]) -> float:
    """Simulated H100 x4 over SN40L x8 latency, Llama 3 8B, batch 1, 1,024 tokens."""

    def latency(hardware: str, tp: int) -> float:
        (value,) = [
            float(p["simulated_s"])  # type: ignore[arg-type]
            for p in points
            if p["hardware"] == hardware
            and p["tp"] == tp
            and p["model"] == "llama-3.1-8b"
            and p["batch"] == 1
            and p["input_tokens"] == 1024
            and p["metric"] == "e2e_s"
        ]
        return value

    return latency("dgx-h100", 4) / latency("sn40l-8", 8)
