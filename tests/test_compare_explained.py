"""What compare and run say of the hardware beside their figures: a machine predicted from
its datasheet with another's fitted values (``config.origins.predicted_words``, the rule
``rdu-sim check`` lists them by), a batch capacity that is the stack's cap rather than what
memory holds, and the HBM a capacity ratio comes from (the newcomer trial read "2,048 |
2,048" as both memories full, and dgx-h200 as measured)."""

from __future__ import annotations

from pathlib import Path

from rdu_sim import api
from rdu_sim.cli.compare_cmd import ROWS
from rdu_sim.compare import compare
from rdu_sim.config import shipped
from rdu_sim.config.origins import predicted_words
from rdu_sim.report.console import header

WORKLOAD = "llama3.1-70b-decode"
H100 = shipped.locate("dgx-h100", ("hardware",))


def test_hardware_whose_device_differs_from_the_machine_it_keeps_fits_of_is_predicted(
    tmp_path: Path,
) -> None:
    said = predicted_words(shipped.locate("dgx-h200", ("hardware",)))
    assert said == (
        "predicted, not measured: its gpu section differs from dgx-h100.yaml's, whose fitted "
        "hw.gpu.kernel.sync, hw.gpu.max_gemm_efficiency, hw.gpu.thread_block_bandwidth it "
        "keeps (rdu-sim check dgx-h200 lists them)"
    )
    # measured machines, and ones that resize only the system around the measured device
    for name in ("dgx-h100", "sn40l-8", "sn40l-16", "dgx-h100-2nodes", "hgx-h800"):
        assert predicted_words(shipped.locate(name, ("hardware",))) is None, name
    resized = tmp_path / "resized.yaml"
    resized.write_text(f"extends: {H100}\nkind: gpu\nname: resized\n")
    assert predicted_words(resized) is None
    faster = tmp_path / "faster.yaml"
    faster.write_text(f"extends: {H100}\nkind: gpu\nname: faster\ngpu:\n  sms: 144\n")
    assert (predicted_words(faster) or "").startswith(
        "predicted, not measured: its gpu section differs from dgx-h100.yaml's"
    )
    # restating every fitted value: nothing of another machine's fit is kept
    refit = tmp_path / "refit.yaml"
    refit.write_text(
        f"extends: {H100}\nkind: gpu\nname: refit\ngpu:\n  sms: 144\n  max_gemm_efficiency: 0.6"
        "\n  thread_block_bandwidth: 50 GB/s\n  kernel:\n    sync: 5 us\n"
    )
    assert predicted_words(refit) is None


def test_compare_and_run_say_when_hardware_is_predicted() -> None:
    result = compare(WORKLOAD, ["dgx-h100", "dgx-h200"], batch=1)
    h100, h200 = result.columns
    assert h100.predicted is None and h200.predicted is not None
    assert f"dgx-h200: {h200.predicted}" in result.lines
    assert not any(line.startswith("dgx-h100: predicted") for line in result.lines)
    assert result.to_dict()["columns"][1]["predicted"] == h200.predicted
    light = {"serving.requests": 2, "serving.output_tokens": 4, "serving.prompt_tokens": 64}
    run = api.run("llama3.1-8b-1socket", {**light, "hardware": "dgx-h200"})
    summary = run.summary()
    assert summary.predicted == h200.predicted == run.to_dict()["predicted"]
    assert f"dgx-h200: {h200.predicted}" in header(summary).plain
    measured = api.run("llama3.1-8b-1socket", {**light, "hardware": "dgx-h100"})
    assert measured.to_dict()["predicted"] is None


def test_a_capacity_the_stacks_cap_sets_is_said_with_what_memory_holds() -> None:
    """TensorRT-LLM's max_batch_slots (2,048) caps both GPUs below what their pools hold
    (2,229 on an H100, 4,436 on an H200); SambaStack's power-of-two programs cap SN40L's
    146 at 128. Under the stack none memory sets each, and the cell says nothing more."""
    cell = dict(ROWS)["batch capacity"]
    h100, h200, sn40l = compare(WORKLOAD, ["dgx-h100", "dgx-h200", "sn40l-8"], batch=1).columns
    assert (h100.batch_capacity, h100.memory_capacity) == (2048, 2229)
    assert (h200.batch_capacity, h200.memory_capacity) == (2048, 4436)
    assert h100.capacity_limit == h200.capacity_limit == "max_batch_slots"
    assert cell(h100) == "2,048 (the stack's max_batch_slots; memory holds 2,229)"
    assert cell(sn40l) == "128 (the stack's batch_programs; memory holds 146)"
    (alone,) = compare(WORKLOAD, ["dgx-h100"], {"stack": "none"}, batch=1).columns
    assert alone.capacity_limit == "memory" and alone.memory_capacity == alone.batch_capacity
    assert cell(alone) == f"{alone.batch_capacity:,}"


