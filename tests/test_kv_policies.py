"""KV policies: slot sizes and bytes, buckets, when prefill compresses, cache bounds.

These pin the numbers the SnapStream comparison rests on (per-slot bytes of DeepSeek-R1 at
128k, the 4x of a 32k budget) and the static-shape rules serving and the compiler rely on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdu_sim.config.workload import KVConfig
from rdu_sim.kv import (
    DEFAULT_BUDGET,
    FullPolicy,
    KVPolicy,
    SnapKVPolicy,
    SnapStreamPolicy,
    StreamingLLMPolicy,
    context_buckets,
    make_policy,
    policy_names,
    register_policy,
)
from rdu_sim.kv.policies import PolicyBase, paged_buckets
from rdu_sim.models import get_model, kv_bytes_per_token

CTX_128K = 131_072
R1_BYTES_PER_TOKEN = 70_272  # BF16, all 61 layers of the MLA latent (512 + 64) x 2 bytes


def policy(name: str, max_context: int = CTX_128K, **kv: object) -> PolicyBase:
    p = make_policy(KVConfig.model_validate({"policy": name, **kv}), max_context)
    assert isinstance(p, PolicyBase)
    return p


# --- registry ---------------------------------------------------------------------------------


def test_registry_names_and_classes() -> None:
    assert {"full", "snapkv", "snapstream", "streamingllm"} <= set(policy_names())
    assert type(policy("full")) is FullPolicy
    assert type(policy("snapstream")) is SnapStreamPolicy
    assert type(policy("streamingllm")) is StreamingLLMPolicy
    assert type(policy("snapkv")) is SnapKVPolicy


def test_registry_refuses_duplicates() -> None:
    """The plugins' registry rule: another class under a taken name is refused; the same
    class again (a reloaded plugin) keeps its name."""

    class Full(FullPolicy):
        pass

    with pytest.raises(ValueError, match=r"KV policy 'full' is already registered \(by "):
        register_policy("full")(Full)
    assert register_policy("full")(FullPolicy) is FullPolicy
    assert type(policy("full")) is FullPolicy


def test_unknown_policy_lists_valid_names() -> None:
    kv = KVConfig.model_construct(policy="h2o")  # type: ignore[arg-type]  # bypass the Literal
    with pytest.raises(ValueError, match=f"valid policies: {', '.join(policy_names())}"):
        make_policy(kv, 1024)


def test_policies_satisfy_protocol() -> None:
    for name in policy_names():
        p: KVPolicy = make_policy(KVConfig(policy=name), CTX_128K)
        assert p.name == name
        d = p.describe()
        assert d["policy"] == name and d["slot_tokens"] == p.slot_tokens()


# --- per-slot bytes ---------------------------------------------------------------------------


def r1_bytes_per_token() -> int:
    return kv_bytes_per_token(get_model("deepseek-r1"), 2)


def test_r1_bytes_per_token() -> None:
    assert r1_bytes_per_token() == R1_BYTES_PER_TOKEN


def test_full_slot_bytes_r1_128k() -> None:
    full = policy("full")
    assert full.slot_tokens() == CTX_128K
    assert full.slot_bytes(r1_bytes_per_token()) == 131_072 * 70_272


@pytest.mark.parametrize("budget", [4096, 8192, 32768])
def test_snapstream_slot_bytes_is_budget(budget: int) -> None:
    snap = policy("snapstream", budget=budget)
    assert snap.slot_tokens() == budget
    assert snap.slot_bytes(r1_bytes_per_token()) == budget * 70_272


def test_compression_ratio_4_gives_4x_at_128k() -> None:
    snap = policy("snapstream", compression_ratio=4)
    full = policy("full")
    assert snap.slot_tokens() == 32_768
    bpt = r1_bytes_per_token()
    assert full.slot_bytes(bpt) == 4 * snap.slot_bytes(bpt)


def test_default_budget() -> None:
    snap = policy("snapstream")
    assert snap.slot_tokens() == DEFAULT_BUDGET == 4096
    d = snap.describe()
    assert (d["sinks"], d["topk"], d["recent"]) == (4, 4096 - 4 - 2048, 2048)
    assert d["observation_window"] == 32 and d["kernel_size"] == 7 and d["pooling"] == "max"


@pytest.mark.parametrize("name", ["snapstream", "streamingllm", "snapkv"])
@pytest.mark.parametrize("max_context", [1, 100, 2052, 4096, 8192, CTX_128K])
def test_never_more_memory_than_full(name: str, max_context: int) -> None:
    kw: dict[str, object] = {"observation_window": 1} if max_context < 32 else {}
    p = policy(name, max_context, **kw)
    full = policy("full", max_context)
    assert p.slot_tokens() <= full.slot_tokens()
    assert p.slot_bytes(R1_BYTES_PER_TOKEN) <= full.slot_bytes(R1_BYTES_PER_TOKEN)


def test_budget_above_max_context_is_clipped() -> None:
    snap = policy("snapstream", 2048, budget=8192)
    assert snap.slot_tokens() == 2048
    assert not snap.compresses(2048)


# --- buckets ----------------------------------------------------------------------------------


def test_pow2_buckets() -> None:
    assert context_buckets("pow2", 1024, 8192) == [1024, 2048, 4096, 8192]
    assert context_buckets("pow2", 1024, 5000) == [1024, 2048, 4096, 5000]
    assert context_buckets("pow2", 1024, 512) == [512]
    assert policy("full").buckets()[-1] == CTX_128K


def test_explicit_buckets_sorted_and_clipped() -> None:
    assert context_buckets([8192, 1024, 4096, 1024], 1, 8192) == [1024, 4096, 8192]
    assert context_buckets([1024, 100_000], 1, 8192) == [1024, 8192]


def test_explicit_buckets_must_cover_max_context() -> None:
    with pytest.raises(ValueError, match=r"kv.context_buckets .* do not cover max_context=8192"):
        policy("full", 8192, context_buckets=[1024, 4096])
    with pytest.raises(ValueError, match=r"kv\.context_buckets"):
        policy("snapkv", 8192, context_buckets=[1024, 4096])


@pytest.mark.parametrize(
    ("longest", "bucket"),
    [
        (0, 1024),
        (1, 1024),
        (1024, 1024),
        (1025, 2048),
        (4096, 4096),
        (4097, 8192),
        (65_537, CTX_128K),
        (CTX_128K, CTX_128K),
    ],
)
def test_full_smallest_covering_bucket(longest: int, bucket: int) -> None:
    assert policy("full").decode_bucket(longest) == bucket


def test_full_bucket_beyond_slot_is_error() -> None:
    with pytest.raises(ValueError, match="exceeds the slot"):
        policy("full").decode_bucket(CTX_128K + 1)


def test_explicit_bucket_selection() -> None:
    full = policy("full", 10_000, context_buckets=[3000, 10_000, 500])
    assert full.buckets() == [500, 3000, 10_000]
    assert [full.decode_bucket(n) for n in (1, 500, 501, 3001)] == [500, 500, 3000, 10_000]


@pytest.mark.parametrize("name", ["snapstream", "streamingllm"])
def test_fixed_slot_bucket_is_static(name: str) -> None:
    p = policy(name, budget=32768) if name == "snapstream" else policy(name)
    slot = p.slot_tokens()
    assert p.buckets() == [slot]
    for longest in (0, 1, slot // 2, slot):
        assert p.decode_bucket(longest) == slot
    for prompt, generated in ((10, 0), (CTX_128K, 50_000), (slot, 1)):
        assert p.decode_bucket(p.cache_at(prompt, generated)) == slot


# --- snapstream semantics ---------------------------------------------------------------------


def test_snapstream_short_prompt_not_compressed() -> None:
    snap = policy("snapstream", budget=8192)
    for prompt in (1, 100, 8191, 8192):
        assert not snap.compresses(prompt)
        assert snap.selection(prompt) is None
        assert snap.cache_after_prefill(prompt) == prompt
    assert snap.compresses(8193)
    assert snap.cache_after_prefill(8193) == 8192


def test_snapstream_fill_then_ring() -> None:
    snap = policy("snapstream", budget=8192)
    assert snap.cache_at(1000, 0) == 1000
    assert snap.cache_at(1000, 7192) == 8192  # slot full
    assert snap.cache_at(1000, 1_000_000) == 8192  # ring overwrites, size fixed
    assert snap.cache_at(100_000, 1_000_000) == 8192
    assert snap.max_generated(100_000) is None


def test_snapstream_selection_shape() -> None:
    snap = policy("snapstream", budget=32768)
    sel = snap.selection(CTX_128K)
    assert sel is not None
    assert sel.window == 32 and sel.scored_keys == CTX_128K
    assert sel.candidates == CTX_128K - 4 - 2048
    assert sel.topk == 32768 - 4 - 2048 and sel.kept == 32768
    assert (sel.kernel_size, sel.pooling) == (7, "max")


def test_snapstream_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="no room for selected tokens"):
        policy("snapstream", compression_ratio=64)  # 2048 <= 4 + 2048
    with pytest.raises(ValueError, match="observation_window"):
        policy("snapstream", recent=16)


def test_a_budget_too_small_for_its_parts_names_the_larger_part_first() -> None:
    """Either part can give way: lowering the larger frees the most, so it comes first."""
    with pytest.raises(ValueError) as caught:
        policy("snapstream", budget=32768, sinks=40000)
    assert str(caught.value).endswith(
        "after kv.sinks (40000) + kv.recent (2048); raise the budget or lower kv.sinks or kv.recent"
    )
    with pytest.raises(ValueError) as caught:
        policy("snapstream", budget=2048)  # 2048 <= 4 + 2048
    assert str(caught.value).endswith(
        "after kv.sinks (4) + kv.recent (2048); raise the budget or lower kv.recent or kv.sinks"
    )


@given(
    name=st.sampled_from(["full", "snapstream", "streamingllm", "snapkv"]),
    max_context=st.integers(64, 200_000),
    budget=st.integers(2100, 300_000),
    prompt_frac=st.floats(0, 1),
    generated=st.integers(0, 10**7),
)
def test_cache_never_exceeds_slot(
    name: str, max_context: int, budget: int, prompt_frac: float, generated: int
) -> None:
    kw: dict[str, object] = {} if name in ("full", "streamingllm") else {"budget": budget}
    p = policy(name, max_context, **kw)
    slot = p.slot_tokens()
    prompt = max(1, round(prompt_frac * max_context))
    assert p.cache_after_prefill(prompt) <= slot
    limit = p.max_generated(prompt)
    if limit is not None:  # growing policies: only sequences that fit are legal
        assert limit >= 0
        if generated > limit:
            with pytest.raises(ValueError):
                p.cache_at(prompt, generated)
            generated = limit
    cache = p.cache_at(prompt, generated)
    assert 1 <= cache <= slot
    assert p.decode_bucket(cache) >= cache
    assert p.compresses(prompt) == (
        p.cache_after_prefill(prompt) < prompt and name in ("snapstream", "snapkv")
    )


# --- ablations --------------------------------------------------------------------------------


def test_streamingllm_truncates_without_selection() -> None:
    s = policy("streamingllm")
    assert s.slot_tokens() == 4 + 2048
    assert not s.compresses(CTX_128K)
    assert s.selection(CTX_128K) is None
    assert s.cache_after_prefill(CTX_128K) == 2052  # first 4 + last 2048
    assert s.cache_after_prefill(2000) == 2000
    assert s.cache_at(2000, 10_000) == 2052


def test_streamingllm_budget_sets_ring() -> None:
    s = policy("streamingllm", budget=32768)
    assert s.slot_tokens() == 32768
    assert s.describe()["recent"] == 32768 - 4
    with pytest.raises(ValueError, match=r"kv\.recent"):
        policy("streamingllm", budget=32768, recent=1000)


def test_snapkv_compresses_then_grows() -> None:
    s = policy("snapkv", budget=4096)
    assert s.slot_tokens() == CTX_128K  # budget + output must fit
    assert s.compresses(100_000) and not s.compresses(4096)
    assert s.cache_after_prefill(100_000) == 4096
    assert s.cache_at(100_000, 1000) == 5096
    assert s.cache_at(1000, 1000) == 2000
    assert s.decode_bucket(s.cache_at(100_000, 1000)) == 8192
    assert s.buckets() == policy("full").buckets()
    assert s.max_generated(100_000) == CTX_128K - 4096
    sel = s.selection(100_000)
    assert sel is not None and (sel.candidates, sel.topk, sel.kept) == (100_000 - 32, 4064, 4096)


def test_full_cache_grows_and_is_bounded() -> None:
    f = policy("full", 8192)
    assert not f.compresses(8192) and f.selection(8192) is None
    assert f.cache_at(1000, 500) == 1500
    assert f.max_generated(1000) == 7192
    with pytest.raises(ValueError, match="exceed max_context"):
        f.cache_at(8000, 193)
    with pytest.raises(ValueError, match="exceeds max_context"):
        f.cache_after_prefill(8193)


def test_paged_buckets_are_whole_pages_at_most_an_eighth_over() -> None:
    """A paged runtime's decode lengths: every page count up to 8, then 8 per octave; a
    cache reads at most 12.5% more than its own pages; the last length is max_context."""
    assert paged_buckets(64, 1024) == [64 * k for k in (1, 2, 3, 4, 5, 6, 7, 8, 9)] + [
        64 * k for k in (10, 11, 12, 13, 14, 15, 16)
    ]
    lengths = paged_buckets(64, 131072)
    assert len(lengths) == 72 and lengths[-1] == 131072
    assert lengths[15:19] == [1024, 1152, 1280, 1408]
    policy = make_policy(KVConfig(policy="full"), 131072, page_tokens=64)
    for cache in range(0, 131073, 97):
        pages = -(-max(cache, 1) // 64) * 64
        bucket = policy.decode_bucket(cache)
        assert pages <= bucket <= max(pages * 1.125, 64 * 8), cache


def test_a_paged_runtime_reads_pages_and_a_static_one_its_buckets() -> None:
    """The serving stack's ``kv_page_tokens`` decides the decode length of a growing
    cache: dgx-h100's TensorRT-LLM (paged, 64 tokens) reads 192 tokens for 130; an SN40L reads its
    smallest compiled bucket, 1024. A fixed slot (SnapStream) is its slot either way."""
    from rdu_sim import api

    repo = Path(__file__).resolve().parents[1]
    workload = repo / "workloads" / "llama3.1-8b-1socket.yaml"
    paged = api.load(workload, ["hardware=dgx-h100"]).kv_policy
    static = api.load(workload).kv_policy
    assert paged.decode_bucket(130) == 192 and static.decode_bucket(130) == 1024
    unpaged = api.load(workload, ["hardware=dgx-h100", "stack.kv_page_tokens=null"])
    assert unpaged.kv_policy.decode_bucket(130) == 1024
    ring = api.load(workload, ["hardware=dgx-h100", "kv.policy=snapstream"]).kv_policy
    assert ring.buckets() == api.load(workload, ["kv.policy=snapstream"]).kv_policy.buckets()


def test_kept_counts_by_each_policys_own_cache() -> None:
    """A prompt compressed when the prefill keeps fewer tokens than it; a slot wrapped when
    the last decode step's cache (prompt + output - 1 tokens) held less than the prefill's
    plus what decode added. A 100-token SnapStream slot (4 sinks + 64 selected + 32 ring):"""
    from rdu_sim.kv.policies import kept_counts

    snap = policy("snapstream", 1000, budget=100, recent=32)
    prompts, outputs = [50, 50, 50, 100, 101, 400, 400], [51, 52, 80, 1, 2, 1, 7]
    # 50 + 51 - 1 = 100 fills the slot exactly: no wrap; 50 + 52 - 1 = 101 wraps; a prompt of
    # 100 is kept whole, one output token adds nothing; 101 and both 400s are compressed,
    # and wrap once decode adds a token (output >= 2)
    kept = kept_counts(snap, prompts, outputs)
    assert (kept.prompts_compressed, kept.slots_wrapped) == (3, 4)
    assert kept.layout == "snapstream: 4 sinks + 64 selected + 32 ring = 100 tokens a slot"
    stream = kept_counts(policy("streamingllm", 1000, budget=100), prompts, outputs)
    assert (stream.prompts_compressed, stream.slots_wrapped) == (3, 4)
    assert stream.layout == "streamingllm: 4 sinks + 96 ring = 100 tokens a slot"
    snapkv = kept_counts(policy("snapkv", 1000, budget=100), prompts, outputs)
    assert (snapkv.prompts_compressed, snapkv.slots_wrapped) == (3, 0)  # it grows
    full = kept_counts(policy("full", 1000), prompts, outputs)
    assert (full.prompts_compressed, full.slots_wrapped) == (0, 0)


@pytest.mark.parametrize("name", ["full", "snapkv", "streamingllm", "snapstream"])
def test_kept_counts_equal_each_requests_cache_at(name: str) -> None:
    """The counts, asked once per distinct prompt, equal the per-request rule written with
    ``cache_at``: compressed when the prefill's cache is shorter than the prompt, wrapped
    when the last decode step's cache holds less than the prefill's plus what decode
    wrote (differential, 3,000 random requests each)."""
    from rdu_sim.kv.policies import kept_counts

    sized: dict[str, object] = {"budget": 700, "recent": 128} if name != "full" else {}
    if name != "snapstream":  # StreamingLLM's ring is the budget less its sinks
        sized.pop("recent", None)
    made = policy(name, 4096, **sized)
    rng = np.random.default_rng(7)
    prompts = rng.integers(1, 3000, 3000)
    outputs = np.minimum(rng.integers(1, 1500, 3000), 4096 - prompts + 1)
    compressed = wrapped = 0
    for prompt, output in zip(prompts.tolist(), outputs.tolist(), strict=True):
        prefilled = made.cache_at(prompt, 0)
        compressed += prefilled < prompt
        written = max(output - 1, 0)
        wrapped += made.cache_at(prompt, written) < prefilled + written
    kept = kept_counts(made, prompts, outputs)
    assert (kept.prompts_compressed, kept.slots_wrapped) == (compressed, wrapped)
    assert name == "full" or (compressed > 0 and (name == "snapkv" or wrapped > 0))


def test_the_window_in_ring_rule_is_one_rule_for_the_policy_and_the_demo() -> None:
    """SnapStream's window must fit its ring: the policy says so with why its budget
    compresses; the demo's reference (``quality_curve``) raises the same rule, unexplained;
    ``blamed`` names the field an override set, the window's otherwise."""
    from rdu_sim.kv.policies import PolicyError, SnapStreamPolicy, check_window_in_ring
    from rdu_sim.kv.quality import quality_curve

    rule = "kv.observation_window (32) must be <= kv.recent (16): the window sits inside the ring"
    with pytest.raises(PolicyError) as policy:
        SnapStreamPolicy.from_config(KVConfig(budget=1024, recent=16), 4096)
    assert str(policy.value) == (
        f"{rule} buffer, and the budget 1024 < serving.max_context 4096 compresses long prompts"
    )
    with pytest.raises(PolicyError) as demo:
        quality_curve(256, [64], kv=KVConfig(observation_window=32), ring=16)
    assert str(demo.value) == f"{rule} buffer"
    check_window_in_ring(16, 16)  # the window may fill the ring
    error = demo.value
    assert (error.field, error.also) == ("kv.observation_window", ("kv.recent",))
    assert error.blamed({"kv.recent": 16}) == "kv.recent"
    assert error.blamed({"kv.sinks": 2}) == "kv.observation_window"
    assert error.blamed({"kv": {}, "kv.recent": 16}) == "kv.observation_window"  # parent first


