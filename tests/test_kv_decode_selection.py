"""A KV policy's decode-time selection (``KVPolicy.decode_selection``): the eviction kernels a
decode step runs and pays for, the docs' H2O-like plugin as written, its memory, its words,
and the refusal of a plugin's bad Selection; a plugin that answers None changes nothing."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_plugins import LLAMA, doc_block, rdu_sim

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.fusion import graph_groups
from rdu_sim.compiler.placement import activation_bytes
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.kv import policies
from rdu_sim.plugins import PolicyAnswerError
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.shapes import Selection, SelectionError, StepShape

REPO = Path(__file__).resolve().parents[1]
GPT_OSS = REPO / "workloads" / "gpt-oss-120b-8socket.yaml"
EXAMPLE = "# h2o_like.py"
H2O = {"kv.policy": "h2o_like", "kv.budget": 4096}
FREE = {**H2O, "kv.policy": "h2o_free"}
EVICT = ("evict_score", "evict_topk", "evict_compact")
SNAPKV = ("snapkv_score", "snapkv_topk", "snapkv_compact")
SNAP = {"kv.budget": 2048, "kv.recent": 1024}  # a 2,048-token slot: 4 sinks, 1,020 selected


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """docs/kv.md's H2O-like policy imported from a module of its own, as written, and the
    same class with its decode hook answering None ("h2o_free"); the registry is restored
    after the test."""
    monkeypatch.setattr(policies, "_REGISTRY", dict(policies._REGISTRY))
    (tmp_path / "h2o_like.py").write_text(doc_block("kv.md", EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("h2o_like")
    try:

        @policies.register_policy("h2o_free")
        class Free(module.H2OLike):  # type: ignore[name-defined,misc]
            def decode_selection(self, cache_tokens: int) -> Selection | None:
                return None

        yield module
    finally:
        sys.modules.pop("h2o_like", None)


def _kernels(scenario: Scenario, shape: StepShape) -> list[str]:
    return [k.name for k in Compiler(scenario).program(shape).kernels]


def _timing(scenario: Scenario, shape: StepShape) -> Any:
    return api.step(scenario, phase=shape.phase, batch=shape.batch, context=shape.cache_len)


# --- (1) a hook answering None changes nothing ------------------------------------------------


def _named_out(data: dict[str, Any], name: str) -> str:
    """A run's JSON without its provenance, the policy's name made the shipped one's."""
    data = dict(data)
    data.pop("provenance")
    return json.dumps(data, sort_keys=True).replace(name, "snapstream")


