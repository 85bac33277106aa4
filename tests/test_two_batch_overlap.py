"""Two-batch overlap's stage-order schedule (``engine/gpu/overlap.py``,
``parallelism.overlap_schedule: stage_order``): SGLang's stage cuts and their interleaving
(exact on hand-made chains), the schedule's times (exact), a differential check with the
network free, and monotonicity: no call's time, launch or hardware parameter that grows makes
a step shorter (hand-made chains, the EP test steps and the two shipped expert-parallel
workloads swept). And the choice: first come, first served by default
(``stream.run_first_come``, tests/test_expert_parallel_step.py), the two schedules' steps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.engine.gpu import engine as gpu_engine
from rdu_sim.engine.gpu.overlap import (
    COMMUNICATES,
    Role,
    interleave,
    run_stage_order,
    stage_cuts,
)
from rdu_sim.engine.gpu.stream import Call, StreamRun, run_stream

ROOT = Path(__file__).resolve().parents[1]
MOE_GPU = str(ROOT / "workloads/qwen3-235b-a22b-16socket.yaml")
STAGE_ORDER = {"parallelism.overlap_schedule": "stage_order"}
FIRST_COME = {
    "hardware": "dgx-h100",
    "model": "qwen3-30b-a3b",
    "parallelism": {"tp": 1, "dp_attention": 8, "ep": 8, "two_batch_overlap": True},
    "serving.batch_slots": 8,
    "serving.max_context": 4096,
}
GPU_EP8 = {**FIRST_COME, **STAGE_ORDER}
EP72 = str(ROOT / "workloads/ep/deepseek-v3-h100-ep72-decode.yaml")
EP32 = str(ROOT / "workloads/ep/deepseek-v3-h100-ep32-prefill.yaml")

# a dense layer, then two MoE layers: norm, projections, attention core, o_proj, router,
# shared experts, dispatch, experts, combine, output
DENSE: list[Role] = ["compute", "compute", "attention", "compute", "compute"]
MOE: list[Role] = [
    "compute",  # 0 the previous layer's output (or norm)
    "compute",  # 1 projections
    "attention",  # 2 kv read
    "attention",  # 3 attention core
    "compute",  # 4 o_proj
    "compute",  # 5 router
    "shared",  # 6
    "shared",  # 7
    "dispatch",  # 8
    "compute",  # 9 experts
    "combine",  # 10
]
CHAIN: list[Role] = ["compute", *DENSE, *MOE, *MOE, "compute"]  # embedding ... LM head


def test_prefill_cuts_after_each_dispatch_and_combine() -> None:
    first = 1 + len(DENSE)  # the first MoE layer's position
    second = first + len(MOE)
    assert stage_cuts(CHAIN, decode=False) == [first + 9, first + 11, second + 9, second + 11]


def test_decode_cuts_at_sglangs_five_yield_points() -> None:
    # before the attention core (both of its kernels), before the shared experts, after the
    # dispatch, after the combine, and the empty stage that receives the combine
    first = 1 + len(DENSE)
    second = first + len(MOE)
    layer = [2, 6, 9, 11, 11]
    assert stage_cuts(CHAIN, decode=True) == [first + i for i in layer] + [
        second + i for i in layer
    ]


def test_interleave_runs_a_ahead_by_delta_stages() -> None:
    # two chains of 4 calls cut into stages [0, 1] [2] [3]
    order = interleave([4, 4], [[2, 3], [2, 3]], delta=0)
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    order = interleave([4, 4], [[2, 3], [2, 3]], delta=2)
    assert order == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    # empty stages keep their place: [0] [] [1]; A's second stage is empty
    order = interleave([2, 2], [[1, 1], [1, 1]], delta=1)
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_the_schedule_on_hand_made_calls_exact() -> None:
    # per micro-batch: compute 1 s, dispatch 1 s, compute 1 s
    roles: list[Role] = ["compute", "dispatch", "compute"]
    streams = [[Call(0, 1.0), Call(1, 1.0), Call(2, 1.0)]] * 2
    # A computes, B computes while A's dispatch crosses, then A and B again: 4 s, not 6
    assert run_stage_order(streams, roles, False, 0.0, None, 1.0, 100).end_s == 4.0
    # the SMs the communication holds slow every computing call
    assert run_stage_order(streams, roles, False, 0.0, None, 1.5, 100).end_s == 6.0
    # a call waits for its launch: the last of 6 launches at 12 s, then its second
    assert run_stage_order(streams, roles, False, 2.0, None, 1.0, 100).end_s == 13.0
    # one CUDA graph: every call launched at once after it
    assert run_stage_order(streams, roles, False, 2.0, 0.5, 1.0, 100).end_s == 4.5
    # a dispatch longer than B's compute: A's experts wait for it (1 + 3), then B's
    # dispatch (queued behind A's on the network) ends at 7, and B's experts at 8
    slow = [[Call(0, 1.0), Call(1, 3.0), Call(2, 1.0)]] * 2
    run = run_stage_order(slow, roles, False, 0.0, None, 1.0, 100)
    assert (run.end_s, run.starts) == (8.0, (0.0, 1.0, 1.0, 4.0, 4.0, 7.0))


def _random_chains(rng: np.random.Generator, layers: int) -> tuple[list[list[Call]], list[Role]]:
    """Two micro-batches' chains of ``layers`` MoE layers, kernel ``i`` the template's
    ``i``-th role, random call times."""
    roles = ["compute", *MOE * layers, "compute"]
    streams = [[Call(i, float(rng.uniform(0.1, 2.0))) for i in range(len(roles))] for _ in range(2)]
    for m in range(2):  # micro-batch B's kernels after A's, as the engine numbers them
        streams[m] = [Call(c.kernel + m * len(roles), c.device_s) for c in streams[m]]
    return streams, roles * 2


@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_no_longer_call_or_launch_makes_the_step_shorter(decode: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    streams, roles = _random_chains(rng, 3)

    def end(streams: Sequence[Sequence[Call]], launch: float = 0.05) -> float:
        return run_stage_order(streams, roles, decode, launch, None, 1.2, 10_000).end_s

    base = end(streams)
    for m in range(2):
        for i, call in enumerate(streams[m]):
            for grow in (1e-9, 0.3, 5.0):
                longer = [list(s) for s in streams]
                longer[m][i] = Call(call.kernel, call.device_s + grow)
                assert end(longer) >= base
    assert end(streams, 0.06) >= base


def _captured(
    monkeypatch: pytest.MonkeyPatch, workload: str, sets: dict[str, Any], **shape: Any
) -> dict[str, Any]:
    """The arguments the engine hands ``run_stage_order`` for one step."""
    seen: dict[str, Any] = {}

    def spy(*args: Any) -> StreamRun:
        seen["args"] = args
        return run_stage_order(*args)

    monkeypatch.setattr(gpu_engine, "run_stage_order", spy)
    seen["step"] = api.step(workload, sets, **shape)
    return seen


def test_with_the_network_free_the_step_is_the_compute_in_sequence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The EP8 step's calls with every all-to-all free: the SMs run both micro-batches'
    computing calls back to back, so with one CUDA graph the step is the graph's launch
    plus their times (slowed by the SMs held) in sequence, as one stream runs them; with a
    launch per call, the latest launch plus the computing calls after it in the order."""
    seen = _captured(monkeypatch, MOE_GPU, GPU_EP8, phase="prefill", tokens=4096)
    streams, roles, decode, launch, graph, scale, budget = seen["args"]
    assert seen["step"].step_s == run_stage_order(*seen["args"]).end_s
    free = [
        [Call(c.kernel, 0.0 if roles[c.kernel] in COMMUNICATES else c.device_s) for c in s]
        for s in streams
    ]
    scaled = [
        Call(c.kernel, c.device_s * (1.0 if roles[c.kernel] in COMMUNICATES else scale))
        for s in free
        for c in s
    ]
    one_stream = run_stream(scaled, launch, graph, budget)
    overlapped = run_stage_order(free, roles, decode, launch, graph, scale, budget)
    assert graph is not None
    assert overlapped.end_s == pytest.approx(one_stream.end_s, rel=1e-12)
    computing_s = sum(c.device_s for c in scaled if roles[c.kernel] not in COMMUNICATES)
    assert overlapped.end_s == pytest.approx(graph + computing_s, rel=1e-12)
    # launched one by one: a single machine with release times, in the order
    launched = run_stage_order(free, roles, decode, launch, None, scale, budget)
    cuts = [stage_cuts([roles[c.kernel] for c in s], decode) for s in free]
    order = interleave([len(s) for s in free], cuts, 2 if decode else 0)
    times = [free[m][i].device_s * scale for m, i in order]
    computing = [roles[free[m][i].kernel] not in COMMUNICATES for m, i in order]
    expected = max(
        launch * (k + 1) + sum(t for t, c in zip(times[k:], computing[k:], strict=True) if c)
        for k in range(len(order))
        if computing[k]
    )
    assert launched.end_s == pytest.approx(expected, rel=1e-12)


