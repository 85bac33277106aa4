"""Every report names the parallel layout that ran, in one rendering
(``config.parallelism.describe_layout``): the step's console and JSON, the run's header and
memory table, ``inspect graph``'s title and JSON, the cluster's pools and ``rdu-sim
check``'s description."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console
from test_api_run import FakeBackend

from rdu_sim import human
from rdu_sim.api_cluster import run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.config.parallelism import ParallelismConfig, describe_layout
from rdu_sim.report.cluster_console import render_cluster

REPO = Path(__file__).resolve().parents[1]
EP64 = str(REPO / "workloads" / "ep" / "deepseek-r1-sn40l-4racks-ep64.yaml")
LLAMA70 = str(REPO / "workloads" / "llama3.1-70b-decode.yaml")
PP2 = ("--set", "hardware=sn40l-16", "--set", "parallelism.tp=8", "--set", "parallelism.pp=2")


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"tp": 16}, "tp=16"),
        ({"tp": 1, "dp_attention": 16, "ep": 16}, "tp=1 dp_attention=16 ep=16"),
        ({"tp": 8, "pp": 2}, "tp=8 pp=2 micro_batches=2"),
        ({"tp": 4, "pp": 2, "micro_batches": 8}, "tp=4 pp=2 micro_batches=8"),
        ({"tp": 16, "moe_experts": "expert"}, "tp=16 ep=16"),
    ],
)
def test_a_layout_is_said_in_the_names_set_takes(fields: dict[str, object], text: str) -> None:
    assert describe_layout(ParallelismConfig.model_validate(fields).layout()) == text


def test_the_step_names_its_layout_and_a_ranks_batch() -> None:
    first = invoke("step", EP64).splitlines()[0]
    assert "(64 sockets, tp=1 dp_attention=64 ep=64)" in first
    assert "batch 64 per attention rank (64 ranks)" in first
    data = json.loads(invoke("step", EP64, "--json"))
    assert data["layout"] == {"tp": 1, "dp_attention": 64, "ep": 64, "pp": 1, "micro_batches": 1}
    assert data["batch_of"] == "attention_rank" and data["batch"] == 64


def test_inspect_graph_names_its_layout_as_step_does() -> None:
    """``inspect graph``'s title names the layout (``describe_layout``) and a rank's batch
    as the step does; its JSON has the degrees as ``layout``; under a pipeline, whose
    kernels they are (the first stage's, one micro-batch)."""
    lines = " ".join(invoke("inspect", "graph", EP64).split())  # the title wraps
    assert "batch 64 per attention rank (64 ranks)," in lines
    assert ", tp=1 dp_attention=64 ep=64, kv full (one socket)" in lines
    data = json.loads(invoke("inspect", "graph", EP64, "--json"))
    assert data["layout"] == {"tp": 1, "dp_attention": 64, "ep": 64, "pp": 1, "micro_batches": 1}
    assert "pipeline" not in data
    piped = " ".join(invoke("inspect", "graph", LLAMA70, *PP2).split())
    assert (
        "batch 32, 1 new token(s), cache 8,192, tp=8 pp=2 micro_batches=2, kv full (one socket "
        "of pipeline stage 0 of 2, one micro-batch of 2)"
    ) in piped
    data = json.loads(invoke("inspect", "graph", LLAMA70, *PP2, "--json"))
    assert data["pipeline"] == {"stages": 2, "micro_batches": 2}


@pytest.mark.parametrize("command", ["run", "step"])
def test_a_replica_on_part_of_the_machine_says_how_much_stands_idle(command: str) -> None:
    # the lone server runs one replica: on 32 sockets, Llama 3.1 70B at tp=8 leaves 24 idle
    # (its tokens/s are those of 8 sockets), which the first line says; a separate draft's
    # sockets are in use
    extra = ("--set", "serving.requests=4") if command == "run" else ()
    first = invoke(command, LLAMA70, "--set", "hw.system.sockets=32", *extra).splitlines()[0]
    assert "(32 sockets, 8 in use with tp=8, 24 idle (a cluster file runs replicas on them))" in (
        first
    ), first
    assert "idle" not in invoke(command, LLAMA70, *extra).splitlines()[0]
    spec = str(REPO / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml")
    tp8 = ("--set", "parallelism.tp=8")
    separate = ("--set", "speculation.placement=separate", "--set", "speculation.draft_tp=8")
    assert "idle" not in invoke(command, spec, *tp8, *separate, *extra).splitlines()[0]
    assert "8 in use with tp=8, 8 idle" in invoke(command, spec, *tp8, *extra).splitlines()[0]


def test_a_pipelined_step_names_its_stages() -> None:
    first = invoke("step", LLAMA70, *PP2).splitlines()[0]
    assert "(16 sockets, tp=8 pp=2 micro_batches=2): decode step, batch 32," in first
    data = json.loads(invoke("step", LLAMA70, *PP2, "--json"))
    assert data["layout"] == {"tp": 8, "dp_attention": 1, "ep": 1, "pp": 2, "micro_batches": 2}
    assert data["batch_of"] == "replica"


def test_a_pipelined_step_shows_its_bubble_on_the_console() -> None:
    """The bound line leaves the pipeline's idle stages unexplained: a line says them."""
    data = json.loads(invoke("step", LLAMA70, *PP2, "--json"))
    lines = invoke("step", LLAMA70, *PP2).splitlines()
    (line,) = [line for line in lines if line.startswith("pipeline:")]
    pipeline = data["pipeline"]
    assert line.startswith(
        "pipeline: 2 stages holding 40, 40 layers, 2 micro-batches of up to 16 sequences;"
    )
    binding = pipeline["binding_stage"]
    assert f"stage {binding} binds (the slowest" in line
    assert f"stages idle: {human.percent(pipeline['bubble'])} of their time" in line
    assert f"{human.percent(pipeline['fill_drain'])} the pipeline filling and draining" in line


def test_a_pipelined_step_says_its_hand_offs_on_the_console() -> None:
    """The hand-off between the stages is inside the step's time: a line says its bytes,
    link, time and sends a step (``pipeline.hand_offs``)."""
    data = json.loads(invoke("step", LLAMA70, *PP2, "--json"))
    (hand_off,) = data["pipeline"]["hand_offs"]
    assert hand_off["link"] == "intra_node_link" and hand_off["sends"] == 2
    lines = invoke("step", LLAMA70, *PP2).splitlines()
    (line,) = [line for line in lines if line.startswith("hand-offs")]
    assert (
        f"stages 0->1: {human.size(hand_off['bytes'])} on the intra-node link "
        f"(hw.system.intra_node_link), {human.duration(hand_off['estimate_s'])} a send on an "
        "idle link"
    ) in line
    assert "2 sends a step" in line


def test_a_batch_smaller_than_micro_batches_runs_one_a_sequence_and_says_so() -> None:
    sets = (*PP2, "--set", "parallelism.micro_batches=8", "--batch", "4")
    data = json.loads(invoke("step", LLAMA70, *sets, "--json"))
    assert data["layout"]["micro_batches"] == 8 and data["pipeline"]["micro_batches"] == 4
    lines = invoke("step", LLAMA70, *sets).splitlines()
    line = next(line for line in lines if line.startswith("pipeline:"))
    assert "4 micro-batches of up to 1 sequence (parallelism.micro_batches=8 asks more" in line


def test_a_run_names_its_pipeline_and_the_stage_its_memory_table_shows() -> None:
    """With tp=8 pp=2 the header and the memory title read as tp=8 alone did."""
    sets = (*PP2, "--set", "serving.requests=4")
    data = json.loads(invoke("run", LLAMA70, *sets, "--json"))
    assert data["layout"] == {"tp": 8, "dp_attention": 1, "ep": 1, "pp": 2, "micro_batches": 2}
    assert data["memory_stage"] in (0, 1)
    text = " ".join(invoke("run", LLAMA70, *sets).split())  # the title wraps
    assert "(16 sockets, tp=8 pp=2 micro_batches=2)" in text
    assert "pipeline: 2 stages of 8 sockets; a step's batch is cut into 2 micro-batches" in text
    stage = data["memory_stage"]
    assert f"Memory per socket of pipeline stage {stage}, the fullest of 2 (16 sockets," in text
    plain = json.loads(invoke("run", LLAMA70, "--set", "serving.requests=4", "--json"))
    assert plain["memory_stage"] is None and plain["layout"]["pp"] == 1
    # the decode step's line says the bubble its bound leaves, the value step reports
    step = data["decode_step"]
    timed = json.loads(
        invoke(
            "step",
            LLAMA70,
            *PP2,
            "--batch",
            str(step["batch"]),
            "--context",
            str(step["context"]),
            "--json",
        )
    )
    bubble = timed["pipeline"]["bubble"]
    assert step["pipeline_bubble"] == pytest.approx(bubble, rel=1e-11)
    assert (
        f"{human.duration(step['step_s'])}; the pipeline's bubble {human.percent(bubble)} of "
        "its stages' time (only one batch in flight: docs/parallelism.md, Left out))"
    ) in text
    # the weights re-read every micro-batch: one would be faster, said under the table
    assert "Decode step: parallelism.micro_batches: 1 would take about" in text
    assert step["fewer_micro_batches"] == pytest.approx(timed["pipeline"]["fewer_micro_batches"])
    assert "pipeline_bubble" not in plain["decode_step"]  # nothing without a pipeline


def test_a_run_names_its_batching_policy_beside_its_kv_policy() -> None:
    sets = ("--set", "serving.prefill_priority=static", "--set", "serving.requests=4")
    llama = str(REPO / "workloads" / "llama3.1-8b-1socket.yaml")
    data = json.loads(invoke("run", llama, *sets, "--json"))
    assert data["batching_policy"] == "static" and data["kv_policy"] == "full"
    assert "; KV policy full, batching policy static\n" in invoke("run", llama, *sets)


def _one_pool_cluster(
    folder: Path,
    name: str,
    workload: Path,
    sets: dict[str, int],
    requests: int,
    output_tokens: int,
) -> Path:
    """A cluster file of one replica of ``workload`` (with ``sets``) serving a few fixed-length
    requests."""
    cluster = {
        "name": name,
        "pools": {"serve": {"workload": str(workload), "replicas": 1, "set": sets}},
        "traffic": {
            "rate": 4,
            "requests": requests,
            "prompt_tokens": {"dist": "fixed", "value": 256},
            "output_tokens": {"dist": "fixed", "value": output_tokens},
        },
        "slo": {"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9},
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


def test_a_clusters_pools_name_their_layout_and_check_says_it_alike(tmp_path: Path) -> None:
    """A pool of data-parallel attention read 'tp 1' in the table and '1 x tp=1' in check;
    one replica read '1 replicas'."""
    path = _one_pool_cluster(
        tmp_path,
        "ranks",
        REPO / "workloads" / "llama3.1-8b-1socket.yaml",
        {"hw.system.sockets": 2, "parallelism.dp_attention": 2},
        requests=8,
        output_tokens=16,
    )
    summary = run_cluster(path, backend=FakeBackend()).summary()
    pool = summary.pools["serve"]
    assert pool.layout == {"tp": 1, "dp_attention": 2, "ep": 1, "pp": 1, "micro_batches": 1}
    console = Console(width=200, record=True)
    console.print(render_cluster(summary))
    text = console.export_text()
    assert text.startswith("ranks: 1 replica (2 attention ranks), 2 sockets, router")
    (row,) = [line for line in text.splitlines() if line.strip().startswith("serve")]
    assert "tp=1 dp_attention=2" in row
    words = " ".join(text.split())  # the caption wraps at the table's width
    assert (
        "slots: a replica's batch slots / the slots its memory has room for; of one attention "
        "rank (under dp_attention each of a replica's ranks has its own)"
    ) in words
    described = invoke("check", str(path))
    assert "'ranks': 2 sockets (serve: 1 replica of tp=1 dp_attention=2)" in described
    gpus = invoke("check", str(REPO / "workloads" / "clusters" / "deepseek-r1-h100-chat.yaml"))
    assert "'deepseek-r1-h100-chat': 16 GPUs (serve: 1 replica of tp=16)" in gpus  # not sockets


def test_a_clusters_pools_name_their_batching_policy_beside_their_kv_policy(
    tmp_path: Path,
) -> None:
    """The pools table and JSON said the KV policy and not the batching policy a pool ran."""
    sets = {"serving.prefill_priority": "decode_first"}
    llama = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    path = _one_pool_cluster(tmp_path, "b", llama, sets, requests=4, output_tokens=8)
    summary = run_cluster(path, backend=FakeBackend()).summary()
    pool = summary.to_dict()["pools"]["serve"]
    assert (pool["kv_policy"], pool["batching_policy"]) == ("full", "decode_first")
    console = Console(width=200, record=True)
    console.print(render_cluster(summary))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.strip().startswith("pool "))
    (row,) = [line for line in lines if line.strip().startswith("serve")]
    assert header.split()[-3:] == ["KV", "batching", "slots"]
    assert row.split()[-5:-3] == ["full", "decode_first"]


def test_a_gpu_clusters_report_counts_gpus_not_sockets(tmp_path: Path) -> None:
    """The header, the pools table and the goodput table said sockets for H100 pools."""
    path = _one_pool_cluster(
        tmp_path,
        "gpus",
        REPO / "workloads" / "ep" / "deepseek-r1-h100.yaml",
        {"hw.system.sockets": 16},
        requests=4,
        output_tokens=8,
    )
    summary = run_cluster(path).summary()  # the GPU model (FakeBackend is an SN40L one)
    assert (summary.device, summary.sockets) == ("GPU", 16)
    assert summary.to_dict()["device"] == "GPU"
    console = Console(width=200, record=True)
    console.print(render_cluster(summary))
    text = console.export_text()
    assert text.startswith("gpus: 1 replica, 16 GPUs, router")
    assert "replicas / GPUs" in text
    assert "socket" not in text.replace("usd_per_socket_hour", "")  # a field's name stays
    (header,) = [line for line in text.splitlines() if line.strip().startswith("pool ")]
    assert " GPUs " in header
