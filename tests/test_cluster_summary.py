"""The typed cluster summary: the JSON is its ``to_dict``, the console reads its attributes,
and the requests a cluster did not serve as sent are counted with their reason in the text.

The clusters run on test_api_run's analytic FakeBackend (closed-form step times), so these
tests are fast; the JSON's values are checked against recounts in test_cluster.py.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from test_cluster import LLAMA, _mooncake, fake, write_cluster, write_trace

from rdu_sim.report.cluster_console import print_cluster_report
from rdu_sim.report.cluster_summary import ClusterSummary
from rdu_sim.report.percentiles import rounded
from rdu_sim.serving.traces.synthetic import SyntheticTrace, synthetic_table

TOP_KEYS = {
    "slo_binding",
    "occupancy",
    "throughput_bound",
    "cluster",
    "router",
    "disaggregated",
    "replicas",
    "sockets",
    "device",
    "max_context",
    "version",
    "pools",
    "traffic",
    "requests",
    "requests_served",
    "requests_rejected",
    "requests_truncated",
    "prompt_tokens_truncated",
    "output_tokens_truncated",
    "output_tokens",
    "makespan_s",
    "output_tokens_per_s",
    "ttft_s",
    "tpot_s",
    "queue_delay_s",
    "e2e_s",
    "slo",
    "goodput",
    "slo_met",
    "offered",
    "classes",
    "per_replica",
    "step_shapes_simulated",
    "energy",
    "provenance",
}
"""The JSON's top-level keys (docs/cluster.md), plus ``prefix_cache``, ``kv_transfer`` and
``prefill_queueing`` when the cluster has them."""


def _disaggregated_with_prefix_cache(folder: Path) -> Path:
    trace = _mooncake(folder, requests=120, rate=6.0)
    pools = {
        name: {
            "workload": str(LLAMA),
            "replicas": replicas,
            "role": role,
            "set": {"serving.batch_slots": 8},
        }
        for name, replicas, role in (("pre", 1, "prefill"), ("dec", 2, "decode"))
    }
    return write_cluster(
        folder,
        pools=pools,
        traffic={"trace": trace},
        kv_transfer={"bandwidth": "10 GB/s", "latency": "20 us"},
        prefix_cache={"block_tokens": 512},
        classes={"by": "prompt_tokens", "edges": [1024, 4096]},
    )


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON-like value by its dotted path."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_leaves(item, f"{path}[{i}]"))
        return out
    return {path: value}


def test_the_json_is_the_typed_summary_and_every_attribute_is_its_json_value(
    tmp_path: Path,
) -> None:
    result = fake(_disaggregated_with_prefix_cache(tmp_path))
    summary = result.summary()
    assert isinstance(summary, ClusterSummary) and result.summary() is summary
    data = result.to_dict()
    assert data == summary.to_dict()
    assert set(data) == TOP_KEYS | {"prefix_cache", "kv_transfer", "prefill_queueing"}
    # the attributes, as plain values, are the JSON's (the traffic's one renamed counter and
    # the keys a cluster without a prefix cache leaves out aside): floats already rounded
    attributes = _leaves(dataclasses.asdict(dataclasses.replace(summary, provenance={})))
    attributes["traffic.skipped_failed_rows"] = attributes.pop("traffic.skipped")
    assert attributes.pop("traffic.out_of_order") == 0  # (a sorted trace: the key left out)
    for i, row in enumerate(summary.per_replica):  # a decode replica has no prefix cache
        if row.prefix_cache is None:
            del attributes[f"per_replica[{i}].prefix_cache"]
        else:  # static slots: no eviction for a paged pool's admissions (the key left out)
            assert attributes.pop(f"per_replica[{i}].prefix_cache.evicted_for_room") is None
        assert row.rank is None and row.of_replica is None  # (no attention ranks: left out)
        del attributes[f"per_replica[{i}].rank"], attributes[f"per_replica[{i}].of_replica"]
    for name, pool in summary.pools.items():  # a replica of one attention rank says nothing
        if pool.ranks == 1:
            del attributes[f"pools.{name}.ranks"]
        assert pool.kv_kept is not None and not pool.kv_kept.decode_evicts  # (nor the full policy)
        del attributes[f"pools.{name}.kv_kept.decode_evicts"]
        # the words of what a wrapped slot keeps beside its ring are the text report's (the
        # JSON's layout says it); the full policy keeps no ring
        assert attributes.pop(f"pools.{name}.kv_kept.stays") == ""
        assert pool.kv_pool is None  # static slots: no paged KV pool (the key is left out)
        del attributes[f"pools.{name}.kv_pool"]
        assert pool.batch_note is None  # slots the stack has a program of (the key left out)
        del attributes[f"pools.{name}.batch_note"]
    assert summary.lockstep is None  # (no pool's ranks step together: the key is left out)
    del attributes["lockstep"]
    assert attributes.pop("prefix_cache.evicted_for_room") is None  # (static slots' cache)
    # the binding SLO half: its fields, and the sentence the report prints
    assert data["slo_binding"] == rounded([v.to_dict() for v in summary.slo_binding])
    assert summary.slo_binding and all(v["sentence"] for v in data["slo_binding"])
    data = {**data, "slo_binding": []}
    del attributes["slo_binding"]
    assert summary.per_replica[0].prefix_cache is not None
    json_leaves = _leaves({**data, "provenance": {}})
    assert attributes == json_leaves
    assert rounded(attributes) == attributes
    # typed reads: a renamed field is an AttributeError (and a mypy error), not a None
    assert summary.goodput.fraction == data["goodput"]["fraction"]
    assert summary.per_replica[0].role == "prefill" and summary.kv_transfer is not None
    assert summary.kv_transfer.seconds.p99 == data["kv_transfer"]["seconds"]["p99"]
    assert summary.classes is not None
    assert set(summary.classes) == set(data["classes"])


def test_optional_blocks_are_left_out_of_the_json_as_before(tmp_path: Path) -> None:
    data = fake(write_cluster(tmp_path), {"traffic.requests": 30}).to_dict()
    assert set(data) == TOP_KEYS
    assert all("prefix_cache" not in row for row in data["per_replica"])
    assert data["classes"] is None and data["traffic"]["source"] == "synthetic"


def _row(report: str, label: str) -> str | None:
    """The value of the report's row ``label`` (None when it has none)."""
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    return None