def test_a_plugin_answering_none_at_decode_is_byte_identical_to_the_shipped_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SnapStream as a plugin whose decode_selection answers None: the same decode and
    compressing-prefill step times, the same kernels, the same run JSON (its name aside)."""
    monkeypatch.setattr(policies, "_REGISTRY", dict(policies._REGISTRY))

    @policies.register_policy("snapstream_plugin")
    class Plugin(policies.SnapStreamPolicy):
        def decode_selection(self, cache_tokens: int) -> Selection | None:
            return None

    base = {"kv.policy": "snapstream", **SNAP, "serving.requests": 24}
    shipped = load_scenario(LLAMA, base)
    plugin = load_scenario(LLAMA, {**base, "kv.policy": "snapstream_plugin"})
    assert isinstance(plugin.kv_policy, Plugin)
    for shape in (StepShape("decode", 16, 1, 2048), StepShape("prefill", 1, 3000, 0)):
        assert _kernels(plugin, shape) == _kernels(shipped, shape)
    decode = (_timing(s, StepShape("decode", 16, 1, 2048)) for s in (shipped, plugin))
    assert len({cost.step_s for cost in decode}) == 1
    prefill = [api.step(s, phase="prefill", tokens=3000) for s in (shipped, plugin)]
    assert prefill[0].step_s == prefill[1].step_s
    assert "snapkv_score" in [k.name for k in prefill[0].detail.kernels]  # it compressed
    runs = [api.run(s).to_dict() for s in (shipped, plugin)]
    assert runs[0]["kv_kept"]["prompts_compressed"] > 0 and runs[0]["kv_kept"]["slots_wrapped"]
    assert _named_out(runs[1], "snapstream_plugin") == _named_out(runs[0], "snapstream")


# --- (2) what the eviction costs --------------------------------------------------------------


def test_the_eviction_costs_at_least_its_bytes_at_the_hbm_rate(plugin: ModuleType) -> None:
    """The H2O-like decode step is slower than the same policy without the hook by at least
    the roofline of the extra HBM bytes its step moves (the breakdown's own bytes)."""
    scenario = load_scenario(LLAMA, H2O)
    free = load_scenario(LLAMA, FREE)
    shape = StepShape("decode", 32, 1, 4096)
    evicting, running_free = _timing(scenario, shape).detail, _timing(free, shape).detail
    assert [k.name for k in evicting.kernels if k.name.startswith("evict")] == list(EVICT)
    assert not [k.name for k in running_free.kernels if k.name.startswith("evict")]
    extra_bytes = evicting.bytes_by_tier["hbm"] - running_free.bytes_by_tier["hbm"]
    extra_s = evicting.step_s - running_free.step_s
    hardware = scenario.hardware
    assert isinstance(hardware, HardwareConfig)
    assert extra_bytes > 0
    assert extra_s >= extra_bytes / hardware.socket.hbm.bandwidth
    evict_s = sum(k.time_s for k in evicting.kernels if k.name in EVICT)
    assert evict_s < extra_s  # the decoder's stash of the queries is the rest


# --- (3) which kernels, where -----------------------------------------------------------------


def test_the_eviction_kernels_run_at_decode_and_never_at_prefill(
    plugin: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy that selects at prefill (SnapStream's) and evicts at decode: a compressing
    prefill runs SnapKV's kernels and no evict_*, a decode step evict_* and no SnapKV's, a
    mixed step's decode rows theirs beside its prompts' (rows: the decode rows), each
    layer once."""

    @policies.register_policy("snap_evicting")
    class SnapEvicting(policies.SnapStreamPolicy):
        def decode_selection(self, cache_tokens: int) -> Selection | None:
            return plugin.H2OLike.decode_selection(self, cache_tokens)  # type: ignore[no-any-return]

    scenario = load_scenario(LLAMA, {"kv.policy": "snap_evicting", **SNAP})
    decode = _kernels(scenario, StepShape("decode", 4, 1, 2048))
    assert decode == ["embedding", "decoder", *EVICT, "lm_head"]
    prefill = _kernels(scenario, StepShape("prefill", 1, 3000, 0))
    assert prefill == ["embedding", "decoder", *SNAPKV, "lm_head"]
    mixed = StepShape("prefill", 1, 3000, 0, decode_batch=3, decode_cache_len=2048)
    groups = {g.name: g for g in graph_groups(scenario, mixed)}
    assert list(groups) == ["embedding", "decoder", *SNAPKV, *EVICT, "lm_head"]
    assert [(groups[n].count, groups[n].rows) for n in EVICT] == [(32, 3)] * 3
    assert [(groups[n].count, groups[n].rows) for n in SNAPKV] == [(32, 1)] * 3
    # each part's attention stashes its own queries: the prompts' window, the rows' one
    outputs = groups["decoder"].graph.graph["outputs"]
    assert outputs["q_window"].shape == (1, 32, 32, 128)
    assert outputs["decode.q_window"].shape == (3, 1, 32, 128)
    # without the hook (SnapStream itself), the same mixed step runs SnapKV's kernels alone
    shipped = load_scenario(LLAMA, {"kv.policy": "snapstream", **SNAP})
    assert [g.name for g in graph_groups(shipped, mixed)] == [
        "embedding",
        "decoder",
        *SNAPKV,
        "lm_head",
    ]


def test_a_sliding_window_layer_evicts_from_its_ring_under_its_own_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpt-oss alternates 128-token windows with full attention: a policy that evicts from
    any cache of at least 2 tokens runs evict_* over the 18 full layers and
    evict_*_window128 over the 18 windowed ones, each over what the layer holds."""
    monkeypatch.setattr(policies, "_REGISTRY", dict(policies._REGISTRY))
    asked: list[int] = []

    @policies.register_policy("evict_all")
    class EvictAll(policies.StreamingLLMPolicy):
        def decode_selection(self, cache_tokens: int) -> Selection | None:
            asked.append(cache_tokens)
            held = cache_tokens
            return Selection(held, 1, held, held, held - 1, held - 1, 1, "max")

    scenario = load_scenario(GPT_OSS, {"kv.policy": "evict_all", "kv.budget": 1024})
    groups = graph_groups(scenario, StepShape("decode", 2, 1, 1024))
    named = {g.name: g.count for g in groups if g.name.startswith("evict")}
    windowed = {f"{name}_window128": 18 for name in EVICT}
    assert named == {**dict.fromkeys(EVICT, 18), **windowed}
    assert sorted(set(asked)) == [127, 1024]


# --- (4) a bad answer is refused, naming the policy and the field ------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kept": 4097}, "kept"),  # more than the cache's 4,096 tokens
        ({"topk": 5000}, "topk"),  # more than the candidates
        ({"topk": 4092}, "topk"),  # all the candidates: nothing dropped
        ({"window": 0}, "window"),
        ({"prompt_tokens": 5000, "scored_keys": 5000, "kept": 4999}, "prompt_tokens"),
    ],
)
def test_a_bad_selection_is_refused_naming_the_policy_and_the_field(
    plugin: ModuleType, change: dict[str, int], field: str
) -> None:
    """Selection refuses what it cannot be (SelectionError naming the field); the compiler
    asks through layer_selection_of, which names the policy and the question too."""

    @policies.register_policy("h2o_bad")
    class Bad(plugin.H2OLike):  # type: ignore[name-defined,misc]
        def decode_selection(self, cache_tokens: int) -> Selection | None:
            good = super().decode_selection(cache_tokens)
            assert good is not None
            return Selection(**{**dataclasses.asdict(good), **change})

    scenario = load_scenario(LLAMA, {**H2O, "kv.policy": "h2o_bad"})
    with pytest.raises(PolicyAnswerError) as caught:
        Compiler(scenario).program(StepShape("decode", 2, 1, 4096))
    message = str(caught.value)
    assert message.startswith("kv.policy 'h2o_bad': decode_selection(4096) ")
    assert f"a bad {field}: " in message
    if field != "prompt_tokens":  # (a Selection of 5,000 tokens is one; not of this cache)
        good = plugin.H2OLike.decode_selection(scenario.kv_policy, 4096)
        with pytest.raises(SelectionError) as built:
            Selection(**{**dataclasses.asdict(good), **change})
        assert built.value.field == field


def test_a_decode_selection_scores_with_the_steps_one_query(plugin: ModuleType) -> None:
    """A decode step's attention stashes the one new query a slot holds: a Selection whose
    window asks for more (a valid Selection at prefill) is refused at decode, naming the
    policy and the field, not costed as queries the step never wrote."""

    @policies.register_policy("h2o_window")
    class Wide(plugin.H2OLike):  # type: ignore[name-defined,misc]
        def decode_selection(self, cache_tokens: int) -> Selection | None:
            good = super().decode_selection(cache_tokens)
            assert good is not None
            return dataclasses.replace(good, window=8)

    scenario = load_scenario(LLAMA, {**H2O, "kv.policy": "h2o_window"})
    with pytest.raises(PolicyAnswerError) as caught:
        Compiler(scenario).program(StepShape("decode", 2, 1, 4096))
    assert str(caught.value) == (
        "kv.policy 'h2o_window': decode_selection(4096) returned a Selection with a bad "
        "window: a decode step scores with the one new query each slot holds, so it must be "
        "1, got 8"
    )


def test_an_answer_that_is_no_selection_is_refused(plugin: ModuleType) -> None:
    @policies.register_policy("h2o_dict")
    class Dict(plugin.H2OLike):  # type: ignore[name-defined,misc]
        def decode_selection(self, cache_tokens: int) -> Any:
            return {"kept": cache_tokens - 1}

    scenario = load_scenario(LLAMA, {**H2O, "kv.policy": "h2o_dict"})
    expected = "kv.policy 'h2o_dict': decode_selection(4096) returned {'kept': 4095}, not a "
    with pytest.raises(PolicyAnswerError, match=f"^{re.escape(expected)}Selection or None$"):
        policies.layer_selection_of(scenario.kv_policy, "decode", 4096, None)


def test_selection_checks_its_own_fields() -> None:
    """The shipped policies' selections pass; each rule names its field and bound."""
    good = dict(
        prompt_tokens=5000,
        window=32,
        scored_keys=5000,
        candidates=2900,
        topk=1000,
        kept=3000,
        kernel_size=7,
        pooling="max",
    )
    Selection(**good)  # type: ignore[arg-type]
    cases = {
        "kept must be >= topk (1000) and <= prompt_tokens (5000), got 5001": {"kept": 5001},
        "kept must be >= topk (1000) and <= prompt_tokens (5000), got 999": {"kept": 999},
        "candidates must be >= 2 and <= scored_keys (5000), got 5001": {"candidates": 5001},
        "scored_keys must be >= 1 and <= prompt_tokens (5000), got 6000": {"scored_keys": 6000},
        "kernel_size must be odd (padded k // 2), got 4": {"kernel_size": 4},
        "pooling must be one of max, avg, got 'sum'": {"pooling": "sum"},
        "window must be an integer, got 1.5": {"window": 1.5},
    }
    for message, change in cases.items():
        with pytest.raises(SelectionError, match=f"^{re.escape(message)}$"):
            Selection(**{**good, **change})  # type: ignore[arg-type]


# --- memory, words, the docs' example through the CLI ------------------------------------------


def test_each_decoding_slot_holds_its_queries_and_a_spare_layer_of_kept_tokens(
    plugin: ModuleType,
) -> None:
    """Llama 3.1 8B on one socket: a slot's scratch is its query a layer (32 layers x 32
    heads x 128 x 2 B) and one layer's 4,095 kept tokens (8 KV heads x 128 x 2 (K, V) x
    2 B each), beside the decode row's own activations; the decode step then sets the
    activation bytes (without the hook, the prefill of one prompt does)."""
    queries = 32 * 32 * 128 * 2
    spare = 4095 * 8 * 128 * 2 * 2
    row = 2 * 4096 * 2 + 4 + 128_256 * 2  # hidden state in and out, token id, logits
    scenario, free = load_scenario(LLAMA, H2O), load_scenario(LLAMA, FREE)
    for slots in (16, 32):
        assert activation_bytes(scenario, slots) == slots * (row + queries + spare)
        assert activation_bytes(free, slots) < slots * (queries + spare)


def test_the_docs_h2o_plugin_in_step_and_run(tmp_path: Path) -> None:
    """``rdu-sim step --json`` lists the eviction kernels of the docs' plugin, a layer a
    call; ``rdu-sim run`` says its wrapped slots lost what it scored lowest (decode_evicts in
    the JSON), and a bad plugin is one error line, exit 2."""
    (tmp_path / "h2o_like.py").write_text(doc_block("kv.md", EXAMPLE))
    settings = ("--set", "kv.policy=h2o_like", "--set", "kv.budget=2048")
    step = rdu_sim("step", LLAMA, *settings, "--json", plugins_path=tmp_path, names="h2o_like")
    assert step.returncode == 0, step.stderr
    kernels = {k["name"]: k["calls"] for k in json.loads(step.stdout)["kernels"]}
    assert {name: kernels.get(name) for name in EVICT} == dict.fromkeys(EVICT, 32)
    run_args = ("--set", "serving.requests=12")
    run = rdu_sim("run", LLAMA, *settings, *run_args, plugins_path=tmp_path, names="h2o_like")
    assert run.returncode == 0, run.stderr
    assert "(the policy's decode eviction dropped the tokens it scored lowest)" in " ".join(
        run.stdout.split()
    )
    data = rdu_sim(
        "run", LLAMA, *settings, *run_args, "--json", plugins_path=tmp_path, names="h2o_like"
    )
    kept = json.loads(data.stdout)["kv_kept"]
    assert kept["decode_evicts"] is True and kept["slots_wrapped"] > 0

    (tmp_path / "h2o_bad.py").write_text(
        "from h2o_like import H2OLike\nfrom rdu_sim.kv import register_policy\n\n\n"
        "@register_policy('h2o_bad')\nclass Bad(H2OLike):\n"
        "    def decode_selection(self, cache_tokens):\n"
        "        return None if cache_tokens < 2048 else super().decode_selection(cache_tokens)"
        ".__class__(cache_tokens, 0, cache_tokens, 9, 8, 8, 1, 'max')\n"
    )
    bad = ("--set", "kv.policy=h2o_bad", "--set", "kv.budget=2048")
    refused = rdu_sim("step", LLAMA, *bad, plugins_path=tmp_path, names="h2o_like,h2o_bad")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "error: kv.policy 'h2o_bad': decode_selection(2048) built a Selection with a bad "
        "window: window must be >= 1, got 0"
    ]


