"""SnapKV selection kernels as operators: exact work of each for a small shape, the radix
select's passes, and the compaction's bytes."""

from __future__ import annotations

import math

import pytest

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.config.workload import KVConfig
from rdu_sim.graph import GraphGroup, Precision, op, operators, selection_graphs, totals
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.snapkv import INDICES, KERNELS, SCORES
from rdu_sim.graph.topk import (
    DIGIT_OPS,
    GATHER_OPS,
    RADIX_BITS,
    SCAN_OPS,
    digit_passes,
    passes,
    radix_select,
)
from rdu_sim.kv import make_policy
from rdu_sim.models import get_model
from rdu_sim.shapes import Selection

BINS = 2**RADIX_BITS


def _selection(prompt: int, budget: int = 4096, window: int = 32) -> Selection:
    """What SnapStream (4 sinks, a ring of 2048) selects of ``prompt`` tokens."""
    policy = make_policy(
        KVConfig(policy="snapstream", budget=budget, observation_window=window), 131072
    )
    selection = policy.selection(prompt)
    assert selection is not None
    return selection


def _graphs(name: str, batch: int, sel: Selection, cache: str = "latent") -> dict[str, DiGraph]:
    graphs = dict(selection_graphs(get_model(name), batch, sel, Precision(), cache))  # type: ignore[arg-type]
    assert list(graphs) == list(KERNELS)
    return graphs


def test_mla_operators_exact_work() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    b, sel = 2, _selection(5000)
    w, n, c, k = sel.window, sel.scored_keys, sel.candidates, sel.topk
    assert (n, c, k, sel.kept) == (5000, 5000 - 4 - 2048, 4096 - 4 - 2048, 4096)
    h, nope, pe, rank = arch.heads, arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.kv_lora_rank
    score, topk, compact = _graphs("deepseek-r1", b, sel).values()
    # the stashed window queries are the kernel's inputs (read from HBM)
    assert {t.shape for t in score.graph["inputs"].values()} == {(b, w, h, nope), (b, w, h, pe)}
    absorb = op(score, "snapkv.q_absorb")
    assert absorb.flops == 2 * b * w * h * nope * rank
    assert absorb.weight_read_bytes == h * nope * rank * 2 and absorb.weight_params == 0
    assert op(score, "snapkv.k_read").kv_read_bytes == b * n * (rank + pe) * 2
    qk = op(score, "snapkv.score")
    assert qk.flops == 2 * b * h * w * n * (rank + pe)
    assert qk.outputs[0].shape == (b, h, w, n) and qk.outputs[0].dtype_bytes == 4  # FP32
    block = b * h * w * w  # the causal mask's window block
    assert op(score, "snapkv.softmax").vector_flops == 5 * b * h * w * n + block
    assert op(score, "snapkv.softmax").outputs[0].shape == (b, h, w, 2)  # max, sum of exp
    assert op(score, "snapkv.window_sum").vector_flops == 4 * b * h * w * n + block
    head_sum = op(score, "snapkv.head_sum")
    assert head_sum.vector_flops == b * h * n
    assert score.graph["outputs"][SCORES].bytes == b * n * 4
    assert op(topk, "snapkv.pool").vector_flops == b * c * sel.kernel_size
    assert topk.graph["outputs"][INDICES].bytes == b * k * 4
    moved = op(compact, "snapkv.compact")
    assert moved.kv_read_bytes == moved.kv_write_bytes == b * sel.kept * (rank + pe) * 2


