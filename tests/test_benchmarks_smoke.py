"""`python -m benchmarks --smoke --json FILE` runs every case and writes the contract keys.

No timing assertions (the machine may be shared): the test only keeps the command from
rotting. Each case runs in its own subprocess at tiny sizes (about 20 s in all).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEYS = {"name", "wall_s", "events", "events_per_s", "peak_rss_bytes"}
CASES = [
    "engine-step",
    "serve-snapstream",
    "serve-full",
    "sweep-200",
    "sweep-hw-1000",
    "serve-million",
    "step-cold",
    "cli-help",
    "cli-step",
    "cluster-mooncake-hour",
    "cluster-million",
    "cluster-h100-lockstep",
]


@pytest.mark.slow
def test_smoke_run_writes_every_case(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["smoke"] is True
    cases = doc["cases"]
    assert [c["name"] for c in cases] == CASES
    for case in cases:
        assert set(case) >= KEYS, case
        assert case["error"] is None, case["error"]
        assert case["wall_s"] > 0 and case["peak_rss_bytes"] > 0
        if case["name"] != "cli-help":  # (starting the CLI simulates nothing)
            assert case["events"] > 0, case["name"]
            assert case["events_per_s"] > 0
    for sweep in (cases[3]["detail"], cases[4]["detail"]):
        assert sweep["points"] == sweep["done"] == 4
    assert len(cases[7]["detail"]["runs_s"]) == 5  # cli-help: the median of 5 processes
    step = cases[8]["detail"]  # cli-step: 5 processes, each split into imports and the rest
    assert len(step["runs_s"]) == len(step["import_s"]) == len(step["after_import_s"]) == 5
    assert all(0 < i < w for i, w in zip(step["import_s"], step["runs_s"], strict=True))
    for cluster in cases[9:]:  # every request served, none lost
        assert cluster["detail"]["requests_served"] == cluster["detail"]["requests"] > 0
    for name in CASES:  # the table names every case
        assert name in proc.stdout


def test_child_rejects_unknown_case() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--case", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "engine-step" in proc.stderr


def test_a_case_past_its_time_limit_is_a_failed_case_not_a_crash() -> None:
    """The parent stops a child that overruns and reports the case failed, with the reason,
    so the other cases' figures are still printed and written."""
    from benchmarks.measure import CHILD_TIMEOUT_S, child_timeout_s, run_in_subprocess

    result = run_in_subprocess("engine-step", smoke=False, timeout_s=0.01)
    assert result.passed is False and result.wall_s == 0.0
    assert result.error is not None and "stopped after 0 s without a result" in result.error
    assert child_timeout_s(None) == CHILD_TIMEOUT_S
    assert child_timeout_s(600.0) == 3600.0  # sweep-hw-1000: six times its 10 minutes
    assert child_timeout_s(0.5) == CHILD_TIMEOUT_S
