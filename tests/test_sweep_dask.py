"""Sweeps on Dask: what a long-running cluster keeps between sweeps, and what a worker that
is not this simulator (another version, another plugin) or a lost scheduler must not do.

The cluster is a LocalCluster in this process (threads: fast, and what a worker keeps is
this process's state, as a long-running worker keeps its own)."""

from __future__ import annotations

import sqlite3
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rdu_sim.sweep import executors, run_sweep, worker
from rdu_sim.sweep.run import SweepSummary

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as local:
        yield local.scheduler_address


def write_spec(folder: Path, name: str = "dask", extra: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"base: {BASE}\n"
        + textwrap.dedent(
            """
            set: {serving.requests: 4}
            axes:
              serving.batch_slots: [1, 2, 4]
              hw.socket.hbm.bandwidth: ["1 TB/s", "2 TB/s"]
            metrics: [decode_tokens_per_s]
            evaluator: {name: synthetic}
            """
        ).lstrip("\n")
        + extra
    )
    return path


def statuses(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(status for (status,) in conn.execute("SELECT status FROM results"))


def test_a_stopped_sweep_does_not_stop_the_next_on_the_same_workers(
    cluster: str, tmp_path: Path
) -> None:
    # a sweep stopped on a long-running cluster told its workers to stop its batches: the
    # next sweep on those workers ran nothing and said "nothing to run" (lost work)
    with distributed.Client(cluster) as client:
        client.run(worker.stop_batches, "an-earlier-sweep")
    summary = run_sweep(write_spec(tmp_path), db=tmp_path / "d.sqlite", cluster=cluster)
    assert (summary.ran, summary.done, summary.unrun) == (6, 6, 0)
    assert statuses(tmp_path / "d.sqlite") == ["done"] * 6


def short_batch(tasks: Sequence[worker.Task], sweep: str | None = None) -> list[Any]:
    """A worker handing back its batch without its last point (stopped alone)."""
    return worker.run_batch(tasks[:-1], sweep)


def test_a_short_batch_from_dask_is_not_taken_for_a_whole_one(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the pool marks a point its worker did not hand back as failed (a rerun with
    # --retry-failed runs it); Dask took the short batch as whole: the point had no row
    monkeypatch.setattr(executors, "run_batch", short_batch)
    summary = run_sweep(write_spec(tmp_path), db=tmp_path / "d.sqlite", cluster=cluster)
    assert summary.ran == 6 and summary.unrun == 0
    assert summary.failed == len(statuses(tmp_path / "d.sqlite")) - summary.done > 0
    with sqlite3.connect(tmp_path / "d.sqlite") as conn:
        errors = {e for (e,) in conn.execute("SELECT error FROM results WHERE status='failed'")}
    assert errors == {"the worker was stopped before this point finished (not by this sweep)"}


def test_the_last_line_never_says_nothing_to_run_while_points_are_unrun() -> None:
    summary = SweepSummary("s", Path("s.sqlite"), 30, 16, 0, unrun=14)
    assert "nothing to run" not in summary.describe()
    assert "14 points not run" in summary.describe()
    assert "run the same command again" in summary.describe()
    done = SweepSummary("s", Path("s.sqlite"), 30, 30, 0)
    assert done.describe() == "s: nothing to run; 30 of 30 points already done (s.sqlite)"
