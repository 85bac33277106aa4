"""CoE expert turns on the serving loop: each turn is the shared scheduler's continuous
batching (a request that arrives mid-turn is admitted at the next step boundary, chunks
interleave with decode steps), the switch policies, switches as copies on the copy engine,
the serving clock's range and work bound, and the invariants of a whole run (each request
served once, slots never over-filled, time monotone)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.arrivals import OpenLoop
from rdu_sim.serving.clock import MAX_PS, SimulatedTimeError
from rdu_sim.serving.coe_server import CoEServer, SwitchPolicy, Tiers
from rdu_sim.serving.expert_region import ExpertRegion
from rdu_sim.serving.scheduler import ServerConfig
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
COE = ROOT / "workloads" / "samba-coe-150x8b-8socket.yaml"

PREFILL_PS = 3_000  # every prefill step, the router's and the expert's
DECODE_PS = 10_000
SWITCH_BYTES = 1e6
COPY_RATE = 1e9  # bytes/s: a switch takes 1 ms, far longer than any step
# channels so fast that the copy engine's own rate decides a copy's time
TIERS = Tiers(1e15, 0.0, 1.0, 1e15, 0.0, 1.0, COPY_RATE)
COPY_PS = math.ceil(SWITCH_BYTES / (COPY_RATE / 1e12))  # the server resumes at a whole ps


def _cost(shape: StepShape) -> StepCost:
    return StepCost(step_s=(PREFILL_PS if shape.phase == "prefill" else DECODE_PS) / 1e12)


@cache
def _policy() -> Any:
    return load_scenario(COE).kv_policy


def _server(
    arrivals: list[int],
    experts: list[int],
    outputs: list[int],
    *,
    switch: str = "drain",
    turn_ps: int = 10**12,
    slots: int = 4,
    prefetch: bool = False,
    priority: str = "prefill_first",
    chunk: int | None = None,
    region: int = 1,
    switch_bytes: float = SWITCH_BYTES,
) -> CoEServer:
    n = len(arrivals)
    return CoEServer(
        _policy(),
        ServerConfig(slots, 8192, priority, chunk),  # type: ignore[arg-type]
        SwitchPolicy(switch, turn_ps, prefetch),
        TIERS,
        ExpertRegion(region, "lru"),
        np.asarray(experts, dtype=np.int64),
        np.full(n, 100, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        OpenLoop(np.asarray(arrivals, dtype=np.int64)),
        switch_bytes,
        _cost,
        _cost,
    )


def test_a_request_arriving_mid_turn_is_admitted_at_the_next_step_boundary() -> None:
    """Request 0 (expert 0) is routed (the router's prefill step), waits for its expert's
    copy, prefills and decodes; request 1 of the same expert arrives 5.5 us into the decode
    run, during its third step: the router takes it when that step ends, and it takes the
    free slot right after (the next boundary), not when request 0 finishes."""
    copied = PREFILL_PS + COPY_PS  # the copy is asked for once the router has named expert 0
    decode_start = copied + PREFILL_PS
    arrival = decode_start + 25_500
    server = _server([0, arrival], [0, 0], [100, 10])
    server.simulate()
    records, counts = server.records, server.counts
    assert records.admit_ps[0] == copied
    assert records.first_token_ps[0] == decode_start
    routed = decode_start + 3 * DECODE_PS + PREFILL_PS  # the step in flight, then the router
    assert server.routed_ps.tolist() == [PREFILL_PS, routed]
    assert records.admit_ps[1] == routed
    assert records.first_token_ps[1] == routed + PREFILL_PS
    assert records.slot.tolist() == [0, 1]
    assert counts.switches == 1 and counts.turns == 1 and counts.admitted_mid_turn == 1
    assert counts.hits == 1  # request 1 was routed after its expert had been asked for
    assert counts.stall_ps == COPY_PS
    assert counts.router_ps == 2 * PREFILL_PS
    # request 0 decodes 99 steps: 3 before request 1's router and prefill steps, 96 after
    assert records.finish_ps[0] == decode_start + 99 * DECODE_PS + 2 * PREFILL_PS
    assert server.tiers.bytes_copied == SWITCH_BYTES


def test_the_bounded_policy_hands_the_sockets_on_and_drain_keeps_them() -> None:
    """Expert 1's request waits from 1 us into expert 0's turn; expert 0's second request
    comes later. Draining admits it into the running turn; a bounded turn older than its
    bound does not: the sockets go to expert 1 first, then back to expert 0."""
    decode_start = 2 * PREFILL_PS + COPY_PS
    times = [0, decode_start + 1_000, decode_start + 25_500]
    experts, outputs = [0, 1, 0], [100, 10, 10]
    drain = _server(times, experts, outputs, switch="drain")
    drain.simulate()
    # expert 1's arrival cuts the run at 1 step for the router, expert 0's at 2 more
    assert drain.records.admit_ps[2] == decode_start + 3 * DECODE_PS + 2 * PREFILL_PS
    assert drain.records.admit_ps[2] < drain.records.admit_ps[1]
    assert drain.counts.switches == 2 and drain.counts.turns == 2
    bounded = _server(times, experts, outputs, switch="bounded", turn_ps=1_000)
    bounded.simulate()
    admit = bounded.records.admit_ps
    assert admit[1] < admit[2]
    assert admit[1] == bounded.records.finish_ps[0] + COPY_PS  # expert 1's turn after 0's
    assert bounded.counts.switches == 3 and bounded.counts.turns == 3
    assert bounded.counts.admitted_mid_turn == 0
    # a bound the turn never reaches admits like draining
    loose = _server(times, experts, outputs, switch="bounded", turn_ps=10**12)
    loose.simulate()
    assert (loose.records.admit_ps == drain.records.admit_ps).all()


def test_the_router_works_while_a_copy_lands() -> None:
    """Request 1 arrives while expert 0's copy is in flight: the router prefills it then
    (the sockets were idle), so that time is not a stall and request 1 waits for its turn
    already routed."""
    times, experts, outputs = [0, 10_000], [0, 1], [2, 2]
    server = _server(times, experts, outputs)
    server.simulate()
    assert server.routed_ps.tolist() == [PREFILL_PS, 10_000 + PREFILL_PS]
    assert server.records.admit_ps[0] == PREFILL_PS + COPY_PS
    # the first copy less the router's step, then expert 1's whole copy (a one-expert region)
    assert server.counts.stall_ps == 2 * COPY_PS - PREFILL_PS


def test_a_prefetched_copy_overlaps_the_running_turn() -> None:
    """With prefetching, expert 1's copy (10 us) starts while expert 0 decodes (50 us; the
    region has room for two), so expert 1's turn starts without waiting for it."""
    times, experts, outputs = [0, 1_000], [0, 1], [5_000, 10]
    copy_ps = 10**7  # 1e4 bytes at 1e9 bytes/s
    on_demand = _server(times, experts, outputs, region=2, switch_bytes=1e4)
    on_demand.simulate()
    ahead = _server(times, experts, outputs, region=2, switch_bytes=1e4, prefetch=True)
    ahead.simulate()
    # request 1 is routed during the first copy (which is not a stall), expert 1's copy is
    # waited for whole on demand and not at all when prefetched
    assert on_demand.counts.stall_ps == pytest.approx(2 * copy_ps - PREFILL_PS, abs=2)
    assert ahead.counts.switches == 2
    assert ahead.counts.stall_ps == pytest.approx(copy_ps - PREFILL_PS, abs=1)
    assert ahead.records.admit_ps[1] == ahead.records.finish_ps[0]
    assert on_demand.records.admit_ps[1] == pytest.approx(
        on_demand.records.finish_ps[0] + copy_ps, abs=1
    )