def test_a_batch_ratio_of_memory_capacities_names_the_hbm_behind_it() -> None:
    """The device alone, each GPU's static slots at its memory's capacity: the H200's 141 GiB
    hold twice the H100's slots, and the verdict's batch reason says so."""
    result = compare(
        WORKLOAD, ["dgx-h100", "dgx-h200"], {"stack": "none", "serving.batch_slots": "auto"}
    )
    (verdict,) = result.verdicts
    assert "it runs 1.99x the batch (392 vs 197 slots: each its batch capacity, the slots " in (
        verdict
    )
    assert "141 GiB vs 80 GiB of HBM a device hold)" in verdict
    # capped by the stack, the HBM does not explain the batch and is not named
    capped = compare(WORKLOAD, ["dgx-h100", "dgx-h200"], {"serving.batch_slots": "auto"})
    assert "of HBM a device hold" not in capped.verdicts[0]


def test_check_and_cluster_reports_say_when_hardware_is_predicted(tmp_path: Path) -> None:
    """What a run says of predicted hardware, ``rdu-sim check`` says before it (of the
    hardware file and of a workload on it) and a cluster's report says of the pool on it."""
    import yaml
    from click.testing import CliRunner

    from rdu_sim.api_cluster import run_cluster
    from rdu_sim.cli.main import cli
    from rdu_sim.report.cluster_console import render_cluster

    h200 = shipped.locate("dgx-h200", ("hardware",))
    said = predicted_words(h200)
    assert said is not None
    workload = tmp_path / "w.yaml"
    llama = shipped.locate("llama3.1-8b-1socket", ("workload",))
    workload.write_text(llama.read_text().replace("../hw_configs/sn40l.yaml", str(h200)))
    out = CliRunner().invoke(cli, ["check", str(h200), str(workload), str(H100)]).output
    assert out.count(said) == 2, out  # the hardware's and the workload's, not the H100's
    assert f"\n    dgx-h200: {said}\n" in out
    assert "hardware 'dgx-h100': 8 GPUs, default stack 'tensorrt-llm'\n" in out

    pools = {
        "h200": {"workload": str(llama), "replicas": 1, "set": {"hardware": "dgx-h200"}},
        "h100": {"workload": str(llama), "replicas": 1, "set": {"hardware": "dgx-h100"}},
    }
    traffic = {"rate": 4.0, "requests": 6, "prompt_tokens": 64, "output_tokens": 4, "seed": 1}
    cluster = tmp_path / "cluster.yaml"
    slo = {"ttft": "1 s", "tpot": "100 ms", "attainment": 0.9}
    fields = {"name": "c", "pools": pools, "traffic": traffic, "slo": slo}
    cluster.write_text(yaml.safe_dump(fields))
    summary = run_cluster(cluster).summary()
    assert summary.pools["h200"].predicted == said and summary.pools["h100"].predicted is None
    data = summary.to_dict()["pools"]
    assert data["h200"]["predicted"] == said and data["h100"]["predicted"] is None
    from rich.console import Console

    console = Console(record=True, width=400)
    console.print(render_cluster(summary))
    text = console.export_text()
    assert text.count(said) == 1 and f"dgx-h200: {said}" in text


def test_step_and_plan_say_when_hardware_is_predicted(tmp_path: Path) -> None:
    """``rdu-sim step`` (its header and JSON) and ``rdu-sim plan`` (its second line and JSON,
    by hardware name) say what a run says of predicted hardware; measured hardware, null."""
    import json

    import yaml
    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    said = predicted_words(shipped.locate("dgx-h200", ("hardware",)))
    runner = CliRunner()
    step = ["step", "llama3.1-8b-1socket", "--batch", "2", "--context", "256"]
    text = runner.invoke(cli, [*step, "--set", "hardware=dgx-h200"]).output
    assert text.splitlines()[1] == f"dgx-h200: {said}"
    data = json.loads(runner.invoke(cli, [*step, "--set", "hardware=dgx-h200", "--json"]).output)
    assert data["predicted"] == said
    measured = runner.invoke(cli, [*step, "--set", "hardware=dgx-h100", "--json"]).output
    assert json.loads(measured)["predicted"] is None

    llama = shipped.locate("llama3.1-8b-1socket", ("workload",))
    pools = {"serve": {"workload": str(llama), "replicas": 1, "set": {"hardware": "dgx-h200"}}}
    traffic = {"rate": 4.0, "requests": 6, "prompt_tokens": 64, "output_tokens": 4, "seed": 1}
    slo = {"ttft": "1 s", "tpot": "100 ms", "attainment": 0.9}
    fields = {"name": "c", "pools": pools, "traffic": traffic, "slo": slo}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(fields))
    spec = tmp_path / "plan.yaml"
    spec.write_text(yaml.safe_dump({"cluster": "cluster.yaml", "search": {"tp": [1]}}))
    plan = ["plan", str(spec), "--no-progress", "--db", str(tmp_path / "p.sqlite")]
    assert json.loads(runner.invoke(cli, [*plan, "--json"]).stdout)["predicted"] == {
        "dgx-h200": said
    }
    assert f"\ndgx-h200: {said}\n" in runner.invoke(cli, plan).stdout  # under the header
    fields["pools"]["serve"]["set"] = {"hardware": "dgx-h100"}  # type: ignore[index]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(fields))
    plan[-1] = str(tmp_path / "q.sqlite")
    assert json.loads(runner.invoke(cli, [*plan, "--json"]).stdout)["predicted"] is None