def test_a_clusters_prefill_pool_never_says_it_evicts_at_decode(plugin: ModuleType) -> None:
    """Disaggregated under the H2O-like policy: the decode pool's slots outgrow their budget
    and its eviction drops what it scored lowest (``decode_evicts`` in its JSON and words);
    the prefill pool's slots hold prompts only, so it says neither."""
    from test_cluster_summary import _disaggregated_with_prefix_cache, fake

    from rdu_sim.report.cluster_console import kept_lines

    sets = {**H2O, "serving.batch_slots": 8}
    folder = Path(plugin.__file__).parent
    result = fake(
        _disaggregated_with_prefix_cache(folder),
        {"pools.pre.set": sets, "pools.dec.set": sets},
    )
    pools = result.to_dict()["pools"]
    assert "decode_evicts" not in pools["pre"]["kv_kept"]
    assert pools["pre"]["kv_kept"]["slots_wrapped"] == 0
    assert pools["dec"]["kv_kept"]["decode_evicts"] is True
    assert pools["dec"]["kv_kept"]["slots_wrapped"] > 0
    pre, dec = kept_lines(result.summary())
    assert "eviction" not in pre and pre.endswith("compressed at prefill, none outgrew the slot")
    assert "the policy's decode eviction dropped the tokens it scored lowest" in dec