def test_the_overlap_keeps_its_gain_on_the_ep8_prefill_step() -> None:
    """At 4,096 tokens the overlapped step is the SMs' work (both micro-batches' compute,
    slowed by the SMs the all-to-alls hold) to within 0.1%: the network's calls hide behind
    the other micro-batch's compute."""
    plain = api.step(
        MOE_GPU,
        {**FIRST_COME, "parallelism.two_batch_overlap": False},
        phase="prefill",
        tokens=4096,
    )
    overlapped = api.step(MOE_GPU, GPU_EP8, phase="prefill", tokens=4096)
    assert overlapped.step_s < 0.96 * plain.step_s


SWEEPS = {
    "hw.system.intra_node_link.latency": ["0 us", "0.5 us", "0.55 us", "0.7 us", "2 us"],
    "hw.system.inter_node_link.latency": ["0 us", "2.7 us", "3 us", "8 us"],
    "hw.gpu.kernel.sync": ["0 us", "3.2875 us", "4 us", "6.575 us", "13.15 us"],
    "hw.system.intra_node_link.bandwidth": ["1000 GB/s", "450 GB/s", "370 GB/s", "300 GB/s"],
    "hw.system.inter_node_link.bandwidth": ["200 GB/s", "50 GB/s", "40 GB/s", "25 GB/s"],
}
"""Each parameter's values, each making the hardware slower than the one before."""


