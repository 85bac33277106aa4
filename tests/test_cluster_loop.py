"""A cluster on des's serving loop (``des.timeline``) against SimPy's environment, the oracle
(tests/simpy_loop.py: the same drivers, each resumption a SimPy event).

Random small clusters (1-4 mixed replicas, or prefill and decode pools with a KV link; few
slots, chunked or whole prefills, both prefill priorities, every router, prefix caches on a
Mooncake-format trace) on the analytic FakeBackend with step times on a 5 ms grid and a
trace rounded to 10 ms put arrivals, step ends, hand-offs and several replicas' events on the
same picosecond. Each runs twice: on the timeline and on the oracle (every replica's driver
and the arrivals' resumed by SimPy events in ``simpy.Environment``); everything must agree:
the result's JSON, every per-request time, route and cached prefix, each replica's step
counts, the run's end, and what the router read at every arrival.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from simpy_loop import SimPyLoop
from test_api_run import FakeBackend
from test_cluster import LLAMA, write_cluster, write_trace

import rdu_sim.api_cluster as api_cluster
from rdu_sim.api_cluster import ClusterResult, run_cluster
from rdu_sim.cluster.routers.least_outstanding import LeastOutstanding
from rdu_sim.cluster.routers.prefix_aware import PrefixAware
from rdu_sim.cluster.routers.round_robin import RoundRobin
from rdu_sim.cluster.simulate import simulate_cluster
from rdu_sim.des.timeline import Timeline
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.serving.traces.synthetic import SyntheticTrace, synthetic_table
from rdu_sim.shapes import StepShape


class TieBackend(FakeBackend):
    """Step times on a 5 ms grid, so steps end where arrivals (10 ms grid) fall."""

    def step_cost(self, scenario: Any, shape: StepShape) -> StepCost:
        if shape.phase == "prefill":
            return StepCost(0.005 * (1 + shape.tokens // 1024), 0.3, 0.9)
        return StepCost(0.005 * (1 + shape.cache_len // 2048), 0.8, 0.2)


REQUEST_ARRAYS = ("arrival_ps", "admit_ps", "first_token_ps", "finish_ps", "slot", "completions")
CLUSTER_ARRAYS = ("replica", "routed", "cached_tokens", "status")


def _cluster(tmp_path: Path, seed: int, split: bool = False) -> Path:
    """A random small cluster whose events often share an instant: mixed replicas, or
    (``split``) prefill and decode pools with a KV link."""
    rng = np.random.default_rng(seed)
    spec = SyntheticTrace(
        requests=int(rng.integers(60, 160)),
        rate=float(rng.uniform(4.0, 30.0)),
        prompt_median=float(rng.choice([300.0, 1500.0])),
        prompt_high=int(rng.choice([7000, 9000])),  # 9000: some are over the 8k context
        output_median=float(rng.choice([20.0, 120.0])),
        output_high=600,
        conversations=4,
        shared_fraction=0.8,
        seed=seed,
    )
    table = synthetic_table(spec)
    ties = np.round(table.arrival_s, 2)  # a 10 ms grid: arrivals share instants
    table = dataclasses.replace(table, arrival_s=ties)
    trace = write_trace(tmp_path, "m.jsonl", table, "mooncake")
    settings: dict[str, Any] = {"serving.batch_slots": int(rng.integers(2, 9))}
    if rng.random() < 0.5:
        settings["serving.prefill_chunk_tokens"] = 1024
    if rng.random() < 0.5:
        settings["serving.prefill_priority"] = "decode_first"
    fields: dict[str, Any] = {
        "traffic": {"trace": trace, "format": "mooncake", "over_context": "reject"},
        "pools": {
            "serve": {"workload": str(LLAMA), "replicas": int(rng.integers(1, 5)), "set": settings}
        },
    }
    if split:
        pools = {}
        for role in ("prefill", "decode"):
            replicas = int(rng.integers(1, 4))
            pools[role] = {"workload": str(LLAMA), "replicas": replicas, "role": role}
            pools[role]["set"] = settings
        fields["pools"] = pools
        # 5 ms a transfer on average: hand-offs end where steps and arrivals do
        fields["kv_transfer"] = {"bandwidth": "40 GB/s", "latency": "1 ms"}
    routers = ["least_outstanding", "round_robin"]
    if rng.random() < 0.7:
        fields["prefix_cache"] = {"block_tokens": 512}
        routers.append("prefix_aware")
    fields["router"] = {"policy": str(rng.choice(routers))}
    return write_cluster(tmp_path, **fields)


def _run(path: Path, oracle: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[ClusterResult, list]:
    """The cluster, on the timeline or SimPy's (``oracle``), and what its router read at each
    choice."""
    reads: list[tuple[int, list[int], list[int]]] = []

    def watching(choose: Any) -> Any:
        def choose_and_record(self: Any, request: int, pool: Any) -> int:
            cached = pool.cached_tokens(request).tolist()
            reads.append((request, pool.outstanding_tokens().tolist(), cached))
            return int(choose(self, request, pool))

        return choose_and_record

    with monkeypatch.context() as patch:
        for router in (LeastOutstanding, PrefixAware, RoundRobin):
            patch.setattr(router, "choose", watching(router.choose))
        loop = SimPyLoop() if oracle else None
        patch.setattr(
            api_cluster, "simulate_cluster", functools.partial(simulate_cluster, loop=loop)
        )
        return run_cluster(path, backend=TieBackend()), reads


def _replicas(result: ClusterResult) -> list[tuple[Any, ...]]:
    rows = []
    for replica in result.run.cluster.replicas:
        server = replica.server
        records = server.records
        cache = server.cache
        rows.append(
            (
                replica.taken,
                server.completed,
                records.prefill_steps,
                records.decode_steps,
                records.decode_runs,
                records.tokens_generated,
                sorted((repr(shape), n) for shape, n in cache.steps.items()),
                [repr(shape) for shape in cache.shapes],
                cache.hits,
                cache.misses,
            )
        )
    return rows


@pytest.mark.parametrize("split", [False, True], ids=["mixed", "disaggregated"])
@pytest.mark.parametrize("seed", range(8))
def test_the_timeline_runs_a_cluster_as_simpy_does(
    tmp_path: Path, seed: int, split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _cluster(tmp_path, seed, split)
    heap, heap_reads = _run(path, False, monkeypatch)
    simpy_run, simpy_reads = _run(path, True, monkeypatch)
    assert isinstance(heap.run.cluster.loop, Timeline)
    assert not isinstance(simpy_run.run.cluster.loop, Timeline)
    assert heap_reads == simpy_reads and len(heap_reads) > 0
    for name in REQUEST_ARRAYS:
        np.testing.assert_array_equal(
            getattr(heap.run.serving, name), getattr(simpy_run.run.serving, name), err_msg=name
        )
    for name in CLUSTER_ARRAYS:
        np.testing.assert_array_equal(
            getattr(heap.run.records, name), getattr(simpy_run.run.records, name), err_msg=name
        )
    assert _replicas(heap) == _replicas(simpy_run)
    assert heap.run.end_ps == simpy_run.run.end_ps
    assert json.dumps(heap.to_dict(), sort_keys=True) == json.dumps(
        simpy_run.to_dict(), sort_keys=True
    )


@pytest.mark.parametrize("split", [False, True], ids=["mixed", "disaggregated"])
def test_the_test_clusters_share_instants(
    tmp_path: Path, split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random clusters above do put arrivals on the instants where steps end (else the
    order rule between them would go untested), reject some requests, and (disaggregated)
    end KV transfers where steps end."""
    shared = rejected = handoffs = 0
    for seed in range(8):
        folder = tmp_path / str(seed)
        folder.mkdir()
        result, _ = _run(_cluster(folder, seed, split), False, monkeypatch)
        serving = result.run.serving
        ends = set(serving.first_token_ps.tolist()) | set(serving.finish_ps.tolist())
        shared += len(ends & set(serving.arrival_ps.tolist()))
        rejected += int(result.run.fit.rejected.sum())
        if split:
            handoffs += len(set(result.run.records.kv_end_ps.tolist()) & ends)
    assert shared > 0
    assert rejected > 0
    assert handoffs > 0 or not split
