"""A replica's data-parallel attention ranks step together (``serving.lockstep``): no rank's
step ends before the slowest rank's, a rank's decode waits for another's prefill, and ranks
given the same work serve it as one rank alone would."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from test_api_run import FakeBackend
from test_plan import write_plan
from test_serving_alone import policy_of

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cluster.replica import PoolRuntime
from rdu_sim.cluster.simulate import ClusterRun, simulate_cluster
from rdu_sim.cluster.traffic import ClusterRequests, fit_context
from rdu_sim.models.presets import get_model
from rdu_sim.plan import load_plan
from rdu_sim.report.cluster import lockstep_costs
from rdu_sim.report.cluster_console import goodput_table, print_cluster_report
from rdu_sim.serving.scheduler import ServerConfig
from rdu_sim.serving.step_cache import PS_PER_S, StepCost, StepTimes
from rdu_sim.shapes import StepShape

MS = PS_PER_S // 1000  # ps
MAX_CONTEXT = 4096


def step_ms(shape: StepShape) -> StepCost:
    """A short prompt's prefill 10 ms, a long one's 100 ms; a decode step 1 ms, +1 ms a
    2,048 tokens of its bucket."""
    if shape.phase == "prefill":
        return StepCost(0.010 if shape.tokens <= 256 else 0.100)
    return StepCost(0.001 * (1 + shape.cache_len // 2048))


def run(
    prompts: Sequence[int],
    outputs: Sequence[int],
    arrival_ms: Sequence[float],
    ranks: int,
    replicas: int = 1,
    slots: int = 1,
    priority: str = "decode_first",
    step: Callable[[StepShape], StepCost] = step_ms,
) -> ClusterRun:
    """The requests on ``replicas`` replicas of ``ranks`` attention ranks, routed in turn
    (request ``i`` to server ``i`` modulo the servers, when they arrive in order)."""
    requests = ClusterRequests(
        np.asarray(arrival_ms, dtype=np.float64) / 1000,
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )
    runtime = pool(replicas * ranks, ranks, slots, priority, step)
    return simulate_cluster(fit_context(requests, MAX_CONTEXT, "reject"), [runtime], "round_robin")


def pool(
    servers: int,
    ranks: int,
    slots: int = 1,
    priority: str = "decode_first",
    step: Callable[[StepShape], StepCost] = step_ms,
) -> PoolRuntime:
    """A pool of ``servers`` servers (Llama 3.1 8B, full KV), ``ranks`` to a replica."""
    return PoolRuntime(
        name="pool",
        replicas=servers,
        config=ServerConfig(slots, MAX_CONTEXT, priority),
        policy=policy_of("full"),
        step_times=StepTimes(step),
        model=get_model("llama-3.1-8b"),
        kv_dtype_bytes=2.0,
        prefix_blocks=0,
        sockets=1,
        ranks=ranks,
    )


def times_ms(result: ClusterRun, name: str) -> list[float]:
    return (getattr(result.serving, name) / MS).tolist()  # type: ignore[no-any-return]


def test_the_joint_step_lasts_the_slowest_ranks_prefill() -> None:
    """Two ranks admit at once, a 10 ms and a 100 ms prefill: both first tokens at 100 ms;
    two decode steps of 1 ms each then end both at 102 ms. Served apart (two replicas) the
    short one would end at 12 ms."""
    lockstep = run([100, 1000], [3, 3], [0, 0], ranks=2)
    assert times_ms(lockstep, "first_token_ps") == [100, 100]
    assert times_ms(lockstep, "finish_ps") == [102, 102]
    apart = run([100, 1000], [3, 3], [0, 0], ranks=1, replicas=2)
    assert times_ms(apart, "first_token_ps") == [10, 100]
    assert times_ms(apart, "finish_ps") == [12, 102]


def test_a_decoding_rank_waits_for_another_ranks_prefill() -> None:
    """Rank 0 prefills A (10 ms) from 0; B reaches rank 1 at 5 ms, mid-step, and prefills at
    the next joint boundary (10 ms), for 100 ms, while A's one decode step waits with it:
    A's second token at 110 ms. Then both decode in 1 ms steps: A's last eight end at 118
    ms, B's nine at 119 ms."""
    result = run([100, 1000], [10, 10], [0, 5], ranks=2)
    assert times_ms(result, "admit_ps") == [0, 10]
    assert times_ms(result, "first_token_ps") == [10, 110]
    assert times_ms(result, "finish_ps") == [118, 119]
    tpot_a = (118 - 10) / 9
    assert tpot_a == pytest.approx(12.0)  # 1 ms steps, one of them 100 ms long
    ranks = [replica.server for replica in result.cluster.replicas]
    assert [server.records.decode_steps for server in ranks] == [9, 9]
    assert [server.records.prefill_steps for server in ranks] == [1, 1]