def test_the_kept_words_say_what_happened_and_nothing_else() -> None:
    """The one phrasing of a run's and a pool's KV line (``console.kept_words``): nothing
    cut; prompts compressed and no slot outgrown (no word of a ring or an eviction); slots
    outgrown under a ring or a decode eviction."""
    from rdu_sim.kv.policies import KeptCounts
    from rdu_sim.report.console import kept_words

    layout = "snapstream: 4 sinks + 1,020 selected + 1,024 ring = 2,048 tokens a slot"
    assert kept_words(KeptCounts(layout, 0, 0), 9) == (
        f"KV slot: {layout}; no prompt compressed, no slot outgrown"
    )
    assert kept_words(KeptCounts(layout, 3, 0), 9, "KV slot of pool pre") == (
        f"KV slot of pool pre: {layout}; of 9 requests 3 had their prompt compressed at "
        "prefill, none outgrew the slot"
    )
    assert kept_words(KeptCounts(layout, 3, 2), 9).endswith(
        "3 had their prompt compressed at prefill, 2 outgrew the slot in decode (the ring "
        "overwrote its oldest tokens)"
    )
    stays = KeptCounts(layout, 3, 2, stays="4 sinks and 1,020 selected tokens")
    assert kept_words(stays, 9).endswith(
        "(the ring overwrote its oldest tokens; the 4 sinks and 1,020 selected tokens stayed)"
    )
    assert kept_words(KeptCounts(layout, 0, 1_200, decode_evicts=True), 2_000).endswith(
        "of 2,000 requests 0 had their prompt compressed at prefill, 1,200 outgrew the slot "
        "in decode (the policy's decode eviction dropped the tokens it scored lowest)"
    )
