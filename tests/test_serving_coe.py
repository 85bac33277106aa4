"""Composition of Experts serving: experts in DDR, a router and the KV cache in HBM, an HBM
region caching the active experts with an eviction policy, switches as copies on the copy
engine that overlap the current expert's steps when prefetching."""

from __future__ import annotations

import csv
import json
import typing
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.compiler.placement import plan_memory, weight_inventory
from rdu_sim.config import ConfigError
from rdu_sim.config.workload import CoEConfig
from rdu_sim.models.figures import weight_bytes
from rdu_sim.report.console import render
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.coe import EVICTION, ExpertRegion, expert_step_scenario, expert_tags

ROOT = Path(__file__).resolve().parents[1]
COE = ROOT / "workloads" / "samba-coe-150x8b-8socket.yaml"
SMALL = {
    "serving.requests": 60,
    "serving.prompt_tokens": {"dist": "fixed", "value": 512},
    "serving.output_tokens": {"dist": "fixed", "value": 32},
}


@cache
def _run(**settings: Any) -> dict[str, Any]:
    overrides = {**SMALL, **{k.replace("__", "."): v for k, v in settings.items()}}
    data: dict[str, Any] = api.run(COE, overrides).to_dict()
    return data


def _per_socket_switch_bytes() -> int:
    """One socket's share of a switch: every weight of the expert but its embedding table."""
    scenario = load_scenario(COE)
    return sum(w.bytes for w in weight_inventory(scenario) if not w.key.startswith("embedding/"))


def test_a_switch_copies_the_expert_without_its_embedding_table() -> None:
    """Llama 3.1 8B at tp 8: each socket holds its shard (1.877 GB with the replicated
    norms) and a replica of the 1.05 GB embedding table; a switch copies the shard, the
    table stays in DDR. The report, the model's figures and the workload's comment agree."""
    data = _run()
    coe = data["coe"]
    scenario = load_scenario(COE)
    arch = scenario.model
    table = arch.vocab_size * arch.hidden_size * 2  # bf16
    assert table == 1_050_673_152
    assert _per_socket_switch_bytes() == 2_927_370_240 - table == 1_876_697_088
    assert coe["expert_weight_bytes"] == weight_bytes(arch, 2.0) == 16_060_522_496
    assert coe["switch_bytes"] == 8 * 1_876_697_088
    assert coe["model_switches"] > 0
    assert coe["bytes_copied"] == pytest.approx(coe["model_switches"] * coe["switch_bytes"])
    text = COE.read_text()
    assert "16 GB each in BF16" in text and "1.88 GB per socket" in text
    # HBM caches whole shards; DDR keeps every expert whole (its table too) on each socket
    hbm, ddr = data["memory"]["hbm"], data["memory"]["ddr"]
    assert hbm["used_bytes"] <= hbm["capacity_bytes"]
    assert ddr["weights_bytes"] == 150 * 2_927_370_240
    # the expert's steps read the table's rows from DDR: one row per slot in a decode step
    assert data["decode_step"]["bytes_by_tier"]["ddr"] == 16 * arch.hidden_size * 2
    # experts in DDR cached in HBM is the plan, not weights pushed out of HBM by the slots
    assert not any("leaves HBM room" in w for w in data["warnings"]), data["warnings"]


def test_the_expert_steps_place_exactly_the_embedding_table_in_ddr() -> None:
    scenario = load_scenario(COE)
    placement = plan_memory(expert_step_scenario(scenario), 16)
    in_ddr = [(t.name, t.bytes) for t in placement.tensors if t.tier == "ddr"]
    assert in_ddr == [("embedding/embed.gather", 1_050_673_152)]


def test_an_on_demand_switch_takes_its_bytes_over_the_copy_bandwidth() -> None:
    """Without prefetching every copy runs alone: at 128 GB/s (below DDR's and HBM's
    effective rates) a switch of a socket's 1.877 GB takes exactly bytes / bandwidth, and
    the server waits for it (to the next whole picosecond) unless the router has work."""
    data = _run(coe__prefetch=False)["coe"]
    switches = data["model_switches"]
    per_switch = 1_876_697_088 / 128e9
    assert data["switch_s"] == pytest.approx(switches * per_switch, rel=1e-9)
    # the server waits for every copy but while the router prefills arrivals meanwhile
    stall, router = data["switch_stall_s"], data["router_s"]
    assert data["switch_s"] - router <= stall <= data["switch_s"] + switches * 1e-12
    # most of it: 89% with the shipped files, the router's prefills meanwhile (each with
    # SambaStack's host time) covering the rest
    assert stall > 0.85 * data["switch_s"]


