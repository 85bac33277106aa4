"""`python -m benchmarks.exactness OUT --quick` writes the same bytes twice, without provenance.

The exactness outputs are how a speed change shows it moved no result (docs/performance.md,
"Exactness"): they must themselves be deterministic, name no commit, and record the events a
step processed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.exactness import commands

ROOT = Path(__file__).resolve().parent.parent


def _write(out: Path) -> dict[str, bytes]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.exactness", str(out), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 of 2 outputs written" in proc.stdout
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_quick_outputs_are_deterministic_and_name_no_commit(tmp_path: Path) -> None:
    first, second = _write(tmp_path / "a"), _write(tmp_path / "b")
    assert first == second
    assert sorted(first) == sorted(f"{name}.json" for name, _ in commands(quick=True))
    step = json.loads(first["step-llama3.1-8b-1socket-decode.json"])
    run = json.loads(first["run-llama3.1-8b-1socket.json"])
    assert "provenance" not in step and "provenance" not in run
    assert step["events"] > 0 and run["requests_completed"] == 20


def test_the_full_set_is_the_steps_runs_and_every_shipped_cluster() -> None:
    full = commands(quick=False)
    clusters = len(list((ROOT / "workloads" / "clusters").glob("*.yaml")))
    speculative = len(list((ROOT / "workloads" / "speculative").glob("*.yaml")))
    expected = 8 + 3 + speculative + clusters  # 4 workloads x 2 phases, 3 lone runs
    assert len(full) == expected and len({name for name, _ in full}) == expected
    assert all(args[-1] == "--json" for _, args in full)
