"""`rdu-sim sweep`: run, resume, export, dry run, Dask, exit statuses; and the issue's
"Must show" case on the real simulator (skipped until the compiler and engine land).
"""

from __future__ import annotations

import csv
import json
import sqlite3
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rdu_sim.cli.main import cli
from rdu_sim.sweep import parquet_available

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

SYNTHETIC = """
axes:
  serving.batch_slots: [1, 2, 4, 8]
metrics: [decode_tokens_per_s, ttft_s.p50]
evaluator: {name: synthetic}
"""


def write_spec(tmp_path: Path, body: str = SYNTHETIC, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(body).lstrip("\n"))
    return path


def sweep(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["sweep", *map(str, args)])


def table(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT key, status, metrics FROM results ORDER BY key"))


def test_run_then_resume_then_export(tmp_path: Path) -> None:
    spec, db = write_spec(tmp_path), tmp_path / "out.sqlite"
    first = sweep(spec, "--workers", "2", "--db", db)
    assert first.exit_code == 0, first.output
    assert "ran 4 points" in first.stdout and "4 done, 0 failed" in first.stdout
    assert "spec: 4 points; 0 already done, 4 to run" in first.stderr
    assert "4/4" in first.stderr  # the progress bar's final state
    rows = table(db)
    assert len(rows) == 4 and all(status == "done" for _, status, _ in rows)

    again = sweep(spec, "--workers", "2", "--db", db, "--export", tmp_path / "out.csv")
    assert again.exit_code == 0, again.output
    assert "nothing to run; 4 of 4 points already done" in again.stdout
    assert "4 already done, 0 to run" in again.stderr
    assert table(db) == rows
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert len(lines) == 5 and "serving.batch_slots" in lines[0]


def test_default_db_is_beside_the_spec_and_dry_run_writes_nothing(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    dry = sweep(spec, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert len(dry.stdout.splitlines()) == 4 and "run   serving.batch_slots=8" in dry.stdout
    assert not (tmp_path / "spec.sqlite").exists()
    assert sweep(spec, "--workers", "1", "--no-progress").exit_code == 0
    assert len(table(tmp_path / "spec.sqlite")) == 4
    dry = sweep(spec, "--dry-run")
    assert dry.stdout.count("skip") == 4


def test_failed_points_exit_1_and_retry(tmp_path: Path) -> None:
    failing = SYNTHETIC.replace(
        "{name: synthetic}", "{name: synthetic, options: {fail_when: {serving.batch_slots: 2}}}"
    )
    spec = write_spec(tmp_path, failing)
    result = sweep(spec, "--workers", "1")
    assert result.exit_code == 1
    assert "3 done, 1 failed" in result.stdout and "--retry-failed" in result.stderr
    write_spec(tmp_path)  # the same points, now passing
    retried = sweep(spec, "--workers", "1", "--retry-failed")
    assert retried.exit_code == 0, retried.output
    assert "ran 1 point in" in retried.stdout and "3 were already done" in retried.stdout


def test_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SYNTHETIC.replace("serving.batch_slots", "serving.batch_slotz"))
    result = sweep(spec)
    assert result.exit_code == 2
    assert "axes.serving.batch_slotz" in result.stderr and "Traceback" not in result.output
    if not parquet_available():
        result = sweep(write_spec(tmp_path), "--export", tmp_path / "x.parquet")
        assert result.exit_code == 2 and "needs pyarrow" in result.stderr
        assert not (tmp_path / "spec.sqlite").exists()  # refused before running


@pytest.mark.parametrize(
    ("count", "problem"), [("0", "at least 1 (got 0)"), ("4097", "at most 4096 (got 4097)")]
)
def test_a_worker_count_out_of_range_is_one_error_line(
    tmp_path: Path, count: str, problem: str
) -> None:
    """--workers 0 printed click's usage block and `Error:`; it is the house's one line."""
    result = sweep(write_spec(tmp_path), "--workers", count)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: --workers: must be {problem}"]
    assert not (tmp_path / "spec.sqlite").exists()  # refused before anything runs


def test_sqlite_errors_end_at_the_cli_boundary() -> None:
    """sqlite3's errors become one `error:` line, exit 2 (found without the CLI importing
    sqlite3: a sweep's store loads it, and none can be raised before)."""
    from rdu_sim.cli import errors

    assert sqlite3.Error in errors.boundary_errors()
    failure = sqlite3.OperationalError("disk I/O error")
    assert errors.message_of(failure) == "database error: disk I/O error"


@pytest.mark.slow
def test_cluster_local_gives_the_same_rows(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    spec = write_spec(tmp_path)
    assert sweep(spec, "--workers", "1", "--db", tmp_path / "a.sqlite").exit_code == 0
    result = sweep(spec, "--cluster", "local", "--workers", "2", "--db", tmp_path / "b.sqlite")
    assert result.exit_code == 0, result.output
    assert table(tmp_path / "a.sqlite") == table(tmp_path / "b.sqlite")


def test_must_show_llama8b_batch_slots(tmp_path: Path) -> None:
    """The issue's case: batch_slots [1, 2, 4, 8] on the 1-socket Llama 8B, --workers 2."""
    spec = tmp_path / "must.yaml"
    spec.write_text(
        textwrap.dedent(f"""
        base: {BASE}
        set:
          serving.requests: 4
          serving.prompt_tokens: 128
          serving.output_tokens: 16
        axes: {{serving.batch_slots: [1, 2, 4, 8]}}
        """)
    )
    db = tmp_path / "out.sqlite"
    first = sweep(spec, "--workers", "2", "--db", db)
    assert first.exit_code == 0, first.output
    with sqlite3.connect(db) as conn:
        rows = list(conn.execute("SELECT overrides, status, metrics FROM results"))
    assert sorted(json.loads(o)["serving.batch_slots"] for o, _, _ in rows) == [1, 2, 4, 8]
    for overrides, status, metrics in rows:
        values = json.loads(metrics)
        assert status == "done"
        assert values["batch_slots"] == json.loads(overrides)["serving.batch_slots"]
        assert values["decode_tokens_per_s"] > 0 and values["requests_completed"] == 4
    again = sweep(spec, "--workers", "2", "--db", db)
    assert again.exit_code == 0
    assert "4 of 4 points already done" in again.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 4


def test_a_point_another_spec_ran_exports_as_this_specs(tmp_path: Path) -> None:
    """Two specs sharing points on one database: the second's export showed the first's name
    in the shared rows (whichever spec stored them); it is the same bytes as its own run."""
    low = write_spec(tmp_path, SYNTHETIC.replace("[1, 2, 4, 8]", "[1, 2, 4]"), "low.yaml")
    high = write_spec(tmp_path, SYNTHETIC.replace("[1, 2, 4, 8]", "[2, 4, 8]"), "high.yaml")
    shared, alone = tmp_path / "shared.sqlite", tmp_path / "alone.sqlite"
    assert sweep(low, "--workers", "1", "--db", shared).exit_code == 0
    args = ("--workers", "1", "--no-progress")
    together = sweep(high, *args, "--db", shared, "--export", tmp_path / "together.csv")
    assert together.exit_code == 0 and "2 already done" in together.stderr
    assert sweep(high, *args, "--db", alone, "--export", tmp_path / "alone.csv").exit_code == 0
    text = (tmp_path / "together.csv").read_text()
    assert ",low," not in text
    assert text == (tmp_path / "alone.csv").read_text()


def test_an_export_holds_the_specs_metrics_whatever_else_the_database_holds(
    tmp_path: Path,
) -> None:
    """A spec's export has its own metrics' columns, in its order: after a spec without a
    metrics list filled the shared database, the rows it reuses held every metric, and the
    export had a column for each (the same bytes as a run alone now); a spec without a list
    reruns the rows the listing spec stored and exports every metric, no cell blank."""
    listing = SYNTHETIC.replace("[decode_tokens_per_s, ttft_s.p50]", "[ttft_s, batch_slots]")
    few = write_spec(tmp_path, listing, "few.yaml")
    every = write_spec(
        tmp_path, listing.replace("metrics: [ttft_s, batch_slots]\n", ""), "all.yaml"
    )
    shared, alone = tmp_path / "shared.sqlite", tmp_path / "alone.sqlite"
    args = ("--workers", "1", "--no-progress")
    assert sweep(every, *args, "--db", shared).exit_code == 0
    together = sweep(few, *args, "--db", shared, "--export", tmp_path / "together.csv")
    assert together.exit_code == 0 and "4 already done" in together.stderr
    assert sweep(few, *args, "--db", alone, "--export", tmp_path / "alone.csv").exit_code == 0
    text = (tmp_path / "together.csv").read_text()
    assert text.splitlines()[0] == (
        "key,sweep,status,serving.batch_slots,ttft_s.p50,ttft_s.p90,ttft_s.p99,batch_slots,"
        "error,version"
    )
    assert text == (tmp_path / "alone.csv").read_text()

    back = sweep(every, *args, "--db", alone, "--export", tmp_path / "all.csv")
    assert back.exit_code == 0 and "4 done without a requested metric, rerunning" in back.stderr
    with (tmp_path / "all.csv").open() as handle:
        exported = list(csv.DictReader(handle))
    assert len(exported) == 4 and {"model", "memory.hbm.kv_bytes"} <= set(exported[0])
    assert [k for row in exported for k, v in row.items() if v == ""] == ["error"] * 4


def test_the_table_says_a_point_that_does_not_fit_as_check_does(tmp_path: Path) -> None:
    """A point whose memory plan the run refuses read ``failed: SlotsCapacityError...`` in
    the sweep's table (its class name, then the workload's path, cut at the first word);
    it says ``does not fit``, as a dry run and `check` do, and the sentence from its field
    on. The database keeps the whole error."""
    body = "set: {serving.requests: 2}\naxes: {serving.batch_slots: [2, 100000]}\n"
    spec = write_spec(tmp_path, body + "metrics: [decode_tokens_per_s]\n")
    db = tmp_path / "fit.sqlite"
    result = sweep(spec, "--workers", "1", "--db", db)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    (row,) = [line for line in lines if line.strip().startswith("100000") and "fit" in line]
    cell = row[row.index("does not fit") :].strip()  # the status (a table of its own)
    assert cell.startswith("does not fit: serving.batch_slots: the KV cache of 100,000 slots")
    assert cell.endswith("...") and "CapacityError" not in result.stdout
    with sqlite3.connect(db) as conn:
        (error,) = conn.execute("SELECT error FROM results WHERE status = 'failed'").fetchone()
    assert error.startswith(f"SlotsCapacityError: {BASE}: serving.batch_slots: the KV cache")


def test_slots_that_a_swept_hbm_capacity_leaves_no_room_for_blame_the_sweep(
    tmp_path: Path,
) -> None:
    """A point whose swept HBM capacity leaves the base file's slots no room was blamed on
    the base file's line of serving.batch_slots, without the swept field, and offered no
    more HBM; it names the sweep's field, without the line, and offers more HBM."""
    body = "set: {serving.requests: 2}\naxes: {hw.socket.hbm.capacity: [20 GiB]}\n"
    spec = write_spec(tmp_path, body + "metrics: [decode_tokens_per_s]\n")
    db = tmp_path / "hbm.sqlite"
    result = sweep(spec, "--workers", "1", "--db", db)
    assert result.exit_code == 1, result.output
    with sqlite3.connect(db) as conn:
        (error,) = conn.execute("SELECT error FROM results WHERE status = 'failed'").fetchone()
    assert error.startswith(f"SlotsCapacityError: {BASE}: serving.batch_slots: the KV cache")
    assert "give each socket more HBM (hw.socket.hbm.capacity, now 20 GiB)" in error
    assert error.endswith("(from the sweep spec: hw.socket.hbm.capacity)")


def test_a_dry_run_and_check_mark_the_points_that_do_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run listed `run` for a point whose memory plan the run refuses; it says `does
    not fit` with the run's own words, and `check` counts it."""
    from rdu_sim import api
    from rdu_sim.compiler import CapacityError

    body = "set: {serving.requests: 8}\naxes: {serving.batch_slots: [8, 100000]}\n"
    spec = write_spec(tmp_path, body + "metrics: [decode_tokens_per_s]\n")
    with pytest.raises(CapacityError) as run:
        api.run(BASE, {"serving.batch_slots": 100000, "serving.requests": 8})
    dry = sweep(spec, "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.stdout.splitlines()
    assert lines[0].split()[1:3] == ["run", "serving.batch_slots=8"]
    assert lines[1].split()[1:3] == ["does", "not"]
    # the run's own words, the override named where the sweep took it from
    in_sweep = str(run.value).replace("(from overrides: ", "(from the sweep spec: ")
    assert "(from the sweep spec: serving.batch_slots)" in in_sweep
    assert lines[1].endswith(f"serving.batch_slots=100000: {in_sweep}")
    assert "memory plans checked: 1 does not fit in memory (dry run" in dry.stderr
    check = CliRunner().invoke(cli, ["check", str(spec)])
    assert check.exit_code == 0  # a point that does not fit is a result, not a bad spec
    assert "; memory plans checked: 1 does not fit in memory (first: " in check.stdout
    from rdu_sim.sweep import run as run_module

    monkeypatch.setattr(run_module, "FIT_BUDGET_S", 0.0)  # a grid too slow to check whole
    dry = sweep(spec, "--dry-run")
    assert "memory plans checked for 1 of 2 points in " in dry.stderr, dry.stderr
    assert "the rest are not checked): it fits" in dry.stderr


@pytest.mark.parametrize(
    ("command", "count", "problem"),
    [
        ("plan", "0", "at least 1 (got 0)"),
        ("plan", "4097", "at most 4096 (got 4097)"),
        ("calibrate", "-3", "at least 1 (got -3)"),
        ("calibrate", "257", "at most 256 (got 257)"),
    ],
)
def test_plan_and_calibrate_refuse_a_worker_count_in_one_line(
    command: str, count: str, problem: str
) -> None:
    """One rule for every --workers (cli.options.workers_option), checked before the spec
    is read."""
    result = CliRunner().invoke(cli, [command, "no-such-spec.yaml", "--workers", count])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: --workers: must be {problem}"]


def test_a_sweep_over_attention_ranks_points_to_the_plan_and_cluster_runs(tmp_path: Path) -> None:
    """Every point of a sweep over parallelism.dp_attention fails (a lone run serves one
    server): its words say where layouts are searched, rdu-sim plan or a cluster's runs
    with --set pools..., and docs/sweeps.md says the same."""
    ep = ROOT / "workloads" / "ep" / "deepseek-r1-h100.yaml"
    spec = tmp_path / "dp.yaml"
    spec.write_text(
        f"base: {ep}\nset: {{parallelism.tp: 1, parallelism.ep: 16}}\n"
        "axes: {parallelism.dp_attention: [16]}\nmetrics: [decode_tokens_per_s]\n"
    )
    dry = sweep(spec, "--dry-run")
    assert dry.exit_code == 0, dry.output
    (line,) = [line for line in dry.stdout.splitlines() if "parallelism.dp_attention=16" in line]
    assert "a lone run, or a sweep's point, serves one server" in line
    assert "to search layouts, rdu-sim plan, or runs of a cluster file with --set " in line
    assert "pools.NAME.set.parallelism.* (docs/sweeps.md)" in line
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    assert "rdu-sim plan" in doc and "pools.serve.set.parallelism.dp_attention=16" in doc
