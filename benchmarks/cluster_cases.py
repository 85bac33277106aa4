"""Cluster benchmark cases: a Mooncake-sized hour on 32 replicas, a million requests on 64 racks,
DeepSeek-R1 chat on 16 H100s whose attention ranks step in lockstep.

Both write their inputs to a temporary folder (a synthetic trace in the Mooncake schema, or
a synthetic Poisson mix, and a cluster file) and run ``rdu_sim.api_cluster.run_cluster`` in
process, plus ``to_dict()`` (every caller asks for the metrics). Events: the engine's, summed
over the distinct step shapes simulated (once for all replicas sharing a workload), plus the
serving level's: per replica, its prefill steps and batched decode advances, and one per
request arrival and per KV transfer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks.work import ROOT, Work

LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
DEEPSEEK_H100 = ROOT / "workloads" / "ep" / "deepseek-r1-h100.yaml"


def cluster_events(result: Any) -> dict[str, int]:
    """Engine events (distinct shapes, once) and serving events of a cluster run."""
    engine = 0
    shapes = 0
    seen: set[int] = set()
    for pool in result.pools:
        times = pool.runtime.step_times
        if id(times) in seen:
            continue
        seen.add(id(times))
        for cost in times.costs():
            engine += int(getattr(cost.detail, "events", 0))
            shapes += 1
    serving = len(result.run.serving)
    for replica in result.run.cluster.replicas:
        records = replica.server.records
        serving += records.prefill_steps + records.decode_runs
    link = result.run.cluster.link
    serving += link.transfers if link is not None else 0
    return {"engine_events": engine, "serving_events": serving, "shapes": shapes}


def _run(cluster: dict[str, Any], folder: Path, smoke: bool) -> Work:
    from rdu_sim.api_cluster import run_cluster

    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    result = run_cluster(path)
    summary = result.to_dict()
    counts = cluster_events(result)
    return Work(
        counts["engine_events"] + counts["serving_events"],
        {
            "requests": summary["requests"],
            "requests_served": summary["requests_served"],
            "replicas": summary["replicas"],
            "sockets": summary["sockets"],
            "goodput_fraction": summary["goodput"]["fraction"],
            "makespan_s": summary["makespan_s"],
            "prefix_hit_rate": (summary.get("prefix_cache") or {}).get("hit_rate"),
            "smoke": smoke,
            **counts,
        },
    )


def mooncake_hour(smoke: bool) -> Work:
    """A Mooncake-sized hour: ~24,000 requests (6.67/s) with shared-prefix block hashes,
    replayed from a JSONL file in the Mooncake schema on 32 Llama 3.1 8B replicas (one
    socket each, 32k context, 2k-token prefill chunks), prefix caches and a prefix-aware
    router. Smoke: 200 requests on 4 replicas."""
    from rdu_sim.serving.traces.synthetic import SyntheticTrace, write_synthetic

    requests, replicas = (200, 4) if smoke else (24_000, 32)
    spec = SyntheticTrace(
        requests=requests,
        rate=requests / 3600 if not smoke else 2.0,
        prompt_median=6000,
        prompt_sigma=0.9,
        prompt_high=30000,
        output_median=250,
        output_high=2000,
        conversations=max(10, requests // 12),
        shared_fraction=0.6,
        seed=0,
    )
    with tempfile.TemporaryDirectory(prefix="rdu-sim-bench-") as tmp:
        folder = Path(tmp)
        write_synthetic(folder / "trace.jsonl", "mooncake", spec)
        cluster = {
            "name": "mooncake-hour",
            "pools": {
                "serve": {
                    "workload": str(LLAMA),
                    "replicas": replicas,
                    "set": {
                        "serving.max_context": 32768,
                        "serving.batch_slots": 8,
                        "serving.prefill_chunk_tokens": 2048,
                    },
                }
            },
            "router": {"policy": "prefix_aware"},
            "traffic": {"trace": "trace.jsonl", "format": "mooncake"},
            "slo": {"ttft": "2 s", "tpot": "50 ms"},
            "prefix_cache": {"block_tokens": 512},
        }
        return _run(cluster, folder, smoke)


def million(smoke: bool) -> Work:
    """A million requests across 64 racks: 1,024 Llama 3.1 8B replicas (one SN40L socket
    each, 16 per rack), synthetic chat traffic at 1,500 requests/s, least-outstanding
    routing. Smoke: 2,000 requests on 16 replicas."""
    requests, replicas = (2_000, 16) if smoke else (1_000_000, 1024)
    cluster = {
        "name": "million",
        "pools": {"serve": {"workload": str(LLAMA), "replicas": replicas}},
        "router": {"policy": "least_outstanding"},
        "traffic": {
            "rate": 1500.0 * replicas / 1024,
            "requests": requests,
            "prompt_tokens": {"dist": "lognormal", "median": 1000, "sigma": 0.8, "high": 6000},
            "output_tokens": {"dist": "lognormal", "median": 250, "sigma": 0.8, "high": 1024},
            "seed": 0,
        },
        "slo": {"ttft": "1 s", "tpot": "40 ms"},
    }
    with tempfile.TemporaryDirectory(prefix="rdu-sim-bench-") as tmp:
        return _run(cluster, Path(tmp), smoke)


def h100_lockstep(smoke: bool) -> Work:
    """DeepSeek-R1 chat on one replica of 16 H100s, attention data-parallel over them with
    whole experts (tp=1, dp_attention=16, ep=16, 16 slots a rank), the ranks in lockstep,
    TensorRT-LLM's live-sequence batches and mixed steps: 240 requests at 6/s (the plan
    deepseek-r1-h100's template traffic). Every rank decodes its own batch, so the joint
    steps a run simulates are what this case watches. Smoke: 6 requests."""
    requests = 6 if smoke else 240
    cluster = {
        "name": "h100-lockstep",
        "pools": {
            "serve": {
                "workload": str(DEEPSEEK_H100),
                "replicas": 1,
                "set": {
                    "hw.system.sockets": 16,
                    "parallelism.tp": 1,
                    "parallelism.dp_attention": 16,
                    "parallelism.ep": 16,
                    "serving.batch_slots": 16,
                },
            }
        },
        "router": {"policy": "least_outstanding"},
        "traffic": {
            "rate": 6.0,
            "requests": requests,
            "prompt_tokens": {
                "dist": "lognormal",
                "median": 2048,
                "sigma": 0.6,
                "low": 256,
                "high": 6144,
            },
            "output_tokens": {
                "dist": "lognormal",
                "median": 400,
                "sigma": 0.6,
                "low": 32,
                "high": 1536,
            },
            "seed": 3,
        },
        "slo": {"ttft": "3 s", "tpot": "50 ms"},
    }
    with tempfile.TemporaryDirectory(prefix="rdu-sim-bench-") as tmp:
        return _run(cluster, Path(tmp), smoke)