def test_a_run_goes_past_2_53_ps_exactly() -> None:
    """The serving loop keeps integer picoseconds over the clock's whole range: a request
    arriving after 2^53 ps (2.5 simulated hours, where a float clock rounds) is served to the
    picosecond, its steps exact."""
    late = 2**53 + 1
    server = _server([0, late], [0, 0], [2, 2])
    server.simulate()
    records = server.records
    assert records.arrival_ps[1] == late
    assert records.admit_ps[1] == late + PREFILL_PS  # the router's step, then its own
    assert records.finish_ps[1] == late + 2 * PREFILL_PS + DECODE_PS


def test_a_run_past_the_serving_clock_is_refused() -> None:
    server = _server([0, MAX_PS - 5_000], [0, 0], [2, 2])
    with pytest.raises(SimulatedTimeError, match="2\\^63 ps"):
        server.simulate()


def test_a_coe_run_is_bounded_by_serving_max_work_as_any_run() -> None:
    with pytest.raises(ConfigError, match=r"serving\.max_work"):
        api.run(COE, {"serving.requests": 50, "serving.max_work": 100})


@pytest.mark.parametrize("switch", ["bounded", "drain"])
def test_a_whole_run_serves_each_request_once_within_its_slots(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    most: list[int] = []
    admit = ExpertRegion.admit

    def counted(self: ExpertRegion, expert: int, now: float, keep: set[int]) -> int | None:
        evicted = admit(self, expert, now, keep)
        most.append(len(self.resident) - self.capacity)
        return evicted

    monkeypatch.setattr(ExpertRegion, "admit", counted)
    run = api.run(
        COE,
        {
            "serving.requests": 120,
            "serving.arrival.rate": 8,
            "coe.switch": switch,
            **({"coe.turn_s": 0.5} if switch == "bounded" else {}),
            "hw.socket.hbm.capacity": "32 GiB",  # 15 experts cached: switches evict
        },
    )
    records = run.records
    assert (records.completions == 1).all()
    assert (records.arrival_ps <= records.admit_ps).all()
    assert (records.admit_ps < records.first_token_ps).all()
    assert (records.first_token_ps <= records.finish_ps).all()
    times = records.series.times()
    assert (np.diff(times) > 0).all()  # one row an instant, in time order
    # slots: at no instant more requests between admission and finish than slots
    events = sorted(
        [(int(t), 1) for t in records.admit_ps] + [(int(t), -1) for t in records.finish_ps]
    )
    held = np.cumsum([d for _, d in events])
    assert held.max() <= run.batch_slots
    slots = records.slot
    for slot in range(run.batch_slots):  # a slot holds one request at a time
        mine = np.flatnonzero(slots == slot)
        order = mine[np.argsort(records.admit_ps[mine])]
        assert (records.admit_ps[order[1:]] >= records.finish_ps[order[:-1]]).all()
    coe = run.coe
    assert coe is not None
    assert coe.bytes_copied == coe.model_switches * coe.switch_bytes
    assert len(most) == coe.model_switches and max(most) == 0  # full, never overfilled
    assert coe.turns >= coe.model_switches - coe.region_experts  # prefetches beyond turns
    assert records.tokens_generated == int(records.output_tokens.sum())


def test_a_hit_is_a_request_whose_expert_was_in_hbm_when_routed() -> None:
    """Request 0 asks for expert 0's copy (a miss); request 1 is routed while that copy is
    in flight (a miss: it waits for it too); request 2 is routed after it landed (a hit)."""
    times = [0, 10_000, PREFILL_PS + COPY_PS + 50_000]
    server = _server(times, [0, 0, 0], [200, 200, 2])
    server.simulate()
    assert server.routed_ps[1] < server.records.admit_ps[0] < server.routed_ps[2]
    assert server.counts.hits == 1 and server.counts.switches == 1


def test_decode_first_puts_a_decode_step_between_two_prefill_steps() -> None:
    """serving.prefill_priority: under decode_first the router's step for request 1 and its
    expert prefill step each wait for one decode step of request 0."""
    copied = PREFILL_PS + COPY_PS
    decode_start = copied + PREFILL_PS
    arrival = decode_start + 25_500
    routed = decode_start + 3 * DECODE_PS + PREFILL_PS
    first = _server([0, arrival], [0, 0], [100, 10])
    first.simulate()
    assert first.records.first_token_ps[1] == routed + PREFILL_PS
    second = _server([0, arrival], [0, 0], [100, 10], priority="decode_first")
    second.simulate()
    assert second.routed_ps[1] == routed
    assert second.records.first_token_ps[1] == routed + DECODE_PS + PREFILL_PS
    assert second.records.finish_ps[0] == first.records.finish_ps[0]  # same steps, reordered


def test_chunks_interleave_with_decode_steps_as_the_scheduler_does() -> None:
    """The turn is the shared scheduler's policy: with prefill_chunk_tokens 50, request 1's
    two chunks (100 prompt tokens) go one per decode step of request 0 under prefill_first
    (the router's two chunks are the CoE driver's and run back to back)."""
    copied = 2 * PREFILL_PS + COPY_PS  # the router's two chunks, then the copy
    decode_start = copied + 2 * PREFILL_PS
    arrival = decode_start + 25_500
    server = _server([0, arrival], [0, 0], [100, 10], chunk=50)
    server.simulate()
    records = server.records
    assert records.first_token_ps[0] == decode_start
    routed = decode_start + 3 * DECODE_PS + 2 * PREFILL_PS
    assert server.routed_ps[1] == routed
    assert records.admit_ps[1] == routed
    assert records.first_token_ps[1] == routed + PREFILL_PS + DECODE_PS + PREFILL_PS
    assert records.prefill_steps == 4  # the expert's chunks (the router's are its own)


def test_the_time_series_counts_requests_waiting_for_another_expert() -> None:
    """The waiting column is the scheduler's queue and the routed requests waiting for their
    expert's turn: expert 1's request waits from its routing until its turn begins."""
    decode_start = 2 * PREFILL_PS + COPY_PS
    routed = decode_start + DECODE_PS + PREFILL_PS  # the step in flight, then the router
    server = _server([0, decode_start + 1_000], [0, 1], [100, 10])
    server.simulate()
    series = server.records.series
    waiting = dict(zip(series.times().tolist(), series.counts()[:, 0].tolist(), strict=True))
    assert server.routed_ps[1] == routed
    assert waiting[routed] == 1
    turn = server.records.finish_ps[0]  # expert 1's turn: its copy, then its admission
    assert waiting[turn] == 1 and waiting[int(server.records.admit_ps[1])] == 0
