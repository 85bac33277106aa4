"""`rdu-sim compare`: one workload on SN40L and on a GPU, side by side."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import rdu_sim.compare as compare_module
from rdu_sim import api, human
from rdu_sim.cli.compare_cmd import ROWS
from rdu_sim.cli.main import cli
from rdu_sim.compare import Variant, compare, compare_batches, parse_vary
from rdu_sim.compare.why import scope
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.stack import NONE_WORDS
from rdu_sim.report.bound import LABELS, step_bound

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
    """405B in BF16 is 97.9 GiB a GPU at tp=8: an H200 holds it, an H100 does not (a column
    saying why, exit 0 as the H200 runs)."""
    result = CliRunner().invoke(
        cli,
        [
            "compare",
            str(WORKLOAD),
            "--hardware",
            "dgx-h200",
            "--hardware",
            str(DGX),
            "--set",
            "model=llama-3.1-405b",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "dgx-h100: does not fit:" in result.stdout
    data = compare(WORKLOAD, ["dgx-h200", DGX], {"model": "llama-3.1-405b"}).to_dict()
    h200, gpu = data["columns"]
    assert not gpu["fits"] and "hw.system.sockets" in gpu["reason"] and gpu["step_s"] is None
    assert h200["fits"] and h200["step_s"] > 0


def test_a_workload_no_system_given_runs_exits_2_with_each_reason() -> None:
    """The model fits neither system: nothing to compare, bad input as for `run` (exit 2),
    each system's reason on its own error line led by its label; one system alone says
    exactly what `run` says (trial R F6: a table of dashes and exit 0 before)."""
    args = ["compare", str(WORKLOAD), "--set", "model=llama-3.1-405b"]
    both = CliRunner().invoke(cli, [*args, "--hardware", str(SN40L_8), "--hardware", str(DGX)])
    assert both.exit_code == 2, both.output
    assert both.stdout == ""
    lines = both.stderr.splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == ["sn40l-8", "dgx-h100"]
    assert all("not one sequence does" in line for line in lines)
    alone = CliRunner().invoke(cli, [*args, "--hardware", str(DGX), "--json"])
    run = CliRunner().invoke(
        cli, ["run", str(WORKLOAD), "--set", "model=llama-3.1-405b", "--set", f"hardware={DGX}"]
    )
    assert alone.exit_code == run.exit_code == 2
    assert alone.stdout == "" and alone.stderr.startswith(f"error: {WORKLOAD}: ")
    said = [e.stderr.split("do not fit", 1)[1].rsplit(" (from", 1)[0] for e in (alone, run)]
    assert said[0] == said[1] and "97.93 GiB per GPU" in said[0]
    # the API returns the columns (a curve over batches keeps the batches none holds)
    result = compare(WORKLOAD, [SN40L_8, DGX], {"model": "llama-3.1-405b"})
    assert not any(c.fits for c in result.columns)
    error = compare_module.nothing_runs(result)
    assert isinstance(error, compare_module.NothingRunsError)
    assert str(error).splitlines()[1] == f"dgx-h100: {result.columns[1].reason}"


def test_over_batches_and_bad_input() -> None:
    rows = compare_batches(WORKLOAD, [DGX], [1, 4])
    assert [r.columns[0].batch for r in rows] == [1, 4]
    assert rows[0].columns[0].step_s < rows[1].columns[0].step_s
    missing = CliRunner().invoke(cli, ["compare", str(WORKLOAD), "--hardware", "nope.yaml"])
    assert missing.exit_code == 2
    with pytest.raises(ValueError, match="at least one hardware file or varied field"):
        compare(WORKLOAD, [])


def test_a_hardware_link_loop_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --hardware that is a loop of symbolic links: the loader's one line (pathlib's
    resolve() raised RuntimeError "Symlink loop" before, a traceback)."""
    monkeypatch.chdir(tmp_path)
    Path("loop1.yaml").symlink_to("loop2.yaml")
    Path("loop2.yaml").symlink_to("loop1.yaml")
    result = CliRunner().invoke(cli, ["compare", str(WORKLOAD), "--hardware", "loop1.yaml"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: loop1.yaml: a link to 'loop2.yaml' in a loop of symbolic links\n"
    )
    with pytest.raises(ConfigError, match="in a loop of symbolic links"):
        compare(WORKLOAD, ["loop1.yaml"])


def test_bad_input_exits_2_before_any_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    too_long = runner.invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", str(DGX), "--context", "100000"]
    )
    assert too_long.exit_code == 2 and "--context" in too_long.stderr
    assert "Traceback" not in too_long.output
    # a workload whose tp no system given can run: refused before any is simulated
    simulated: list[str] = []
    monkeypatch.setattr(
        "rdu_sim.compare._column",
        lambda scenario, side, batch, context: simulated.append(scenario.hardware.name),
    )
    sixteen = {"parallelism.tp": 16}
    with pytest.raises(ConfigError, match="tp=16 exceeds the 8 GPUs of hardware 'dgx-h100'"):
        compare(WORKLOAD, [DGX, REPO / "hw_configs" / "dgx-h200.yaml"], sixteen)
    assert simulated == []


def test_a_serving_run_on_the_gpu_reports_like_sn40l() -> None:
    overrides = {"serving.requests": 6, "serving.batch_slots": 4, "serving.max_context": 2048}
    gpu = api.run(WORKLOAD, {"hardware": str(DGX), **overrides}).to_dict()
    sn40l = api.run(WORKLOAD, overrides).to_dict()
    # and the paged KV pool of its stack (TensorRT-LLM's), which SN40L's static slots lack
    assert gpu.keys() == {*sn40l.keys(), "kv_pool"} and "kv_pool" not in sn40l
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


SNAP = "deepseek-r1-128k-snapstream"