def test_a_fixed_slot_built_in_python_names_the_field_it_refuses() -> None:
    from rdu_sim.kv.policies import PolicyError, StreamingLLMPolicy

    for kwargs, field in (
        ({"sinks": -1, "recent": 8}, "kv.sinks"),
        ({"sinks": 4, "recent": 0}, "kv.recent"),
    ):
        with pytest.raises(PolicyError) as exc:
            StreamingLLMPolicy(1024, **kwargs)
        assert exc.value.field == field and field in str(exc.value)


def test_kept_counts_say_what_a_wrapped_slot_keeps_beside_its_ring() -> None:
    """Per policy: SnapStream's sinks and selected tokens, StreamingLLM's sinks, a ring
    alone nothing (the console's words: ``report.console.kept_words``)."""
    from rdu_sim.kv.policies import kept_counts

    snap = make_policy(KVConfig(policy="snapstream", budget=2048, recent=1024), 8192)
    stream = make_policy(KVConfig(policy="streamingllm", sinks=1, recent=64), 8192)
    ring = make_policy(KVConfig(policy="streamingllm", sinks=0, recent=64), 8192)
    assert kept_counts(snap, [4096], [2000]).stays == "4 sinks and 1,020 selected tokens"
    assert kept_counts(stream, [4096], [2000]).stays == "1 sink"
    assert kept_counts(ring, [4096], [2000]).stays == ""
