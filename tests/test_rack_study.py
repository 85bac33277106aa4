"""The SN40L racks study (`rdu_sim.rack_study`): the crossover's interpolation, and the TP16
replicas not moving with the racks' bandwidth while the expert-parallel replica does."""

from __future__ import annotations

import math

import pytest

from rdu_sim.rack_study import crossover, rack_sweep

EP64 = "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml"


def rows(points: dict[float, tuple[float, float]]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for gb_s, (tp16, ep) in points.items():
        out.append({"inter_rack_gb_s": gb_s, "configuration": "4 x TP16", "m": tp16})
        out.append({"inter_rack_gb_s": gb_s, "configuration": "EP64, DP attention", "m": ep})
    return out


def test_crossover_interpolates_on_a_log_scale_of_bandwidth() -> None:
    # the gap goes -1 at 1 GB/s to +1 at 4 GB/s: it closes half way on a log scale, at 2
    assert crossover(rows({1: (5.0, 4.0), 4: (5.0, 6.0)}), "m") == pytest.approx(2.0)
    assert crossover(rows({1: (5.0, 6.0), 4: (5.0, 7.0)}), "m") is None  # wins from the start
    assert crossover(rows({1: (5.0, 1.0), 4: (5.0, 2.0)}), "m") is None  # never wins
    at = crossover(rows({1: (5.0, 4.0), 2: (5.0, 4.5), 8: (5.0, 5.5)}), "m")
    assert at is not None and 2 < at < 8 and math.log(at) == pytest.approx(math.log(4))


def test_only_the_expert_parallel_replica_feels_the_racks_network() -> None:
    swept = rack_sweep(EP64, [1, 25], [32], [8])
    tp16 = [r for r in swept if r["configuration"] == "4 x TP16"]
    ep = [r for r in swept if r["configuration"] != "4 x TP16"]
    assert tp16[0]["decode_tokens_per_s"] == tp16[1]["decode_tokens_per_s"]
    # 1.86x at batch 8: at 1 GB/s auto sends the throughput form (2.2 copies of a token
    # across racks, not 6), at 25 GB/s low latency
    assert ep[1]["decode_tokens_per_s"] > 1.5 * ep[0]["decode_tokens_per_s"]
    assert ep[1]["prefill_tokens_per_s"] > ep[0]["prefill_tokens_per_s"]


def test_a_pipeline_over_all_64_sockets_is_one_replica() -> None:
    """TP16 x PP4 spans the 64 sockets once: its rate is one step's batch over its time (4x
    that, counting 64 / tp replicas, was compare's and this study's old error)."""
    from rdu_sim import api
    from rdu_sim.rack_study import throughput

    layout = {"parallelism": {"tp": 16, "dp_attention": 1, "ep": 1, "pp": 4}}
    found = throughput(EP64, layout, [64], 1024)
    step = api.step(api.load(EP64, layout), batch=64).detail
    assert found.decode_batch == step.batch == 64
    assert found.decode_tokens_per_s == pytest.approx(step.batch / step.step_s, rel=1e-12)
