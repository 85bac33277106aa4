"""What a policy may read beyond the load (docs/architecture.md, "Where to add a batching
policy"; docs/cluster.md, routers): a batching policy's ``QueueView`` gives each waiting
request's arrival time and the time now; a router's ``PoolState`` gives each replica's queued
tokens, queue length, running and free slots, and the routed request's prompt and output
lengths, each read from what tracks it (the scheduler's queue and slots). The worked examples
built on them, ``aging_spf`` and ``least_queued``, order as their rules say; both registries
take a class by decorator or by call, and an unknown name says how a plugin is found."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from test_cluster import assert_served_once, fake, write_cluster
from test_plugins import import_doc_module
from test_serving_alone import policy_of, round_step

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cluster.routers import PoolState, make_router
from rdu_sim.cluster.routers import base as routers_base
from rdu_sim.cluster.routers import register as register_router
from rdu_sim.cluster.routers.least_outstanding import LeastOutstanding
from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.batching import QueueView, check_batching
from rdu_sim.serving.batching import base as batching_base
from rdu_sim.serving.batching import register as register_batching
from rdu_sim.serving.batching.aging_spf import AGING_TOKENS_PER_S, AgingShortestPromptFirst
from rdu_sim.serving.batching.prefill_first import PrefillFirst
from rdu_sim.serving.clock import PS_PER_S
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registries as they are, restored after the test (it registers its own)."""
    monkeypatch.setattr(batching_base, "_REGISTRY", dict(batching_base._REGISTRY))
    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))


# --- the batching policy's view: arrival times and now ---------------------------------------


class At:
    """A clock standing at ``now`` (ps)."""

    def __init__(self, now: int) -> None:
        self.now = now


def view(prompts: list[int], arrivals_s: list[float], now_s: float) -> QueueView:
    """A queue of requests 0.. with these prompts and arrival times, read at ``now_s``."""
    prompt = np.array(prompts, dtype=np.int64)
    arrival = np.array([round(t * PS_PER_S) for t in arrivals_s], dtype=np.int64)
    return QueueView(
        deque(range(len(prompts))), prompt.data, arrival.data, At(round(now_s * PS_PER_S))
    )


def _serve(name: str, prompts: list[int], arrivals_s: list[float], outputs: int = 3) -> Any:
    requests = RequestSet(
        np.array(prompts, dtype=np.int64),
        np.full(len(prompts), outputs, dtype=np.int64),
        np.array(arrivals_s, dtype=np.float64),
        None,
    )
    server = ServerConfig(1, 4096, name)
    return serve(requests, policy_of("full"), StepCache(round_step), server)


