"""The serving-level Perfetto trace (`rdu-sim run --trace`): parsed back, checked for structure.

Each request appears on the slot the run gave it, prefill then decode, with its lengths and
latencies as arguments; a slot's slices never overlap; queue lanes never overlap; one flow per
request runs from its first slice to its last; the counters are the run's state series.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.report.serving_trace import serving_trace

OVERRIDES = {
    "serving.requests": 30,
    "serving.batch_slots": 4,
    "serving.prompt_tokens": 256,
    "serving.output_tokens": {"dist": "uniform", "low": 1, "high": 24},
    "serving.arrival": {"process": "poisson", "rate": 400.0},  # a queue forms
}


@pytest.fixture(scope="module")
def run() -> api.RunResult:
    return api.run("llama3.1-8b-1socket", OVERRIDES)


@pytest.fixture(scope="module")
def trace(run: api.RunResult) -> dict[str, Any]:
    return serving_trace(run.requests(), run.timeseries(), run.batch_slots, {"x": 1})


def threads(trace: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}


def test_each_request_runs_prefill_then_decode_on_its_slot(
    run: api.RunResult, trace: dict[str, Any]
) -> None:
    names = threads(trace)
    columns = run.requests()
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_request: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for s in slices:
        by_request[s["args"]["request"]][s["cat"]] = s
    assert len(by_request) == OVERRIDES["serving.requests"]
    for request, parts in by_request.items():
        slot = int(columns["slot"][request])
        prefill = parts["prefill"]
        assert names[prefill["tid"]] == f"slot {slot}"
        assert prefill["ts"] == pytest.approx(columns["admit_s"][request] * 1e6)
        ttft_without_queue = columns["first_token_s"][request] - columns["admit_s"][request]
        assert prefill["dur"] == pytest.approx(ttft_without_queue * 1e6, abs=1e-3)
        assert prefill["args"]["ttft_s"] == pytest.approx(columns["ttft_s"][request])
        assert prefill["args"]["prompt_tokens"] == 256
        if columns["output_tokens"][request] > 1:
            decode = parts["decode"]
            assert decode["tid"] == prefill["tid"]
            assert decode["ts"] == pytest.approx(prefill["ts"] + prefill["dur"], abs=1e-3)
        else:
            assert "decode" not in parts
    assert any("queued" in parts for parts in by_request.values())  # the load queued


def test_tracks_never_overlap(trace: dict[str, Any]) -> None:
    per_track: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in trace["traceEvents"]:
        if s["ph"] == "X":
            per_track[s["tid"]].append((s["ts"], s["ts"] + s["dur"]))
    for spans in per_track.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-6


def test_one_flow_per_request_from_first_to_last_slice(trace: dict[str, Any]) -> None:
    flows: dict[int, list[str]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] in "stf" and e.get("cat") == "request":
            flows[e["id"]].append(e["ph"])
            # bound inside a slice of the same track
            assert any(
                s["ph"] == "X" and s["tid"] == e["tid"] and s["ts"] < e["ts"] < s["ts"] + s["dur"]
                for s in trace["traceEvents"]
            )
    for phases in flows.values():
        assert phases[0] == "s" and phases[-1] == "f" and set(phases[1:-1]) <= {"t"}
    assert trace["otherData"] == {"x": 1}


def test_counters_follow_the_state_series(run: api.RunResult, trace: dict[str, Any]) -> None:
    series = run.timeseries()
    waiting = [e["args"]["value"] for e in trace["traceEvents"] if e["name"] == "requests waiting"]
    assert waiting == [int(v) for v in series["waiting"]]
    assert max(waiting) > 0


def test_cli_run_trace_is_deterministic_and_carries_provenance(tmp_path: Path) -> None:
    args = ["run", "llama3.1-8b-1socket", "--set", "serving.requests=6", "--json"]
    first = CliRunner().invoke(cli, [*args, "--trace", str(tmp_path / "a.json")])
    again = CliRunner().invoke(cli, [*args, "--trace", str(tmp_path / "b.json")])
    assert first.exit_code == 0 and again.exit_code == 0, first.output
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["otherData"]["workload"] == "llama3.1-8b-1socket"
    assert "overrides" in data["otherData"]["provenance"]
    refused = CliRunner().invoke(cli, [*args, "--step", "--trace", str(tmp_path / "c.json")])
    assert refused.exit_code == 2 and "rdu-sim step --trace" in refused.output
    assert refused.output.startswith("error: --trace writes a serving run's trace")


def test_a_cluster_refuses_step_and_trace_in_one_error_line(tmp_path: Path) -> None:
    cluster = str(
        Path(__file__).resolve().parents[1] / "workloads/clusters/deepseek-r1-h100-chat.yaml"
    )
    for flag in (["--step"], ["--trace", str(tmp_path / "t.json")]):
        out = CliRunner().invoke(cli, ["run", cluster, *flag])
        assert out.exit_code == 2, out.output
        assert out.output.startswith(f"error: {flag[0]}: {cluster} is a cluster; ")
        assert len(out.output.strip().splitlines()) == 1 and "Usage" not in out.output
    assert not (tmp_path / "t.json").exists()
