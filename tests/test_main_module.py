"""``python -m rdu_sim`` is the ``rdu-sim`` command (``rdu_sim/__main__.py``): the same
program name, output and exit status as the console script's entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LLAMA = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"


def python_m(module: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_python_m_rdu_sim_runs_the_command() -> None:
    helped = python_m("rdu_sim", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: rdu-sim [OPTIONS] COMMAND [ARGS]...")
    checked, entry = (
        python_m("rdu_sim", "check", LLAMA),
        python_m("rdu_sim.cli.entry", "check", LLAMA),
    )
    assert checked.returncode == entry.returncode == 0, checked.stderr
    assert checked.stdout == entry.stdout and "OK" in checked.stdout
    missing = python_m("rdu_sim", "run", "no-such-workload.yaml")
    errors = [line for line in missing.stderr.splitlines() if line.startswith("error: ")]
    assert missing.returncode == 2 and len(errors) == 1 and "Traceback" not in missing.stderr
    assert errors[0].startswith("error: no-such-workload.yaml: file not found")
