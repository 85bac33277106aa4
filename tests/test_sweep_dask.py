"""Sweeps on Dask: what a long-running cluster keeps between sweeps, and what a worker that
is not this simulator (another version, another plugin) or a lost scheduler must not do.

The cluster is a LocalCluster in this process (threads: fast, and what a worker keeps is
this process's state, as a long-running worker keeps its own)."""

from __future__ import annotations

import re
import sqlite3
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rdu_sim.sweep import executors, run_sweep, worker
from rdu_sim.sweep.run import SweepSummary

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def local_cluster(workers: int) -> Any:
    """An in-process Dask cluster of ``workers`` one-thread workers on a TCP scheduler on
    this machine (an address, as a remote one), no dashboard."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with local_cluster(2) as local:
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


def test_a_worker_of_another_version_is_refused_before_anything_runs(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its rows were stored under this version's keys, flagged only at the next run
    monkeypatch.setattr(worker, "__version__", "9.9.9")
    with pytest.raises(worker.WorkerMismatch) as caught:
        run_sweep(write_spec(tmp_path), db=tmp_path / "d.sqlite", cluster=cluster)
    message = str(caught.value)
    assert message.startswith(
        "2 of 2 Dask workers are not the simulator this sweep keys its rows by, so nothing "
        "was run: tcp://127.0.0.1:"
    )
    assert message.count("runs rdu-sim 9.9.9") == 2
    assert statuses(tmp_path / "d.sqlite") == []


def test_a_worker_that_became_another_version_is_refused_at_its_first_point(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker joining after the check: the point is refused where it runs, and the sweep
    # stops with that one error instead of storing a row under a key that lies
    monkeypatch.setattr(executors, "check_workers", lambda client, tasks: None)
    monkeypatch.setattr(worker, "__version__", "9.9.9")
    monkeypatch.setattr(worker, "_IDENTITY", {})
    with pytest.raises(worker.WorkerMismatch, match=r"^worker \S+:\d+ runs rdu-sim 9\.9\.9"):
        run_sweep(write_spec(tmp_path), db=tmp_path / "d.sqlite", cluster=cluster)
    assert statuses(tmp_path / "d.sqlite") == []


PLUGIN = """\
from rdu_sim.serving.batching import register
from rdu_sim.serving.batching.prefill_first import PrefillFirst
class DaskTestPolicy(PrefillFirst):
    pass
register("dasktest_policy", DaskTestPolicy)
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A plugin batching policy this process (the client, and its threads' workers) loads
    from RDU_SIM_PLUGINS; the registry as it was after the test."""

    from rdu_sim import plugins
    from rdu_sim.serving.batching import base

    (tmp_path / "dasktest_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.VARIABLE, "dasktest_plugin")
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(plugins, "_loaded", set())
    monkeypatch.setattr(worker, "_IDENTITY", {})
    yield "dasktest_plugin"
    sys.modules.pop("dasktest_plugin", None)


@pytest.mark.parametrize(
    ("there", "said"),
    [
        (
            "f" * 64,
            r"has another source of plugin package 'dasktest_plugin' "
            r"\(dasktest_plugin.DaskTestPolicy\): sha256 ffffffffffff there, [0-9a-f]{12} in "
            r"the sweep \(install the same plugin on both\)",
        ),
        (
            None,
            r"cannot import plugin package 'dasktest_plugin' \(dasktest_plugin.DaskTestPolicy\),"
            r" which the sweep's points use: RDU_SIM_PLUGINS='dasktest_plugin' there \(the "
            r"worker's environment, not the spec\)",
        ),
    ],
)
@pytest.mark.parametrize("joined_later", [False, True])
def test_a_worker_with_another_plugin_or_none_is_refused(
    cluster: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plugin: str,
    there: str | None,
    said: str,
    joined_later: bool,
) -> None:
    # a worker whose plugin had other source computed with it and stored the row under the
    # key of the client's source; one without the plugin failed every point, blaming --set
    from rdu_sim import plugins

    spec = write_spec(
        tmp_path, extra="set: {serving.requests: 4, serving.prefill_priority: dasktest_policy}\n"
    )
    spec.write_text(spec.read_text().replace("set: {serving.requests: 4}\n", ""))
    if joined_later:
        monkeypatch.setattr(executors, "check_workers", lambda client, tasks: None)
    real = plugins.digest_here
    monkeypatch.setattr(
        plugins, "digest_here", lambda package: there if package == plugin else real(package)
    )
    with pytest.raises(worker.WorkerMismatch) as caught:
        run_sweep(spec, db=tmp_path / "d.sqlite", cluster=cluster)
    first = r"^worker \S+:\d+ " if joined_later else r"^2 of 2 Dask workers .*: tcp://\S+: "

    assert re.search(first + said, str(caught.value)), str(caught.value)
    assert statuses(tmp_path / "d.sqlite") == []


def test_a_lost_scheduler_stops_the_sweep_leaving_its_unrun_points_to_a_resume(
    tmp_path: Path,
) -> None:
    # every point left was stored as failed (FutureCancelledError ...
    # scheduler-connection-lost), and the same command then ran nothing
    spec = write_spec(tmp_path)
    spec.write_text(
        spec.read_text().replace("{name: synthetic}", "{name: synthetic, options: {sleep_s: 0.3}}")
    )
    db = tmp_path / "d.sqlite"
    local = local_cluster(1)

    def stored() -> bool:
        try:  # the sweep creates the file before its table: none stored yet
            return db.is_file() and bool(statuses(db))
        except sqlite3.OperationalError:
            return False

    def lose_the_scheduler() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stored():
            time.sleep(0.05)
        local.close()

    threading.Thread(target=lose_the_scheduler, daemon=True).start()
    with pytest.raises(executors.SchedulerLost) as caught:
        run_sweep(spec, db=db, cluster=local.scheduler_address)
    kept = statuses(db)
    assert kept and set(kept) == {"done"} and len(kept) < 6
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(
        f"--cluster: lost the Dask scheduler at {local.scheduler_address} ("
    )
    assert str(caught.value).endswith(
        f"the points not run are not stored: {len(kept)} of 6 points are saved in {db} "
        f"({len(kept)} finished now); run the same command again to resume"
    )
    summary = run_sweep(spec, db=db, workers=1)  # the same sweep resumes
    assert (summary.ran, summary.already_done, summary.failed) == (6 - len(kept), len(kept), 0)


def test_an_unreachable_scheduler_is_the_first_and_only_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it was said after the plan line and a 0/N bar, with the database already created
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.sweep.progress import Silent

    said: list[str] = []

    class Recording(Silent):
        def message(self, text: str) -> None:
            said.append(text)

    monkeypatch.setattr(executors, "CONNECT_S", 1.0)
    with pytest.raises(ConfigError, match=r"cannot reach the Dask scheduler at 'tcp://127\.0"):
        run_sweep(
            write_spec(tmp_path),
            db=tmp_path / "d.sqlite",
            cluster="tcp://127.0.0.1:9",
            progress=Recording(),
        )
    assert said == []
    assert not (tmp_path / "d.sqlite").exists()


def test_a_local_cluster_starts_only_when_there_is_something_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, db = write_spec(tmp_path), tmp_path / "d.sqlite"
    run_sweep(spec, db=db, workers=1)

    def no_cluster(cluster: str, workers: int) -> Any:
        raise AssertionError("a LocalCluster was started for nothing")

    monkeypatch.setattr(executors, "_dask_client", no_cluster)
    summary = run_sweep(spec, db=db, cluster="local")
    assert (summary.ran, summary.already_done) == (0, 6)
