"""Two searches on one database evaluate each shared point once (``sweep.evaluate_points``).

A plan's points go through ``evaluate_points``; two plans on one database (or one plan run
twice at once) claim their points as two sweeps do (``rdu_sim.sweep.claims``): a point the
other live process holds is waited for, and its stored row returned to both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdu_sim.sweep.run import evaluate_points

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Probe:
    """A point of its own: a key and a value; its evaluation sleeps and logs its key."""

    key: str
    overrides: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def slow_square(point: Probe) -> Mapping[str, Any]:
    """Sleep, note the evaluation in the log file the environment names, square the value."""
    time.sleep(float(os.environ.get("PROBE_SLEEP_S", "0")))
    with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {point.key}\n")
    value = int(point.config["value"])
    return {"square": value * value}


def probes(values: list[int]) -> list[Probe]:
    return [Probe(f"k{v}", {"value": v}, {"value": v}) for v in values]


def start(db: Path, values: list[int], log: Path, out: Path) -> subprocess.Popen[str]:
    """``evaluate_points`` of ``values`` in a process of its own; its rows go to ``out``."""
    code = textwrap.dedent(f"""\
        import json, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_evaluate_points_claims import probes, slow_square
        from rdu_sim.sweep.run import evaluate_points
        rows = evaluate_points("probe", probes({values!r}), slow_square, {str(db)!r})
        squares = {{k: json.loads(r["metrics"])["square"] if isinstance(r["metrics"], str)
                   else r["metrics"]["square"] for k, r in rows.items()}}
        open({str(out)!r}, "w").write(json.dumps(squares, sort_keys=True))
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBE_LOG": str(log), "PROBE_SLEEP_S": "0.3"}
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_sharing_points_evaluate_each_once(tmp_path: Path) -> None:
    db, log = tmp_path / "plan.sqlite", tmp_path / "evaluations.log"
    log.touch()
    first = start(db, [1, 2, 3, 4, 5, 6], log, tmp_path / "a.json")
    deadline = time.monotonic() + 60
    while not log.read_text() and time.monotonic() < deadline:  # the first has claimed
        time.sleep(0.05)
    second = start(db, [4, 5, 6, 7, 8], log, tmp_path / "b.json")
    for proc in (first, second):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    evaluated = [line.split()[1] for line in log.read_text().splitlines()]
    assert sorted(evaluated) == [f"k{v}" for v in range(1, 9)]  # each point once
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert a == {f"k{v}": v * v for v in range(1, 7)}
    assert b == {f"k{v}": v * v for v in range(4, 9)}


def test_a_point_stored_is_not_evaluated_again_and_no_claim_is_left(tmp_path: Path) -> None:
    db, log = tmp_path / "plan.sqlite", tmp_path / "evaluations.log"
    os.environ["PROBE_LOG"] = str(log)
    try:
        evaluate_points("probe", probes([1, 2]), slow_square, db)
        rows = evaluate_points("probe", probes([1, 2, 3]), slow_square, db)
    finally:
        del os.environ["PROBE_LOG"]
    assert [line.split()[1] for line in log.read_text().splitlines()] == ["k1", "k2", "k3"]
    assert set(rows) == {"k1", "k2", "k3"}
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