def test_prefetching_the_next_expert_hides_switch_time() -> None:
    """With a queue (all requests at once) there is always a next expert to copy while the
    current one serves: most of the copy time leaves the critical path."""
    ahead = _run(serving__arrival__process="all_at_once")
    on_demand = _run(serving__arrival__process="all_at_once", coe__prefetch=False)
    assert ahead["coe"]["switch_stall_s"] < 0.5 * on_demand["coe"]["switch_stall_s"]
    # on demand the server waits for every copy, but while the router prefills arrivals
    demand = on_demand["coe"]
    assert demand["switch_s"] - demand["router_s"] <= demand["switch_stall_s"]
    assert demand["switch_stall_s"] <= demand["switch_s"] + demand["model_switches"] * 1e-12
    assert ahead["ttft_s"]["mean"] < on_demand["ttft_s"]["mean"]


ROUTER_1B_BYTES = 525_336_576 + 16 * 2 * (60_817_408 // 8 + 2 * 2048) + 2 * 2048
"""One socket's Llama-3.2-1B router at tp 8, bf16: its tied embedding table (128,256 x
2,048) on every socket, 16 layers' eighth of 60,817,408 weights (q and o 2,048 x 2,048, k
and v 2,048 x 512, three FFN matrices 2,048 x 8,192) with their two norms replicated, the
final norm."""
EXPERT_8B_HBM = 2 * 32 * (218_103_808 // 8 + 2 * 4096) + 2 * 128_256 * 4096 // 8 + 2 * 4096
"""One socket's Llama-3.1-8B expert in the HBM region at tp 8, bf16 (what a switch copies):
32 layers' eighth of 218,103,808 weights with their two norms, the LM head's eighth, the
final norm; not its embedding table (it stays in DDR)."""


def test_the_hbm_region_holds_at_most_the_experts_there_are() -> None:
    """12 Llama-3.1-8B experts and a 1B router on 16 slots of 4,096 tokens: HBM has room
    for 35 experts beside the router, the KV cache and the activations, and the region holds
    the 12 there are, so HBM holds the router and 12 experts' bytes, no more."""
    assert ROUTER_1B_BYTES == 768_741_376
    assert _per_socket_switch_bytes() == EXPERT_8B_HBM
    data = _run(coe__experts=12, coe__router="llama-3.2-1b", serving__max_context=4096)
    hbm = data["memory"]["hbm"]
    assert hbm["kv_bytes"] == 16 * 4096 * 32 * 2 * 128 * 2  # a KV head per socket
    room = hbm["capacity_bytes"] - ROUTER_1B_BYTES - hbm["kv_bytes"] - hbm["activations_bytes"]
    assert room // EXPERT_8B_HBM == 35
    assert data["coe"]["region_experts"] == 12
    assert hbm["weights_bytes"] == ROUTER_1B_BYTES + 12 * EXPERT_8B_HBM == 23_289_106_432
    assert human.size(hbm["weights_bytes"]) == "21.7 GiB"
    # every expert is copied in once at its first request and never evicted
    assert data["coe"]["model_switches"] <= 12
    sets = ("coe.experts=12", "coe.router=llama-3.2-1b", "serving.max_context=4096")
    args = ["run", str(COE), "--set", "serving.requests=20"]
    words = CliRunner().invoke(cli, [*args, *(a for s in sets for a in ("--set", s))])
    assert words.exit_code == 0, words.output
    text = " ".join(words.output.split())
    assert "these slots leave room for all 12 experts, each copied in once, none evicted)" in text
    all_12 = "all 12 experts, each copied in once, none evicted"
    assert f"HBM region (experts cached per socket) │ {all_12} │" in text
    one = _run(coe__experts=1, coe__router="llama-3.2-1b", serving__max_context=4096)
    assert one["coe"]["region_experts"] == one["coe"]["model_switches"] == 1
    assert one["memory"]["hbm"]["weights_bytes"] == ROUTER_1B_BYTES + EXPERT_8B_HBM


@pytest.mark.parametrize(
    ("settings", "region", "switches", "hit_rate"),
    [
        ({}, 33, 27, 0.55),
        ({"coe__prefetch": False}, 33, 27, 0.55),
        ({"hw__socket__hbm__capacity": "32 GiB"}, 15, 31, 29 / 60),
    ],
)
def test_a_region_below_the_expert_count_switches_as_before(
    settings: dict[str, Any], region: int, switches: int, hit_rate: float
) -> None:
    """Capping the region at the expert count moves nothing where it was already below it:
    the figures of commit 0bc5187, before the cap, for 150 experts."""
    coe = _run(**settings)["coe"]
    assert (coe["region_experts"], coe["model_switches"]) == (region, switches)
    assert coe["hbm_hit_rate"] == pytest.approx(hit_rate, abs=1e-12)


def test_more_experts_in_the_same_hbm_hit_less_and_switch_more() -> None:
    few, many = _run(coe__experts=10), _run(coe__experts=150)
    # the same HBM has room for 33: it holds all 10 of the few (at most the experts there are)
    assert (few["coe"]["region_experts"], many["coe"]["region_experts"]) == (10, 33)
    assert few["memory"]["hbm"]["free_bytes"] > many["memory"]["hbm"]["free_bytes"]
    assert few["coe"]["hbm_hit_rate"] > many["coe"]["hbm_hit_rate"]
    assert few["coe"]["model_switches"] < many["coe"]["model_switches"]


def test_a_smaller_hbm_caches_fewer_experts_and_hits_less() -> None:
    small = _run(hw__socket__hbm__capacity="32 GiB")
    large = _run()
    assert small["coe"]["region_experts"] < large["coe"]["region_experts"]
    assert small["coe"]["hbm_hit_rate"] < large["coe"]["hbm_hit_rate"]


def test_a_slower_copy_engine_makes_switches_slower() -> None:
    slow = _run(hw__socket__ddr_to_hbm_bandwidth="32 GB/s")
    fast = _run()
    assert slow["coe"]["switch_s"] > 2 * fast["coe"]["switch_s"]


def test_each_eviction_policy_picks_its_victim() -> None:
    assert set(EVICTION) == set(typing.get_args(CoEConfig.model_fields["eviction"].annotation))
    victims = {}
    for name in EVICTION:
        region = ExpertRegion(3, name)
        region.admit(0, 0.0, set())  # admitted first, used often, not lately
        region.admit(1, 1.0, set())
        region.admit(2, 2.0, set())
        for t in (3.0, 4.0, 5.0):
            region.use(0, t)
        region.use(1, 6.0)
        region.use(2, 7.0)
        victims[name] = region.admit(3, 8.0, set())
        assert 3 in region and len(region.resident) == 3
    assert victims == {"lru": 0, "lfu": 1, "fifo": 0}
    region = ExpertRegion(2, "lru")
    region.admit(0, 0.0, set())
    region.admit(1, 1.0, set())
    assert region.admit(2, 2.0, keep={0}) == 1  # the kept (running) expert is never evicted
    full = ExpertRegion(1, "lru")
    full.admit(0, 0.0, set())
    assert full.can_admit(set()) and not full.can_admit({0})


def test_expert_tags_follow_zipf_and_the_seed() -> None:
    coe = CoEConfig(experts=50, router="llama-3.1-8b")
    tags = expert_tags(coe, 20_000, seed=3)
    assert (tags == expert_tags(coe, 20_000, seed=3)).all()
    counts = [int((tags == e).sum()) for e in (0, 1, 9)]
    share = 1.0 / sum(1.0 / k for k in range(1, 51))  # expert 0's Zipf(1) probability
    assert counts[0] / 20_000 == pytest.approx(share, rel=0.05)
    assert counts[0] == pytest.approx(2 * counts[1], rel=0.1)
    assert counts[0] == pytest.approx(10 * counts[2], rel=0.2)


def test_the_same_coe_run_gives_the_same_bytes() -> None:
    assert api.run(COE, SMALL).to_dict() == _run()


def test_a_router_from_a_config_json_runs_as_its_preset() -> None:
    """``coe.router`` takes what ``model`` takes: Llama-3.1-8B's config.json (the test
    fixture, Hugging Face's fields) serves as the preset of that model does."""
    fixture = ROOT / "tests" / "models" / "llama-3.1-8b" / "config.json"
    given = api.run(COE, {**SMALL, "coe.router": {"config_json": str(fixture)}}).to_dict()
    preset = _run()
    assert given["coe"] == preset["coe"]
    assert given["ttft_s"] == preset["ttft_s"] and given["makespan_s"] == preset["makespan_s"]
    with pytest.raises(ConfigError, match=r"coe\.router.*config_json") as info:
        load_scenario(COE, {"coe.router": {"config_json": "no/such/config.json"}})
    assert "no/such/config.json" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"serving.batch_slots": "auto"}, "serving.batch_slots", "needs a number of slots"),
        ({"coe.router": "no-such-model"}, "coe.router", "no-such-model"),
        ({"coe.eviction": "random"}, "coe.eviction", "lru"),
        ({"coe.switch": "sometimes"}, "coe.switch", "bounded"),
        ({"coe.turn_s": 0}, "coe.turn_s", "must be more than 0, got 0"),
        (  # drain never reads a turn's bound: setting one changes nothing, so it is refused
            {"coe.switch": "drain", "coe.turn_s": 0.5},
            "coe.turn_s",
            "bounds a turn under switch 'bounded'; switch 'drain' never reads it",
        ),
    ],
)
def test_bad_coe_settings_name_the_field(overrides: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(COE, overrides)
    message = str(info.value)
    assert field in message and words in message


def test_a_paged_stack_under_a_coe_is_refused_naming_the_field() -> None:
    """A CoE plans static slots beside its expert region; a paged KV pool for it is not
    modelled, so a stack with ``kv_page_tokens`` is refused (one error line, exit 2), not
    run as static slots under a capacity line that describes a pool."""
    with pytest.raises(ConfigError) as info:
        load_scenario(COE, {"stack.kv_page_tokens": 64})
    message = str(info.value)
    assert "stack.kv_page_tokens: 64 pages the KV cache of stack 'sambastack-2025'" in message
    assert "a paged KV pool for it is not modelled" in message
    result = CliRunner().invoke(cli, ["run", str(COE), "--set", "stack.kv_page_tokens=64"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and "stack.kv_page_tokens" in result.stderr


def test_no_room_for_an_expert_is_a_capacity_error() -> None:
    from rdu_sim.compiler import CapacityError

    with pytest.raises(CapacityError, match="no expert fits the HBM region"):
        api.run(COE, {**SMALL, "serving.batch_slots": 480})


def test_rdu_sim_run_json_reports_the_switching() -> None:
    result = CliRunner().invoke(cli, ["run", str(COE), "--json", "--set", "serving.requests=20"])
    assert result.exit_code == 0, result.output
    coe = json.loads(result.output)["coe"]
    assert {"model_switches", "switch_s", "hbm_hit_rate", "bytes_copied"} <= set(coe)
    assert {"admitted_mid_turn", "turns", "switch_policy", "switch_stall_s"} <= set(coe)
    assert coe["bytes_copied"] == pytest.approx(coe["model_switches"] * coe["switch_bytes"])


def test_rdu_sim_run_prints_the_switching_in_its_text_report() -> None:
    result = CliRunner().invoke(cli, ["run", str(COE), "--set", "serving.requests=20"])
    assert result.exit_code == 0, result.output
    summary = api.run(COE, {"serving.requests": 20}).summary()
    coe = summary.coe
    assert coe is not None
    text = " ".join(result.output.split())
    assert "Composition of Experts" in text
    assert f"expert switches (DDR to HBM copies) │ {coe.model_switches}" in text
    assert f"requests admitted mid-turn │ {coe.admitted_mid_turn}" in text
    assert f"HBM hit rate (expert in HBM when routed) │ {human.percent(coe.hbm_hit_rate)}" in text
    region = f"HBM region (experts cached per socket) │ {coe.region_experts} of the 150 experts"
    assert f"{region}, lru eviction" in text
    assert f"bytes copied (all sockets) │ {human.size(coe.bytes_copied, 4)}" in text
    assert f"stall waiting for copies │ {human.duration(coe.switch_stall_s)}" in text
    assert "bounded: a turn admits for 2 s while others wait" in text
    assert (  # the header's room for more slots is a trade against cached experts
        f"{summary.batch_slots} batch slots (room for {summary.memory_capacity} with one expert "
        f"cached in HBM; these slots leave room for {coe.region_experts} of the 150 experts)"
    ) in text


def test_a_coe_run_that_falls_behind_its_arrivals_is_bound_by_the_machine() -> None:
    """Each turn serves ~2 requests of one expert while the others' requests queue: the
    slots stand mostly empty, yet the requests wait longer than they are served and fewer
    tokens are served than asked, so the machine (its turns) sets the throughput, and the
    report says so; at a tenth of the rate the same machine keeps up, and the load sets it."""
    from rdu_sim.report.summary import OCCUPANCY_FULL

    behind = api.run(COE, {"serving.requests": 60}).summary()
    waited, e2e = behind.queue_delay_s.mean, behind.e2e_s.mean
    asked, served = behind.load.asked_tokens_per_s, behind.decode_tokens_per_s
    assert waited is not None and e2e is not None and asked is not None and served is not None
    assert behind.occupancy is not None and behind.occupancy < OCCUPANCY_FULL / 4
    assert waited > e2e - waited and served < asked
    assert behind.throughput_bound == "machine"
    console = Console(width=400, record=True)
    console.print(render(behind))
    text = console.export_text()
    assert "set by the offered load" not in text
    assert behind.coe is not None
    assert (
        f"Requests waited {human.duration(waited)} on average to be admitted, longer than "
        f"serving them took ({human.duration(e2e - waited)}), and the machine served "
        f"{human.rate(served, 'tokens/s')} of the "
    ) in text
    assert (
        f"set by the machine, in its expert turns ({behind.coe.turns:,} turns of "
        f"{human.number(behind.coe.requests_per_turn)} requests each"
    ) in text
    keeping_up = api.run(COE, {"serving.requests": 60, "serving.arrival.rate": 0.2}).summary()
    assert keeping_up.throughput_bound == "offered_load"


def test_a_compressing_kv_policy_serves_its_experts_in_its_slots() -> None:
    """SnapStream with a 1k budget and 2k prompts: each prefill runs the selection and the
    decode steps attend to what the slot keeps (a batch's bucket never exceeds the slot)."""
    data = api.run(
        COE,
        {
            "serving.requests": 12,
            "serving.prompt_tokens": {"dist": "fixed", "value": 2048},
            "serving.output_tokens": {"dist": "fixed", "value": 16},
            "kv.policy": "snapstream",
            "kv.budget": 1024,
            "kv.recent": 256,
        },
    )
    assert data.to_dict()["requests_completed"] == 12
    shapes = data.cache.shapes
    assert any(s.phase == "prefill" and s.select for s in shapes)
    assert all(s.cache_len <= 1024 for s in shapes if s.phase == "decode")


def _trace(tmp_path: Path, experts: list[str]) -> Path:
    path = tmp_path / "coe.csv"
    rows = [f"256,8,{e}" for e in experts]
    path.write_text("prompt_tokens,output_tokens,expert\n" + "\n".join(rows) + "\n")
    return path


def _from_trace(trace: Path, **extra: Any) -> dict[str, Any]:
    overrides = {
        "serving.trace": str(trace),
        "serving.requests": 1000,
        "serving.arrival": {"process": "closed_loop"},
        "coe.popularity": {"dist": "trace"},
        **extra,
    }
    data: dict[str, Any] = api.run(COE, overrides).to_dict()
    return data


def test_experts_from_a_trace_column(tmp_path: Path) -> None:
    """Every request of the trace asks for expert 7: one switch, then only hits."""
    data = _from_trace(_trace(tmp_path, ["7"] * 40))
    coe = data["coe"]
    assert data["requests_completed"] == 40
    assert coe["model_switches"] == 1
    assert coe["bytes_copied"] == coe["switch_bytes"]
    # the first request asked for the copy and those routed while it landed waited for it
    # (the router prefills the 16 closed-loop users' prompts one by one); later ones hit
    assert 24 / 40 <= coe["hbm_hit_rate"] < 1
    two = _from_trace(_trace(tmp_path, ["0", "1"] * 20))["coe"]
    assert two["model_switches"] == 2


@pytest.mark.parametrize(
    ("experts", "header", "field", "words"),
    [
        (  # at the row's line, as every bad value of a trace is
            ["3", "200"],
            True,
            "expert",
            "coe.csv:3: expert: expected an expert's index in 0..149 (coe.experts is 150; "
            "experts count from 0), got 200 (the serving.trace",
        ),
        (["3", "x"], True, "expert", "expert's index"),
        (["3", "4"], False, "coe.popularity.dist", "which has none"),
    ],
)
def test_a_bad_expert_column_is_named(
    tmp_path: Path, experts: list[str], header: bool, field: str, words: str
) -> None:
    trace = _trace(tmp_path, experts)
    if not header:
        trace.write_text("prompt_tokens,output_tokens\n256,8\n256,8\n")
    with pytest.raises(ConfigError) as info:
        _from_trace(trace)
    assert field in str(info.value) and words in str(info.value)


def test_room_for_counts_the_slots_that_leave_one_expert_in_hbm() -> None:
    """A CoE's batch capacity is the most slots whose KV cache still leaves the HBM region
    one expert: one slot more and no expert fits (the plain model's capacity, which
    ignores the router, is larger)."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.compiler.placement import batch_capacity
    from rdu_sim.serving.coe import coe_capacity, region_experts, router_scenario

    scenario = load_scenario(COE, {"stack.batch_programs": "any"})  # memory's count
    assert scenario.workload.coe is not None
    router = router_scenario(scenario, scenario.workload.coe)
    capacity = coe_capacity(scenario, router)
    assert region_experts(scenario, router, capacity) == 1
    with pytest.raises(CapacityError, match="no expert fits"):
        region_experts(scenario, router, capacity + 1)
    assert capacity < batch_capacity(scenario)
    # the shipped stack runs programs of powers of two: the largest at most that
    shipped = load_scenario(COE)
    runs = 1 << (capacity.bit_length() - 1)
    assert coe_capacity(shipped, router_scenario(shipped, scenario.workload.coe)) == runs
    assert _run()["batch_capacity"] == runs


def test_the_capacity_line_says_what_a_coe_holds_and_runs() -> None:
    """448 slots fit beside the router and one expert (the room is 475: one more and no
    expert fits; 512 are refused), so the line says 475 fit, that the stack's programs run
    at most 256 and 448 as if compiled, and neither that 'auto' would pick a count (a CoE
    refuses it) nor that slots beyond the room spill weights to DDR (none do)."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.serving.coe import coe_room, region_experts, router_scenario

    scenario = load_scenario(COE, {"serving.batch_slots": 448})
    assert scenario.workload.coe is not None
    router = router_scenario(scenario, scenario.workload.coe)
    room = coe_room(scenario, router)
    assert room == 475 and region_experts(scenario, router, room) == 1
    with pytest.raises(CapacityError, match="no expert fits"):
        region_experts(scenario, router, room + 1)
    summary = api.run(COE, {"serving.batch_slots": 448, "serving.requests": 4}).summary()
    assert (summary.batch_capacity, summary.memory_capacity) == (256, 475)
    assert summary.capacity == (
        "serving.batch_slots sets 448; at most 475 fit beside the router's weights with room "
        "left for one expert in the HBM region (a Composition of Experts names its slots: no "
        "'auto'); the stack runs at most 256 of them (its batch_programs: powers_of_two); the "
        "stack has no 448-slot program, so it runs 448 as if one were compiled for it"
    )


def _workload(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """The shipped CoE workload in ``tmp_path`` (its hardware by shipped name), each
    ``(old, new)`` of ``edits`` replacing a line's text."""
    text = COE.read_text().replace("hardware: ../hw_configs/sn40l-8.yaml", "hardware: sn40l-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "coe.yaml"
    path.write_text(text)
    return path


def _line(path: Path, fragment: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if fragment in t)


@pytest.mark.parametrize(
    ("edits", "where", "message"),
    [
        (  # the router alone takes more HBM than a socket has: no slot count helps
            [("router: llama-3.1-8b", "router: llama-3.1-405b")],
            ("coe.yaml", "router: llama-3.1-405b", "coe.router"),
            "the router (llama-3.1-405b) alone does not fit: its weights take 97.93 GiB of "
            "the 64 GiB HBM per socket (they stay in HBM beside the experts' region); use a "
            "smaller router or raise parallelism.tp (now 8)",
        ),
        (  # every expert whole in DDR: 563 of 2.726 GiB fit a socket's 1.5 TiB
            [("experts: 150", "experts: 100000")],
            ("coe.yaml", "experts: 100000", "coe.experts"),
            "100,000 experts of 2.726 GiB per socket need 266.2 TiB of DDR, more than its "
            "1.5 TiB (it holds 563); lower coe.experts or raise parallelism.tp (now 8)",
        ),
        (
            [("batch_slots: 16", "batch_slots: 2000")],
            ("coe.yaml", "batch_slots: 2000", "serving.batch_slots"),
            "no expert fits the HBM region: the router (2.726 GiB), the KV cache of 2000 "
            "slots and the activations take 253.2 GiB of the 64 GiB HBM per socket and one "
            "expert needs 1.748 GiB; lower serving.batch_slots, reduce serving.max_context, "
            "or raise parallelism.tp (now 8)",
        ),
        (  # a row asks for expert 150 of 150: at the trace's line
            [
                ("popularity: {dist: zipf, exponent: 1.0}", "popularity: {dist: trace}"),
                ("requests: 400", "requests: 400\n  trace: t.csv"),
            ],
            ("t.csv", "256,8,150", "expert"),
            "expected an expert's index in 0..149 (coe.experts is 150; experts count from 0), "
            "got 150 (the serving.trace of {workload})",
        ),
        (
            [
                ("popularity: {dist: zipf, exponent: 1.0}", "popularity: {dist: trace}"),
                ("requests: 400", "requests: 400\n  trace: t.csv"),
                ("process: poisson, rate: 2", "process: closed_loop"),
            ],
            ("coe.yaml", "popularity: {dist: trace}", "coe.popularity.dist"),
            "{dist: trace} reads the expert column of serving.trace 't.csv', which has none",
        ),
    ],
)
def test_check_refuses_what_the_run_refuses_before_simulating(
    tmp_path: Path, edits: list[tuple[str, str]], where: tuple[str, str, str], message: str
) -> None:
    """``rdu-sim check`` plans a CoE's memory as its run does (``serving.run.plan_run``)
    and reads its trace's experts against ``coe.experts``: the same one error line, naming
    the file, the line and the field, exit 2 and no traceback."""
    workload = _workload(tmp_path, *edits)
    file, fragment, field = where
    trace = tmp_path / "t.csv"
    if field == "expert":
        trace.write_text("arrival_s,prompt_tokens,output_tokens,expert\n0,256,8,3\n1,256,8,150\n")
    else:
        trace.write_text("prompt_tokens,output_tokens\n256,8\n")
    at = tmp_path / file
    expected = f"error: {at}:{_line(at, fragment)}: {field}: " + message.replace(
        "{workload}", str(workload)
    )
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", str(workload)])
    ran = runner.invoke(cli, ["run", str(workload), "--set", "serving.requests=4"])
    for result in (checked, ran):
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines()[0] == expected
        assert "Traceback" not in result.output
    assert checked.stderr.splitlines()[1:] == ["error: 1 of 1 file(s) failed the check"]


def test_a_sweeps_dry_run_marks_a_router_too_big_as_not_fitting() -> None:
    """A sweep's dry run asks ``plan_run`` too: a CoE point whose router fills HBM is one
    that does not fit, in the run's words."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.serving.backend import EngineBackend
    from rdu_sim.serving.run import plan_run

    scenario = load_scenario(COE, {"coe.router": "llama-3.1-405b"})
    with pytest.raises(CapacityError, match=r"coe\.router: the router \(llama-3\.1-405b\) alone"):
        plan_run(scenario, EngineBackend())
    capacity, slots, placement, draft = plan_run(load_scenario(COE), EngineBackend())
    assert (capacity, slots, draft) == (_run()["batch_capacity"], 16, None)
    assert placement.tiers["hbm"].weights_bytes == _run()["memory"]["hbm"]["weights_bytes"]


PLAIN_COLUMNS = [
    "request",
    "prompt_tokens",
    "output_tokens",
    "slot",
    "arrival_s",
    "admit_s",
    "first_token_s",
    "finish_s",
    "queue_delay_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
]
"""requests.csv's columns for a run of one model (a CoE's add four)."""


def _requests_csv(tmp_path: Path, workload: Path, *sets: str) -> tuple[list[dict[str, str]], Any]:
    """``rdu-sim run --out``'s requests.csv rows and result.json."""
    args = [a for s in sets for a in ("--set", s)]
    result = CliRunner().invoke(cli, ["run", str(workload), *args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with (tmp_path / "requests.csv").open() as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        assert reader.fieldnames is not None
        header = list(reader.fieldnames)
    data = json.loads((tmp_path / "result.json").read_text())
    return [{"header": ",".join(header), **row} for row in rows], data


def test_requests_csv_names_each_requests_expert_and_whether_it_hit(tmp_path: Path) -> None:
    """A CoE run's requests.csv gives each request the expert it asked for (the seeded
    Zipf tags), whether that expert was in HBM (1) or had to be copied (0), the router's
    prefill and the copy stall: the hit rate recomputed from it is the reported one, and
    a request's queueing delay holds both; a plain run's CSV has none of them."""
    rows, data = _requests_csv(tmp_path / "coe", COE, "serving.requests=60")
    header = rows[0]["header"].split(",")
    assert header == [*PLAIN_COLUMNS, "expert", "expert_hit", "router_s", "copy_stall_s"]
    scenario = load_scenario(COE)
    assert scenario.workload.coe is not None
    tags = expert_tags(scenario.workload.coe, 60, scenario.workload.serving.seed)
    assert [int(r["expert"]) for r in rows] == tags.tolist()
    hits = [int(r["expert_hit"]) for r in rows]
    coe = data["coe"]
    assert set(hits) == {0, 1}
    assert sum(hits) / len(hits) == pytest.approx(coe["hbm_hit_rate"], abs=1e-12)
    assert coe["misses"] == hits.count(0)
    stall = [float(r["copy_stall_s"]) for r in rows]
    router = [float(r["router_s"]) for r in rows]
    assert all(s == 0 for s, h in zip(stall, hits, strict=True) if h)
    assert sum(router) == pytest.approx(coe["router_s"], rel=1e-9)
    for row, r, s in zip(rows, router, stall, strict=True):
        assert r > 0 and r + s <= float(row["queue_delay_s"]) + 1e-9
    misses = np.array([s for s, h in zip(stall, hits, strict=True) if not h])
    assert Percentiles(**coe["miss_stall_s"]) == Percentiles.of(misses)
    assert Percentiles(**coe["router_prefill_s"]) == Percentiles.of(np.array(router))
    plain, _ = _requests_csv(
        tmp_path / "plain", ROOT / "workloads" / "llama3.1-8b-1socket.yaml", "serving.requests=4"
    )
    assert plain[0]["header"].split(",") == PLAIN_COLUMNS


def test_a_miss_waits_the_switch_time_at_low_load(tmp_path: Path) -> None:
    """Requests 10 s apart, each served alone, without prefetching: a miss's TTFT exceeds a
    hit's by exactly one switch (a socket's 1.877 GB at the copy engine's 128 GB/s), its
    copy stall; each waits for the router's prefill of its prompt before its expert's
    admission. The report says both are in the queueing delay."""
    trace = tmp_path / "t.csv"
    experts = [0, 0, 1, 1, 0, 2]
    lines = [f"{10 * i},256,8,{e}" for i, e in enumerate(experts)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens,expert\n" + "\n".join(lines) + "\n")
    sets = ("coe.prefetch=false", "coe.popularity={dist: trace}", f"serving.trace={trace}")
    rows, data = _requests_csv(tmp_path / "out", COE, *sets)
    assert [int(r["expert"]) for r in rows] == experts
    assert [int(r["expert_hit"]) for r in rows] == [0, 1, 0, 1, 1, 0]
    switch = 1_876_697_088 / 128e9
    ttft = [float(r["ttft_s"]) for r in rows]
    router = {float(r["router_s"]) for r in rows}
    assert len(router) == 1  # the same prompt: the same router prefill
    for miss, hit in ((0, 1), (2, 3), (5, 4)):
        assert ttft[miss] - ttft[hit] == pytest.approx(switch, abs=1e-11)
        assert float(rows[miss]["copy_stall_s"]) == pytest.approx(switch, abs=1e-11)
        assert float(rows[hit]["copy_stall_s"]) == 0
    # a hit waits for nothing but the router: its queueing delay is the router's prefill
    assert float(rows[1]["queue_delay_s"]) == pytest.approx(router.pop(), abs=1e-11)
    coe = data["coe"]
    assert coe["misses"] == 3
    assert coe["miss_stall_s"]["p50"] == pytest.approx(switch, abs=1e-11)
    settings = {"coe.prefetch": False, "coe.popularity": {"dist": "trace"}}
    summary = api.run(COE, {**settings, "serving.trace": str(trace)}).summary()
    console = Console(width=400, record=True)
    console.print(render(summary))
    text = " ".join(console.export_text().split())
    assert summary.coe is not None and summary.coe.requests_per_turn == 1  # each alone
    assert "(1 request a turn," in text and "1 requests" not in text
    r = human.duration(coe["router_prefill_s"]["p50"])
    s = human.duration(switch)
    assert (
        f"router prefill a request (part of its queueing delay) │ p50 {r}, p99 {r} a request"
        in text
    )
    assert (
        f"a miss's wait for its expert's copy (part of its queueing delay) │ p50 {s}, p99 {s} "
        "over 3 misses; 0 for a hit"
    ) in text
