"""A sweep SIGKILLed mid-way and restarted finishes with every point exactly once.

The sweep runs in a subprocess (calling the Python API, as the CLI does) with the
`synthetic` evaluator; `sleep_s` makes points slow enough to kill between them, or 0 keeps
the parent writing rows back to back so the kill lands during a write. After each kill the
database must pass SQLite's integrity check and hold only complete rows; the rerun must skip
exactly those and run the rest once (`attempts` stays 1 everywhere).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from rdu_sim.sweep import expand, load_spec, run_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
RUNNER = (
    "import sys; from rdu_sim.sweep import run_sweep; "
    "run_sweep(sys.argv[1], db=sys.argv[2], workers=int(sys.argv[3]))"
)


def write_spec(tmp_path: Path, slots: int, seeds: int, sleep_s: float) -> Path:
    path = tmp_path / "kill.yaml"
    path.write_text(
        f"base: {BASE}\n"
        + textwrap.dedent(f"""
        axes:
          serving.batch_slots: {{start: 1, stop: {slots}, step: 1}}
          serving.seed: {{start: 0, stop: {seeds - 1}, step: 1}}
        metrics: [decode_tokens_per_s, ttft_s]
        evaluator: {{name: synthetic, options: {{sleep_s: {sleep_s}}}}}
        """)
    )
    return path


def count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def start(spec: Path, db: Path, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(spec), str(db), str(workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def kill_when(proc: subprocess.Popen[bytes], db: Path, rows: int, group: bool) -> int:
    """SIGKILL the sweep (its whole process group when `group`) once `rows` rows exist."""
    deadline = time.monotonic() + 60
    while count(db) < rows:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the sweep did not make progress"
        time.sleep(0.005)
    if group:
        os.killpg(proc.pid, signal.SIGKILL)  # this test's own session: the sweep and its pool
    else:
        proc.kill()
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return count(db)


def check_rows(db: Path) -> set[str]:
    """The database is intact and every row in it is complete; return the keys."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = set()
        for key, status, metrics, config, finished, attempts in conn.execute(
            "SELECT key, status, metrics, config, finished, attempts FROM results"
        ):
            assert status == "done" and finished and attempts == 1
            assert set(json.loads(metrics)) == {
                "decode_tokens_per_s",
                "ttft_s.p50",
                "ttft_s.p90",
                "ttft_s.p99",
            }
            assert json.loads(config)["workload"]["serving"]["batch_slots"] >= 1
            keys.add(key)
    return keys


def finish(spec: Path, db: Path, before: int) -> None:
    """Resume in this process; every point must then be there exactly once."""
    everything = {p.key for p in expand(load_spec(spec)).points}
    summary = run_sweep(spec, db=db, workers=1)
    assert summary.already_done == before
    assert summary.ran == len(everything) - before and summary.failed == 0
    assert check_rows(db) == everything


def test_killed_twice_between_points_then_resumed(tmp_path: Path) -> None:
    spec, db = write_spec(tmp_path, slots=10, seeds=6, sleep_s=0.02), tmp_path / "k.sqlite"
    first = kill_when(start(spec, db, workers=1), db, rows=8, group=False)
    assert 8 <= first < 60 and len(check_rows(db)) == first
    second = kill_when(start(spec, db, workers=1), db, rows=first + 10, group=False)
    assert first + 10 <= second < 60 and len(check_rows(db)) == second
    finish(spec, db, second)


def test_killed_while_writing_back_to_back(tmp_path: Path) -> None:
    spec, db = write_spec(tmp_path, slots=12, seeds=8, sleep_s=0.0), tmp_path / "k.sqlite"
    done = kill_when(start(spec, db, workers=1), db, rows=25, group=False)
    assert 25 <= done < 96
    finish(spec, db, done)


def test_killed_with_a_process_pool(tmp_path: Path) -> None:
    # 30 points of 80 ms left on 2 workers when the kill is due: 1.2 s for this process to
    # be scheduled on a loaded machine (at 30 ms, 0.45 s once ran out: the sweep finished)
    spec, db = write_spec(tmp_path, slots=10, seeds=4, sleep_s=0.08), tmp_path / "k.sqlite"
    done = kill_when(start(spec, db, workers=2), db, rows=10, group=True)
    assert 10 <= done < 40
    finish(spec, db, done)