def _run(tmp_path: Path, overrides: dict[str, Any]) -> tuple[ClusterSummary, str]:
    table = synthetic_table(SyntheticTrace(requests=90, rate=9.0, prompt_high=9000, seed=8))
    trace = write_trace(tmp_path, "t.csv", table, "csv")
    summary = fake(write_cluster(tmp_path, traffic={"trace": trace}), overrides).summary()
    out = io.StringIO()
    print_cluster_report(summary, Console(file=out, width=250))
    return summary, out.getvalue()


def test_the_report_says_why_requests_were_rejected_truncated_or_left_out(tmp_path: Path) -> None:
    limit = "prompt + output over the 8,192-token context"
    summary, report = _run(tmp_path, {})
    n = summary.requests_rejected
    assert n > 0 and summary.requests_truncated == 0
    assert _row(report, "rejected") == f"{n:,} ({limit}; traffic.over_context: reject)"
    assert _row(report, "truncated") is None and _row(report, "trace rows left out") is None
    cut, report = _run(tmp_path, {"traffic.over_context": "truncate", "traffic.requests": 50})
    assert cut.requests_rejected == 0 and cut.requests_truncated > 0
    took = f"{cut.prompt_tokens_truncated:,} prompt and {cut.output_tokens_truncated:,} output"
    assert _row(report, "truncated") == (
        f"{cut.requests_truncated:,} ({limit}, cut to fit; traffic.over_context: truncate): "
        f"{took} tokens not served"
    )
    assert _row(report, "trace rows left out") == "40 (beyond traffic.requests)"
    assert _row(report, "rejected") is None
    assert _row(report, "requests served / rejected / truncated") == (
        f"50 / 0 / {cut.requests_truncated} of 50"
    )


