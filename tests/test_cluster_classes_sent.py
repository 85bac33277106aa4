"""Per-class results: a class no request fell in reports no share meeting the SLO (it read
0.0%), and a length class takes the lengths the traffic sent, before truncate cut them (a
long class read 0 requests under truncate where reject counted 42)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from test_api_run import FakeBackend

from rdu_sim.api_cluster import run_cluster
from rdu_sim.report.cluster_console import classes_table

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def cluster_file(folder: Path, over_context: str, prompt: dict[str, Any]) -> Path:
    data = {
        "name": "t",
        "pools": {
            "serve": {
                "workload": str(LLAMA),
                "replicas": 2,
                "set": {"serving.batch_slots": 8, "serving.max_context": 2048},
            }
        },
        "traffic": {
            "rate": 4.0,
            "requests": 40,
            "prompt_tokens": prompt,
            "output_tokens": 20,
            "seed": 3,
            "over_context": over_context,
        },
        "slo": {"ttft": "2 s", "tpot": "100 ms"},
        "classes": {"by": "prompt_tokens", "edges": [1024, 2048, 4096]},
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_empty_class_reports_no_share(tmp_path: Path) -> None:
    """Every prompt 300 tokens: the three longer classes are empty: null, and '-'."""
    result = run_cluster(
        cluster_file(tmp_path, "reject", {"dist": "uniform", "low": 300, "high": 300}),
        backend=FakeBackend(),
    )
    classes = json.loads(result.to_json())["classes"]
    assert classes["prompt_tokens<1024"]["requests"] == 40
    assert classes["prompt_tokens<1024"]["goodput_fraction"] is not None
    for name in ("1024<=prompt_tokens<2048", "2048<=prompt_tokens<4096", "prompt_tokens>=4096"):
        assert classes[name]["requests"] == 0 and classes[name]["goodput_fraction"] is None
    console = Console(width=300, record=True)
    console.print(classes_table(result.summary()))
    row = next(line for line in console.export_text().splitlines() if ">=4096" in line)
    assert row.split()[1:4] == ["0", "0", "-"]


def test_a_length_class_counts_the_length_sent_under_truncate_as_under_reject(
    tmp_path: Path,
) -> None:
    """Prompts of 500 to 6,000 tokens over a 2,048-token context: truncate cuts the long
    ones to fit, and they stay in their classes, the counts reject gives."""
    prompt = {"dist": "uniform", "low": 500, "high": 6000}
    counts = {}
    for mode in ("reject", "truncate"):
        folder = tmp_path / mode
        folder.mkdir()
        data = json.loads(
            run_cluster(cluster_file(folder, mode, prompt), backend=FakeBackend()).to_json()
        )
        counts[mode] = {name: c["requests"] for name, c in data["classes"].items()}
        if mode == "truncate":
            assert data["requests_truncated"] > 0
            assert data["classes"]["prompt_tokens>=4096"]["served"] > 0
    assert counts["truncate"] == counts["reject"]
    assert counts["reject"]["prompt_tokens>=4096"] > 0
