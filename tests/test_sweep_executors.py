"""The same sweep gives the same rows in this process, in a local pool, and on Dask.

The Dask case starts a real scheduler and two worker processes on loopback and connects to
it by its tcp:// address, the path `--cluster tcp://HOST:PORT` takes.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest

from rdu_sim.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

SPEC = """
name: same-rows
set: {serving.requests: 4}
axes:
  serving.batch_slots: [1, 2, 4, 8]
  hw.socket.hbm.bandwidth: ["1 TB/s", "2 TB/s"]
zip:
  - {serving.max_context: [4096, 8192], kv.min_bucket: [512, 1024]}
metrics: [decode_tokens_per_s, ttft_s.p50, memory.hbm]
evaluator: {name: synthetic, options: {fail_when: {serving.batch_slots: 8,
                                                   serving.max_context: 4096}}}
"""


def table(db: Path) -> dict[str, tuple[str, str, str | None, str]]:
    """key -> (status, metrics, first line of error, overrides), as stored."""
    with sqlite3.connect(db) as conn:
        return {
            key: (status, metrics, error.splitlines()[0] if error else None, overrides)
            for key, status, metrics, error, overrides in conn.execute(
                "SELECT key, status, metrics, error, overrides FROM results"
            )
        }


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "same.yaml"
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(SPEC).lstrip("\n"))
    return path


@pytest.fixture(scope="module")
def serial(
    spec: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[str, str, str | None, str]]:
    db = tmp_path_factory.mktemp("serial") / "serial.sqlite"
    summary = run_sweep(spec, db=db, workers=1)
    assert (summary.ran, summary.done, summary.failed) == (16, 14, 2)
    return table(db)


def test_serial_rows_are_complete(serial: dict[str, tuple[str, str, str | None, str]]) -> None:
    assert len(serial) == 16
    failed = [v for v in serial.values() if v[0] == "failed"]
    assert len(failed) == 2  # batch 8 at 4k context, at both bandwidths
    assert all(json.loads(v[3])["serving.batch_slots"] == 8 for v in failed)
    assert all(
        json.loads(v[1])["memory.hbm.kv_bytes"] > 0 for v in serial.values() if v[0] == "done"
    )


def test_process_pool_gives_the_same_rows(
    spec: Path, tmp_path: Path, serial: dict[str, tuple[str, str, str | None, str]]
) -> None:
    db = tmp_path / "pool.sqlite"
    summary = run_sweep(spec, db=db, workers=2)
    assert summary.ran == 16
    assert table(db) == serial
    with sqlite3.connect(db) as conn:
        workers = {w for (w,) in conn.execute("SELECT DISTINCT worker FROM results")}
    assert len(workers) >= 2  # really ran in worker processes


@pytest.mark.slow
def test_dask_cluster_gives_the_same_rows(
    spec: Path, tmp_path: Path, serial: dict[str, tuple[str, str, str | None, str]]
) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        db = tmp_path / "dask.sqlite"
        summary = run_sweep(spec, db=db, cluster=address, workers=2)
    assert summary.ran == 16
    assert table(db) == serial


def test_local_workers_are_at_most_four_a_core(monkeypatch: pytest.MonkeyPatch) -> None:
    # --workers 4096 on a small machine would start thousands of ~60 MB processes.
    from rdu_sim.sweep import executors

    monkeypatch.setattr(executors.os, "cpu_count", lambda: 2)
    assert [executors.local_workers(n) for n in (1, 3, 8, 9, 4096)] == [1, 3, 8, 8, 8]