def test_gqa_operators_exact_work() -> None:
    arch = get_model("llama-3.1-8b")
    b, sel = 3, _selection(6000)
    w, n, c = sel.window, sel.scored_keys, sel.candidates
    h, kv, d = arch.heads, arch.kv_heads, arch.head_dim
    score, topk, compact = _graphs("llama-3.1-8b", b, sel).values()
    qk = op(score, "snapkv.score")
    assert qk.flops == 2 * b * h * w * n * d
    assert qk.gemm is not None and (qk.gemm.m, qk.gemm.batch) == (w * h // kv, b * kv)
    assert op(score, "snapkv.k_read").kv_read_bytes == b * n * kv * d * 2
    group = op(score, "snapkv.group_sum")
    assert group.vector_flops == b * h * n and group.outputs[0].shape == (b, kv, n)
    assert op(topk, "snapkv.pool").vector_flops == b * kv * c * sel.kernel_size
    gather = op(topk, "snapkv.topk.gather")
    assert gather.vector_flops == b * kv * GATHER_OPS * c  # one selection per KV head
    moved = op(compact, "snapkv.compact")
    assert moved.kv_read_bytes == moved.kv_write_bytes == b * sel.kept * 2 * kv * d * 2


def test_per_head_mla_cache_scores_without_absorption() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    sel = _selection(5000)
    score, _, compact = _graphs("deepseek-r1", 1, sel, "per_head").values()
    assert "snapkv.q_absorb" not in score
    dim = arch.qk_nope_head_dim + arch.qk_rope_head_dim
    assert op(score, "snapkv.score").flops == 2 * arch.heads * sel.window * 5000 * dim
    per_token = arch.heads * (dim + arch.v_head_dim) * 2
    assert op(compact, "snapkv.compact").kv_write_bytes == sel.kept * per_token


@pytest.mark.parametrize(("n", "k", "count"), [(100, 30, 5), (2, 1, 5), (10, 10, 0), (9, 0, 0)])
def test_radix_select_pass_count(n: int, k: int, count: int) -> None:
    assert digit_passes() == math.ceil(32 / RADIX_BITS) == 4
    assert passes(n, k) == count == len(radix_select(n, k))


def test_radix_select_passes_exact_work() -> None:
    n, k, rows = 1000, 700, 3
    work = radix_select(n, k, rows)
    assert [p.name for p in work] == ["digit1", "digit2", "digit3", "digit4", "gather"]
    for digit in work[:-1]:  # every key read, a histogram written
        assert digit.read_bytes == rows * n * 4
        assert digit.write_bytes == rows * BINS * 4
        assert digit.vector_flops == rows * (DIGIT_OPS * n + SCAN_OPS * BINS)
    gather = work[-1]
    assert (gather.read_bytes, gather.write_bytes) == (rows * n * 4, rows * k * 4)
    assert gather.vector_flops == rows * GATHER_OPS * n
    with pytest.raises(ValueError, match="n >= 0"):
        passes(-1, 3)


def test_top_k_kernel_is_the_passes_in_order() -> None:
    sel = _selection(9000)
    topk = _graphs("deepseek-r1", 1, sel)["snapkv_topk"]
    work = radix_select(sel.candidates, sel.topk)
    names = [node.name for node in operators(topk)]
    assert names == ["snapkv.pool"] + [f"snapkv.topk.{p.name}" for p in work]
    previous = None
    for p in work:
        node = op(topk, f"snapkv.topk.{p.name}")
        assert node.vector_flops == p.vector_flops
        assert sum(t.bytes for t in node.outputs) == p.write_bytes
        pooled = node.inputs[0]
        assert pooled.name == "snapkv.pooled" and pooled.bytes == p.read_bytes
        # each pass waits for the previous pass's histogram
        assert [t.name for t in node.inputs[1:]] == ([] if previous is None else [previous])
        previous = node.outputs[0].name


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-r1"])
def test_score_work_grows_with_prompt_times_window(name: str) -> None:
    def kernel_flops(prompt: int, window: int, kernel: str) -> float:
        graph = _graphs(name, 1, _selection(prompt, window=window))[kernel]
        return totals([GraphGroup(kernel, 1, graph)]).flops

    score = "snapkv_score"
    qk = kernel_flops(40000, 32, score)
    assert kernel_flops(40000, 64, score) == pytest.approx(2 * qk)  # all of it is per query
    assert kernel_flops(80000, 32, score) > 1.9 * qk
    vector = {
        prompt: totals(
            [GraphGroup(k, 1, g) for k, g in _graphs(name, 1, _selection(prompt)).items()]
        ).vector_flops
        for prompt in (40000, 80000)
    }
    assert vector[80000] > 1.9 * vector[40000]