def test_the_issue_command_varies_the_kv_policy_and_says_why() -> None:
    """`compare deepseek-r1-128k-snapstream --vary kv.policy=full,snapstream`: a column per
    policy, each what `step` gives with that policy set, a line per column with what binds
    it, and the verdict: the ratio of the system's tokens/s and why (the batch each policy's
    KV slot leaves room for, and the step)."""
    runner = CliRunner()
    printed = runner.invoke(cli, ["compare", SNAP, "--vary", "kv.policy=full,snapstream"])
    assert printed.exit_code == 0, printed.output
    data = compare(SNAP, [], vary=["kv.policy=full,snapstream"]).to_dict()
    full, snap = data["columns"]
    assert (full["label"], snap["label"]) == ("kv.policy=full", "kv.policy=snapstream")
    assert full["settings"] == {"kv.policy": "full"} and snap["kv_policy"] == "snapstream"
    for column in (full, snap):
        cost = api.step(SNAP, {"kv.policy": column["kv_policy"]}, batch=column["batch"])
        assert column["step_s"] == cost.step_s
        bound = step_bound(cost.detail, api.load(SNAP).hardware)
        assert (column["bound"], column["bound_s"]) == (bound.bound, bound.limit_s)
        assert column["resource_s"] == bound.times()  # each resource alone, as step has them
    for line, column in zip(data["lines"], (full, snap), strict=True):
        alone = line.split("each resource alone: ", 1)[1]
        named = [name for name, seconds in column["resource_s"].items() if seconds > 0]
        assert [n for n in named if n != column["bound"]] == [
            part.split()[0] for part in alone.rstrip(")").split(", ")
        ]
    assert full["slot_tokens"] == 131072 and snap["slot_tokens"] == 32768
    assert snap["batch"] > full["batch"]  # a SnapStream slot keeps a quarter of the tokens
    # both prefills time the same prompt, the workload's typical one (run's prefill_s, the
    # step's default), which SnapStream does not compress: the same 403 ms in both columns
    for column in (full, snap):
        scenario = api.load(SNAP, {"kv.policy": column["kv_policy"]})
        assert column["prefill_tokens"] == api.default_step_shape(scenario, "prefill").tokens
        assert column["prefill_s"] == round(api.step(scenario, phase="prefill").step_s, 12)
        assert column["prefill_compressed"] is False
    assert full["prefill_tokens"] == snap["prefill_tokens"] == 4096
    assert full["prefill_s"] == snap["prefill_s"]
    assert printed.stdout.count("403 ms (4,096 tokens)") == 2
    # the prompts SnapStream compresses have their own row, labelled as what they are
    assert full["long_prefill_s"] is None and snap["long_prefill_tokens"] == 39717
    assert snap["long_prefill_bucket"] == 40960 and round(snap["long_prefill_share"], 3) == 0.005
    assert "prefill, median prompt" in printed.stdout
    assert "4.03 s (39,717 tokens," in printed.stdout and "0.5% of" in printed.stdout
    ratio = snap["system_tokens_per_s"] / full["system_tokens_per_s"]
    (verdict,) = data["verdicts"]
    served = snap["system_served_tokens_per_s"] / full["system_served_tokens_per_s"]
    assert verdict.startswith(
        f"kv.policy=snapstream serves {human.ratio(served)} the output tokens/s of "
        "kv.policy=full on the whole system with prefill included ("
    )
    assert f"), {human.ratio(ratio)} the decode-step tokens/s (" in verdict
    assert "a KV slot keeping 32,768 tokens vs 131,072" in verdict
    assert data["lines"][0].startswith(
        "kv.policy=full served by sambastack-2025: full KV, a slot keeping 131,072 tokens"
    )
    assert "bound by HBM bandwidth" in data["lines"][0]
    for text in (*data["lines"], verdict, "kv.policy=full", "kv.policy=snapstream"):
        assert text in printed.stdout.replace("\n", " ") or text in printed.stdout


def test_the_hardware_verdict_names_the_bandwidth() -> None:
    """SN40L-8 against the DGX H100 on Llama 3.1 70B: the same batch, both decode steps
    bound by HBM bandwidth; the H100's 1.7x sustained bandwidth (its peak's 1.86x, at each
    device's efficiency), not the bytes, sets HBM's time, and
    the rest of the H100's step (HBM is 59.5% of it) brings the steps to 0.903x, not 0.6x."""
    data = compare(WORKLOAD, [SN40L_8, DGX]).to_dict()
    (verdict,) = data["verdicts"]
    assert verdict.startswith("dgx-h100 serves")
    assert "the same batch (32 slots)" in verdict
    assert "bound by HBM bandwidth in both" in verdict
    assert "(59.5% vs 89.1% of their step time)" in verdict
    assert "its time on HBM bandwidth is 0.603x as long, the HBM bandwidth (1.7x) the" in verdict
    # the rates it states are the ones its times are at: bytes / rate is the HBM time, the
    # rate while HBM streams (the table's share of peak is over the whole step: 84.6%)
    assert (
        "27 GiB of HBM traffic per device at 2.91 TB/s while streaming (87.0% of its 3.35 TB/s "
        "peak) vs 26.3 GiB of HBM traffic per device at 1.71 TB/s while streaming (95.0% of its "
        "1.8 TB/s peak)"
    ) in verdict
    for column in data["columns"]:
        rate = column["peak_hbm_bandwidth"] * column["hbm_efficiency"]
        assert column["hbm_bytes"] / rate == pytest.approx(column["resource_s"]["hbm"])
    assert verdict.endswith(
        "; the rest of each step (40.5% vs 10.9%), which HBM bandwidth does not explain, "
        "brings the steps to 0.903x; of that rest, kernel boundaries (launch and sync) take "
        "5.29 ms vs 51 us (805 vs 3 kernel calls; 31.6% vs 0.3% of their step); host time, a "
        "factor of its own: the serving stacks add 0 s vs 1.73 ms to their steps (tensorrt-llm "
        "vs sambastack-2025; 0.0% vs 9.3% of them), and on the device alone its step takes "
        "0.996x as long (16.7 ms vs 16.8 ms)."
    )


def test_the_verdict_names_the_kernel_boundaries_when_they_are_a_material_share() -> None:
    """H100 against H200 (the same compute, boundary time and kernels): the rest of each
    step is mostly the 805 kernels' boundaries, named with their time from each step's own
    resource times (``report.bound``); below a tenth of both steps (SN40L's looped kernels
    under two policies) they are not named."""
    result = compare(WORKLOAD, [REPO / "hw_configs" / "dgx-h200.yaml", DGX])
    h200, h100 = result.columns
    (verdict,) = result.verdicts
    boundaries = h100.resource_s["boundaries"]
    assert boundaries == h200.resource_s["boundaries"] > 0.1 * h200.step_s
    assert h100.kernel_calls == h200.kernel_calls == 805
    assert h100.step_s is not None and h200.step_s is not None
    assert verdict.endswith(
        "which HBM bandwidth does not explain, brings the steps to 1.22x; of that rest, "
        f"kernel boundaries (launch and sync) take {human.duration(boundaries)} in both (805 "
        f"kernel calls each; {human.percent(boundaries / h100.step_s)} vs "
        f"{human.percent(boundaries / h200.step_s)} of their step)."
    )
    snap = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    (policies,) = compare(snap, [], vary=["kv.policy=full,snapstream"]).verdicts
    assert "kernel boundaries" not in policies


def test_the_verdicts_say_they_compare_one_step_at_one_context() -> None:
    """Under the verdicts one line says what they compare (a decode step, every slot at one
    context) and why a serving run may differ: the GPU's paged KV cache, named, reads each
    sequence's own context (rdu-sim run); nothing when fewer than two variants fit."""
    result = compare(WORKLOAD, [SN40L_8, DGX])
    assert [c.paged_kv for c in result.columns] == [False, True]
    assert result.scope == (
        "Each verdict compares one decode step with every slot at one context (8,192 cached "
        "tokens), and the typical request's prefill: decode-step tokens/s are that step's "
        "alone, served tokens/s (prefill included) add each request's prefill beside its "
        "output tokens' decode steps, taking the device in turn with every slot busy. A "
        "serving run can differ, where the batch fills and drains, prompts and outputs vary "
        "and each context grows (rdu-sim run times one). There the paged KV cache of dgx-h100 "
        "reads each sequence's own context. The workload's typical request ends at 2,880 "
        "tokens (2,304 prompt, 576 output), under half that context: --context 2880 compares "
        "the decode step at its length."
    )
    assert result.to_dict()["scope"] == result.scope
    printed = CliRunner().invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", str(SN40L_8), "--hardware", str(DGX)]
    )
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.rstrip().endswith(result.scope)
    gpus = compare(WORKLOAD, [DGX], vary=["serving.batch_slots=8,16"], context=2048)
    assert "every slot at one context (2,048 cached tokens)" in gpus.scope
    assert gpus.scope.endswith(
        "(rdu-sim run times one). There each variant's paged KV cache reads each sequence's "
        "own context."
    )
    assert compare(WORKLOAD, [SN40L_8]).scope == ""
    # the typical request said at the default context only, and only under half of it
    sn40l, h100 = result.columns
    assert "typical request ends" not in scope([sn40l, h100], context_given=True)
    longer = [dataclasses.replace(c, output_tokens=1_300) for c in (sn40l, h100)]
    assert "typical request ends at 3,604 tokens" in scope(longer)  # 3,604 of 8,192
    assert "typical request ends" not in scope(
        [dataclasses.replace(c, output_tokens=1_800) for c in (sn40l, h100)]  # 4,104
    )
    # several paged but not all: the machines joined in words, in a sentence of its own
    sn40l, h100 = result.columns
    h200 = dataclasses.replace(h100, label="dgx-h200")
    assert scope([sn40l, h100, h200], context_given=True).endswith(
        "(rdu-sim run times one). There the paged KV caches of dgx-h100 and dgx-h200 read "
        "each sequence's own context."
    )
    three = [sn40l, h100, h200, dataclasses.replace(h100, label="h20, tp=4")]
    assert scope(three, context_given=True).endswith(
        "There the paged KV caches of dgx-h100; dgx-h200 and h20, tp=4 read each sequence's "
        "own context."
    )


