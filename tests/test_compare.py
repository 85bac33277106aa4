"""`rdu-sim compare`: one workload on SN40L and on a GPU, side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compare import compare, compare_batches
from rdu_sim.config.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "workloads" / "llama3.1-70b-decode.yaml"
SN40L_8 = REPO / "hw_configs" / "sn40l-8.yaml"
DGX = REPO / "hw_configs" / "dgx-h100.yaml"


def test_the_issue_command_prints_both_columns() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "compare",
            "workloads/llama3.1-70b-decode.yaml",
            "--hardware",
            "hw_configs/sn40l-8.yaml",
            "--hardware",
            "hw_configs/dgx-h100.yaml",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["workload"] == "llama3.1-70b-decode" and data["model"] == "llama-3.1-70b"
    sn40l, gpu = data["columns"]
    assert (sn40l["hardware"], sn40l["kind"], sn40l["fusion"]) == ("sn40l-8", "rdu", "full")
    assert (gpu["hardware"], gpu["kind"], gpu["fusion"]) == ("dgx-h100", "gpu", "partial")
    for column in (sn40l, gpu):
        assert column["fits"] and column["batch"] == 32 and column["tp"] == 8
        step = column["step_s"]
        assert column["tokens_per_s_per_user"] == pytest.approx(1 / step)
        assert column["tokens_per_s"] == pytest.approx(32 / step)
        assert 0 < column["hbm_bandwidth_fraction"] <= 1
    assert sn40l["peak_hbm_bandwidth"] == 1.8e12 and gpu["peak_hbm_bandwidth"] == 3.35e12
    assert sn40l["kernel_calls"] < gpu["kernel_calls"]  # looped layers vs a kernel per op group


def test_each_column_is_what_step_gives_on_that_hardware() -> None:
    result = compare(WORKLOAD, [SN40L_8, DGX], batch=8, context=2048)
    for column, hardware in zip(result.columns, (SN40L_8, DGX), strict=True):
        cost = api.step(WORKLOAD, {"hardware": str(hardware)}, batch=8, context=2048)
        assert column.step_s == cost.step_s
        assert column.batch == 8 and column.context == 2048


@pytest.mark.parametrize("weights", ["bf16", "fp8"])
def test_the_share_of_peak_flops_is_of_the_peak_reported(weights: str) -> None:
    """On a GPU with fp8 weights the peak is the FP8 tensor rate, in the fraction and in
    peak_flops alike; SN40L's is its BF16 peak either way."""
    overrides = {"dtypes.weights": weights}
    result = compare(WORKLOAD, [SN40L_8, DGX], overrides, batch=8, context=2048)
    for column, hardware in zip(result.columns, (SN40L_8, DGX), strict=True):
        cost = api.step(WORKLOAD, {"hardware": str(hardware), **overrides}, batch=8, context=2048)
        achieved = cost.detail.flops / cost.step_s
        assert column.flops_fraction == pytest.approx(achieved / column.peak_flops, rel=1e-12)
    gpu = result.columns[1]
    assert gpu.peak_flops == (1979e12 if weights == "fp8" else 989e12)


def test_a_model_that_does_not_fit_is_a_column_saying_so() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "compare",
            str(WORKLOAD),
            "--hardware",
            str(SN40L_8),
            "--hardware",
            str(DGX),
            "--set",
            "model=llama-3.1-405b",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "dgx-h100: does not fit:" in result.stdout  # 405B BF16 is 101 GB per GPU
    data = compare(WORKLOAD, [SN40L_8, DGX], {"model": "llama-3.1-405b"}).to_dict()
    sn40l, gpu = data["columns"]
    assert not gpu["fits"] and "hw.system.sockets" in gpu["reason"] and gpu["step_s"] is None
    # SN40L holds what HBM cannot in DDR: the columns differ by memory system
    assert not sn40l["fits"] or sn40l["step_s"] > 0


def test_over_batches_and_bad_input() -> None:
    rows = compare_batches(WORKLOAD, [DGX], [1, 4])
    assert [r.columns[0].batch for r in rows] == [1, 4]
    assert rows[0].columns[0].step_s < rows[1].columns[0].step_s
    missing = CliRunner().invoke(cli, ["compare", str(WORKLOAD), "--hardware", "nope.yaml"])
    assert missing.exit_code == 2
    with pytest.raises(ValueError, match="at least one hardware"):
        compare(WORKLOAD, [])


def test_bad_input_exits_2_before_any_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    too_long = runner.invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", str(DGX), "--context", "100000"]
    )
    assert too_long.exit_code == 2 and "--context" in too_long.stderr
    assert "Traceback" not in too_long.output
    # a workload whose tp the second system cannot run: refused before the first is simulated
    simulated: list[str] = []
    monkeypatch.setattr(
        "rdu_sim.compare._column",
        lambda scenario, batch, context: simulated.append(scenario.hardware.name),
    )
    sixteen = {"parallelism.tp": 16}
    with pytest.raises(ConfigError, match="tp=16 exceeds the 8 GPUs of hardware 'dgx-h100'"):
        compare(WORKLOAD, [REPO / "hw_configs" / "sn40l-16.yaml", DGX], sixteen)
    assert simulated == []


def test_a_serving_run_on_the_gpu_reports_like_sn40l() -> None:
    overrides = {"serving.requests": 6, "serving.batch_slots": 4, "serving.max_context": 2048}
    gpu = api.run(WORKLOAD, {"hardware": str(DGX), **overrides}).to_dict()
    sn40l = api.run(WORKLOAD, overrides).to_dict()
    assert gpu.keys() == sn40l.keys()
    assert gpu["hardware"] == "dgx-h100" and gpu["requests_completed"] == 6
    assert gpu["decode_tokens_per_s"] > 0


def test_plot_compare_reads_the_json_and_refuses_a_workload(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", str(DGX), "--batch", "4", "--json"]
    )
    assert printed.exit_code == 0, printed.output
    source = tmp_path / "c.json"
    source.write_text(printed.stdout)
    drawn = runner.invoke(cli, ["plot", "compare", str(source), "-o", str(tmp_path / "c.png")])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "c.png").stat().st_size > 0
    refused = runner.invoke(cli, ["plot", "compare", str(WORKLOAD), "-o", str(tmp_path / "x.png")])
    assert refused.exit_code == 2 and "rdu-sim compare" in refused.stderr
