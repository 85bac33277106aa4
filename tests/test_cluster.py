"""Cluster serving: replicas, routers, disaggregated prefill and decode, prefix caching, SLOs.

Most tests run on the analytic FakeBackend of test_api_run (closed-form step times), so
the cluster mechanics are tested against independent computations: a one-replica cluster
against the lone server, round robin against independent servers, KV transfers against the
link's arithmetic, goodput against a recount from the per-request columns. The must-show
tests at the bottom run the real compiler and engine through `rdu-sim run --json`.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_api_run import FakeBackend

from rdu_sim import api
from rdu_sim.api_cluster import ClusterResult, UncappedPrefixCacheWarning, run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.cluster import load_cluster
from rdu_sim.cluster.kv_link import KVLink
from rdu_sim.cluster.prefix_cache import PrefixCache
from rdu_sim.cluster.prefix_index import PrefixIndex
from rdu_sim.cluster.routers import PoolState, make_router, register, router_names
from rdu_sim.cluster.routers import base as routers_base
from rdu_sim.cluster.routers.least_outstanding import LeastOutstanding
from rdu_sim.cluster.scenario import build_cluster
from rdu_sim.config.errors import ConfigError
from rdu_sim.des.timeline import Timeline
from rdu_sim.report.files import write_columns
from rdu_sim.serving.step_cache import PS_PER_S
from rdu_sim.serving.traces.published import WRITERS
from rdu_sim.serving.traces.synthetic import SyntheticTrace, synthetic_table
from rdu_sim.serving.traces.table import TraceTable

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SHIPPED = sorted((ROOT / "workloads" / "clusters").glob("*.yaml"))


def write_cluster(folder: Path, **fields: Any) -> Path:
    """A cluster file in ``folder`` (pools default: 3 Llama 8B replicas of 8 slots)."""
    data: dict[str, Any] = {
        "name": "t",
        "pools": {
            "serve": {
                "workload": str(LLAMA),
                "replicas": 3,
                "set": {"serving.batch_slots": 8},
            }
        },
        "traffic": {
            "rate": 6.0,
            "requests": 120,
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 3000},
            "output_tokens": {"dist": "uniform", "low": 1, "high": 300},
            "seed": 5,
        },
        "slo": {"ttft": "300 ms", "tpot": "20 ms", "attainment": 0.9},
        **fields,
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_trace(folder: Path, name: str, table: TraceTable, fmt: str) -> str:
    WRITERS[fmt](folder / name, table)
    return name


def fake(path: Path, overrides: dict[str, Any] | None = None) -> ClusterResult:
    return run_cluster(path, overrides, backend=FakeBackend())


def assert_served_once(result: ClusterResult) -> None:
    """Every request the trace offered: routed and completed exactly once, or rejected."""
    records, serving = result.run.records, result.run.serving
    rejected = result.run.fit.rejected
    np.testing.assert_array_equal(records.routed, (~rejected).astype(np.int64))
    np.testing.assert_array_equal(serving.completions, (~rejected).astype(np.int64))
    assert (records.replica[~rejected] >= 0).all() and (records.replica[rejected] == -1).all()
    assert (serving.finish_ps[~rejected] >= serving.first_token_ps[~rejected]).all()
    assert (serving.first_token_ps[~rejected] > serving.arrival_ps[~rejected]).all()
    for replica in result.run.cluster.replicas:  # nothing left behind
        assert replica.server.outstanding_tokens() == 0
        assert replica.server.slots.occupied == 0 and not replica.server.queue


# --- differential: a cluster of one, round robin -------------------------------------------


def test_one_replica_cluster_is_the_lone_server(tmp_path: Path) -> None:
    table = synthetic_table(SyntheticTrace(requests=80, rate=3.0, prompt_high=6000, seed=2))
    trace = write_trace(tmp_path, "t.csv", table, "csv")
    pools = {"serve": {"workload": str(LLAMA), "replicas": 1, "set": {"serving.batch_slots": 6}}}
    cluster = fake(write_cluster(tmp_path, pools=pools, traffic={"trace": trace}))
    lone = api.run(
        LLAMA,
        {
            "serving.batch_slots": 6,
            "serving.trace": str(tmp_path / trace),
            "serving.arrival": {"process": "poisson", "rate": 1.0},  # replays arrival_s
            "serving.requests": 80,
        },
        backend=FakeBackend(),
    )
    mine, theirs = cluster.run.serving, lone.records
    for name in ("arrival_ps", "admit_ps", "first_token_ps", "finish_ps", "slot"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name), err_msg=name)
    assert_served_once(cluster)


def test_round_robin_is_independent_servers(tmp_path: Path) -> None:
    table = synthetic_table(SyntheticTrace(requests=90, rate=9.0, prompt_high=6000, seed=3))
    trace = write_trace(tmp_path, "t.csv", table, "csv")
    pools = {"serve": {"workload": str(LLAMA), "replicas": 3, "set": {"serving.batch_slots": 4}}}
    result = fake(
        write_cluster(
            tmp_path, pools=pools, traffic={"trace": trace}, router={"policy": "round_robin"}
        )
    )
    assert_served_once(result)
    for k in range(3):
        mine = np.arange(k, 90, 3)
        part = TraceTable(
            "csv", table.arrival_s[mine], table.prompt_tokens[mine], table.output_tokens[mine]
        )
        WRITERS["csv"](tmp_path / f"part{k}.csv", part)
        lone = api.run(
            LLAMA,
            {
                "serving.batch_slots": 4,
                "serving.trace": str(tmp_path / f"part{k}.csv"),
                "serving.arrival": {"process": "poisson", "rate": 1.0},
                "serving.requests": len(mine),
            },
            backend=FakeBackend(),
        )
        assert (result.run.records.replica[mine] == k).all()
        for name in ("admit_ps", "first_token_ps", "finish_ps"):
            np.testing.assert_array_equal(
                getattr(result.run.serving, name)[mine], getattr(lone.records, name)
            )


# --- routers -----------------------------------------------------------------------------


class Pool:
    """A pool state with fixed answers."""

    def __init__(self, outstanding: list[int], cached: list[int]) -> None:
        self.outstanding, self.cached = np.asarray(outstanding), np.asarray(cached)

    def __len__(self) -> int:
        return len(self.outstanding)

    def outstanding_tokens(self) -> np.ndarray:
        return self.outstanding

    def cached_tokens(self, request: int) -> np.ndarray:
        return self.cached


def test_router_choices() -> None:
    pool: PoolState = Pool([50, 30, 40, 30, 45], [0, 0, 35, 0, 40])
    robin = make_router("round_robin")
    assert [robin.choose(i, pool) for i in range(7)] == [0, 1, 2, 3, 4, 0, 1]
    assert make_router("least_outstanding").choose(0, pool) == 1  # lowest index of ties
    # 40 - 35 = 45 - 40 = 5 < 30: the tie goes to the larger cached prefix.
    assert make_router("prefix_aware").choose(0, pool) == 4
    with pytest.raises(ValueError, match=f"valid: {', '.join(router_names())} "):
        make_router("random")
    with pytest.raises(ValueError, match="already registered"):
        register("round_robin")(lambda: make_router("round_robin"))


def test_a_registered_router_needs_no_config_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry is the one list of router names: a router registered under a new name
    runs from a cluster file as it is (the config has no second list to extend), and an
    unknown name is one error at router.policy's line, listing the registered names."""

    class First:
        def choose(self, request: int, pool: PoolState) -> int:
            return 0

    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))
    register("test_first")(First)
    path = write_cluster(tmp_path, router={"policy": "test_first"})
    result = fake(path)
    assert (result.run.records.replica == 0).all()  # the new router chose every replica
    path.write_text(path.read_text().replace("test_first", "nope"))
    with pytest.raises(ConfigError) as caught:
        fake(path)
    (issue,) = caught.value.issues
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "nope" in text)
    assert (issue.field, issue.line) == ("router.policy", line)
    assert f"unknown router 'nope'; valid: {', '.join(router_names())}" in issue.message
    assert "test_first" in router_names()
    with pytest.raises(ConfigError, match=r"\(from overrides: router.policy\)") as caught:
        fake(path, {"router.policy": "nope2"})
    assert caught.value.issues[0].line is None  # the file's line holds its own value