def test_vary_is_repeatable_and_combines_with_hardware() -> None:
    result = compare(WORKLOAD, [SN40L_8, DGX], vary=["parallelism.tp=4,8"], batch=4)
    labels = [c.label for c in result.columns]
    assert labels == [
        "sn40l-8, parallelism.tp=4",
        "sn40l-8, parallelism.tp=8",
        "dgx-h100, parallelism.tp=4",
        "dgx-h100, parallelism.tp=8",
    ]
    assert [(c.hardware, c.tp) for c in result.columns] == [
        ("sn40l-8", 4),
        ("sn40l-8", 8),
        ("dgx-h100", 4),
        ("dgx-h100", 8),
    ]
    two = compare(WORKLOAD, [], vary=["parallelism.tp=4,8", "serving.batch_slots=2,4"])
    assert [(c.tp, c.batch) for c in two.columns] == [(4, 2), (4, 4), (8, 2), (8, 4)]
    assert len(two.to_dict()["verdicts"]) == 3  # each against the first


def test_vary_values_split_as_set_reads_them() -> None:
    assert parse_vary("hw.socket.hbm.bandwidth=1.8 TB/s, 2.4 TB/s") == (
        "hw.socket.hbm.bandwidth",
        ["1.8 TB/s", "2.4 TB/s"],
    )
    assert parse_vary("kv.context_buckets=[1024, 2048],[4096]") == (
        "kv.context_buckets",
        [[1024, 2048], [4096]],
    )
    assert parse_vary("serving.batch_slots=8,16,auto") == ("serving.batch_slots", [8, 16, "auto"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vary", "kv.policy=full"], "--vary: kv.policy: give two values or more"),
        (["--vary", "kv.policy"], "--vary: kv.policy: give a field and its values"),
        (["--vary", "kv.policy=full,full"], "a value is given twice"),
        (["--vary", "kv.policy=full,fulll"], "unknown kv.policy 'fulll'"),
        (["--vary", "kv.policy=full,snapkv", "--set", "kv.policy=full"], "also given by --set"),
        (["--hardware", "sn40l-8", "--vary", "hardware=sn40l-16,dgx-h100"], "already varied"),
        ([], "give --hardware (a system per column) or --vary PATH=A,B"),
        (  # 90,000 combinations ran until killed
            [
                "--vary",
                "serving.seed=" + ",".join(map(str, range(300))),
                "--vary",
                "serving.requests=" + ",".join(map(str, range(100, 400))),
            ],
            "serving.seed x serving.requests: 90,000 variants; a comparison shows at most 64",
        ),
        (
            ["--hardware", "sn40l-8", "--vary", "serving.seed=" + ",".join(map(str, range(65)))],
            "hardware x serving.seed: 65 variants",
        ),
    ],
)
def test_bad_vary_is_one_error_line_before_any_simulation(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulated: list[str] = []
    monkeypatch.setattr(
        "rdu_sim.compare._column",
        lambda scenario, side, batch, context: simulated.append(scenario.hardware.name),
    )
    result = CliRunner().invoke(cli, ["compare", str(WORKLOAD), *args])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert simulated == []


def test_plot_compare_draws_the_variants(tmp_path: Path) -> None:
    from rdu_sim.report import plots

    data = compare(SNAP, [], vary=["kv.policy=full,snapstream"]).to_dict()
    fig = plots.plot("compare", data)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["kv.policy=full", "kv.policy=snapstream"]
    bounds = [f"{LABELS[column['bound']]}-bound" for column in data["columns"]]
    assert [t.get_text().split("\n")[1] for t in fig.axes[0].texts] == bounds
    assert bounds[0] == "HBM-bound"  # full KV at 128k: the KV reads bind, whatever the links
    title = fig.get_suptitle()  # names what it compares (notebook 06's had no title)
    assert "deepseek-r1-128k-snapstream" in title and "deepseek-r1" in title
    data["columns"][1]["bound"] = "host_link"  # a key in words, not 'HOST_LINK-bound'
    fig = plots.plot("compare", data)
    assert fig.axes[0].texts[1].get_text().split("\n")[1] == "host-link-bound"


RACKS = "deepseek-r1-sn40l-4racks-ep64"
EP64 = "{tp: 1, dp_attention: 64, ep: 64}"
TP16_PP4 = "{tp: 16, dp_attention: 1, ep: 1, pp: 4}"
TP16 = "{tp: 16, dp_attention: 1, ep: 1}"


def test_an_instance_is_a_replica_of_its_layout_as_step_runs_it() -> None:
    """On 64 sockets, TP16 x PP4 and EP64 are each one replica (one model instance) and
    four TP16 replicas are four: compare's instance tokens/s is ``rdu-sim step``'s batch
    (a rank's, times the ranks, under data-parallel attention: its ``batch_of``) over its
    step, and the system's is that times the instances. It summed 64 // tp instances: TP16
    x PP4 came out 4x (52,393 tokens/s where one 4,096-slot replica at 313 ms makes 13.1k)
    and EP64 read as 64 instances of one rank's batch."""
    runner = CliRunner()
    layouts = (EP64, TP16_PP4, TP16)
    printed = runner.invoke(
        cli,
        ["compare", RACKS, "--vary", "parallelism=" + ",".join(layouts), "--batch", "8", "--json"],
    )
    assert printed.exit_code == 0, printed.output
    data = json.loads(printed.stdout)
    assert [c["instances"] for c in data["columns"]] == [1, 1, 4]
    for column, layout in zip(data["columns"], layouts, strict=True):
        shown = runner.invoke(
            cli, ["step", RACKS, "--set", f"parallelism={layout}", "--batch", "8", "--json"]
        )
        assert shown.exit_code == 0, shown.output
        step = json.loads(shown.stdout)
        assert column["layout"] == step["layout"]
        ranks = step["layout"]["dp_attention"] if step["batch_of"] == "attention_rank" else 1
        assert column["attention_ranks"] == ranks and column["batch"] == step["batch"] * ranks
        assert column["step_s"] == step["step_s"]
        assert column["tokens_per_s"] == pytest.approx(step["batch"] * ranks / step["step_s"])
        assert column["system_tokens_per_s"] == pytest.approx(
            column["tokens_per_s"] * column["instances"]
        )
    ep64, pipeline, four = data["columns"]
    assert ep64["batch"] == 8 * 64 and pipeline["batch"] == 8 and four["batch"] == 8
    assert (
        "the system holds 4 model instances of 16 sockets vs 1 model instance of 64"
        in (data["verdicts"][1])
    )
    assert "instances" not in data["verdicts"][0]  # EP64 and TP16 x PP4: one each
    assert "batch 512 of 4,096 (8 a rank over 64 ranks)" in data["lines"][0]


def test_the_issue_command_counts_a_pipeline_as_one_instance() -> None:
    """The trial's command: four TP16 replicas serve ~1.83x one TP16 x PP4 replica (each at
    its batch capacity), not 0.457x."""
    result = compare(RACKS, [], vary=[f"parallelism={TP16_PP4},{TP16}"])
    pipeline, four = result.columns
    assert (pipeline.instances, four.instances) == (1, 4)
    assert pipeline.batch == pipeline.batch_capacity == 4096
    assert pipeline.step_s is not None and pipeline.system_tokens_per_s is not None
    assert four.system_tokens_per_s is not None
    assert pipeline.system_tokens_per_s == pytest.approx(4096 / pipeline.step_s)
    (verdict,) = result.verdicts
    ratio = four.system_tokens_per_s / pipeline.system_tokens_per_s
    assert 1.7 < ratio < 2.0
    assert f"{human.ratio(ratio)} the decode-step tokens/s (" in verdict
    # a varied mapping is labelled as --vary takes it, not as Python's repr
    assert pipeline.label == "parallelism={tp: 16, dp_attention: 1, ep: 1, pp: 4}"


@pytest.mark.parametrize(
    ("chunk", "shown"),
    [(None, "(2,304 tokens, bucket 3,072)"), (1024, "(2,304 tokens, 3 chunks of 1,024)")],
)
def test_the_prefill_row_is_what_a_run_reports(chunk: int | None, shown: str) -> None:
    """`run` and `compare` time the same typical prompt the same way: a server pads the
    2,304-token median prompt to its 3,072 bucket (or cuts it into chunks); compare timed the
    bare 2,304 tokens (120 ms against run's 160 ms on a Qwen2.5-14B workload). The row
    says the bucket."""
    overrides = {"serving.requests": 2, "serving.batch_slots": 2}
    if chunk is not None:
        overrides["serving.prefill_chunk_tokens"] = chunk
    result = compare(WORKLOAD, [SN40L_8, DGX], overrides, batch=2)
    for column, hardware in zip(result.columns, (SN40L_8, DGX), strict=True):
        served = api.run(WORKLOAD, {**overrides, "hardware": str(hardware), "stack": None})
        assert column.prefill_s == pytest.approx(served.to_dict()["prefill_s"], rel=1e-9)
        assert column.prefill_tokens == 2304
    row = dict(ROWS)["prefill, typical prompt alone in a step"]
    assert row(result.columns[0]).endswith(shown)


def test_a_crossed_combination_the_workload_refuses_is_a_column_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--vary parallelism.dp_attention=16,64 --vary parallelism.ep=16,64`: ep must equal
    tp x dp_attention, so two of the four combinations are refused; each value runs in
    another, so they are columns saying why (nothing simulated for them), not an abort of
    the whole comparison on the first."""
    simulated: list[dict[str, object]] = []
    real = compare_module._column

    def counted(scenario: object, side: Variant, batch: object, context: object) -> object:
        simulated.append(side.settings)
        return real(scenario, side, batch, context)  # type: ignore[arg-type]

    monkeypatch.setattr("rdu_sim.compare._column", counted)
    vary = ["parallelism.dp_attention=16,64", "parallelism.ep=16,64"]
    result = compare(RACKS, [], vary=vary, batch=8)
    assert [c.invalid for c in result.columns] == [False, True, True, False]
    assert [c.fits for c in result.columns] == [True, False, False, True]
    assert len(simulated) == 2
    refused = result.columns[1]
    assert refused.label == "parallelism.dp_attention=16, parallelism.ep=64"
    ran = result.columns[0]  # the hardware is not varied: the refused column names it too
    assert (refused.hardware, refused.kind) == (ran.hardware, ran.kind)
    assert refused.hardware_file == ran.hardware_file and refused.hardware != "-"
    assert "parallelism.ep: must be 1" in refused.reason and "got 64" in refused.reason
    assert refused.step_s is None and refused.settings == {
        "parallelism.dp_attention": 16,
        "parallelism.ep": 64,
    }
    assert result.lines[1].startswith(
        "parallelism.dp_attention=16, parallelism.ep=64: invalid combination: "
    )
    assert len(result.verdicts) == 1  # the two that run, one against the other
    printed = CliRunner().invoke(cli, ["compare", RACKS, *(f"--vary={v}" for v in vary)])
    assert printed.exit_code == 0, printed.output
    assert "invalid combination" in printed.stdout


def test_a_system_that_cannot_take_a_value_another_can_is_a_column() -> None:
    """tp=16 on an 8-socket system beside a 16-socket one that runs it: a column."""
    result = compare(
        WORKLOAD, [SN40L_8, REPO / "hw_configs" / "sn40l-16.yaml"], vary=["parallelism.tp=8,16"]
    )
    assert [(c.hardware, c.tp, c.invalid) for c in result.columns] == [
        ("sn40l-8", 8, False),
        ("sn40l-8", 0, True),
        ("sn40l-16", 8, False),
        ("sn40l-16", 16, False),
    ]
    assert "tp=16 exceeds the 8 sockets" in result.columns[1].reason


def test_every_combination_refused_is_one_error_line() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "compare",
            RACKS,
            "--vary",
            "parallelism.dp_attention=16,64",
            "--vary",
            "parallelism.ep=32,128",
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "parallelism.ep: must be 1" in line


def test_help_shows_the_mapping_form_of_vary() -> None:
    shown = CliRunner().invoke(cli, ["compare", "--help"])
    assert shown.exit_code == 0
    text = " ".join(shown.stdout.split())
    assert "--vary 'parallelism={tp: 16, dp_attention: 1, ep: 1},{tp: 1, dp_attention: 64" in text
    assert "refuses is a column saying why" in text


def test_a_speculative_workload_says_its_draft_is_not_compared() -> None:
    """compare times the target's steps alone: a workload with a draft says so, one without
    says nothing of it."""
    spec = Path(__file__).resolve().parents[1] / "workloads" / "speculative"
    result = compare(spec / "llama3.1-70b-16socket-specdec.yaml", ["sn40l-16"], batch=8)
    said = [line for line in result.lines if line.startswith("speculation is not compared")]
    assert said == [
        "speculation is not compared: each column times llama-3.1-70b alone, its decode step "
        "and its prefill, without the draft llama-3.2-1b's part (rdu-sim run times the "
        "draft's part)"
    ]
    plain = compare("llama3.1-8b-1socket", ["sn40l"], batch=8)
    assert not any("speculation" in line for line in plain.lines)


def test_a_pipelined_variant_names_its_bubble_as_what_its_bound_leaves() -> None:
    """A pipeline's bubble is the time its binding resource does not explain: its line and
    the verdict name it (the same value ``rdu-sim step`` reports), where a variant without
    a pipeline says nothing of one; with the binding resource under half of both steps, the
    rest is said to hold the bubble rather than "a pipeline's fill"."""
    from dataclasses import replace

    from rdu_sim.compare.why import column_lines, verdict
    from rdu_sim.report.bound import BUBBLE_CAVEAT

    tp8 = {"parallelism.tp": 8}
    sn40l_16 = REPO / "hw_configs" / "sn40l-16.yaml"
    result = compare(WORKLOAD, [sn40l_16], tp8, vary=["parallelism.pp=1,2"])
    alone, pipelined = result.columns
    timing = api.step(api.load(WORKLOAD, {**tp8, "hardware": "sn40l-16", "parallelism.pp": 2}))
    timing = timing.detail
    assert timing.pipeline is not None
    assert alone.pipeline_bubble is None
    assert pipelined.pipeline_bubble == timing.pipeline["bubble"]
    words = f"the pipeline's bubble {human.percent(timing.pipeline['bubble'])} of its stages' time"
    assert words in result.lines[1] and "bubble" not in result.lines[0]
    # the verdict that blames the bubble says once that one batch is in flight
    caveat = f"({BUBBLE_CAVEAT})"
    assert f"({pipelined.label}: {words} {caveat})" in result.verdicts[0]
    assert result.verdicts[0].count(caveat) == 1 and caveat in result.lines[1]
    # both under half their step: the rest is named, not guessed
    assert alone.step_s is not None and pipelined.step_s is not None
    slow = replace(alone, step_s=alone.step_s * 3)
    unexplained = verdict(pipelined, slow)
    assert f"no one resource explains ({pipelined.label}: {words} {caveat}; latencies," in (
        unexplained
    )
    assert "a pipeline's fill" in verdict(replace(pipelined, pipeline_bubble=None), slow)
    assert column_lines([alone])[0] == result.lines[0]


def test_a_varied_value_is_labelled_in_yaml_words() -> None:
    """A label reads as --vary takes the value (YAML's null, true, false), not Python's."""
    assert Variant({"speculation": None}).label("sn40l-16") == "speculation=null"
    assert Variant({"serving.x": True, "serving.y": False}).label("h") == (
        "serving.x=true, serving.y=false"
    )
    assert Variant({"kv.policy": "full", "parallelism.tp": 8}).label("h") == (
        "kv.policy=full, parallelism.tp=8"
    )


def test_one_slot_is_one_slot_in_the_verdict() -> None:
    from dataclasses import replace

    from rdu_sim.compare.why import verdict

    (column,) = compare(WORKLOAD, [SN40L_8], batch=1).columns
    said = verdict(replace(column, label="b"), column)
    assert "Why: the same batch (1 slot);" in said  # prefill is under a tenth of its time
    many = compare(WORKLOAD, [SN40L_8], batch=2).columns[0]
    assert "; in decode, the same batch (2 slots);" in verdict(replace(many, label="b"), many)


def test_a_gpu_step_its_bound_leaves_half_unexplained_names_the_parts_that_add_up() -> None:
    """At batch 1 the H100's HBM time is under half its step: its kernels run one after
    another, so the verdict adds the parts that take time of their own (HBM, kernel
    boundaries, the collectives' kernels: the step's bound report's times) and says how much
    of the rest the other resources could take and what none explains (trial R F5: "the rest
    is time no one resource explains" where boundaries and links add up), each word once."""
    result = compare(WORKLOAD, [SN40L_8, DGX], batch=1)
    sn40l, gpu = result.columns
    (said,) = result.verdicts
    timing = api.step(WORKLOAD, {"hardware": str(DGX)}, batch=1).detail
    bound = step_bound(timing, api.load(WORKLOAD, {"hardware": str(DGX)}).hardware)
    assert gpu.bound == "hbm" and gpu.bound_s is not None and gpu.step_s is not None
    assert sn40l.bound_s is not None and sn40l.step_s is not None
    assert gpu.bound_s / gpu.step_s < 0.5 <= sn40l.bound_s / sn40l.step_s
    others = {k: t for k, t in bound.times().items() if k != "hbm"}
    assert max(others, key=lambda k: others[k]) == "boundaries"
    boundaries = bound.boundaries_s
    assert gpu.resource_s["boundaries"] == boundaries
    times = gpu.resource_s
    parts = times["hbm"] + boundaries + times["link"]
    others = times["compute"] + times["blocks"] + times["launch"]
    assert parts < gpu.step_s and parts + others < gpu.step_s  # what the words claim
    d = human.duration
    assert (
        "; dgx-h100 runs its kernels one after another, its step the sum of their times, each "
        f"bound by its own resource: HBM bandwidth {d(times['hbm'])}, kernel boundaries "
        f"(launch and sync) {d(boundaries)} and its collectives' kernels on the links "
        f"(hw.system.intra_node_link) {d(times['link'])} make {d(parts)} of its "
        f"{d(gpu.step_s)}; of the rest, {d(gpu.step_s - parts)}, the other resources take at "
        f"most {d(others)} (alone: compute (PCUs or SMs) {d(times['compute'])}, decode "
        f"attention's thread blocks {d(times['blocks'])}, the host's kernel launches "
        f"{d(times['launch'])}), and {d(gpu.step_s - parts - others)} no one resource explains "
        "(latencies, resources waiting on each other); host time, a factor of its own: the "
        "serving stacks add 0 s vs 1.73 ms to their steps (tensorrt-llm vs sambastack-2025;"
    ) in said
    assert said.count("latencies") == 1 and "the largest other" not in said
    assert "sn40l-8's" not in said  # its HBM time explains most of its step


def test_each_column_names_its_serving_stack() -> None:
    """The stack moves the comparison (its host time, its batch limit), so each column names
    it: ``stack`` in the JSON as a run's and a step's JSON do, a table row and each line in
    the step header's words; ``--set stack=none`` says the device alone."""
    args = ["compare", str(WORKLOAD), "--hardware", "sn40l-8", "--hardware", "dgx-h100"]
    shown = CliRunner().invoke(cli, [*args, "--batch", "1", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    stacks = [c["stack"] for c in data["columns"]]
    ran = [
        api.load(WORKLOAD, {"hardware": h, "stack": None}).stack.name
        for h in ("sn40l-8", "dgx-h100")
    ]
    assert stacks == ran == ["sambastack-2025", "tensorrt-llm"]
    assert data["lines"][0].startswith("sn40l-8 served by sambastack-2025: full KV")
    assert data["lines"][1].startswith("dgx-h100 served by tensorrt-llm: full KV")
    bare = CliRunner().invoke(cli, [*args, "--batch", "1", "--set", "stack=none"])
    assert bare.exit_code == 0, bare.output
    (row,) = [line for line in bare.stdout.splitlines() if line.startswith("│ serving stack")]
    assert [cell.strip() for cell in row.split("│")[2:4]] == ["none (the device alone)"] * 2
    assert "sn40l-8 on the device alone (no serving stack): full KV" in bare.stdout


SPECDEC = REPO / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
DRAFT = "{draft: llama-3.2-1b, decoding: {draft_tokens: 8, acceptance: 0.5}}"


def test_the_speculation_note_names_each_column_with_a_draft_in_any_order() -> None:
    """The note is each column's, not the first's: varying speculation on and off says the
    same of the column with a draft whichever comes first, and the varied field is noted as
    one compare does not time."""
    said = []
    for values in (f"null,{DRAFT}", f"{DRAFT},null"):
        result = compare(SPECDEC, [], vary=[f"speculation={values}"], batch=8)
        drafted = [c for c in result.columns if c.draft is not None]
        assert [c.draft for c in result.columns].count(None) == 1
        assert [c.label for c in drafted] == [f"speculation={DRAFT}"]
        notes = [line for line in result.lines if "speculation is not" in line]
        assert notes == [
            f"speculation is not compared in speculation={DRAFT}: llama-3.1-70b is timed alone, "
            "its decode step and its prefill, without the draft llama-3.2-1b's part (rdu-sim "
            "run times the draft's part)"
        ]
        assert "--vary speculation: compare does not time speculation" in result.lines[-1]
        said.append(notes)
    assert said[0] == said[1]


def test_a_varied_speculation_field_is_noted_and_moves_only_the_memory_plan() -> None:
    """``--vary speculation.decoding.draft_tokens``: compare times no draft round, so the
    field is noted; what it does move is the memory plan (the verify step's rollback
    positions in each slot: the batch capacity, here with no stack's cap on it)."""
    result = compare(
        SPECDEC, [], {"stack": "none"}, vary=["speculation.decoding.draft_tokens=1,16"]
    )
    one, sixteen = result.columns
    assert one.step_s == sixteen.step_s and one.draft == sixteen.draft == "llama-3.2-1b"
    assert one.batch_capacity is not None and sixteen.batch_capacity is not None
    assert sixteen.batch_capacity < one.batch_capacity
    assert result.lines[2].startswith("speculation is not compared: each column times ")
    assert result.lines[3] == (
        "--vary speculation.decoding.draft_tokens: compare does not time speculation (a "
        "draft's steps, the target's verify step, the tokens it accepts), so its values move "
        "at most each column's memory plan (its batch capacity); rdu-sim run times them "
        "(rdu-sim sweep varies them)"
    )
    shown = CliRunner().invoke(
        cli, ["compare", str(SPECDEC), "--vary", "speculation.decoding.draft_tokens=1,8", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    assert [c["draft"] for c in json.loads(shown.stdout)["columns"]] == ["llama-3.2-1b"] * 2


COE = REPO / "workloads" / "samba-coe-150x8b-8socket.yaml"


def test_a_composition_of_experts_column_times_one_expert_in_its_own_memory_plan() -> None:
    """A CoE column times one expert as a CoE run does (its steps' scenario, the embedding
    read from DDR) at the batch capacity of the CoE plan (slots beside the router and one
    cached expert: fewer than the whole HBM gives the model alone), and says what it leaves
    out; --vary coe.experts is noted as a field compare does not time."""
    from rdu_sim.serving.coe import coe_capacity, expert_step_scenario, router_scenario

    bare = {"stack": "none"}
    result = compare(COE, [], bare, vary=["coe=null,{experts: 150, router: llama-3.1-8b}"])
    alone, coe = result.columns
    scenario = api.load(COE, bare)
    assert scenario.workload.coe is not None
    planned = coe_capacity(scenario, router_scenario(scenario, scenario.workload.coe))
    whole = api.EngineBackend().batch_capacity(scenario)
    assert coe.batch_capacity == planned < whole == alone.batch_capacity
    assert (coe.coe_experts, alone.coe_experts) == (150, None)
    expert = api.EngineBackend().step_cost(
        expert_step_scenario(scenario), api.default_step_shape(scenario, "decode", batch=16)
    )
    assert coe.batch == 16 and coe.step_s == expert.step_s
    assert coe.resource_s["ddr"] > 0 == alone.resource_s["ddr"]  # the embedding's rows
    notes = [line for line in result.lines if "Composition of Experts is not" in line]
    assert notes == [
        "a Composition of Experts is not compared in coe={experts: 150, router: llama-3.1-8b}: "
        "one expert (llama-3.1-8b) is timed alone, its decode step at the batch and its "
        "prefill, with the batch capacity its HBM leaves beside the router and one cached "
        "expert; not its turns of one expert at a time (a batch holds one expert's "
        "requests), its expert switches or the router's prefills (rdu-sim run times them)"
    ]
    shown = CliRunner().invoke(
        cli, ["compare", str(COE), "--hardware", "sn40l-8", "--vary", "coe.experts=1,150"]
    )
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "a Composition of Experts is not compared: each column times one expert" in text
    assert "--vary coe.experts: compare does not time a Composition of Experts' serving" in text


def test_a_composition_of_experts_column_says_the_stacks_cap_as_a_run_does() -> None:
    """Under SambaStack the CoE's batch capacity is the stack's (its powers_of_two programs)
    below the slots its HBM region holds (``coe_room``, a run's ``room for``): the column
    says so as every other column does; it printed the capacity bare, as memory's."""
    from rdu_sim.cli.compare_cmd import _cap
    from rdu_sim.serving.coe import coe_capacity, coe_room, router_scenario

    (column,) = compare(COE, ["sn40l-8"]).columns
    scenario = api.load(COE)
    assert scenario.workload.coe is not None
    router = router_scenario(scenario, scenario.workload.coe)
    holds = coe_room(scenario, router)
    assert column.batch_capacity == coe_capacity(scenario, router) < holds
    assert (column.capacity_limit, column.memory_capacity) == ("batch_programs", holds)
    assert _cap(column) == f" (the stack's batch_programs; memory holds {holds:,})"


def test_a_composition_of_experts_batch_that_leaves_no_expert_room_does_not_fit() -> None:
    """A batch whose KV cache leaves HBM no room for one expert is a column that does not
    fit, with the CoE plan's reason (as a run refuses it), where the model alone still fits."""
    result = compare(COE, [], vary=["coe=null,{experts: 150, router: llama-3.1-8b}"], batch=480)
    alone, coe = result.columns
    assert alone.fits and not coe.fits
    assert "no expert fits the HBM region" in coe.reason


def test_the_verdict_says_bound_by_only_where_the_column_lines_do() -> None:
    """dgx-h100-vllm's decode step is 38.6% HBM ('largest part' on its line), sn40l-8's
    89.1% ('bound by'): the verdict uses each column's label, not 'both read as bound by';
    a verdict between steps of different resources labels each the same way."""
    from dataclasses import replace

    from rdu_sim.compare.why import UNEXPLAINED, _step_why
    from rdu_sim.report.bound import BINDS_SHARE

    assert UNEXPLAINED == BINDS_SHARE
    args = ["compare", "llama3.1-70b-decode", "--hardware", "dgx-h100-vllm"]
    said = " ".join(CliRunner().invoke(cli, [*args, "--hardware", "sn40l-8"]).stdout.split())
    assert "decode step 25.8 ms largest part HBM bandwidth (9.96 ms of it, 38.6%" in said
    assert "decode step 18.5 ms bound by HBM bandwidth (16.5 ms of it, 89.1%" in said
    assert (
        "bound by HBM bandwidth vs largest part HBM bandwidth: it takes 89.1% vs 38.6% of "
        "their step time"
    ) in said
    assert "both read as bound by" not in said
    gpu, rdu = compare(WORKLOAD, [REPO / "hw_configs" / "dgx-h100-vllm.yaml", SN40L_8]).columns
    host = replace(gpu, bound="host", bound_s=gpu.step_s * 0.3)
    assert "largest part the serving stack's host time against bound by HBM" in _step_why(host, rdu)


def bare_sn40l(tmp_path: Path) -> Path:
    """SN40L-8's silicon under no serving stack by default: a column that differs from
    sn40l-8 only in its stack."""
    path = tmp_path / "bare.yaml"
    path.write_text("extends: sn40l-8\nname: sn40l-8-bare\ndefault_stack: none\n")
    return path


def test_the_lines_say_when_the_columns_run_different_stacks() -> None:
    """Each system runs as deployed, its own stack: when they differ, one line says which
    column runs which and how to compare alike; one stack for all, or the stack varied,
    says nothing."""
    result = compare(WORKLOAD, [SN40L_8, DGX], batch=1)
    (said,) = [line for line in result.lines if "different serving stacks" in line]
    # no stack runs on both an RDU and a GPU: --vary stack=... would refuse half its
    # columns, so the line does not advise it (the trial ran it: 2 of 4 columns refused)
    assert said == (
        "the columns run different serving stacks (sn40l-8: sambastack-2025; dgx-h100: "
        "tensorrt-llm), each system as deployed: a verdict's ratio holds the stacks' host time "
        "and batch limits beside the hardware. No stack named runs on every column's hardware "
        "(sambastack-2025 on rdu; tensorrt-llm on gpu), so --vary stack cannot run each under "
        f"each. To compare the hardware alike, give every column one stack (--set stack=none: "
        f"{NONE_WORDS}); or keep each system's stack and read the host time a verdict names "
        "apart (its step on the device alone)"
    )
    assert "--vary stack=" not in said
    assert result.lines.index(said) == 2  # after the columns' own lines
    # two GPU stacks on GPUs: each runs under each, and the advice says so and works
    gpus = compare(WORKLOAD, [DGX, REPO / "hw_configs" / "dgx-h100-vllm.yaml"], batch=1)
    (said,) = [line for line in gpus.lines if "different serving stacks" in line]
    assert said.endswith("or run each under each (--vary stack=tensorrt-llm,vllm-2024)")
    each = compare(
        WORKLOAD, [DGX, REPO / "hw_configs" / "dgx-h100-vllm.yaml"],
        vary=["stack=tensorrt-llm,vllm-2024"], batch=1,
    )  # fmt: skip
    assert all(c.fits for c in each.columns)
    alike = compare(WORKLOAD, [SN40L_8, DGX], {"stack": "none"}, batch=1)
    assert [c.stack for c in alike.columns] == ["none", "none"]
    assert not any("different serving stacks" in line for line in alike.lines)
    varied = compare(WORKLOAD, [SN40L_8], vary=["stack=none,sambastack-2025"], batch=1)
    assert not any("different serving stacks" in line for line in varied.lines)
    printed = CliRunner().invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", "sn40l-8", "--hardware", "dgx-h100",
              "--batch", "1"],
    )  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert "the columns run different serving stacks (sn40l-8: sambastack-2025;" in printed.stdout


def test_the_verdict_credits_host_time_as_a_factor_of_its_own(tmp_path: Path) -> None:
    """The same silicon with and without SambaStack: the step ratio (0.911x) is the stack's
    host time, not the hardware, and the verdict says so, with the device's steps equal."""
    result = compare(WORKLOAD, [SN40L_8, bare_sn40l(tmp_path)])
    served, bare = result.columns
    assert (bare.stack, served.stack) == ("none", "sambastack-2025")
    assert bare.runtime_s == 0 and served.runtime_s == pytest.approx(1.732e-3)
    assert bare.step_s is not None and served.step_s is not None
    assert bare.step_s == pytest.approx(served.step_s - 1.732e-3, rel=1e-12)
    (verdict,) = result.verdicts
    assert verdict.endswith(
        "; host time, a factor of its own: the serving stacks add 0 s vs 1.73 ms to their "
        f"steps (none vs sambastack-2025; 0.0% vs {human.percent(1.732e-3 / served.step_s)} of "
        "them), and on the device alone its step takes 1x as long (16.8 ms vs 16.8 ms)."
    )
    # under one stack the host times are equal and the clause is gone
    (alike,) = compare(WORKLOAD, [SN40L_8, bare_sn40l(tmp_path)], {"stack": "none"}).verdicts
    assert "host time" not in alike


def test_host_time_is_named_even_where_the_rest_of_the_step_is_not(tmp_path: Path) -> None:
    """A new socket with 4.44x the HBM bandwidth under no stack against SN40L-8 under
    SambaStack: the rest of each step stays within 15% of the HBM ratio, so the rest is not
    named; the host time (9.3% of SN40L-8's step) still is, with the devices' own ratio."""
    fast = tmp_path / "fast.yaml"
    fast.write_text(
        "extends: sn40l-8\nname: fast-8\ndefault_stack: none\n"
        "socket: {hbm: {bandwidth: 8 TB/s, capacity: 256 GiB}}\n"
    )
    result = compare(WORKLOAD, [SN40L_8, fast])
    served, new = result.columns
    (verdict,) = result.verdicts
    assert "the rest of each step" not in verdict
    assert served.step_s is not None and new.step_s is not None
    device = new.step_s / (served.step_s - 1.732e-3)
    assert verdict.endswith(
        "; host time, a factor of its own: the serving stacks add 0 s vs 1.73 ms to their "
        f"steps (none vs sambastack-2025; 0.0% vs 9.3% of them), and on the device alone its "
        f"step takes {human.ratio(device)} as long ({human.duration(new.step_s)} vs "
        f"{human.duration(served.step_s - 1.732e-3)})."
    )


def test_a_system_that_cannot_take_the_workload_is_a_column_not_run(tmp_path: Path) -> None:
    """tp=16 beside an 8-GPU system: the systems that run it are compared, the other is a
    column not run with the rule's own sentence (it was an error, and no column ran), and
    the command exits 0 as with a system the model does not fit. Every system refusing it,
    or a hardware file that is itself wrong beside one that runs, is bad input: exit 2."""
    sixteen = {"parallelism.tp": 16}
    result = compare(WORKLOAD, ["sn40l-16", DGX], sixteen, batch=8)
    rack, gpu = result.columns
    assert rack.fits and rack.tp == 16 and not rack.unsupported
    assert (gpu.fits, gpu.invalid, gpu.unsupported, gpu.hardware) == (False, True, True, "dgx-h100")
    sentence = "parallelism.tp: tp=16 exceeds the 8 GPUs of hardware 'dgx-h100'"
    assert sentence in gpu.reason
    with pytest.raises(ConfigError) as alone:
        api.load(WORKLOAD, {"hardware": str(DGX), **sixteen})
    assert gpu.reason == str(alone.value)  # the same sentence the workload alone gives
    assert f"dgx-h100: not run: {gpu.reason}" in result.lines
    assert result.verdicts == ()  # one system ran: nothing to weigh it against
    args = ["compare", str(WORKLOAD), "--hardware", "sn40l-16", "--hardware", str(DGX)]
    printed = CliRunner().invoke(cli, [*args, "--set", "parallelism.tp=16", "--batch", "8"])
    assert printed.exit_code == 0, printed.output
    # the same sentence, naming the flag where the API's call named its argument
    flagged = gpu.reason.replace("(from overrides: parallelism.tp)", "(from --set parallelism.tp)")
    assert gpu.reason.endswith("(from overrides: parallelism.tp)")
    assert f"dgx-h100: not run: {flagged}" in printed.stdout
    shown = CliRunner().invoke(cli, [*args, "--set", "parallelism.tp=16", "--batch", "8", "--json"])
    (column,) = [c for c in json.loads(shown.stdout)["columns"] if c["hardware"] == "dgx-h100"]
    assert column["unsupported"] and not column["fits"]
    # every system refusing it: one error line, exit 2
    none_run = CliRunner().invoke(
        cli, ["compare", str(WORKLOAD), "--hardware", str(DGX), "--hardware", "dgx-h200",
              "--set", "parallelism.tp=16"],
    )  # fmt: skip
    assert none_run.exit_code == 2, none_run.output
    (line,) = none_run.stderr.strip().splitlines()
    assert line.startswith("error: ") and sentence in line
    # a hardware file wrong in itself is bad input, whatever the other systems do
    broken = tmp_path / "broken.yaml"
    broken.write_text("extends: sn40l-16\nname: broken\nsocket: {hbm: {bandwidth: -1 TB/s}}\n")
    bad = CliRunner().invoke(cli, [*args[:3], "sn40l-16", "--hardware", str(broken)])
    assert bad.exit_code == 2, bad.output
    assert "hbm.bandwidth" in bad.stderr and "Traceback" not in bad.output


def test_a_batch_its_kv_pool_cannot_hold_does_not_fit() -> None:
    """DeepSeek-R1 in FP8 on one DGX-H100 node leaves TensorRT-LLM's pool 61 pages of 64
    tokens, not one 8,192-token sequence: ``--batch 64`` does not fit, by the rule that makes
    ``rdu-sim step`` warn of the same step, in its words (the trial's compare said ``fits:
    true``, no warning, "batch 64 of 10"); a batch the pool holds still runs."""
    from rdu_sim.serving.backend import StepOverPoolWarning

    given = {"model": "deepseek-r1", "dtypes.weights": "fp8"}
    column = compare(WORKLOAD, [DGX], given, batch=64).columns[0]
    assert not column.fits and column.step_s is None
    assert column.reason.startswith("a decode step of 64 sequences of 8,192 cached tokens")
    assert column.reason.endswith("the tensorrt-llm pool holds (not one such sequence)")
    with pytest.warns(StepOverPoolWarning) as said:
        api.step(WORKLOAD, {**given, "hardware": str(DGX)}, batch=64)
    assert str(said[0].message) == f"{WORKLOAD}: {column.reason}"
    # 405B's pool holds 55 such sequences: 32 run, 64 do not
    big = {"model": "llama-3.1-405b", "dtypes.weights": "fp8"}
    held, over = (compare(WORKLOAD, [DGX], big, batch=b).columns[0] for b in (32, 64))
    assert held.fits and held.step_s and not held.warnings
    assert not over.fits and over.reason.endswith("(at most 55 such sequences at once)")


def test_the_default_stack_compare_gives_a_system_is_blamed_on_its_hardware() -> None:
    """compare serves each system with its hardware's default stack: an error that stack
    causes names the --hardware that gave it, not a ``--set stack`` nobody typed (the trial's
    "(from --set parallelism.tp, --set stack)")."""

    def does_not_fit(*sets: str) -> str:
        args = ["compare", "deepseek-r1-128k-snapstream", "--hardware", "dgx-h100"]
        args += ["--hardware", "dgx-h200"]
        for item in ("parallelism.tp=8", *sets):
            args += ["--set", item]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        return next(line for line in result.stdout.splitlines() if "does not fit" in line)

    said = does_not_fit()
    assert said.endswith("(from --set parallelism.tp, --hardware dgx-h100: its default stack)")
    assert "--set stack" not in said
    # at the field of the shortfall the user's override touched, not the page size that
    # compare's own default stack set (a stack the user names does set it)
    workload = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    assert f"does not fit: {workload}: parallelism.tp: cannot fit even one sequence" in said
    assert "stack.kv_page_tokens:" not in said
    said = does_not_fit("stack=vllm-2024")
    assert f"does not fit: {workload}: stack.kv_page_tokens: cannot fit" in said


def test_the_verdict_names_the_experts_load_where_it_moves_a_phase() -> None:
    """DeepSeek-R1 on 16 sockets, attention data-parallel and experts over every socket,
    routed uniformly against a zipf of exponent 1.2: the busiest device's prefill takes
    4.48x the mean token-expert pairs against 1.01x, and the prefill 2.66x as long; the
    verdict names the load as a factor of its own there. The decode step streams every
    expert whatever the routing (static loading): equal steps, the load not named there."""
    sets = {
        "hardware": "sn40l-16",
        "dtypes.weights": "fp8_block",
        "parallelism": {"tp": 1, "dp_attention": 16, "ep": 16},
        "moe_expert_loading": "static",
        "kv.context_buckets": [8192],
        "serving.max_context": 8192,
        "serving.prompt_tokens": 2048,
        "serving.output_tokens": 512,
        "serving.batch_slots": 16,
    }
    result = compare(
        "workloads/deepseek-r1-128k-full.yaml",
        [],
        sets,
        vary=["experts.load={dist: zipf, exponent: 1.2, seed: 0},{dist: uniform}"],
    )
    skewed, uniform = result.columns
    assert skewed.prefill_expert_imbalance is not None and uniform.expert_imbalance is not None
    assert skewed.prefill_expert_imbalance > 4 > 1.1 > uniform.prefill_expert_imbalance
    (verdict,) = result.verdicts  # the faster first: uniform's against the zipf's
    prefill, decode = verdict.split("; in decode, ")
    assert prefill.startswith(f"{uniform.label} serves ")
    assert (
        "; expert load, a factor of its own: the busiest device takes "
        f"{human.ratio(uniform.prefill_expert_imbalance)} the mean token-expert pairs vs "
        f"{human.ratio(skewed.prefill_expert_imbalance)} (experts.load, experts.placement, "
        "experts.redundant))"
    ) in prefill
    assert skewed.step_s == pytest.approx(uniform.step_s, rel=0.01)
    assert "expert load" not in decode


def test_the_experts_load_is_not_blamed_on_the_faster_column() -> None:
    """Expert load is named only when the column whose busiest device takes more of the
    token-expert pairs is the slower one: the same imbalances with the times the other way
    round (another EP degree or machine made the loaded column faster) name nothing."""
    from dataclasses import replace

    from rdu_sim.compare.why import _experts

    (column,) = compare(WORKLOAD, [SN40L_8], batch=1).columns
    loaded, even = replace(column, expert_imbalance=2.0), replace(column, expert_imbalance=1.0)
    assert "expert load, a factor of its own" in _experts(loaded, even, "decode", (2.0, 1.0))
    assert "expert load, a factor of its own" in _experts(even, loaded, "decode", (1.0, 2.0))
    assert _experts(loaded, even, "decode", (1.0, 2.0)) == ""
    assert _experts(even, loaded, "decode", (2.0, 1.0)) == ""


def test_a_batch_past_the_capacity_is_said_over_it() -> None:
    """A --batch past the capacity (128 on sn40l-8: the largest power of two SambaStack
    runs of the 146 that fit) is timed as asked: the column's line says the batch is over
    its capacity, not ``batch 140 of 128``; within it, ``batch 64 of 128``."""
    over, within = (compare(WORKLOAD, [SN40L_8], batch=b) for b in (140, 64))
    assert over.columns[0].batch_capacity == within.columns[0].batch_capacity == 128
    assert "batch 140 over its capacity of 128;" in over.lines[0]
    assert "batch 64 of 128;" in within.lines[0]