class Recording(PrefillFirst):
    """FIFO, recording what each admission decision saw: now and each waiting request's id
    and arrival time."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, list[tuple[int, int]]]] = []

    def admit_from(self, queue: QueueView) -> int:
        waiting = [(queue.request(i), queue.arrival_ps(i)) for i in range(len(queue))]
        self.seen.append((queue.now, waiting))
        return 0


def test_an_admission_decision_sees_each_arrival_and_now(registries: None) -> None:
    """Each decision sees the server's time (never going back) and each waiting request's
    recorded arrival, none after now; the request admitted is admitted at that instant."""
    made: list[Recording] = []

    def recording() -> Recording:
        made.append(Recording())
        return made[-1]

    batching_base._REGISTRY["recording_test"] = recording  # type: ignore[assignment]
    records = _serve("recording_test", [2000, 300, 300, 1500, 800], [0.0, 0.01, 0.02, 0.03, 0.5])
    (policy,) = made
    times = [now for now, _ in policy.seen]
    assert times == sorted(times) and len(times) >= 4
    for now, waiting in policy.seen:
        for request, arrival in waiting:
            assert arrival == records.arrival_ps[request] <= now
    admitted = {waiting[0][0]: now for now, waiting in policy.seen}
    for request, now in admitted.items():
        assert records.admit_ps[request] >= now  # (a decision that did not admit asks again)
    assert (records.completions == 1).all()


def test_aging_spf_admits_the_lowest_prompt_less_wait() -> None:
    """The rule: prompt tokens less AGING_TOKENS_PER_S a second waited, the oldest of equal
    scores; equivalently A before a later B exactly when P_A - P_B < rate (t_B - t_A)."""
    policy = AgingShortestPromptFirst()
    rate = AGING_TOKENS_PER_S
    # 4,000 tokens at 0 s against 100 at 3.8 s: 3,900 >= 3,800, the short one goes first
    assert policy.admit_from(view([4000, 100], [0.0, 3.8], 6.0)) == 1
    # ... against 100 at 3.95 s: 3,900 < 3,950, the long one has waited long enough
    assert policy.admit_from(view([4000, 100], [0.0, 3.95], 6.0)) == 0
    # equal scores: the oldest
    assert policy.admit_from(view([1000, 1000 - rate], [0.0, 1.0], 2.0)) == 0
    rng = np.random.default_rng(3)
    for _ in range(50):
        prompts = rng.integers(1, 8000, 6).tolist()
        arrivals = np.sort(rng.uniform(0, 10, 6)).tolist()
        queue = view(prompts, arrivals, 10.0)
        scores = [
            queue.prompt_tokens(i) * PS_PER_S - rate * (queue.now - queue.arrival_ps(i))
            for i in range(6)
        ]
        assert policy.admit_from(queue) == int(np.argmin(scores))


class ShortestFirst(PrefillFirst):
    def admit_from(self, queue: QueueView) -> int:
        return min(range(len(queue)), key=queue.prompt_tokens)


class NanosecondAging(AgingShortestPromptFirst):
    """Aging at a token a nanosecond (the test server's steps take nanoseconds): a variant
    is a subclass with another rate."""

    rate = 10**9


def test_aging_bounds_how_long_a_long_prompt_waits(registries: None) -> None:
    """One slot, a long prompt behind a busy slot and a stream of short ones arriving for
    longer than its prompt's worth of aging: shortest prompt first admits it last; aging
    admits it before every short prompt that arrived more than (P - 1) / rate after it."""
    register_batching("spf_test", ShortestFirst)
    register_batching("aging_test", NanosecondAging)
    long, n = 3800, 120
    prompts = [500, long] + [200] * n
    arrivals = [0.0, 1e-9] + [(2 + 100 * i) * 1e-9 for i in range(n)]  # 12 us of short ones
    spf = _serve("spf_test", prompts, arrivals, outputs=40)
    aging = _serve("aging_test", prompts, arrivals, outputs=40)
    assert int(np.argmax(spf.admit_ps)) == 1  # the long prompt starved to the end
    limit = arrivals[1] + (long - 1) / NanosecondAging.rate
    later = [i for i in range(2, n + 2) if arrivals[i] > limit]
    assert later and all(aging.admit_ps[1] < aging.admit_ps[i] for i in later)
    passed = [i for i in range(2, n + 2) if aging.admit_ps[i] < aging.admit_ps[1]]
    assert passed  # (short prompts did pass it: aging is not FIFO)
    for records in (spf, aging):
        assert (records.completions == 1).all()


# --- the router's view: queues, slots and the request -----------------------------------------


def _served_prompts(scheduler: Any) -> Any:
    """The prompts a scheduler serves: the target's, or under pages on demand its own copy,
    a preempted request's prompt grown by the tokens it had generated."""
    records = scheduler.records
    return records.served_tokens()[0] if scheduler.kv.grows else records.target_prompt_tokens


class Checking:
    """Least outstanding, checking at every choice that each view equals what the replicas'
    schedulers hold (the queue's prompts summed, its length, the occupied slots)."""

    checked: ClassVar[list[int]] = []
    preempted_queued: ClassVar[int] = 0  # choices seen with a preempted request queued

    def choose(self, request: int, pool: PoolState) -> int:
        replicas = pool.replicas  # type: ignore[attr-defined]
        schedulers = [replica.server.scheduler for replica in replicas]
        prompts = [
            sum(int(_served_prompts(scheduler)[r]) for r in scheduler.queue)
            for scheduler in schedulers
        ]
        Checking.preempted_queued += any(
            s.records.preemptions[r] > 0 for s in schedulers for r in s.queue
        )
        assert pool.queued_tokens().tolist() == prompts
        assert pool.queue_lengths().tolist() == [len(s.queue) for s in schedulers]
        running = [s.slots.occupied for s in schedulers]
        assert pool.running_slots().tolist() == running
        assert (pool.free_slots() + pool.running_slots()).tolist() == [
            s.slots.n for s in schedulers
        ]
        records = schedulers[0].records
        assert pool.prompt_tokens(request) == int(records.prompt_tokens[request])
        assert pool.output_tokens(request) == int(records.output_tokens[request])
        Checking.checked.append(sum(prompts) + sum(running))
        return LeastOutstanding().choose(request, pool)


@pytest.mark.parametrize("disaggregated", [False, True], ids=["mixed", "disaggregated"])
def test_the_routers_views_are_the_schedulers_state(
    tmp_path: Path, registries: None, disaggregated: bool
) -> None:
    """Over an overloaded run (queues form), mixed or a prefill and a decode pool (a decode
    replica's queue empties by reserving slots), every view a router reads is what the
    schedulers hold at that instant, and queues and slots were seen non-empty."""
    register_router("checking_test", Checking)
    Checking.checked = []
    pool = {"workload": str(Path(__file__).parents[1] / "workloads" / "llama3.1-8b-1socket.yaml")}
    fields: dict[str, Any] = {
        "router": {"policy": "checking_test"},
    }
    if disaggregated:
        fields["pools"] = {
            "prefill": {
                **pool,
                "replicas": 2,
                "role": "prefill",
                "set": {"serving.batch_slots": 4},
            },
            "decode": {**pool, "replicas": 2, "role": "decode", "set": {"serving.batch_slots": 4}},
        }
    else:
        fields["pools"] = {"serve": {**pool, "replicas": 2, "set": {"serving.batch_slots": 4}}}
    result = fake(write_cluster(tmp_path, **fields), {"traffic.rate": 40.0})  # (overloaded)
    assert_served_once(result)
    assert max(Checking.checked) > 0
    for replica in result.run.cluster.replicas:
        assert replica.server.scheduler.queued_tokens == 0  # every queued prompt left


def test_the_queued_tokens_a_router_reads_count_a_preempted_requests_generated_tokens(
    tmp_path: Path, registries: None
) -> None:
    """Pages on demand (vLLM's stack, its pool binding): a preempted request goes back to
    its replica's queue with its prompt and the tokens it had generated, and the queued
    tokens a router reads are those, at every choice (some made while one was queued)."""
    register_router("checking_test", Checking)
    Checking.checked, Checking.preempted_queued = [], 0
    repo = Path(__file__).parents[1]
    workload = repo / "workloads" / "llama3.1-8b-1socket.yaml"
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"name: gpu\npools:\n  serve:\n    workload: {workload}\n"
        "    replicas: 2\n    set: {hardware: dgx-h100, stack: vllm-2024, "
        "stack.kv_allocation: on_demand, stack.memory_utilization: 0.226, "
        "stack.prefill_batch_tokens: null}\nrouter: {policy: checking_test}\n"
        f"traffic: {{trace: {repo / 'workloads' / 'traces' / 'mooncake-300.jsonl'}, "
        "format: mooncake, time_scale: 0.25}\nslo: {ttft: 1 s, tpot: 40 ms, attainment: 0.9}\n"
    )
    run = run_cluster(path)
    assert run.to_dict()["pools"]["serve"]["kv_pool"]["preemptions"] > 0
    assert Checking.preempted_queued > 0 and max(Checking.checked) > 0


