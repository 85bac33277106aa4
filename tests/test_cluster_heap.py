"""The event heap that drives a mixed cluster (``cluster.event_heap``) against SimPy.

Random small mixed clusters (1-4 replicas, few slots, chunked or whole prefills, both
prefill priorities, every router, prefix caches on a Mooncake-format trace) on the analytic
FakeBackend with step times on a 5 ms grid and a trace rounded to 10 ms put arrivals, step ends
and several replicas' events on the same picosecond. Each runs twice, driven by the heap
and by SimPy processes; everything must agree: the result's JSON, every per-request time,
route and cached prefix, each replica's step counts, the run's end, and what the router
read at every arrival.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_api_run import FakeBackend
from test_cluster import LLAMA, write_cluster, write_trace

import rdu_sim.api_cluster as api_cluster
from rdu_sim.api_cluster import ClusterResult, run_cluster
from rdu_sim.cluster import event_heap
from rdu_sim.cluster.routers.least_outstanding import LeastOutstanding
from rdu_sim.cluster.routers.prefix_aware import PrefixAware
from rdu_sim.cluster.routers.round_robin import RoundRobin
from rdu_sim.cluster.simulate import simulate_cluster
from rdu_sim.serving.server import Idle
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


def _cluster(tmp_path: Path, seed: int) -> Path:
    """A random small mixed cluster whose events often share an instant."""
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
    routers = ["least_outstanding", "round_robin"]
    if rng.random() < 0.7:
        fields["prefix_cache"] = {"block_tokens": 512}
        routers.append("prefix_aware")
    fields["router"] = {"policy": str(rng.choice(routers))}
    return write_cluster(tmp_path, **fields)


def _run(path: Path, heap: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[ClusterResult, list]:
    """The cluster, driven by the heap or by SimPy, and what its router read at each choice."""
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
        patch.setattr(
            api_cluster, "simulate_cluster", functools.partial(simulate_cluster, heap=heap)
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


@pytest.mark.parametrize("seed", range(8))
def test_the_heap_runs_a_mixed_cluster_as_simpy_does(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _cluster(tmp_path, seed)
    heap, heap_reads = _run(path, True, monkeypatch)
    simpy_run, simpy_reads = _run(path, False, monkeypatch)
    assert isinstance(heap.run.cluster.env, event_heap.EventHeap)
    assert not isinstance(simpy_run.run.cluster.env, event_heap.EventHeap)
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


def test_the_test_clusters_share_instants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random clusters above do put arrivals on the instants where steps end (else the
    order rule between them would go untested), and reject some requests."""
    shared = rejected = 0
    for seed in range(8):
        folder = tmp_path / str(seed)
        folder.mkdir()
        result, _ = _run(_cluster(folder, seed), True, monkeypatch)
        serving = result.run.serving
        ends = set(serving.first_token_ps.tolist()) | set(serving.finish_ps.tolist())
        shared += len(ends & set(serving.arrival_ps.tolist()))
        rejected += int(result.run.fit.rejected.sum())
    assert shared > 0
    assert rejected > 0


class _Stub:
    """A server on the heap that logs its resumptions and yields the step ends it is given."""

    def __init__(
        self, name: str, ends: list[Any], log: list[tuple[int, str]], forever: bool = True
    ) -> None:
        self.name, self.ends, self.log, self.forever = name, ends, log, forever
        self.heap: event_heap.EventHeap | None = None

    def driven(self) -> Any:
        yield 0  # the settle at time 0
        for end in self.ends:
            assert self.heap is not None
            self.log.append((self.heap.now, self.name))
            yield end
        while self.forever:
            assert self.heap is not None
            self.log.append((self.heap.now, self.name))
            yield Idle(self, self.heap)  # type: ignore[arg-type]  # idle: wait for a wake


@pytest.mark.parametrize(
    ("ends", "forever", "error"),
    [
        ([np.int64(10)], True, TypeError),  # a NumPy integer is not a step end the heap keeps
        ([object()], True, TypeError),  # nor is anything else
        ([10], False, RuntimeError),  # a replica's process never ends
    ],
)
def test_the_heap_refuses_what_would_lose_a_server(
    ends: list[Any], forever: bool, error: type[Exception]
) -> None:
    """A server whose process yields anything but an int step end or an idle wait would never
    be resumed (its requests silently lost); one whose process ends would end the run."""
    heap = event_heap.EventHeap(1)
    stub = _Stub("a", ends, [], forever)
    stub.heap = heap
    heap.add(stub)  # type: ignore[arg-type]
    with pytest.raises(error):
        heap.run([], lambda request: None)


def test_the_heap_refuses_more_pushes_than_its_keys_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Push counts past ``SEQ_BITS`` would spill into the time and reorder events."""
    monkeypatch.setattr(event_heap, "SEQ_BITS", 2)
    heap = event_heap.EventHeap(1)
    stub = _Stub("a", [], [])
    heap.add(stub)  # type: ignore[arg-type]
    for at in range(3):  # pushes 1, 2, 3 fit in two bits
        heap.move(stub, at)  # type: ignore[arg-type]
    with pytest.raises(OverflowError, match="2\\*\\*2 pushes"):
        heap.move(stub, 3)  # type: ignore[arg-type]


def test_the_heap_orders_an_instant_as_simpy_does() -> None:
    """The order rule itself: arrivals at an instant first, then wakes (NORMAL), then step
    ends (LATE) in push order; a moved step end leaves a stale entry the clock still
    passes."""
    log: list[tuple[int, str]] = []
    heap = event_heap.EventHeap(2)
    a, b = _Stub("a", [10, 20], log), _Stub("b", [10], log)
    for stub in (a, b):
        stub.heap = heap
        heap.add(stub)  # type: ignore[arg-type]

    def arrive(request: int) -> None:
        log.append((heap.now, f"arrival {request}"))
        if request == 3:
            heap.move(a, 15)  # type: ignore[arg-type]
        if request == 4:
            heap.wake(b)  # type: ignore[arg-type]

    end = heap.run([0, 10, 10, 15, 15], arrive)
    assert log == [
        (0, "arrival 0"),
        (0, "a"),
        (0, "b"),
        (10, "arrival 1"),
        (10, "arrival 2"),
        (10, "a"),
        (10, "b"),
        (15, "arrival 3"),
        (15, "arrival 4"),
        (15, "b"),  # woken (NORMAL) at 15: before a step end there pushed earlier
        (15, "a"),  # its end moved from 20 to 15; the entry at 20 is stale
    ]
    assert end == 20
