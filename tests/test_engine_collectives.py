"""Collectives in the simulated step: the chooser against the simulation, the step JSON's
per-collective report, and batch-1 decode that speeds up with more sockets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_engine_programs import hardware, kernel, program, stage

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.program import CollectiveSpec, Program
from rdu_sim.engine import simulate_step
from rdu_sim.engine.collective_port import HW_KINDS, wiring_of
from rdu_sim.hw.collective_choice import candidates

ROOT = Path(__file__).resolve().parents[1]
LLAMA8 = ROOT / "workloads" / "llama3.1-8b-8socket.yaml"
ONE_NODE = {"system.sockets_per_node": 16}  # the shipped rack: one switched node of 16


def collective_program(kind: str, nbytes: float, p: int, producer_flops: float) -> Program:
    """A producer stage (computing ``producer_flops``) feeding a stage's ``kind`` collective."""
    spec = CollectiveSpec(kind, nbytes, p)  # type: ignore[arg-type]
    return program(
        [
            kernel(
                "k",
                [
                    stage("mm", pcus=8, flops=producer_flops, vector_flops=1.0, out=nbytes),
                    stage("c", pcus=2, vector_flops=1.0, inputs=("mm",), collective=spec),
                ],
            )
        ],
        tp=p,
    )


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reduce_scatter"])
@pytest.mark.parametrize("nbytes", [2e3, 1.6e4, 2.6e5, 4e6, 6.4e7])
@pytest.mark.parametrize("producer_flops", [0.0, 5e8], ids=["alone", "pipelined"])
def test_the_chosen_algorithm_is_never_slower_than_forcing_another(
    kind: str, nbytes: float, producer_flops: float
) -> None:
    # The chooser's estimate (idle links, all pieces at once) against the simulated step,
    # where the pieces leave as the producer's tiles finish and share the socket's port.
    p = 16
    prog = collective_program(kind, nbytes, p, producer_flops)
    auto = simulate_step(prog, hardware(zero=False, **ONE_NODE))
    [report] = auto.collectives
    names = candidates(HW_KINDS[kind], wiring_of(hardware(**ONE_NODE).system), p)
    assert report.algorithm in names and set(report.candidates) == set(names)
    forced = {
        a: simulate_step(
            prog, hardware(zero=False, **ONE_NODE, **{"system.collective_algorithm": a})
        ).step_s
        for a in names
    }
    # the same algorithm simulated: the same step to the last bits of a float sum
    assert forced[report.algorithm] == pytest.approx(auto.step_s, rel=1e-12)
    assert auto.step_s <= min(forced.values()) * 1.01
    if producer_flops == 0:  # the collective alone: exactly the fastest
        assert auto.step_s == pytest.approx(min(forced.values()), rel=1e-12)


def test_step_json_names_each_collectives_algorithm_bytes_and_hops() -> None:
    out = CliRunner().invoke(
        cli, ["step", str(LLAMA8), "--batch", "1", "--context", "8192", "--json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    reports = {(c["kernel"], c["stage"]): c for c in data["collectives"]}
    # Llama TP8: two all-reduces per decoder layer, the LM head's all-gather of logits
    assert set(reports) == {
        ("decoder", "attn.o_proj.allreduce"),
        ("decoder", "ffn.down_proj.allreduce"),
        ("lm_head", "lm_head.allgather"),
    }
    latency = api.load(LLAMA8).hardware.system.intra_node_link.latency
    for c in data["collectives"]:
        assert c["algorithm"] in c["candidates"] and c["policy"] == "auto"
        assert c["estimate_s"] == min(c["candidates"].values())
        # the bandwidth term: the busiest link's bytes at its bandwidth (one link class
        # here); the latency term the rest, at most the hops' latencies in sequence
        bandwidth = api.load(LLAMA8).hardware.system.intra_node_link.bandwidth
        assert c["bandwidth_s"] == pytest.approx(c["bytes_per_link"] / bandwidth)
        assert latency * (1 - 1e-9) <= c["latency_s"] <= c["hops"] * latency * (1 + 1e-9)
        assert c["estimate_s"] == pytest.approx(c["latency_s"] + c["bandwidth_s"])
        assert c["group"] == 8 and c["pieces"] == 4
        assert c["bytes_per_step"] == c["bytes"] * c["calls_per_step"]
        assert c["simulated_calls"] >= 1 and c["simulated_mean_s"] >= c["latency_s"]
    layer = reports[("decoder", "attn.o_proj.allreduce")]
    # a decode token's hidden state, BF16: 4096 x 2 bytes, once per layer
    assert layer["kind"] == "allreduce" and layer["bytes"] == 4096 * 2
    # two-shot at 8 kB on the 35 GB/s port: 2 hops of 1 us (2.26 us) beat one-shot's
    # 7 x 8 kB through one port (2.64 us)
    assert layer["calls_per_step"] == 32 and layer["hops"] == 2
    # the link bytes socket 0 sent are those the chosen algorithms put on its port
    sent = sum(c["bytes_per_link"] * c["calls_per_step"] for c in data["collectives"])
    assert data["bytes_by_tier"]["p2p"] == pytest.approx(sent, rel=1e-12)


def decode_tokens_per_s(model: str, sockets: int) -> float:
    """Batch-1 decode tokens/s of ``model`` (BF16, 8k context) on ``sockets`` sockets."""
    overrides = [
        f"model={model}",
        f"hw.system.sockets={sockets}",
        f"hw.system.sockets_per_node={max(sockets, 8)}",
        f"parallelism.tp={sockets}",
        "serving.batch_slots=1",
        # the weights HBM cannot hold read from DDR (70B on one socket: its 131 GiB)
        "memory.weights=hot_set",
        "memory.hot_set_fraction=0.9",
        "serving.max_context=8192",
    ]
    return 1.0 / api.step(LLAMA8, overrides, batch=1, context=8192).detail.device_s  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b"])
def test_batch1_decode_is_faster_on_16_sockets_than_8_and_on_8_than_1(model: str) -> None:
    one, eight, sixteen = (decode_tokens_per_s(model, s) for s in (1, 8, 16))
    assert sixteen > eight > one
    # memory-bound decode: 16 sockets stream half of 8's bytes each, latency-optimal
    # collectives keep most of that
    assert sixteen > 1.5 * eight


def test_step_text_names_each_collectives_algorithm_as_the_json_does() -> None:
    args = ["step", str(LLAMA8), "--batch", "32", "--context", "8192"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "collectives (per socket)" in out.stdout
    words = " ".join(out.stdout.split())  # the caption says what the two times are
    assert "estimate: one call on idle links" in words
    assert "so it includes waiting for the producer's tiles and for busy links" in words
    rows = {
        line.split()[1]: line.split()
        for line in out.stdout.splitlines()
        if "." in line and not line.startswith("estimate:")
    }
    algorithms = {c["algorithm"] for c in data["collectives"]}
    assert len(algorithms) == 2  # the all-reduces and the all-gather choose differently
    for c in data["collectives"]:
        row = rows[c["stage"]]
        assert row[:7] == [
            c["kernel"],
            c["stage"],
            c["kind"],
            c["algorithm"],
            c["policy"],
            str(c["group"]),
            str(c["hops"]),
        ]