class Fixed:
    """A pool state with fixed answers (what ``least_queued`` reads)."""

    def __init__(self, queued: list[int], outstanding: list[int]) -> None:
        self.queued, self.outstanding = np.asarray(queued), np.asarray(outstanding)

    def __len__(self) -> int:
        return len(self.queued)

    def queued_tokens(self) -> np.ndarray[Any, Any]:
        return self.queued

    def outstanding_tokens(self) -> np.ndarray[Any, Any]:
        return self.outstanding


def test_least_queued_takes_the_fewest_queued_tokens_then_the_least_load() -> None:
    router = make_router("least_queued")
    assert router.choose(0, Fixed([900, 300, 500], [100, 9000, 50])) == 1  # type: ignore[arg-type]
    # nothing queued anywhere (light load): the least outstanding, then the lowest index
    assert router.choose(0, Fixed([0, 0, 0], [700, 200, 200])) == 1  # type: ignore[arg-type]
    assert router.choose(0, Fixed([0, 10, 0], [700, 0, 700])) == 0  # type: ignore[arg-type]


# --- registration in either form, and an unknown name ----------------------------------------


def test_both_registries_take_a_decorator_or_a_call(registries: None) -> None:
    """``@register(name)`` and ``register(name, Cls)`` in both registries, each returning the
    class."""

    @register_batching("decorated_test")
    class Decorated(PrefillFirst):
        pass

    class Called:
        def choose(self, request: int, pool: PoolState) -> int:
            return 0

    assert batching_base._REGISTRY["decorated_test"] is Decorated
    assert register_router("called_test", Called) is Called
    assert routers_base._REGISTRY["called_test"] is Called


def test_an_unknown_name_lists_the_names_and_says_how_a_plugin_is_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        check_batching("spf", "w.yaml")
    message = caught.value.issues[0].message
    assert "unknown batching policy 'spf'; valid: " in message
    assert "aging_spf, decode_first, prefill_first" in message and "RDU_SIM_PLUGINS" in message
    path = write_cluster(tmp_path, router={"policy": "p2c"})
    with pytest.raises(ConfigError) as caught:
        fake(path)
    message = caught.value.issues[0].message
    assert "unknown router 'p2c'; valid: least_outstanding, least_queued" in message
    assert "RDU_SIM_PLUGINS" in message


def test_the_docs_long_prompt_router_runs_as_written(tmp_path: Path, registries: None) -> None:
    """docs/cluster.md's long-prompts-to-free-slots router, registered as written: every
    request served, and a long prompt goes to a replica with the most free slots at its
    arrival (checked against the views it read)."""
    import_doc_module(tmp_path, "cluster.md", "long_free")
    router = routers_base._REGISTRY["long_free"]
    picks: list[tuple[int, list[int], int]] = []

    class Watching(router):  # type: ignore[misc, valid-type]
        def choose(self, request: int, pool: PoolState) -> int:
            chosen = super().choose(request, pool)
            picks.append((pool.prompt_tokens(request), pool.free_slots().tolist(), chosen))
            return chosen

    routers_base._REGISTRY["long_free"] = Watching
    result = fake(write_cluster(tmp_path, router={"policy": "long_free"}))
    assert_served_once(result)
    long = [(free, chosen) for prompt, free, chosen in picks if prompt >= 2048]
    assert long and all(free[chosen] == max(free) for free, chosen in long)
