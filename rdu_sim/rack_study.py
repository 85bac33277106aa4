"""The SN40L racks question: DeepSeek-R1 on four 16-socket racks, four tensor-parallel
replicas (a rack each) against one replica with attention data-parallel and the experts
whole over all 64 sockets, over the bandwidth of the network between racks.

Each point is a step through the API (``api.step``, what ``rdu-sim step`` times): decode at
a batch (each configuration's fastest over the batches given: tokens per second of all 64
sockets) and prefill of one prompt per replica or rank. The tensor-parallel replicas send
nothing between racks, so their figures do not move with the bandwidth; the expert-parallel
one's all-to-alls cross it. ``crossover`` finds where the two meet
(notebooks/08_sn40l_racks_expert_parallel.ipynb, docs/parallelism.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rdu_sim import api
from rdu_sim.compiler import CapacityError
from rdu_sim.config.parallelism import replica_batch, replica_devices

RACKS_SOCKETS = 64
TP16: Mapping[str, Any] = {
    "parallelism.tp": 16,
    "parallelism.dp_attention": 1,
    "parallelism.ep": 1,
    "parallelism.mla_cache_layout": "sequence_split",
}
"""Four replicas of sixteen sockets, a rack each (deepseek-r1-128k-full's split)."""


@dataclass(frozen=True)
class Throughput:
    """What 64 sockets do with one configuration: decode tokens/s at the best batch given
    (and that batch, per replica or rank), prefill tokens/s."""

    decode_tokens_per_s: float
    decode_batch: int
    prefill_tokens_per_s: float


def throughput(
    workload: str,
    overrides: Mapping[str, Any],
    batches: Sequence[int | None],
    prompt: int,
) -> Throughput:
    """Decode at each of ``batches`` that fits (None: the batch capacity) and one prefill of
    ``prompt`` tokens, scaled to all 64 sockets (a step's batch is a rank's: each replica
    of the layout runs ``replica_batch`` of it, and 64 / ``replica_devices`` replicas run)."""
    scenario = api.load(workload, dict(overrides))
    layout = scenario.workload.parallelism.layout()
    per = RACKS_SOCKETS // replica_devices(layout) * replica_batch(layout, 1)  # a step's batches
    best = (0.0, 0)
    for batch in batches:
        try:
            step = api.step(scenario, batch=batch).detail
        except CapacityError:  # more slots than the memory holds: not a point of this split
            continue
        assert step is not None  # (the engine's backend: every cost has its timing)
        rate = step.batch * per / step.step_s
        if rate > best[0]:
            best = (rate, step.batch)
    prefill = api.step(scenario, phase="prefill", tokens=prompt).detail
    assert prefill is not None
    prefill_rate = prefill.batch * prefill.tokens * per / prefill.step_s
    return Throughput(best[0], best[1], prefill_rate)


def rack_sweep(
    workload: str,
    bandwidths_gb_s: Sequence[float],
    tp16_batches: Sequence[int | None],
    ep_batches: Sequence[int | None],
    prompt: int = 2048,
) -> list[dict[str, Any]]:
    """Rows of (inter-rack GB/s per socket, configuration, decode and prefill tokens/s of the
    64 sockets): the TP16 replicas once per bandwidth (they do not depend on it)."""
    baseline = throughput(workload, TP16, tp16_batches, prompt)
    rows = []
    for gb_s in bandwidths_gb_s:
        link = {"hw.system.inter_rack_link.bandwidth": f"{gb_s} GB/s"}
        expert = throughput(workload, link, ep_batches, prompt)
        for name, result in (("4 x TP16", baseline), ("EP64, DP attention", expert)):
            rows.append(
                {
                    "inter_rack_gb_s": gb_s,
                    "configuration": name,
                    "decode_tokens_per_s": result.decode_tokens_per_s,
                    "decode_batch": result.decode_batch,
                    "prefill_tokens_per_s": result.prefill_tokens_per_s,
                }
            )
    return rows


def crossover(rows: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """The inter-rack bandwidth (GB/s per socket) where the expert-parallel configuration's
    ``metric`` first reaches the TP16 replicas', interpolated between swept points on a log
    scale of bandwidth; None when it never does, or already does at the lowest point."""
    points = sorted({row["inter_rack_gb_s"] for row in rows})
    gap = []
    for gb_s in points:
        value = {
            row["configuration"]: row[metric] for row in rows if row["inter_rack_gb_s"] == gb_s
        }
        gap.append(value["EP64, DP attention"] - value["4 x TP16"])
    if gap[0] >= 0:
        return None
    for i in range(1, len(points)):
        if gap[i] >= 0:
            low, high = math.log(points[i - 1]), math.log(points[i])
            share = -gap[i - 1] / (gap[i] - gap[i - 1])
            return math.exp(low + share * (high - low))
    return None