def test_the_joint_run_steps_at_the_slowest_ranks_bucket() -> None:
    """Rank 1's long context (its 4,096-token decode bucket: a 3 ms step) sets every joint
    step of the run: rank 0's 1 ms steps (its 256-token bucket) take 3 ms."""
    result = run([100, 100], [5, 5], [0, 0], ranks=2)
    assert times_ms(result, "finish_ps") == [14, 14]  # 10 ms prefill + 4 steps of 1 ms
    slow = run([100, 2100], [5, 5], [0, 0], ranks=2)
    assert times_ms(slow, "first_token_ps") == [100, 100]
    assert times_ms(slow, "finish_ps") == [112, 112]  # 4 steps of 3 ms


def test_unequal_ranks_time_their_experts_on_the_ranks_tokens_together() -> None:
    """Where the ranks' shapes differ, each busy rank's step is its shape with the experts
    serving the busy ranks' tokens together (a prefill here halves when its experts see the
    ranks' tokens, not every rank's copy of its own). A (100 tokens, its prompt bucket 128)
    prefills alone on rank 0 (joint 128 tokens: 5 ms); B (1,000, bucket 1,024) reaches rank
    1 at 5 ms and prefills beside A's decode step (joint 1,025 tokens for both: 50 ms, A's
    token waiting); then two joint decode steps (B's bucket beside A's, 2 tokens: each
    rank's own shape, as many tokens as every rank's copy) and A alone (1 token) for its
    last six."""
    seen: list[StepShape] = []

    def step(shape: StepShape) -> StepCost:
        seen.append(shape)
        cost = step_ms(shape).step_s
        return StepCost(cost / 2 if shape.phase == "prefill" and shape.joint_tokens else cost)

    result = run([100, 1000], [10, 3], [0, 5], ranks=2, step=step)
    assert times_ms(result, "first_token_ps") == [5, 55]
    assert times_ms(result, "finish_ps") == [63, 57]
    joint = sorted({(shape.phase, shape.joint_tokens) for shape in seen if shape.joint_tokens})
    assert joint == [
        ("decode", 1),
        ("decode", 1025),
        ("prefill", 128),
        ("prefill", 1025),
    ]


@pytest.mark.parametrize("priority", ["decode_first", "prefill_first"])
@pytest.mark.parametrize("seed", range(4))
def test_ranks_given_the_same_work_serve_it_as_one_rank_alone(seed: int, priority: str) -> None:
    """Every request copied to each of R ranks at its instant: each copy's admission, first
    token and finish are the lone rank's, to the picosecond (a differential test of the
    joint step against the one-rank driver)."""
    rng = np.random.default_rng(seed)
    n, ranks = 30, 3
    prompts = rng.integers(1, 1500, size=n)
    outputs = rng.integers(1, 200, size=n)
    arrivals = np.sort(rng.integers(0, 400, size=n)).astype(float)
    alone = run(prompts, outputs, arrivals, ranks=1, slots=3, priority=priority)
    together = run(
        np.repeat(prompts, ranks),
        np.repeat(outputs, ranks),
        np.repeat(arrivals, ranks),
        ranks=ranks,
        slots=3,
        priority=priority,
    )
    assert together.records.replica.tolist() == [i % ranks for i in range(n * ranks)]
    for name in ("admit_ps", "first_token_ps", "finish_ps"):
        lone = getattr(alone.serving, name)
        for rank in range(ranks):
            np.testing.assert_array_equal(getattr(together.serving, name)[rank::ranks], lone)


