"""``router.load_refresh``: routers that read the replicas' load as last published.

The replicas publish their load every ``load_refresh`` seconds, as it stood just before that
instant; between publications a router adds what it has itself sent. Checked against the
exact board (a router that reads but routes round robin serves the same requests either
way, so the exact run's reads are the oracle), against a hand replay when no publication
after the first ever comes, and for the error of a bad value. The clusters run on
test_api_run's analytic FakeBackend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from test_cluster import LLAMA, fake, write_cluster

from rdu_sim.cluster.routers import PoolState, register
from rdu_sim.cluster.routers import base as routers_base
from rdu_sim.config.cluster import UnreadRouterFieldWarning
from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.step_cache import PS_PER_S

GAP_PS = PS_PER_S // 20  # between arrivals: 50 ms
REFRESH_PS = 2 * GAP_PS  # publications every 100 ms: an arrival on each, one between


def _trace(folder: Path, requests: int) -> str:
    """Arrivals every 50 ms (on and between 100 ms publications), lengths varied."""
    rng = np.random.default_rng(4)
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    for i in range(requests):
        prompt, output = int(rng.integers(200, 4000)), int(rng.integers(2, 200))
        lines.append(f"{i * GAP_PS / PS_PER_S},{prompt},{output}")
    (folder / "half.csv").write_text("\n".join(lines) + "\n")
    return "half.csv"


class Reads:
    """A router that records what it reads (the instant and every replica's load) and
    routes round robin, so its choices do not depend on what it reads."""

    seen: ClassVar[list[tuple[int, list[int]]]] = []  # of every instance (one front a cluster)

    def __init__(self) -> None:
        self.turn = 0

    def choose(self, request: int, pool: PoolState) -> int:
        now = pool.loop.now  # type: ignore[attr-defined]  # (the cluster's group, in a test)
        Reads.seen.append((now, pool.outstanding_tokens().tolist()))
        self.turn += 1
        return (self.turn - 1) % len(pool)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> type[Reads]:
    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))
    register("test_reads")(Reads)
    return Reads


def _run(folder: Path, refresh: str | None, router: str, requests: int = 60) -> Any:
    router_config: dict[str, Any] = {"policy": router}
    if refresh is not None:
        router_config["load_refresh"] = refresh
    path = write_cluster(folder, router=router_config, traffic={"trace": _trace(folder, requests)})
    return fake(path)


def test_the_published_load_is_the_exact_load_just_before_its_instant(
    tmp_path: Path, reads: type[Reads]
) -> None:
    """Round robin either way, so both runs serve alike: a read on a publication instant
    (every 100 ms) sees the exact load there, less what was written at that instant (none
    here); a read 50 ms later sees that publication plus the prompt the router sent at the
    instant, not the exact load then."""
    Reads.seen = []
    exact_run = _run(tmp_path, None, "test_reads")
    exact = dict(Reads.seen)
    Reads.seen = []
    published_run = _run(tmp_path, "100 ms", "test_reads")
    published = Reads.seen
    assert len(published) == len(exact) == 60
    np.testing.assert_array_equal(exact_run.run.records.replica, published_run.run.records.replica)
    prompts = published_run.run.serving.prompt_tokens
    differs = 0
    for i, (now, view) in enumerate(published):
        if now % REFRESH_PS == 0:  # a publication instant: nothing sent since
            assert view == exact[now], (i, now)
        else:  # 50 ms on: the publication, plus the request sent on its instant
            before = exact[now - GAP_PS]
            chosen = (i - 1) % len(view)
            expected = [
                load + (prompts[i - 1] if r == chosen else 0) for r, load in enumerate(before)
            ]
            assert view == expected, (i, now)
            differs += view != exact[now]
    assert differs > 10  # the exact load moved meanwhile: the router did not see it


def test_with_no_publication_after_the_first_the_router_sees_only_what_it_sent(
    tmp_path: Path,
) -> None:
    """A refresh longer than the run: the publication at 0 holds nothing, so least
    outstanding work picks the replica it has sent the fewest prompt tokens (ties to the
    lowest index), a hand replay of the trace; the exact router picks otherwise."""
    stale = _run(tmp_path, "3600 s", "least_outstanding")
    prompts = stale.run.serving.prompt_tokens
    sent = np.zeros(3, dtype=np.int64)
    expected = []
    for prompt in prompts:
        chosen = int(sent.argmin())
        expected.append(chosen)
        sent[chosen] += prompt
    np.testing.assert_array_equal(stale.run.records.replica, expected)
    exact = _run(tmp_path, None, "least_outstanding")
    assert (exact.run.records.replica != stale.run.records.replica).any()


def test_the_refresh_moves_the_answer_and_zero_is_the_exact_board(tmp_path: Path) -> None:
    """0 s is the exact board (the same JSON as leaving the field out); a refresh moves
    which replica serves what, and so the latencies."""
    base = _run(tmp_path, None, "least_outstanding").to_dict()
    zero = _run(tmp_path, "0 s", "least_outstanding").to_dict()
    assert {**zero, "provenance": {}} == {**base, "provenance": {}}
    lagged = _run(tmp_path, "2 s", "least_outstanding").to_dict()
    assert [r["requests"] for r in lagged["per_replica"]] != [
        r["requests"] for r in base["per_replica"]
    ]


def test_a_bad_refresh_is_one_error_at_its_line(tmp_path: Path) -> None:
    path = write_cluster(tmp_path, router={"policy": "least_outstanding", "load_refresh": "-1 s"})
    with pytest.raises(ConfigError) as caught:
        fake(path)
    (issue,) = caught.value.issues
    assert issue.field == "router.load_refresh"
    assert issue.line is not None


def test_a_refresh_below_the_clock_is_refused_and_one_no_router_reads_is_said(
    tmp_path: Path,
) -> None:
    """0.1 ps would round to the exact board: refused at its field. Round robin reads no
    load, so a refresh under it changes nothing, and a warning says so."""
    path = write_cluster(tmp_path, router={"policy": "least_outstanding", "load_refresh": "0.1 ps"})
    with pytest.raises(ConfigError) as caught:
        fake(path)
    (issue,) = caught.value.issues
    assert issue.field == "router.load_refresh"
    assert "below the clock's 1 ps, so it would read the exact load" in issue.message
    path = write_cluster(tmp_path, router={"policy": "round_robin", "load_refresh": "1 s"})
    with pytest.warns(UnreadRouterFieldWarning, match="round_robin reads no replica's load"):
        fake(path, {"traffic.requests": 10})


class Tally:
    """Least outstanding work that logs each read: the pool's size, what it saw, its pick."""

    log: ClassVar[list[tuple[int, int, list[int], int]]] = []

    def choose(self, request: int, pool: PoolState) -> int:
        view = pool.outstanding_tokens()
        chosen = int(view.argmin())
        Tally.log.append((request, len(pool), view.tolist(), chosen))
        return chosen


def _own_sends_only(log: list[tuple[int, int, list[int], int]], prompts: Any, first: int) -> int:
    """Check every read against a recount of what the router itself sent that group (its
    prompts, plus ``first`` tokens a request arrives with in a decode group of that size):
    with no publication after the first, that is all a router knows. Returns the reads."""
    sent: dict[int, list[int]] = {}
    for request, size, view, chosen in log:
        tally = sent.setdefault(size, [0] * size)
        assert view == tally, (request, size)
        tally[chosen] += int(prompts[request]) + (first if size == 2 else 0)
    return len(log)


@pytest.mark.parametrize("layout", ["disaggregated", "lockstep ranks"])
def test_a_decode_pool_and_lockstep_ranks_count_what_their_router_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """A refresh longer than the run: every read of either router group (a prefill pool of
    one replica and a decode pool of two; or one replica of two attention ranks stepping in
    lockstep) sees exactly what its router sent there: prompts, and a decode pool's first
    tokens too (``Scheduler.arrival_tokens``)."""
    from test_cluster_summary import _disaggregated_with_prefix_cache

    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))
    register("test_tally")(Tally)
    Tally.log = []
    router = {"policy": "test_tally", "load_refresh": "3600 s"}
    if layout == "disaggregated":
        path = _disaggregated_with_prefix_cache(tmp_path)
        result = fake(path, {"router": router})
        first = 1
    else:
        sets = {"hw.system.sockets": 2, "parallelism.dp_attention": 2, "serving.batch_slots": 4}
        pools = {"serve": {"workload": str(LLAMA), "replicas": 1, "set": sets}}
        result = fake(write_cluster(tmp_path, pools=pools, router=router))
        first = 0
    prompts = result.run.serving.prompt_tokens
    sizes = {size for _, size, _, _ in Tally.log}
    assert sizes == ({1, 2} if layout == "disaggregated" else {2})
    assert _own_sends_only(Tally.log, prompts, first) > 100