STEPS = {
    "ep8-prefill": (MOE_GPU, GPU_EP8, {"phase": "prefill", "tokens": 4096}),
    "ep8-decode": (MOE_GPU, GPU_EP8, {"phase": "decode"}),
    # first come, a slower link makes it 9% faster
    "ep72-prefill": (EP72, STAGE_ORDER, {"phase": "prefill"}),
    "ep72-decode": (EP72, STAGE_ORDER, {"phase": "decode"}),
    # first come, a halved sync makes it 5.5% slower
    "ep32-prefill": (EP32, STAGE_ORDER, {"phase": "prefill"}),
}
"""The EP test step (one node) and the shipped expert-parallel workloads' steps."""


@pytest.mark.parametrize(
    ("step", "field"),
    [
        (step, field)
        for step in STEPS
        for field in SWEEPS
        if not (step.startswith("ep8") and field.startswith("hw.system.inter_node"))
    ],
)
def test_slower_hardware_never_makes_an_overlapped_step_faster(step: str, field: str) -> None:
    workload, sets, shape = STEPS[step]
    steps = [api.step(workload, {**sets, field: v}, **shape).step_s for v in SWEEPS[field]]
    assert steps == sorted(steps), list(zip(SWEEPS[field], steps, strict=True))


def test_first_come_is_the_default_and_the_schedules_differ_on_the_ep8_prefill_step() -> None:
    """Unset, the schedule is first come (the one SGLang's measured prefill points were
    matched with). On the EP8 prefill step both hide some communication: first come
    84.77 ms, the stage order 84.02 ms (the SMs' work), without overlap 88.16 ms."""
    assert api.load(MOE_GPU, FIRST_COME).workload.parallelism.overlap_schedule == "first_come"
    shape: dict[str, Any] = {"phase": "prefill", "tokens": 4096}
    first = api.step(MOE_GPU, FIRST_COME, **shape).step_s
    named = api.step(MOE_GPU, {**FIRST_COME, "parallelism.overlap_schedule": "first_come"}, **shape)
    stage = api.step(MOE_GPU, GPU_EP8, **shape).step_s
    plain = api.step(
        MOE_GPU, {**FIRST_COME, "parallelism.two_batch_overlap": False}, **shape
    ).step_s
    assert named.step_s == first
    assert [first, stage, plain] == pytest.approx([84.771e-3, 84.021e-3, 88.161e-3], abs=2e-6)


def test_first_come_is_not_monotone_in_the_link_latency() -> None:
    """The documented anomaly (Graham's): under first come, ep72's prefill step is 9% shorter
    at 0.7 us intra-node latency than at 0.55 us; in the stage order it is 301.06 ms and
    301.09 ms."""
    latency = "hw.system.intra_node_link.latency"

    def step_ms(sets: dict[str, Any], value: str) -> float:
        return api.step(EP72, {**sets, latency: value}, phase="prefill").step_s * 1e3

    first = [step_ms({}, v) for v in ("0.55 us", "0.7 us")]
    stage = [step_ms(STAGE_ORDER, v) for v in ("0.55 us", "0.7 us")]
    assert first == pytest.approx([319.529, 290.689], abs=2e-3)
    assert stage == pytest.approx([301.061, 301.087], abs=2e-3)
