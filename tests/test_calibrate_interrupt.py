"""Ctrl-C or SIGTERM stops calibrate at the next unit of work: one line, no traceback, exit
128 + the signal, every finished simulation kept in the cache, and the same command resumes.

calibrate runs in a subprocess of its own session (as a terminal's foreground job), with one
worker or two (SIGINT then reaches the whole process group, as a terminal sends it: the
workers ignore it and the parent terminates them). The signal is sent once the cache holds a
given number of lines, at several moments.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdu_sim.validate.deployment import MeasuredPoint, simulate

ROOT = Path(__file__).resolve().parents[1]
H = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured"


def _measurements(tmp_path: Path) -> Path:
    rows = []
    for i in range(8):
        batch, out = 1 + i % 4, 8 + 4 * (i // 4)
        point = MeasuredPoint("sn40l", "llama-3.2-1b", 1, batch, 64 + i, out, "e2e_s", 1.0)
        value = simulate(point, ["stack.host.serial_per_step=0.0004"])
        rows.append(f"sn40l,llama-3.2-1b,1,{batch},{64 + i},{out},e2e_s,{value}")
    path = tmp_path / "m.csv"
    path.write_text("\n".join([H, *rows]) + "\n")
    return path


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rdu_sim.cli.main", "calibrate", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(
    ("signum", "workers", "after"),
    [(signal.SIGINT, 1, 1), (signal.SIGTERM, 1, 12), (signal.SIGINT, 2, 3)],
)
def test_a_signal_stops_calibrate_and_keeps_its_cache(
    tmp_path: Path, signum: int, workers: int, after: int
) -> None:
    path = _measurements(tmp_path)
    out, cache = tmp_path / "o", tmp_path / "o" / "evaluations.jsonl"
    args = [str(path), "--fit", "stack.host.serial_per_step=0:1ms", "-o", str(out)]
    args += ["--workers", str(workers), "--max-evaluations", "6"]
    proc = _start(args)
    deadline = time.monotonic() + 120
    while _lines(cache) < after and proc.poll() is None:
        assert time.monotonic() < deadline, "calibrate made no progress"
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.fail(
            f"calibrate ended before the signal: {proc.stderr.read() if proc.stderr else ''}"
        )
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # as a terminal sends Ctrl-C: the whole foreground group
    else:
        os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 15, "calibrate took too long to stop"
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr, stderr
    name = signal.Signals(signum).name
    stopped = [line for line in stderr.splitlines() if line.startswith(f"interrupted ({name}): ")]
    assert len(stopped) == 1 and stopped[0] == stderr.strip().splitlines()[-1], stderr
    kept = int(stopped[0].split(": ", 1)[1].split(" ")[0])
    assert kept == _lines(cache) >= after  # what it says it kept is what the cache holds
    assert all(json.loads(line)["values"] for line in cache.read_text().splitlines())
    assert not (out / "fit.json").exists()
    # the same command again replays the cache and finishes the fit
    done = subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", "calibrate", *args, "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = [line for line in done.stderr.splitlines() if line.startswith("calibrate: ")][-1]
    found = re.search(r"; ([\d,]+) simulations? \(", summary)
    assert found, summary
    simulated = int(found.group(1).replace(",", ""))
    keys = [json.loads(line)["key"] for line in cache.read_text().splitlines()]
    assert simulated == len(keys) - kept  # what was kept was never simulated again
    assert len(set(keys)) == len(keys)
    assert json.loads(done.stdout)["parameters"][0]["text"].endswith(" us")


def test_a_stop_while_a_simulation_is_kept_counts_it_as_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal landing while a finished simulation's line is written is raised once the
    line is written AND counted: what the stop says it kept is what the cache holds (the
    line was written and the stop raised before the count, so it said 12 with 13 kept)."""
    from rdu_sim import interrupts
    from rdu_sim.validate.calibration_problem import Inputs, build_problem
    from rdu_sim.validate.evaluation_cache import EvaluationCache
    from rdu_sim.validate.evaluator import Evaluator
    from rdu_sim.validate.scope import parse_fit

    problem = build_problem(
        Inputs(
            measurements=(_measurements(tmp_path),),
            parameters=(parse_fit("stack.host.serial_per_step=0:1ms"),),
            base=tmp_path,
        )
    )
    cache = EvaluationCache(tmp_path / "evaluations.jsonl")
    real_open = cache._open

    class Arriving:
        """The cache's file, where a signal arrives while the first line is written."""

        def __init__(self) -> None:
            self.stream = real_open()

        def write(self, text: str) -> int:
            interrupts._state.pending = signal.SIGTERM  # as the handler does inside a section
            return self.stream.write(text)

        def flush(self) -> None:
            self.stream.flush()

    arriving = Arriving()
    monkeypatch.setattr(cache, "_open", lambda: arriving)
    evaluator = Evaluator(problem, cache)
    try:
        with pytest.raises(interrupts.Interrupted):
            evaluator.evaluate((0.0004,), range(len(problem.units)))
    finally:
        evaluator.close()
        arriving.stream.close()
        interrupts._state.pending = None
    assert evaluator.simulated == _lines(tmp_path / "evaluations.jsonl") == 1