def test_the_ranks_count_what_the_lockstep_costs_them() -> None:
    """The second timeline above, counted: joint steps of 10 (A's prefill, rank 1 idle),
    100 (B's prefill, A's 1 ms decode held by it), 8 x 1 and 1 ms: 119 ms; the ranks' own
    step time 10 + 101 + 16 + 1 = 128 ms; the busy ranks' time 10 + 2 x 100 + 2 x 8 + 1 =
    227 ms of 2 x 119; the decoding ranks' time 100 (A, held) + 2 x 8 + 1 = 117 ms, of which
    100 held."""
    result = run([100, 1000], [10, 10], [0, 5], ranks=2)
    ((pool, together),) = result.cluster.lockstep
    assert pool == "pool"
    assert together.joint_ps == 119 * MS
    assert together.busy_ps == 227 * MS
    assert together.own_ps == 128 * MS
    assert (together.decode_ps, together.held_ps) == (117 * MS, 100 * MS)
    cost = lockstep_costs(result)["pool"]
    assert cost.ranks == 2
    assert cost.idle_share == pytest.approx(1 - 227 / 238, rel=1e-6)
    assert cost.wait_share == pytest.approx(1 - 128 / 227, rel=1e-6)
    assert cost.prefill_held_share == pytest.approx(100 / 117, rel=1e-6)
    apart = run([100, 1000], [10, 10], [0, 5], ranks=1, replicas=2)
    assert apart.cluster.lockstep == [] and lockstep_costs(apart) is None


def test_a_cluster_of_ranks_reports_its_lockstep(tmp_path: Path) -> None:
    """A plan's data-parallel replica run as a cluster: its JSON and console name what the
    lockstep cost the pool's ranks; a pool without ranks reports none."""
    search = {"parallelism": [{"tp": 2}, {"tp": 1, "dp_attention": 2}], "batch_slots": [8]}
    spec = write_plan(tmp_path, search, slo={"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9})
    loaded = load_plan(spec)
    tensor, ranks = loaded.configurations()
    result = run_cluster(loaded.build(ranks, 2).cluster, backend=FakeBackend())
    data = result.to_dict()
    ((pool, cost),) = data["lockstep"].items()
    assert cost["ranks"] == 2
    for share in ("idle_share", "wait_share", "prefill_held_share"):
        assert 0 <= cost[share] < 1
    assert cost["prefill_held_share"] > 0  # chat prefills hold the other rank's decode
    console = Console(width=200, record=True)
    console.print(goodput_table(result.summary()))
    assert f"{pool}: 2 attention ranks in lockstep" in console.export_text()
    plain = run_cluster(loaded.build(tensor, 2).cluster, backend=FakeBackend()).to_dict()
    assert "lockstep" not in plain
    # each server is a rank of a replica, and the JSON and the text say which
    rows = [(r["replica"], r["of_replica"], r["rank"]) for r in data["per_replica"]]
    assert rows == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    assert all("rank" not in r and "of_replica" not in r for r in plain["per_replica"])
    console = Console(width=200, record=True)
    print_cluster_report(result.summary(), console)
    text = console.export_text()
    lines = [line.strip() for line in text.splitlines()]
    assert ": 2 replicas (4 attention ranks), 4 " in text
    assert "Attention ranks" in lines and not any(line.startswith("Replicas") for line in lines)
    (header,) = [line for line in text.splitlines() if line.split()[:3] == ["#", "replica", "rank"]]
    table = text[text.index(header) :].splitlines()[2:6]
    assert [line.split()[:3] for line in table] == [[str(i) for i in row] for row in rows]
    console = Console(width=200, record=True)
    print_cluster_report(
        run_cluster(loaded.build(tensor, 2).cluster, backend=FakeBackend()).summary(), console
    )
    text = console.export_text()
    lines = [line.strip() for line in text.splitlines()]
    assert ": 2 replicas, " in text and "Replicas" in lines and "rank" not in text


def test_servers_that_are_not_whole_replicas_of_ranks_are_refused() -> None:
    """Three servers cannot be replicas of two ranks: the third would have no driver, and
    its requests would never complete."""
    with pytest.raises(ValueError, match="3 servers are not whole replicas of 2 attention"):
        pool(3, 2)
