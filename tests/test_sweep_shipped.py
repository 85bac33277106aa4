"""The sweeps shipped in workloads/sweeps/ are valid and ask what their names say."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim.sweep import check_spec

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = {  # file -> (points, axis paths)
    "llama8b-batch.yaml": (4, ("serving.batch_slots",)),
    "deepseek-context.yaml": (10, ("serving.max_context", "kv.policy", "kv.budget")),
    "llama8b-hbm-bandwidth.yaml": (7, ("hw.socket.hbm.bandwidth",)),
    "llama8b-sockets.yaml": (5, ("parallelism.tp", "hw.system.sockets")),
    "deepseek-snapstream-budget.yaml": (5, ("kv.budget",)),
    "deepseek-snapstream-batch.yaml": (11, ("serving.batch_slots", "serving.requests")),
    "speculation-acceptance-k.yaml": (
        30,
        ("speculation.decoding.acceptance", "speculation.decoding.draft_tokens"),
    ),
    "speculation-crossover.yaml": (36, ("speculation", "serving.batch_slots", "serving.requests")),
    "coe-experts-hbm.yaml": (15, ("coe.experts", "hw.socket.hbm.capacity")),
}


def test_every_shipped_sweep_is_listed() -> None:
    assert {p.name for p in (ROOT / "workloads" / "sweeps").glob("*.yaml")} == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_sweep_expands(name: str) -> None:
    expansion = check_spec(ROOT / "workloads" / "sweeps" / name).expansion
    points, axes = SHIPPED[name]
    assert len(expansion.points) == points and expansion.axes == axes
    assert expansion.spec.spec.metrics  # each keeps a short list of metrics, not everything
    for point in expansion.points:  # modest request counts: minutes, not hours (3 a slot
        # for a steady rate: the budget sweep's 1,024 slots at budget 4096 need 3,072)
        assert point.scenario.workload.serving.requests <= 3100


def test_context_sweep_spans_8k_to_128k_full_and_snapstream() -> None:
    expansion = check_spec(ROOT / "workloads" / "sweeps" / "deepseek-context.yaml").expansion
    seen = {
        (p.scenario.workload.serving.max_context, p.scenario.workload.kv.policy)
        for p in expansion.points
    }
    assert seen == {(2**k * 1024, policy) for k in range(3, 8) for policy in ("full", "snapstream")}


def test_sockets_sweep_matches_tp_to_the_system() -> None:
    expansion = check_spec(ROOT / "workloads" / "sweeps" / "llama8b-sockets.yaml").expansion
    assert [(p.scenario.tp, p.scenario.hardware.system.sockets) for p in expansion.points] == [
        (n, n) for n in (1, 2, 4, 8, 16)
    ]
