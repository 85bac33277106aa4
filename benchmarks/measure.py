"""Measuring one case in a fresh child process, and collecting the results in the parent.

Why a child per case: "cold caches" must mean a fresh interpreter (the compiler and step
caches are per process), and a process's peak RSS only ever grows, so two cases in one
process would report the larger peak for both. The parent starts
``python -m benchmarks --case NAME --child`` with an argument list (no shell, no CLI
string-building) and reads one JSON line marked ``RESULT_MARK`` from its stdout.

What is timed: the case's work only, after ``rdu_sim`` is imported (import time is reported
separately as ``import_s``; 0.4-2 s, more when no bytecode cache exists, e.g. under
PYTHONDONTWRITEBYTECODE). Peak RSS: ``getrusage`` max RSS of the child (exact for one
process) and, for cases with worker processes, the largest sum over the child and all its
descendants, sampled every ``SAMPLE_S`` by a thread (psutil).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from benchmarks.cases import get
from benchmarks.work import ROOT

RESULT_MARK = "BENCH-RESULT "
SAMPLE_S = 0.1
CHILD_TIMEOUT_S = 1800
"""Longest a case without a time budget may run before it is stopped and reported failed."""
BUDGET_TIMEOUT_FACTOR = 6
"""A case with a time budget is stopped at this many times its budget (at least
``CHILD_TIMEOUT_S``): a miss is still measured, a hang is not waited on forever."""


def child_timeout_s(budget_wall_s: float | None) -> float:
    """How long a case's child process may run: ``CHILD_TIMEOUT_S``, or
    ``BUDGET_TIMEOUT_FACTOR`` times the case's time budget when that is longer."""
    if budget_wall_s is None:
        return CHILD_TIMEOUT_S
    return max(CHILD_TIMEOUT_S, BUDGET_TIMEOUT_FACTOR * budget_wall_s)


@dataclass
class CaseResult:
    """One case's measurement: the ``--json`` keys (``name`` .. ``pass``) and details."""

    name: str
    wall_s: float
    events: int
    events_per_s: float
    peak_rss_bytes: int
    cpu_s: float = 0.0  # user + system CPU of the child and its descendants (sampled)
    import_s: float = 0.0
    budget_wall_s: float | None = None
    budget_rss_bytes: int | None = None
    passed: bool | None = None
    description: str = ""
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict; ``passed`` is written as ``pass``."""
        out = asdict(self)
        out["pass"] = out.pop("passed")
        return out


class TreeRss:
    """Samples the RSS summed over this process and all its descendants; keeps the peak."""

    def __init__(self, interval_s: float = SAMPLE_S) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self.descendant_cpu_s: dict[int, float] = {}  # pid -> last seen user + system CPU
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def __enter__(self) -> TreeRss:
        # The first sample here, before the case's clocks start: taken by the thread, it
        # ran beside the case (psutil walks /proc, ~1.5-2 ms of CPU holding the GIL, more on
        # its first call), inside a short case's wall time (step-cold's ~0.08 s).
        self.peak = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> int:
        """RSS of this process plus every live descendant, bytes."""
        me = psutil.Process()
        total = 0
        for proc in (me, *me.children(recursive=True)):
            try:
                total += int(proc.memory_info().rss)
                if proc.pid != me.pid:
                    times = proc.cpu_times()
                    self.descendant_cpu_s[proc.pid] = times.user + times.system
            except psutil.Error:  # a worker that exited between listing and reading
                continue
        return total

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, self.sample())


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_child(name: str, smoke: bool) -> CaseResult:
    """Run case ``name`` in this process and measure it (the ``--child`` side)."""
    case = get(name)
    start = time.perf_counter()
    import rdu_sim.api  # before timing: import_s is reported apart from the work

    if name.startswith("sweep"):
        import rdu_sim.sweep  # noqa: F401
    if name.startswith("cluster"):
        importlib.import_module("rdu_sim.api_cluster")
    import_s = time.perf_counter() - start
    with TreeRss() as tree:
        cpu0 = _cpu_s()
        t0 = time.perf_counter()
        work = case.run(smoke)
        wall = time.perf_counter() - t0
    if work.wall_s is not None:  # the case timed its own processes
        wall = work.wall_s
    # Workers of a forkserver pool are not our waited-for children: add their sampled CPU.
    cpu = _cpu_s() - cpu0 + sum(tree.descendant_cpu_s.values())
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    peak = max(own_peak, tree.peak)
    result = CaseResult(
        name=name,
        wall_s=wall,
        events=work.events,
        events_per_s=work.events / wall if wall > 0 else 0.0,
        peak_rss_bytes=int(peak),
        cpu_s=cpu,
        import_s=import_s,
        description=case.description,
        detail=work.detail,
    )
    if not smoke:
        result.budget_wall_s = case.budget_wall_s
        result.budget_rss_bytes = case.budget_rss_bytes
        result.passed = (case.budget_wall_s is None or wall <= case.budget_wall_s) and (
            case.budget_rss_bytes is None or peak <= case.budget_rss_bytes
        )
    return result


def run_in_subprocess(name: str, smoke: bool, timeout_s: float = CHILD_TIMEOUT_S) -> CaseResult:
    """Run case ``name`` in a fresh ``python -m benchmarks --child`` and parse its result; a
    child that fails, or runs past ``timeout_s`` (then it is killed), is a failed case with
    the reason in ``error``, so the other cases' figures are still reported."""
    args = [sys.executable, "-m", "benchmarks", "--case", name, "--child"]
    if smoke:
        args.append("--smoke")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _failed(name, smoke, f"stopped after {timeout_s:,.0f} s without a result")
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            data = json.loads(line[len(RESULT_MARK) :])
            data["passed"] = data.pop("pass")
            return CaseResult(**data)
    why = f"child exited with status {proc.returncode} and no result (its stderr is above)"
    return _failed(name, smoke, why)


def _failed(name: str, smoke: bool, error: str) -> CaseResult:
    """A case that produced no figures."""
    return CaseResult(
        name=name,
        wall_s=0.0,
        events=0,
        events_per_s=0.0,
        peak_rss_bytes=0,
        passed=False if not smoke else None,
        error=error,
    )


def machine() -> dict[str, Any]:
    """Where the figures were taken (load average: the machine may be shared)."""
    load1, load5, _ = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "load_avg_1m": load1,
        "load_avg_5m": load5,
        "memory_bytes": int(psutil.virtual_memory().total),
    }


def table(results: list[CaseResult]) -> str:
    """The results as a plain-text table for people."""
    head = ("case", "wall s", "events", "events/s", "peak RSS", "cpu s", "budget", "pass")
    rows = [head]
    for r in results:
        budget = []
        if r.budget_wall_s is not None:
            budget.append(f"<{r.budget_wall_s:g} s")
        if r.budget_rss_bytes is not None:
            gib = r.budget_rss_bytes / 2**30
            budget.append(f"<{gib:g} GiB" if gib >= 1 else f"<{r.budget_rss_bytes >> 20} MiB")
        verdict = "error" if r.error else ("-" if r.passed is None else "yes" if r.passed else "NO")
        rows.append(
            (
                r.name,
                f"{r.wall_s:.3f}",
                f"{r.events:,}",
                f"{r.events_per_s:,.0f}",
                f"{r.peak_rss_bytes / 2**20:,.0f} MiB",
                f"{r.cpu_s:.2f}",
                ", ".join(budget) or "-",
                verdict,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