def test_a_cluster_error_names_the_set_that_gave_the_value(tmp_path: Path) -> None:
    """The one rule of a workload's --set (``config.overrides.overridden``): the override
    that set the field, a parent blamed for what it set, and no line."""
    path = write_cluster(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_cluster(path, {"pools.serve": {"workload": str(LLAMA), "replicas": 0}})
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("pools.serve.replicas", None)
    assert issue.message.endswith("(from --set pools.serve)"), issue.message


def test_a_set_under_a_misspelt_pool_is_an_unknown_pool(tmp_path: Path) -> None:
    """``--set pools.serv.replicas=2`` read as a new pool without a workload, at the file's
    line of pools (which the user did not write); it is an unknown pool, with the closest
    name, from that --set. A new pool given with its workload is still a pool."""
    path = write_cluster(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_cluster(path, ["pools.serv.replicas=2"])
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("pools.serv", None)
    assert issue.message == (
        "unknown pool 'serv'; did you mean 'serve'? (from --set pools.serv.replicas)"
    )
    with pytest.raises(ConfigError, match=r"unknown pool 'xyzzy'; the pools: serve \(from"):
        load_cluster(path, ["pools.xyzzy.replicas=2"])
    more = load_cluster(path, {"pools.more": {"workload": str(LLAMA), "replicas": 1}})
    assert [pool.name for pool in more.pools] == ["serve", "more"]


def test_a_trace_filter_or_window_from_a_set_names_it() -> None:
    """A window or filter that --set gave and that leaves no request, or names no column,
    said so without "(from --set ...)", unlike every other overridden field."""
    from rdu_sim.cluster.traffic import load_traffic

    chat = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"
    with pytest.raises(ConfigError) as caught:
        load_traffic(load_cluster(chat, ["traffic.start=1 h"]))
    (issue,) = caught.value.issues
    assert issue.message.endswith("left after filter and window (from --set traffic.start)")
    with pytest.raises(ConfigError) as caught:
        load_traffic(load_cluster(chat, ["traffic.filter.Model=x"]))
    (issue,) = caught.value.issues
    assert issue.field == "traffic.filter.Model"
    assert issue.message.endswith(
        "to filter on (columns besides arrival and lengths: none) (from --set traffic.filter.Model)"
    )


def _remaining(replica: Any) -> int:
    """A replica's load recomputed from its queue and slots (a second way): each request's
    prompt plus the output tokens generated so far (``serving.load``)."""
    server = replica.server
    prompts, outputs = server.records.target_prompt_tokens, server.records.output_tokens
    # a decode replica's requests arrive with their first token (made elsewhere)
    arrived_with = 1 if replica.runtime.config.role == "decode" else 0
    total = sum(int(prompts[r]) + arrived_with for r in server.queue)
    slots = server.slots
    done_steps = 0
    load = server.load
    if load.run_decoding:
        now = min(int(server.loop.now), load.run_end)
        done_steps = (now - load.run_start) // load.run_step
    for slot in range(slots.n):
        request = int(slots.request[slot])
        if request < 0:
            continue
        total += int(prompts[request])
        if slots.phase[slot] == 2:  # decoding: the first token and the steps since
            total += int(outputs[request]) - int(slots.remaining[slot]) + done_steps
        elif slots.phase[slot] == 3:  # its cache held until sent, or reserved until received
            total += 1
    return total


def test_outstanding_work_matches_a_recount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At every routing decision, each server's running count of its load equals a recount
    from its queue and slots."""
    checks: list[int] = []
    choose = LeastOutstanding.choose

    def checking(self: LeastOutstanding, request: int, pool: Any) -> int:
        board = pool.outstanding_tokens()
        for index, replica in enumerate(pool.replicas):
            assert board[index] == replica.server.outstanding_tokens() == _remaining(replica)
            checks.append(request)
        return choose(self, request, pool)

    monkeypatch.setattr(LeastOutstanding, "choose", checking)
    traffic = {
        "rate": 20.0,
        "requests": 150,
        "prompt_tokens": {"dist": "uniform", "low": 200, "high": 3000},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 400},
    }
    result = fake(write_cluster(tmp_path, traffic=traffic))
    assert len(checks) == 150 * 3
    assert_served_once(result)


def test_disaggregated_load_matches_a_recount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same recount on prefill and decode pools, whose requests arrive with their first
    token (decode) or leave once their cache was sent (prefill)."""
    checks: list[int] = []
    choose = LeastOutstanding.choose

    def checking(self: LeastOutstanding, request: int, pool: Any) -> int:
        board = pool.outstanding_tokens()
        for index, replica in enumerate(pool.replicas):
            assert board[index] == replica.server.outstanding_tokens() == _remaining(replica)
        checks.append(request)
        return choose(self, request, pool)

    monkeypatch.setattr(LeastOutstanding, "choose", checking)
    pools = {
        "pre": {
            "workload": str(LLAMA),
            "replicas": 2,
            "role": "prefill",
            "set": {"serving.batch_slots": 2},
        },
        "dec": {
            "workload": str(LLAMA),
            "replicas": 2,
            "role": "decode",
            "set": {"serving.batch_slots": 3},
        },
    }
    traffic = {
        "rate": 30.0,
        "requests": 120,
        "prompt_tokens": {"dist": "uniform", "low": 200, "high": 3000},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 200},
    }
    result = fake(write_cluster(tmp_path, pools=pools, traffic=traffic))
    served = result.run.serving.output_tokens > 1
    assert len(checks) == 120 + int(served.sum())  # the prefill pool's and the decode pool's
    assert_served_once(result)
    cluster = result.run.cluster
    for group in (cluster.front, cluster.back):  # every request left: no load is left behind
        assert group.board.outstanding.tolist() == [0, 0]
        assert group.board.run_decoding.tolist() == [0, 0]


def test_routing_is_blind_to_the_outputs_still_to_come(tmp_path: Path) -> None:
    """No router knows an output's length before its tokens are generated: requests 1 and 2
    (long prompts) arrive just after request 0 (a short prompt) started; least outstanding
    and prefix-aware routing send request 2 to request 0's replica whatever its output's
    length (before: a 4,000-token output still to come, an oracle's knowledge, sent it
    behind the long prompt)."""
    pools = {"serve": {"workload": str(LLAMA), "replicas": 2}}
    for policy in ("least_outstanding", "prefix_aware"):
        placed = []
        for first_output in (10, 4000):
            rows = [(0, 256, first_output, [0]), (1, 4000, 10, list(range(100, 108)))]
            rows.append((2, 4000, 10, list(range(200, 208))))
            name = f"m{first_output}.jsonl"
            (tmp_path / name).write_text(
                "".join(
                    json.dumps(
                        {"timestamp": t, "input_length": p, "output_length": o, "hash_ids": h}
                    )
                    + "\n"
                    for t, p, o, h in rows
                )
            )
            path = write_cluster(
                tmp_path,
                pools=pools,
                traffic={"trace": name, "format": "mooncake"},
                router={"policy": policy},
                prefix_cache={"block_tokens": 512},
            )
            result = fake(path)
            assert_served_once(result)
            placed.append(result.run.records.replica.tolist())
        assert placed == [[0, 1, 0], [0, 1, 0]], policy


def test_least_outstanding_balances_better_than_round_robin(tmp_path: Path) -> None:
    path = write_cluster(
        tmp_path,
        traffic={
            "rate": 12.0,
            "requests": 300,
            "prompt_tokens": {"dist": "lognormal", "median": 800, "sigma": 1.0, "high": 6000},
            "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 1.2, "high": 1500},
        },
    )
    p99 = {
        policy: fake(path, {"router.policy": policy}).to_dict()["ttft_s"]["p99"]
        for policy in ("round_robin", "least_outstanding")
    }
    assert p99["least_outstanding"] < p99["round_robin"]


# --- prefix cache ----------------------------------------------------------------------------


def test_prefix_cache_lru_and_pinning() -> None:
    cache = PrefixCache(3)
    assert cache.acquire(1, [10, 11]) == 0
    cache.insert(1, [10, 11])
    assert cache.match([10, 11, 12]) == 2 and cache.match([11]) == 1
    cache.release(1)
    assert cache.acquire(2, [10, 12]) == 1  # 10 hits, 12 does not
    cache.insert(2, [10, 12])  # 12 fills the third block
    cache.insert(3, [20])  # full; 11 is the only unpinned block: evicted
    assert len(cache) == 3 and cache.match([11]) == 0 and cache.evicted == 1
    cache.insert(4, [30])  # full, everything pinned: not cached
    assert cache.not_cached == 1 and cache.match([30]) == 0 and len(cache) <= 3
    cache.release(2)
    cache.release(3)
    cache.insert(5, [40])  # LRU among unpinned: 10 and 12 (released first) before 20, and
    # request 2's tail (12) before its head (10): a leaving request's blocks idle tail first
    assert cache.match([20]) == 1 and cache.match([10, 12]) == 1 and cache.evicted == 2
    assert cache.lookups == 4 and cache.hits == 1


def test_a_prompts_tail_is_evicted_before_its_head() -> None:
    """Evicting a leading block would leave the blocks after it unusable (a hit needs the
    whole prefix): a released chain goes idle last block first, so room is made from its
    tail and what stays is still a usable prefix."""
    cache = PrefixCache(4)
    cache.insert(1, [1, 2, 3, 4])
    cache.release(1)
    cache.insert(2, [9])  # one block of room: the chain's last
    assert cache.match([1, 2, 3, 4]) == 3 and cache.evicted == 1
    cache.insert(3, [8, 7])  # two more: from the tail again
    assert cache.match([1, 2, 3, 4]) == 1 and cache.evicted == 3


@pytest.mark.parametrize("seed", range(6))
def test_prefix_index_matches_every_cache_as_each_would(seed: int) -> None:
    """Random admissions, inserts, releases and evictions on caches sharing one index: at
    every step the index's walk gives each member exactly what its own ``match`` gives."""
    rng = np.random.default_rng(seed)
    index = PrefixIndex()
    caches = [PrefixCache(int(rng.integers(0, 12)), index, member) for member in range(40)]
    chains = [[int(h) for h in rng.choice(60, size=8, replace=False)] for _ in range(6)]
    held: list[tuple[int, int]] = []  # (cache, request) pinning blocks
    for request in range(400):
        member = int(rng.integers(len(caches)))
        hashes = chains[int(rng.integers(len(chains)))][: int(rng.integers(1, 9))]
        caches[member].acquire(request, hashes)
        caches[member].insert(request, hashes)
        held.append((member, request))
        if held and rng.random() < 0.6:
            gone = held.pop(int(rng.integers(len(held))))
            caches[gone[0]].release(gone[1])
        probe = chains[int(rng.integers(len(chains)))][: int(rng.integers(1, 9))]
        members = int(rng.integers(1, 2 ** len(caches)))
        expected = {
            m: caches[m].match(probe)
            for m in range(len(caches))
            if members >> m & 1 and caches[m].match(probe)
        }
        found = dict(index.matches(probe, members))
        assert found == expected
    assert sum(c.evicted for c in caches) > 0  # the walk saw blocks leave the index too


def _mooncake(tmp_path: Path, requests: int = 200, rate: float = 8.0) -> str:
    spec = SyntheticTrace(
        requests=requests,
        rate=rate,
        prompt_median=3000,
        prompt_high=7000,
        conversations=6,
        shared_fraction=0.8,
        seed=9,
    )
    return write_trace(tmp_path, "m.jsonl", synthetic_table(spec), "mooncake")


def test_prefix_caching_skips_prefill_and_prefix_routing_finds_it(tmp_path: Path) -> None:
    trace = _mooncake(tmp_path)
    path = write_cluster(
        tmp_path,
        traffic={"trace": trace},
        prefix_cache={"block_tokens": 512},
        router={"policy": "prefix_aware"},
    )
    aware = fake(path)
    assert_served_once(aware)
    data = aware.to_dict()
    prefix = data["prefix_cache"]
    cached = aware.run.records.cached_tokens
    assert prefix["prefill_tokens_skipped"] == int(cached.sum()) > 0
    prompts = aware.run.serving.prompt_tokens
    assert (cached < prompts).all() and (cached % 128 == 0).all()  # a prompt bucket
    blind = fake(path, {"router.policy": "least_outstanding"}).to_dict()["prefix_cache"]
    assert prefix["hit_rate"] > blind["hit_rate"]
    none = fake(path, {"prefix_cache": None, "router.policy": "least_outstanding"})
    assert "prefix_cache" not in none.to_dict()
    assert int(none.run.records.cached_tokens.sum()) == 0
    # Spared prefill work shows: the steps of a cached prompt are shorter.
    assert data["ttft_s"]["mean"] < none.to_dict()["ttft_s"]["mean"]


def test_compressed_prompts_share_nothing(tmp_path: Path) -> None:
    trace = _mooncake(tmp_path, requests=60)
    path = write_cluster(
        tmp_path,
        traffic={"trace": trace},
        prefix_cache={"block_tokens": 512},
        pools={
            "serve": {
                "workload": str(LLAMA),
                "replicas": 2,
                "set": {
                    "serving.batch_slots": 8,
                    "kv.policy": "snapstream",
                    "kv.budget": 2048,
                    "kv.recent": 512,
                },
            }
        },
    )
    result = fake(path)
    prompts = result.run.serving.prompt_tokens
    cached = result.run.records.cached_tokens
    assert (cached[prompts > 2048] == 0).all()  # compressed: its own selection, not a prefix


# --- disaggregated prefill and decode ----------------------------------------------------------


def test_kv_link_is_fifo_per_port() -> None:
    loop = Timeline()
    link = KVLink(loop, 3, bandwidth=1e9, latency=1e-6)  # 1 GB/s: 1 ms per MB
    first = link.transfer(0, 2, 1_000_000)
    second = link.transfer(1, 2, 1_000_000)  # same ingress: queues behind the first
    third = link.transfer(1, 0, 500_000)  # 1's egress is busy until the second has gone
    loop.run()
    ms, us = 10**9, 10**6
    assert first.value == 1 * ms + us
    assert second.value == 2 * ms + us
    assert third.value == 2 * ms + ms // 2 + us
    assert link.transfers == 3 and link.queued_ps == 1 * ms + 2 * ms


def test_disaggregated_serving(tmp_path: Path) -> None:
    trace = _mooncake(tmp_path, requests=150, rate=6.0)
    pools = {
        "pre": {
            "workload": str(LLAMA),
            "replicas": 1,
            "role": "prefill",
            "set": {"serving.batch_slots": 4},
        },
        "dec": {
            "workload": str(LLAMA),
            "replicas": 2,
            "role": "decode",
            "set": {"serving.batch_slots": 8},
        },
    }
    path = write_cluster(
        tmp_path,
        pools=pools,
        traffic={"trace": trace},
        kv_transfer={"bandwidth": "10 GB/s", "latency": "20 us"},
    )
    result = fake(path)
    assert_served_once(result)
    records, serving = result.run.records, result.run.serving
    served = ~result.run.fit.rejected
    multi = (serving.output_tokens > 1) & served
    assert (records.replica[multi] == 0).all() and (records.decode_replica[multi] >= 1).all()
    assert (records.decode_replica[~multi] == -1).all()  # one token: done at prefill
    # Each transfer: reserved after the prefill, serialised at 10 GB/s, 20 us latency.
    start, end = records.kv_start_ps[multi], records.kv_end_ps[multi]
    assert (start >= serving.first_token_ps[multi]).all()
    nbytes = records.kv_bytes[multi]
    per_token = 131072  # Llama 3.1 8B, bf16
    np.testing.assert_array_equal(nbytes, serving.prompt_tokens[multi] * per_token)
    minimum = np.ceil(nbytes / (10e9 / PS_PER_S)).astype(np.int64) + 20 * 10**6
    assert (end - start >= minimum).all()
    # Decode starts after the cache arrived: one decode step at least after kv_end per token.
    assert (serving.finish_ps[multi] > end).all()
    # A prefill replica holds the slot until its cache has left: at most 4 at once.
    events = sorted([(int(a), 1) for a in serving.admit_ps[multi]] + [(int(e), -1) for e in end])
    held = np.cumsum([delta for _, delta in sorted(events, key=lambda x: (x[0], x[1]))])
    assert held.max() <= 4
    data = result.to_dict()
    assert data["kv_transfer"]["transfers"] == int(multi.sum())
    assert data["kv_transfer"]["bytes"] == int(nbytes.sum())
    roles = [row["role"] for row in data["per_replica"]]
    assert roles == ["prefill", "decode", "decode"]
    assert data["per_replica"][0]["steps"]["decode"] == 0
    assert sum(row["decoded"] for row in data["per_replica"]) == int(multi.sum())
    # requests.csv: a request sent no KV cache (one token, done at prefill) has empty KV
    # bytes, as its transfer time (before: 0 bytes beside an empty time)
    write_columns(tmp_path / "requests.csv", result.requests())
    with (tmp_path / "requests.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    cells = {(row["kv_bytes"] == "", row["kv_transfer_s"] == "") for row in rows}
    assert cells == {(False, False), (True, True)}
    sent = [int(row["kv_bytes"]) for row in rows if row["kv_bytes"]]
    assert sent == nbytes.tolist()


def test_a_prefill_pool_balances_on_prefill_work_only(tmp_path: Path) -> None:
    """A prefill replica prefills a prompt and makes its first token; the decode work is
    another pool's. Request 0 (a short prompt) and request 1 (a long one) go to prefill
    replicas 0 and 1; request 2 (long) belongs behind the short prompt, however long request
    0's output: its routing and TTFT do not depend on it (before: a 4,000-token output
    counted as prefill work sent request 2 behind the long prompt)."""
    pools = {
        "prefill": {"workload": str(LLAMA), "replicas": 2, "role": "prefill"},
        "decode": {"workload": str(LLAMA), "replicas": 2, "role": "decode"},
    }
    runs = []
    for first_output in (10, 4000):
        rows = [(256, first_output, [0]), (4000, 10, list(range(100, 108)))]
        rows.append((4000, 10, list(range(200, 208))))
        name = f"t{first_output}.jsonl"
        (tmp_path / name).write_text(
            "".join(
                json.dumps({"timestamp": 0, "input_length": p, "output_length": o, "hash_ids": h})
                + "\n"
                for p, o, h in rows
            )
        )
        path = write_cluster(
            tmp_path,
            pools=pools,
            traffic={"trace": name, "format": "mooncake"},
            router={"policy": "least_outstanding"},
        )
        result = fake(path)
        assert_served_once(result)
        runs.append(result)
    for result in runs:
        assert result.run.records.replica.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(
        runs[0].run.serving.first_token_ps, runs[1].run.serving.first_token_ps
    )


# --- metrics ---------------------------------------------------------------------------------


def test_cluster_energy_sums_its_pools(tmp_path: Path) -> None:
    """Every pool's sockets and hosts draw for the cluster's makespan, at its own power."""
    pools = {
        "a": {"workload": str(LLAMA), "replicas": 2, "set": {"serving.batch_slots": 8}},
        "b": {
            "workload": str(LLAMA),
            "replicas": 3,
            "set": {"serving.batch_slots": 8, "hw.power.socket_w": 700},
        },
    }
    data = fake(write_cluster(tmp_path, pools=pools)).to_dict()
    energy, span = data["energy"], data["makespan_s"]
    host = 1500.0 / 8  # the shipped sn40l.yaml: 1,500 W a host of 8 sockets
    watts = 2 * (530 + host) + 3 * (700 + host)
    assert energy["average_power_w"] == pytest.approx(watts, rel=1e-12)
    assert energy["joules"] == pytest.approx(watts * span, rel=1e-9)
    tokens = data["output_tokens"]
    assert energy["output_tokens_per_joule"] == pytest.approx(tokens / (watts * span), rel=1e-9)


def test_goodput_recount_and_classes(tmp_path: Path) -> None:
    table = synthetic_table(SyntheticTrace(requests=150, rate=9.0, prompt_high=9000, seed=8))
    trace = write_trace(tmp_path, "t.csv", table, "csv")
    path = write_cluster(
        tmp_path,
        traffic={"trace": trace},
        classes={"by": "prompt_tokens", "edges": [1024, 4096]},
    )
    result = fake(path)
    data = result.to_dict()
    cols = result.requests()
    rejected = cols["status"] == "rejected"
    over = (cols["prompt_tokens"] + cols["output_tokens"]) > 8192
    np.testing.assert_array_equal(rejected, over)
    assert data["requests_rejected"] == int(over.sum()) > 0
    # a rejected request reached no replica: an empty cell, as a decode replica's (not -1)
    write_columns(tmp_path / "requests.csv", cols)
    with (tmp_path / "requests.csv").open() as stream:
        cells = [(row["status"], row["replica"]) for row in csv.DictReader(stream)]
    assert {cell for status, cell in cells if status == "rejected"} == {""}
    assert all(cell.isdigit() for status, cell in cells if status == "served")
    ttft, tpot = cols["ttft_s"], cols["tpot_s"]
    good = (~rejected) & (ttft <= 0.3) & (np.isnan(tpot) | (tpot <= 0.02))
    assert data["goodput"]["requests"] == int(good.sum())
    assert data["goodput"]["fraction"] == pytest.approx(good.sum() / 150)
    assert data["slo_met"] == (good.sum() / 150 >= 0.9)
    span = np.nanmax(cols["finish_s"]) - cols["arrival_s"].min()
    assert data["goodput"]["tokens_per_s"] == pytest.approx(
        cols["output_tokens"][good].sum() / span
    )
    classes = data["classes"]
    assert sum(c["requests"] for c in classes.values()) == 150
    assert classes["prompt_tokens>=4096"]["rejected"] == int(over.sum())
    big = cols["class"] == "1024<=prompt_tokens<4096"
    assert classes["1024<=prompt_tokens<4096"]["ttft_s"]["p50"] == pytest.approx(
        float(np.median(ttft[big & ~rejected]))
    )
    per = data["per_replica"]
    assert sum(r["requests"] for r in per) == 150 - int(over.sum())
    assert all(0 < r["occupancy"] <= 1 for r in per)
    cut = fake(path, {"traffic.over_context": "truncate"})
    truncated, cut_cols = cut.to_dict(), cut.requests()
    assert truncated["requests_rejected"] == 0
    assert truncated["requests_truncated"] == int(over.sum())
    # what the cut took: the rejected run's lengths (as sent) less the truncated run's
    for kind in ("prompt", "output"):
        asked, kept = cols[f"{kind}_tokens"], cut_cols[f"{kind}_tokens"]
        assert (kept <= asked).all() and (kept[~over] == asked[~over]).all()
        assert truncated[f"{kind}_tokens_truncated"] == int((asked - kept).sum())
    assert truncated["output_tokens_truncated"] > 0


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from test_api_run import FakeBackend
from rdu_sim.api_cluster import run_cluster
print(run_cluster({path!r}, backend=FakeBackend()).to_json())
"""


def test_same_inputs_same_bytes_across_processes(tmp_path: Path) -> None:
    traffic = {"rate": 9.0, "requests": 60, "prompt_tokens": 900, "output_tokens": 40}
    path = write_cluster(tmp_path, traffic=traffic, router={"policy": "least_outstanding"})
    code = _CHILD.format(tests=str(ROOT / "tests"), path=str(path))
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    outs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        ).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1] == fake(path).to_json() + "\n"
    data = json.loads(outs[0])
    assert data["requests_served"] == 60 and data["pools"]["serve"]["replicas"] == 3


# --- config errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"router": {"polcy": "round_robin"}},
            "router.polcy: unknown field 'polcy'; did you mean 'policy'",
        ),
        ({"slo": {"ttft": "2 parsecs", "tpot": "1 ms"}}, "slo.ttft"),
        (
            {"router": {"policy": "prefix_aware"}},
            "router.policy: prefix_aware routing needs a prefix_cache",
        ),
        ({"prefix_cache": {}}, "prefix_cache: a prefix cache needs a trace"),
        ({"kv_transfer": {}}, "kv_transfer: only applies with prefill and decode pools"),
        ({"traffic": {"trace": "nope.csv"}}, "traffic.trace: trace file"),
        ({"traffic": {"rate": 1.0}}, "traffic.prompt_tokens, traffic.output_tokens"),
    ],
)
def test_bad_cluster_files_name_the_field(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    path = write_cluster(tmp_path, **fields)
    with pytest.raises(ConfigError) as caught:
        fake(path)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_a_rule_across_fields_an_override_broke_names_the_override(tmp_path: Path) -> None:
    """The router set by --set, with no prefix cache: the error says the override, with no
    line of the file (whose line holds the value the override replaced)."""
    path = write_cluster(tmp_path, router={"policy": "round_robin"})
    with pytest.raises(ConfigError) as caught:
        fake(path, {"router.policy": "prefix_aware"})
    (issue,) = caught.value.issues
    assert issue.field == "router.policy" and issue.line is None
    assert issue.message.endswith("(from overrides: router.policy)")


def test_kv_transfer_without_disaggregation_names_its_field_line_or_override(
    tmp_path: Path,
) -> None:
    """Refused at the kv_transfer field: at its line when the file gives it, else naming
    the override that did (it was the cluster's first line, with no field)."""
    path = write_cluster(tmp_path, kv_transfer={"bandwidth": "1 GB/s"})
    line = path.read_text().splitlines().index("kv_transfer:") + 1
    with pytest.raises(ConfigError) as caught:
        fake(path)
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("kv_transfer", line)
    assert issue.message == "only applies with prefill and decode pools"
    with pytest.raises(ConfigError) as caught:
        fake(write_cluster(tmp_path), {"kv_transfer.bandwidth": "1 GB/s"})
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("kv_transfer", None)
    assert issue.message == (
        "only applies with prefill and decode pools (from overrides: kv_transfer.bandwidth)"
    )


def test_a_pools_missing_workload_is_one_error_at_its_own_field(tmp_path: Path) -> None:
    """It was two errors, the first at the pool's line ('workload is not valid:'), the
    second naming the unnormalized path ('cluster/../w.yaml: file not found')."""
    (tmp_path / "cluster").mkdir()
    pools = {"serve": {"workload": "../w.yaml", "replicas": 1}}
    path = write_cluster(tmp_path / "cluster", pools=pools)
    with pytest.raises(ConfigError) as caught:
        fake(path)
    (issue,) = caught.value.issues
    assert (issue.file, issue.field, issue.line) == (str(path), "pools.serve.workload", 4)
    assert issue.message == (
        f"pool 'serve': workload {str(tmp_path / 'w.yaml')!r} not found (paths are relative "
        "to the cluster file; a bare name is a shipped workload's)"
    )


def test_a_pools_workload_path_may_start_with_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'~/w.yaml' is read where the home folder holds it, as every path in a config file."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "w.yaml").write_text(LLAMA.read_text().replace("../hw_configs/sn40l.yaml", "sn40l"))
    (tmp_path / "cluster").mkdir()
    pools = {"serve": {"workload": "~/w.yaml", "replicas": 1}}
    scenario = build_cluster(
        yaml.safe_load(write_cluster(tmp_path / "cluster", pools=pools).read_text()),
        file=str(tmp_path / "cluster" / "cluster.yaml"),
    )
    assert scenario.pools[0].scenario.workload_file == str(tmp_path / "w.yaml")


def test_pool_errors_name_the_workload_and_the_pool(tmp_path: Path) -> None:
    pools = {"serve": {"workload": str(LLAMA), "replicas": 2, "set": {"serving.batch_slot": 8}}}
    with pytest.raises(ConfigError) as caught:
        fake(write_cluster(tmp_path, pools=pools))
    text = str(caught.value)
    assert "pools.serve: pool 'serve': workload is not valid" in text
    assert "serving.batch_slot" in text
    pools = {
        "a": {"workload": str(LLAMA), "replicas": 1},
        "b": {"workload": str(LLAMA), "replicas": 1, "set": {"serving.max_context": 4096}},
    }
    with pytest.raises(ConfigError, match="a cluster has one context limit"):
        fake(write_cluster(tmp_path, pools=pools))
    pools = {
        "p": {"workload": str(LLAMA), "replicas": 1, "role": "prefill"},
        "d": {"workload": str(LLAMA), "replicas": 1, "role": "decode", "set": {"dtypes.kv": "fp8"}},
    }
    with pytest.raises(ConfigError, match=r"cannot take the KV caches .* KV dtypes differ"):
        fake(write_cluster(tmp_path, pools=pools))
    with pytest.raises(ConfigError, match="mixed"):
        fake(write_cluster(tmp_path, pools={**pools, "m": {"workload": str(LLAMA), "replicas": 1}}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("serving.batch_slots", -1),  # the workload's validation
        ("parallelism.tp", 3),  # a rule after it (tp against the model's heads)
        ("hw.system.sockets", 0),  # the hardware file's validation
    ],
)
def test_an_error_from_a_pools_set_names_the_set_not_a_command_line_flag(
    tmp_path: Path, key: str, value: int
) -> None:
    """No --set was given: the pool's set gave the value, so its error says that set."""
    pools = {"serve": {"workload": str(LLAMA), "replicas": 1, "set": {key: value}}}
    with pytest.raises(ConfigError) as caught:
        load_cluster(write_cluster(tmp_path, pools=pools))
    issue = caught.value.issues[-1]
    assert issue.message.endswith(f"(from pools.serve.set: {key})"), issue.message
    assert issue.line is None and "--set" not in str(caught.value)


def test_cli_check_and_schema_know_cluster_and_plan_files(tmp_path: Path) -> None:
    runner = CliRunner()
    files = [str(p) for p in SHIPPED] + [str(p) for p in (ROOT / "workloads/plans").glob("*.yaml")]
    result = runner.invoke(cli, ["check", *files])
    assert result.exit_code == 0, result.output
    assert result.output.count("OK") == len(files) and "cluster 'llama3.1-8b-chat'" in result.output
    bad = write_cluster(tmp_path, router={"policy": "random"})
    result = runner.invoke(cli, ["check", str(bad)])
    assert result.exit_code == 2 and "router.policy" in result.output
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(runner.invoke(cli, ["schema", "cluster"]).stdout)
    for path in SHIPPED:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    plan_schema = json.loads(runner.invoke(cli, ["schema", "plan"]).stdout)
    for path in (ROOT / "workloads/plans").glob("*.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), plan_schema)


def test_absurd_sizes_are_refused_before_running(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"traffic.requests: must be at most 10,000,000, got 20,000,000"
    ):
        fake(write_cluster(tmp_path), {"traffic.requests": 20_000_000})
    pools = {
        "serve": {"workload": str(LLAMA), "replicas": 100_000, "set": {"serving.batch_slots": 128}}
    }
    with pytest.raises(ConfigError, match=r"pools.serve.replicas: the pools hold 12,800,000 batch"):
        fake(write_cluster(tmp_path, pools=pools))


def test_hw_overrides_are_refused_on_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pools\.NAME\.set"):
        fake(write_cluster(tmp_path), {"hw.system.sockets": 2})


# --- must show: rdu-sim run CLUSTER --json on the real engine ---------------------------------


def rdu_sim(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_run_cluster_json_on_the_real_engine(tmp_path: Path) -> None:
    """`rdu-sim run CLUSTER --json` with a trace: cluster and per-replica metrics with goodput;
    every trace request served exactly once (or rejected, counted), none lost at the router."""
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    shutil.copytree(ROOT / "hw_configs", tmp_path / "hw_configs")
    path = tmp_path / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"
    done = rdu_sim("run", str(path), "--json", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    trace = (tmp_path / "workloads" / "traces" / "chat-400.csv").read_text().splitlines()
    assert data["requests"] == len(trace) - 1 == 400
    assert data["requests_served"] + data["requests_rejected"] == 400
    assert data["requests_rejected"] == 1  # the one request longer than the 8k context
    assert set(data["goodput"]) == {"requests", "fraction", "requests_per_s", "tokens_per_s"}
    assert len(data["per_replica"]) == 4 == data["replicas"]
    assert sum(r["requests"] for r in data["per_replica"]) == data["requests_served"]
    assert all(
        {"ttft_s", "tpot_s", "goodput_fraction", "occupancy"} <= set(r) for r in data["per_replica"]
    )
    rows = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    assert len(rows) == 401
    result = run_cluster(path)
    assert_served_once(result)
    assert result.to_dict() == data


def test_run_cluster_report_renders(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", str(write_cluster(tmp_path)), "--set", "traffic.requests=20"]
    )
    assert result.exit_code == 0, result.output
    for words in (
        "Pools",
        "requests meeting the SLO",
        "goodput",
        "Replicas",
        "time to first token",
    ):
        assert words in result.output


def test_a_cluster_out_removes_the_timeseries_an_earlier_single_run_left(tmp_path: Path) -> None:
    """--out's files are one set (``files.OUT_SET``): a cluster's run writes no
    timeseries.csv, so one a single run left in the folder is removed (plot occupancy read it
    as the cluster's), and the `wrote` line says so; a single run's own set is whole."""
    out = tmp_path / "mix"
    out.mkdir()
    (out / "timeseries.csv").write_text("time_s,occupied\n0,1\n")
    cluster = str(write_cluster(tmp_path))
    result = CliRunner().invoke(
        cli, ["run", cluster, "--set", "traffic.requests=20", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["requests.csv", "result.json"]
    assert f"wrote {out}/result.json, requests.csv (removed an earlier run's timeseries.csv)" in (
        result.output
    )


def test_a_cluster_out_never_removes_one_of_its_inputs(tmp_path: Path) -> None:
    """The timeseries.csv a cluster's --out would remove is its own trace: refused before
    anything runs, the file kept."""
    out = tmp_path / "o"
    out.mkdir()
    trace = out / "timeseries.csv"
    shutil.copy(ROOT / "workloads" / "traces" / "chat-400.csv", trace)
    cluster = str(ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml")
    ran = CliRunner().invoke(
        cli, ["run", cluster, "--set", f"traffic.trace={trace}", "--out", str(out)]
    )
    assert ran.exit_code == 2
    assert f"{trace}: --out: is one of the run's inputs; write elsewhere" in ran.output
    assert [p.name for p in out.iterdir()] == ["timeseries.csv"]


def test_plot_draws_a_clusters_latency_and_refuses_its_other_plots(tmp_path: Path) -> None:
    """A cluster's --out: latency is drawn from its requests.csv (its text columns, status
    and class, are not read as numbers); a replica's plots (occupancy, memory) are refused
    in one line naming what takes a cluster and what to plot instead."""
    out = tmp_path / "cl"
    cluster = str(write_cluster(tmp_path))
    ran = CliRunner().invoke(
        cli, ["run", cluster, "--set", "traffic.requests=20", "--out", str(out)]
    )
    assert ran.exit_code == 0, ran.output
    drawn = CliRunner().invoke(
        cli, ["plot", "latency", str(out / "result.json"), "-o", str(tmp_path / "l.png")]
    )
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "l.png").stat().st_size > 0
    for kind in ("occupancy", "memory"):
        refused = CliRunner().invoke(
            cli, ["plot", kind, str(out / "result.json"), "-o", str(tmp_path / "x.png")]
        )
        assert refused.exit_code == 2
        assert refused.output.count("\n") == 1 and "Traceback" not in refused.output
        assert f"{out / 'result.json'}: a cluster's result; of the plots only latency" in (
            refused.output
        )
        assert f"rdu-sim plot {kind} WORKLOAD" in refused.output


def test_a_pools_replicas_share_one_memo_of_the_policys_prompt_answers(tmp_path: Path) -> None:
    """The policy's per-prompt answers are memoised once a pool, not once a replica (1,024
    replicas each holding the same answers cost cluster-million ~190 MiB): every replica's
    server asks the pool's memo, which holds one entry per distinct prompt length served."""
    result = fake(write_cluster(tmp_path))
    (pool,) = result.pools
    memo = pool.runtime.facts
    replicas = result.run.cluster.replicas
    assert len(replicas) == 3
    assert all(r.server.scheduler._facts is memo for r in replicas)
    served = result.run.serving.prompt_tokens
    assert len(memo) == len(set(served.tolist()))


def test_a_prefix_cache_smaller_than_one_block_is_refused_naming_the_block(
    tmp_path: Path,
) -> None:
    """A capacity below one block's bytes would cache nothing (0 blocks, silently): refused
    at its line (or its --set), with the block size and the bytes one block takes."""
    trace = _mooncake(tmp_path, requests=20, rate=4.0)
    block = 512 * 131072  # Llama 3.1 8B, bf16: 128 KiB a token on one socket
    path = write_cluster(
        tmp_path,
        traffic={"trace": trace},
        prefix_cache={"block_tokens": 512, "capacity": f"{block} B"},
    )
    data = fake(path).to_dict()
    assert data["prefix_cache"]["capacity_blocks"] == 3  # one block on each of 3 replicas
    small = write_cluster(
        tmp_path,
        traffic={"trace": trace},
        prefix_cache={"block_tokens": 512, "capacity": f"{block - 1} B"},
    )
    for run, note in [
        (lambda: fake(small), ""),
        (
            lambda: fake(small, {"prefix_cache.capacity": "1 MiB"}),
            " (from overrides: prefix_cache.capacity)",
        ),
    ]:
        with pytest.raises(ConfigError) as caught:
            run()
        (issue,) = caught.value.issues
        assert issue.field == "prefix_cache.capacity"
        assert "bytes per socket hold no block: one block of 512 tokens " in issue.message
        assert f"(prefix_cache.block_tokens) takes {block} bytes per socket in pool 'serve'" in (
            issue.message
        )
        assert issue.message.endswith("or omit capacity for the free HBM" + note)


def test_one_cap_over_static_pools_of_different_free_hbm_caps_the_larger_and_warns(
    tmp_path: Path,
) -> None:
    """``prefix_cache.capacity`` is one cap for every pool: static slots take it as a paged
    pool does. A pool whose free HBM holds fewer blocks than the cap keeps its room and
    warns that the cap caps nothing there (before: refused, so one cap could not serve two
    pools of different sizes); a pool with more free HBM is capped."""
    trace = _mooncake(tmp_path, requests=20, rate=4.0)
    block = 512 * 131072  # Llama 3.1 8B, bf16: 128 KiB a token on one socket
    pools = {
        name: {"workload": str(LLAMA), "replicas": 1, "set": {"serving.batch_slots": slots}}
        for name, slots in (("few", 8), ("many", 32))
    }
    sizes = {}
    for cap in (None, 400 * block):
        path = write_cluster(
            tmp_path,
            pools=pools,
            traffic={"trace": trace},
            prefix_cache={"block_tokens": 512, "capacity": None if cap is None else f"{cap} B"},
        )
        if cap is None:
            result = fake(path)
        else:
            with pytest.warns(UncappedPrefixCacheWarning) as caught:
                result = fake(path)
            (warned,) = [str(w.message) for w in caught]
            assert f"prefix_cache.capacity: {cap} bytes per socket cap nothing in pool 'many':" in (
                warned
            )
            assert (
                "HBM per socket that its memory plan leaves its KV cache beside its 32 slots"
                in (warned)
            )
        sizes[cap] = {p.pool.name: p.runtime.prefix_blocks for p in result.pools}
    free = sizes[None]
    assert 0 < free["many"] < 400 < free["few"]
    assert sizes[400 * block] == {"few": 400, "many": free["many"]}


def test_pools_of_two_contexts_are_refused_naming_both(tmp_path: Path) -> None:
    """One context limit a cluster: the error names each pool's, the first pool's quoted
    once (not "pool 'a''s 8192")."""
    pools = {
        name: {"workload": str(LLAMA), "replicas": 1, "set": {"serving.max_context": context}}
        for name, context in (("a", 8192), ("b", 4096))
    }
    with pytest.raises(ConfigError) as caught:
        fake(write_cluster(tmp_path, pools=pools))
    (issue,) = caught.value.issues
    assert issue.field == "pools.b"
    assert issue.message.startswith(
        "serving.max_context 4096 differs from the 8192 of pool 'a': a cluster has one "
        "context limit"
    )
