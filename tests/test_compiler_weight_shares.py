"""Which HBM share a kernel's weight reads get: its own placement, else all owners' pooled.

The SnapKV score kernel (`snapkv_score`, every layer) places no weight of its own; its
kv_b_proj reads come from DeepSeek's dense layers' copy (decoder_dense) and MoE layers' copy
(decoder_moe). When kv_b_proj straddles HBM and DDR, its share must be the two together,
weighted by layers (bytes), not whichever owner is found first.
"""

from __future__ import annotations

import pytest

from rdu_sim.compiler import Compiler
from rdu_sim.compiler.compile import _hbm_share, weight_fractions
from rdu_sim.compiler.placement import weight_inventory
from rdu_sim.compiler.program import Placement, TensorPlacement, TierUsage
from rdu_sim.scenario import load_scenario
from rdu_sim.shapes import StepShape

SNAP = "workloads/deepseek-r1-128k-snapstream.yaml"
KV_B = "attn.kv_b_proj"
MB = 1 << 20


def _placement(*tensors: TensorPlacement) -> Placement:
    return Placement(batch_slots=1, tiers={"hbm": TierUsage(1 << 40)}, tensors=tensors)


def test_share_of_own_placement_else_pooled_over_owners() -> None:
    # 3 dense layers all in HBM, 58 MoE layers half in DDR (1 MiB per layer)
    placement = _placement(
        TensorPlacement("kv_cache", "kv", "hbm", 7 * MB),
        TensorPlacement(f"decoder_dense/{KV_B}", "weights", "hbm", 3 * MB),
        TensorPlacement(f"decoder_moe/{KV_B}", "weights", "hbm", 29 * MB),
        TensorPlacement(f"decoder_moe/{KV_B}", "weights", "ddr", 29 * MB),
        TensorPlacement("decoder_moe/moe.router", "weights", "ddr", 5 * MB),
    )
    fractions = weight_fractions(placement)
    assert _hbm_share(fractions, "decoder_dense", KV_B) == 1.0
    assert _hbm_share(fractions, "decoder_moe", KV_B) == 0.5
    # the selection reads every layer's copy: (3 x 1.0 + 58 x 0.5) / 61, layer-weighted
    assert _hbm_share(fractions, "snapkv_score", KV_B) == pytest.approx((3 + 29) / 61)
    assert _hbm_share(fractions, "snapkv_score", "moe.router") == 0.0
    assert _hbm_share(fractions, "snapkv_score", "not.placed") == 1.0
    assert _hbm_share(fractions, "decoder_dense", "not.placed") == 1.0


def test_order_of_owners_does_not_matter() -> None:
    tensors = [
        TensorPlacement(f"decoder_dense/{KV_B}", "weights", "hbm", 3 * MB),
        TensorPlacement(f"decoder_moe/{KV_B}", "weights", "ddr", 58 * MB),
    ]
    for order in (tensors, tensors[::-1]):
        fractions = weight_fractions(_placement(*order))
        assert _hbm_share(fractions, "snapkv_score", KV_B) == pytest.approx(3 / 61)


def _straddling_kv_b_hot_set(slots: int) -> float:
    """A ``memory.hot_set_fraction`` at which decoder_moe's kv_b_proj is about half in DDR
    while decoder_dense's is all in HBM (the hot set pins weights by need, ties in model
    order)."""
    scenario = load_scenario(SNAP, overrides={"serving.batch_slots": slots})
    before = 0
    for weight in sorted(weight_inventory(scenario, slots), key=lambda w: -w.need):
        if weight.key == f"decoder_moe/{KV_B}":
            return (before + weight.bytes // 2) / scenario.hardware.hbm.capacity
        before += weight.bytes
    raise AssertionError("decoder_moe places no kv_b_proj")


def test_selection_reads_kv_b_proj_at_the_layer_weighted_share() -> None:
    slots = 4
    scenario = load_scenario(
        SNAP,
        overrides={
            "serving.batch_slots": slots,
            "memory.weights": "hot_set",
            "memory.hot_set_fraction": _straddling_kv_b_hot_set(slots),
        },
    )
    compiler = Compiler(scenario)
    fractions = weight_fractions(compiler.placement(slots))
    dense, moe = fractions[f"decoder_dense/{KV_B}"], fractions[f"decoder_moe/{KV_B}"]
    assert dense == 1.0 and 0.3 < moe < 0.7  # the case where the owners differ

    shape = StepShape("prefill", 1, 40000, 0)
    program = compiler.program(shape)
    kernels = {k.name: k for k in program.kernels}
    layers = scenario.model.layers
    dense_layers, moe_layers = kernels["decoder_dense"].calls, kernels["decoder_moe"].calls
    assert kernels["snapkv_score"].calls == layers == dense_layers + moe_layers
    expected = (dense_layers * dense + moe_layers * moe) / layers
    assert expected != pytest.approx(dense) and expected != pytest.approx(moe)

    def ddr_share(kernel: str, stage: str) -> float:
        """DDR reads of the stage over its weight reads (its HBM reads add activations)."""
        graph = next(k.graph for k in compiler.kernels(shape) if k.name == kernel)
        weight = graph.nodes[stage]["op"].weight_read_bytes
        reads = next(s.reads for s in kernels[kernel].stages if s.name == stage)
        return float(reads.get("ddr", 0.0) / weight)

    assert 1 - ddr_share("snapkv_score", "snapkv.q_absorb") == pytest.approx(expected, rel=1e-12)
    # the decoder kernels still read their own placements
    assert 1 - ddr_share("decoder_dense", KV_B) == pytest.approx(dense, rel=1e-12)
    assert 1 - ddr_share("decoder_moe", KV_B) == pytest.approx(moe, rel=1e-12)
