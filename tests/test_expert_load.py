"""The load on whole experts (`compiler.expert_load`, the workload's `experts` section): a
skewed routing makes the busiest device the step's bound, a load balancer's copies bring it
back, the placements' rules, and the counts file's errors naming its file and line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.expert_load import expert_load_model, place, popularity
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.experts import ExpertsConfig, ZipfLoad
from rdu_sim.shapes import StepShape

DEEPSEEK = "workloads/deepseek-r1-128k-full.yaml"
EP16 = {
    "parallelism.tp": 1,
    "parallelism.dp_attention": 16,
    "parallelism.ep": 16,
    "serving.batch_slots": 8,
    "serving.max_context": 8192,
}
SKEW = {"experts.load": {"dist": "zipf", "exponent": 0.8}}
SHAPE = StepShape("prefill", 1, 2048, 0)


def expert_stage(sets: dict[str, object]) -> tuple[float, float, float]:
    """(routed gate/up FLOPs on the busiest socket, its FLOPs per pair x busiest pairs,
    the step's time)."""
    scenario = api.load(DEEPSEEK, sets)
    program = Compiler(scenario).program(SHAPE)
    moe = next(k for k in program.kernels if k.name == "decoder_moe")
    stage = next(s for s in moe.stages if s.name == "moe.experts_gate_up")
    balance = program.expert_balance
    assert balance is not None
    per_pair = 2 * 7168 * 2 * 2048  # one token through one expert's gate and up products
    return (
        stage.flops,
        per_pair * balance.pairs,
        api.step(scenario, phase="prefill", tokens=2048).step_s,
    )


def test_a_skewed_routing_makes_the_busiest_device_the_bound() -> None:
    uniform_flops, uniform_expected, uniform_step = expert_stage(EP16)
    skewed_flops, skewed_expected, skewed_step = expert_stage({**EP16, **SKEW})
    # the routed experts run the busiest device's pairs, exactly
    assert skewed_flops == pytest.approx(skewed_expected, rel=1e-12)
    assert uniform_flops == pytest.approx(uniform_expected, rel=1e-12)
    assert skewed_flops > 1.5 * uniform_flops and skewed_step > uniform_step
    # a load balancer's copies of the hot experts bring the busiest device back
    balanced = {**EP16, **SKEW, "experts.redundant": 16, "experts.placement": "balanced"}
    balanced_flops, _, balanced_step = expert_stage(balanced)
    assert balanced_flops < 1.1 * uniform_flops and balanced_step < skewed_step
    balance = api.step(DEEPSEEK, {**EP16, **SKEW}, phase="prefill", tokens=2048).detail
    report = balance.to_dict()["expert_balance"]
    assert report["imbalance"] == pytest.approx(skewed_flops / uniform_flops, rel=0.02)


def test_whole_experts_without_data_parallel_attention_follow_the_load_too() -> None:
    ep16 = {"parallelism.ep": 16}  # tp 16: every socket holds every token
    plain = api.step(DEEPSEEK, ep16, phase="prefill", tokens=2048).step_s
    skewed = api.step(DEEPSEEK, {**ep16, **SKEW}, phase="prefill", tokens=2048).step_s
    assert skewed > plain


def test_placements() -> None:
    shares = popularity(ExpertsConfig(load=ZipfLoad(dist="zipf", exponent=1.0)), 64)
    assert sum(shares) == pytest.approx(1.0)
    in_order = place(shares, 8, 0, balanced=False)
    assert [e for e, _ in in_order[3]] == list(range(24, 32))
    balanced = place(shares, 8, 8, balanced=True)
    assert all(len(device) == 9 for device in balanced)
    held = [e for device in balanced for e, _ in device]
    assert set(held) == set(range(64))  # every expert somewhere
    hottest = max(range(64), key=shares.__getitem__)
    assert held.count(hottest) > 1  # the hottest expert copied
    for device in balanced:  # copies of one expert on different devices
        experts = [e for e, _ in device]
        assert len(experts) == len(set(experts))
    loads = [sum(s for _, s in device) for device in balanced]
    unbalanced = [sum(s for _, s in device) for device in in_order]
    assert max(loads) < max(unbalanced)
    assert sum(loads) == pytest.approx(1.0)  # copies split their expert's share


def test_the_model_at_a_handful_of_tokens_is_at_least_one_pair() -> None:
    model = expert_load_model(ExpertsConfig(), 256, 1, 16, 1, "routed")
    assert model.load(1).pairs == pytest.approx(1.0)
    assert model.load(0).pairs == 0.0


def test_counts_from_a_file_and_their_errors(tmp_path: Path) -> None:
    counts = tmp_path / "counts.txt"
    counts.write_text("# tokens per expert\n" + "\n".join(["10"] * 255 + ["2000"]) + "\n")
    sets = {**EP16, "experts.load": {"dist": "counts", "file": str(counts)}}
    scenario = api.load(DEEPSEEK, sets)
    load = scenario.workload.experts.load
    assert getattr(load, "counts", None) is not None and len(load.counts) == 256  # type: ignore[union-attr]
    balance = Compiler(scenario).program(SHAPE).expert_balance
    assert balance is not None and balance.imbalance > 1.5
    counts.write_text("10\nmany\n")
    with pytest.raises(ConfigError, match=r"line 2: 'many' is not a count") as caught:
        api.load(DEEPSEEK, sets)
    assert caught.value.issues[0].file == str(counts) and caught.value.issues[0].line == 2
    counts.write_text("10\n20\n")
    with pytest.raises(ConfigError, match="2 counts for the deepseek-r1 model's 256") as caught:
        api.load(DEEPSEEK, sets)
    assert caught.value.issues[0].field == "experts.load.counts"
    counts.write_text("0\n0\n")
    with pytest.raises(ConfigError, match="all 0"):
        api.load(DEEPSEEK, sets)
    with pytest.raises(ConfigError, match="file not found") as caught:
        api.load(DEEPSEEK, {**EP16, "experts.load": {"dist": "counts", "file": "nope.txt"}})
    assert caught.value.issues[0].field == "experts.load.file"
    assert "(relative to the workload, else to the current folder)" in str(caught.value)


def test_a_counts_file_set_on_a_shipped_workload_is_read_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--set experts.load={dist: counts, file: mine.txt}`` on a shipped workload: the file
    is not beside the workload (inside the package), so it is the one in the current folder,
    as a trace set the same way is (``shipped.near_or_here``)."""
    (tmp_path / "mine.txt").write_text("\n".join(["10"] * 255 + ["2000"]) + "\n")
    monkeypatch.chdir(tmp_path)
    sets = {**EP16, "experts.load": {"dist": "counts", "file": "mine.txt"}}
    load = api.load(DEEPSEEK, sets).workload.experts.load
    assert getattr(load, "counts", None) == [10.0] * 255 + [2000.0]


@pytest.mark.parametrize(
    ("sets", "field", "message"),
    [
        (SKEW, "experts", "needs expert parallelism"),
        ({**EP16, "experts.redundant": 3, "experts.placement": "balanced"}, "experts.redundant",
         "do not fill the 16 devices evenly"),
        ({**EP16, "experts.redundant": 16}, "experts.redundant",
         "balanced \\(with expert parallelism, parallelism.ep > 1\\)"),
        ({**EP16, "experts.load": {"dist": "zipf", "exponent": -1}}, "experts.load.exponent",
         "must be at least 0, got -1"),
        ({**EP16, "experts.load": {"dist": "counts"}}, "experts.load",
         r"experts\.load: dist counts needs counts or file"),  # the field said once
    ],
)  # fmt: skip
def test_experts_errors_name_their_field(sets: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        api.load(DEEPSEEK, sets)
    (issue,) = caught.value.issues
    assert issue.field == field


@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
@pytest.mark.parametrize("placed", ["uniform", "zipf-balanced"])
def test_the_busiest_device_reads_the_most_experts_a_device_is_routed(
    tokens: int, placed: str
) -> None:
    """Differential: the experts the busiest device reads (``ExpertLoad.distinct``) against
    a seeded Monte Carlo of the same routing (each token's k experts drawn by the experts'
    popularity, a copy taking an equal share of its expert's tokens): the mean over draws
    of the LARGEST count of copies touched on any device, which the layer waits for. It was
    the count on an average device (0.5 experts at one token, where the busiest reads 2)."""
    config = (
        ExpertsConfig()
        if placed == "uniform"
        else ExpertsConfig.model_validate(
            {
                "load": {"dist": "zipf", "exponent": 0.8, "seed": 3},
                "redundant": 16,
                "placement": "balanced",
            }
        )
    )
    experts, per_token, devices = 64, 4, 8
    model = expert_load_model(config, experts, per_token, devices, 1, "routed")
    shares = np.array(popularity(config, experts))
    holders = [
        [d for d, device in enumerate(model.devices) for x, _ in device if x == e]
        for e in range(experts)
    ]
    most = max(len(h) for h in holders)
    table = np.array([h + h[:1] * (most - len(h)) for h in holders])  # padded, never drawn
    counts = np.array([len(h) for h in holders])
    rng = np.random.default_rng(7)
    draws = 1500
    # each token's k experts by popularity without replacement (Efraimidis-Spirakis keys),
    # each pick landing on one of its expert's copies at random
    keys = rng.random((draws, tokens, experts)) ** (1 / shares)
    chosen = np.argpartition(-keys, per_token - 1, axis=2)[:, :, :per_token]
    pick = (rng.random(chosen.shape) * counts[chosen]).astype(int)
    device = table[chosen, pick]
    touched = np.zeros((draws, devices, experts), dtype=bool)
    touched[np.arange(draws)[:, None, None], device, chosen] = True
    largest = touched.sum(axis=2).max(axis=1)
    sampled = float(np.mean(largest))
    assert model.load(tokens).distinct == pytest.approx(sampled, rel=0.06, abs=0.1)
    average = (
        sum(
            -math.expm1(tokens * math.log1p(-min(1.0, per_token * s)))
            for device in model.devices
            for _, s in device
        )
        / devices
    )
    if tokens <= 16:  # the busiest device reads clearly more than an average one
        assert model.load(tokens).distinct > 1.2 * average


@pytest.mark.parametrize(("devices", "tokens"), [(16, 1), (64, 1), (8, 2), (16, 16), (32, 300)])
def test_every_copy_the_busiest_device_reads_takes_one_of_its_pairs(
    devices: int, tokens: int
) -> None:
    """Routed, a copy is read only for a pair routed to it: the busiest device's pairs are at
    least the copies it reads (at one token, Blom's spread gave 1.69 pairs to a device
    reading 1.98 experts)."""
    load = expert_load_model(ExpertsConfig(), 256, 8, devices, 1, "routed").load(tokens)
    assert load.pairs >= load.distinct > 0


def test_an_expert_every_token_picks_is_read_not_a_math_error() -> None:
    """A copy whose share reaches 1/k (every token picks it) is touched for certain: a
    steep Zipf load raised 'math domain error' in the hit probability."""
    config = ExpertsConfig.model_validate({"load": {"dist": "zipf", "exponent": 6, "seed": 1}})
    model = expert_load_model(config, 64, 4, 8, 1, "routed")
    assert max(s for device in model.devices for _, s in device) >= 1 / 4
    load = model.load(3)
    assert 1 <= load.distinct <= load.pairs <= 3 * 4


def test_streaming_all_experts_reads_every_copy_a_device_holds() -> None:
    """Under the static schedule that streams every expert (``all``) the busiest device reads
    all its copies whatever the tokens; the static gather reads at most the tokens' pairs;
    the pairs are the same either way."""
    model = expert_load_model(ExpertsConfig(), 256, 8, 64, 1, "static")
    every = dataclasses.replace(model, loading="all")
    assert model.load(1).distinct == 4.0  # 256 / 64 held, 8 pairs: every slot
    assert dataclasses.replace(model, per_token=2).load(1).distinct == 2.0
    assert dataclasses.replace(every, per_token=2).load(1).distinct == 4.0
    assert every.load(3).pairs == model.load(3).pairs