def test_the_binding_slo_half_is_recounted_from_the_requests(tmp_path: Path) -> None:
    """Overloaded (one replica, a high rate): the SLO is missed; the halves named are those
    whose share of requests within target, recounted from requests.csv's columns, is below
    the attainment, with that share and the value at the attainment quantile; the report
    says why under the Cluster table. Lightly loaded: met, and the one half named is the
    nearer its target."""
    import numpy as np

    pools = {"serve": {"workload": str(LLAMA), "replicas": 1, "set": {"serving.batch_slots": 8}}}
    for rate, met in ((40.0, False), (0.2, True)):
        traffic = {
            "rate": rate,
            "requests": 60,
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 3000},
            "output_tokens": {"dist": "uniform", "low": 2, "high": 300},
            "seed": 5,
        }
        slo = {"ttft": "2 s", "tpot": "60 ms", "attainment": 0.9}
        result = fake(write_cluster(tmp_path, pools=pools, traffic=traffic, slo=slo))
        summary = result.summary()
        assert summary.slo_met is met
        cols = result.requests()
        within = {
            "ttft": float(np.mean(cols["ttft_s"] <= 2.0)),
            "tpot": float(np.mean(np.nan_to_num(cols["tpot_s"]) <= 0.06)),
        }
        named = [v.half for v in summary.slo_binding]
        if met:
            ratio = {
                "ttft": np.quantile(cols["ttft_s"], 0.9, method="inverted_cdf") / 2.0,
                "tpot": np.quantile(cols["tpot_s"], 0.9, method="inverted_cdf") / 0.06,
            }
            assert named == [max(ratio, key=lambda h: ratio[h])]
        else:
            assert named == [h for h in ("ttft", "tpot") if within[h] < 0.9] and named
        for verdict in summary.slo_binding:
            assert verdict.share == within[verdict.half] and not verdict.moves
            key = f"{verdict.half}_s"
            values = np.nan_to_num(cols[key]) if verdict.half == "tpot" else cols[key]
            assert verdict.value_s == np.quantile(values, 0.9, method="inverted_cdf")
        out = io.StringIO()
        print_cluster_report(summary, Console(file=out, width=250))
        head = "tightest half: " if met else "why not met: "
        assert head + summary.slo_binding[0].sentence() in out.getvalue()


def test_each_pools_kv_kept_is_recounted_from_the_requests(tmp_path: Path) -> None:
    """SnapStream with a 1,024-token slot (4 sinks, 256 ring): a prompt is compressed iff it
    is longer than the slot, and a slot outgrown iff what the prefill left plus the decode's
    ``output - 1`` tokens exceed it. Colocated, the pool counts both over the requests it
    served; disaggregated, the prefill pool counts the compressed prompts of the requests it
    took (its slots hold prompts only: none outgrown) and the decode pool both, over the
    requests it decoded; the report prints each pool's line."""
    import numpy as np

    from rdu_sim.report.cluster import request_columns

    kv = {"kv.policy": "snapstream", "kv.budget": 1024, "kv.recent": 256, "kv.sinks": 4}
    colocated = fake(write_cluster(tmp_path), {"pools.serve.set": {**kv}})
    split = fake(
        _disaggregated_with_prefix_cache(tmp_path),
        {
            "pools.pre.set": {"serving.batch_slots": 8, **kv},
            "pools.dec.set": {"serving.batch_slots": 8, **kv},
        },
    )
    for result, held_by in (
        (colocated, {"serve": "took"}),
        (split, {"pre": "took", "dec": "decoded"}),
    ):
        cols = request_columns(result.run)
        served = cols["status"] == "served"
        prompt, output = cols["prompt_tokens"], cols["output_tokens"]
        kept = np.minimum(prompt, 1024)
        compressed = served & (prompt > 1024)
        outgrown = served & (kept + np.maximum(output - 1, 0) > 1024)
        summary = result.summary()
        for name, held in held_by.items():
            pool = summary.pools[name]
            assert pool.kv_kept is not None and pool.kv_kept.layout.startswith("snapstream")
            mine = served if held == "took" else served & (output > 1)
            assert pool.requests == int(mine.sum()) > 0
            assert pool.kv_kept.prompts_compressed == int((compressed & mine).sum()) > 0
            wrapped = 0 if pool.role == "prefill" else int((outgrown & mine).sum())
            assert pool.kv_kept.slots_wrapped == wrapped
            assert wrapped > 0 or pool.role == "prefill"
            kept_json = result.to_dict()["pools"][name]["kv_kept"]
            assert kept_json["slots_wrapped"] == wrapped and "decode_evicts" not in kept_json
        out = io.StringIO()
        print_cluster_report(summary, Console(file=out, width=400))
        for name, pool in summary.pools.items():
            assert pool.kv_kept is not None
            assert (
                f"KV slot of pool {name}: {pool.kv_kept.layout}; of {pool.requests:,} requests"
                in (out.getvalue())
            )
