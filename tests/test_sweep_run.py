"""Running sweeps: rows in SQLite, resume, failures recorded, --retry-failed, load and export.

These use the `synthetic` evaluator (closed form, microseconds, documented in
rdu_sim/sweep/evaluators.py) so they test the machinery, not the simulator.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rdu_sim.config.errors import ConfigError
from rdu_sim.sweep import Point, check_spec, export, load, parquet_available, run_sweep
from rdu_sim.sweep.worker import Outcome

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

SPEC = """
name: demo
set: {serving.requests: 4}
axes:
  serving.batch_slots: [1, 2, 4]
  hw.socket.hbm.bandwidth: ["1 TB/s", "2 TB/s"]
metrics: [decode_tokens_per_s, ttft_s, memory.hbm.kv_bytes]
evaluator: {name: synthetic, options: {fail_when: {serving.batch_slots: 4}}}
"""


def write_spec(tmp_path: Path, body: str = SPEC, name: str = "demo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(body).lstrip("\n"))
    return path


class Recorder:
    """A Reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.outcomes: list[Outcome] = []

    def message(self, text: str) -> None:
        self.messages.append(text)

    def start(self, name: str, total: int) -> None:
        pass

    def advance(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def close(self) -> None:
        pass


def rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM results ORDER BY key")]


def test_rows_failures_and_resume(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    first = run_sweep(spec, workers=1)
    assert first.db == tmp_path / "demo.sqlite"  # default: beside the spec
    assert (first.points, first.ran, first.done, first.failed) == (6, 6, 4, 2)
    stored = rows(first.db)
    assert len(stored) == 6 and {r["key"] for r in stored} == set(first.keys)
    for row in stored:
        overrides = json.loads(row["overrides"])
        config = json.loads(row["config"])
        assert config["workload"]["serving"]["batch_slots"] == overrides["serving.batch_slots"]
        assert row["version"] and row["started"] <= row["finished"] and row["attempts"] == 1
        if overrides["serving.batch_slots"] == 4:
            assert row["status"] == "failed" and row["metrics"] is None
            assert "synthetic failure requested by fail_when" in row["error"]
        else:
            assert row["status"] == "done" and row["error"] is None
            assert set(json.loads(row["metrics"])) == {
                "decode_tokens_per_s",
                "ttft_s.p50",
                "ttft_s.p90",
                "ttft_s.p99",
                "memory.hbm.kv_bytes",
            }

    recorder = Recorder()
    again = run_sweep(spec, workers=1, progress=recorder)
    assert (again.ran, again.already_done, again.failed_before) == (0, 4, 2)
    assert "4 already done" in recorder.messages[0]
    assert "2 failed before (rerun with --retry-failed)" in recorder.messages[0]
    assert rows(first.db) == stored  # nothing rewritten


def test_retry_failed_reruns_only_failed_points(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    run_sweep(spec, workers=1)
    fixed = write_spec(tmp_path, SPEC.replace("fail_when: {serving.batch_slots: 4}", ""))
    recorder = Recorder()
    summary = run_sweep(fixed, workers=1, retry_failed=True, progress=recorder)
    assert (summary.ran, summary.done, summary.already_done) == (2, 2, 4)
    assert len(recorder.outcomes) == 2
    rerun = {
        json.loads(r["overrides"])["serving.batch_slots"]
        for r in rows(summary.db)
        if r["attempts"] == 2
    }
    assert rerun == {4}
    assert all(r["status"] == "done" for r in rows(summary.db))


def test_a_new_metric_reruns_points_stored_without_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SPEC.replace("fail_when: {serving.batch_slots: 4}", ""))
    run_sweep(spec, workers=1)
    more = write_spec(
        tmp_path,
        SPEC.replace("fail_when: {serving.batch_slots: 4}", "").replace(
            "metrics: [", "metrics: [requests_completed, "
        ),
    )
    recorder = Recorder()
    summary = run_sweep(more, workers=1, progress=recorder)
    assert summary.ran == 6 and "6 done without a requested metric" in recorder.messages[0]
    assert run_sweep(more, workers=1).ran == 0


def test_a_spec_without_metrics_reruns_rows_another_spec_stored_with_a_few(
    tmp_path: Path,
) -> None:
    """No `metrics:` list asks for every metric: a row another spec stored with only some
    of them is run again (it held `decode_tokens_per_s` and nothing else, and was exported
    with blank cells), and a whole row is reused by either spec."""
    few = write_spec(tmp_path, SPEC.replace("fail_when: {serving.batch_slots: 4}", ""))
    db = tmp_path / "shared.sqlite"
    run_sweep(few, db=db, workers=1)
    every = write_spec(
        tmp_path,
        SPEC.replace("fail_when: {serving.batch_slots: 4}", "").replace(
            "metrics: [decode_tokens_per_s, ttft_s, memory.hbm.kv_bytes]\n", ""
        ),
        name="every.yaml",
    )
    recorder = Recorder()
    summary = run_sweep(every, db=db, workers=1, progress=recorder)
    assert (summary.ran, summary.already_done) == (6, 0)
    assert "6 done without a requested metric, rerunning" in recorder.messages[0]
    frame = load(db, keys=summary.keys, sweep=summary.name)
    assert frame["model"].notna().all() and frame["requests_completed"].notna().all()
    assert run_sweep(every, db=db, workers=1).already_done == 6  # whole rows: reused
    assert run_sweep(few, db=db, workers=1).already_done == 6


def test_a_whole_result_holds_every_name_a_reused_row_must_hold() -> None:
    """``full_names`` (what a row must hold to be reused by a spec without a metrics list)
    are names every result holds: a whole `simulate` result has each of them, so a row it
    stored is never rerun for lacking one."""
    from rdu_sim.api import run
    from rdu_sim.sweep.run import full_names
    from rdu_sim.sweep.spec import load_spec
    from rdu_sim.sweep.worker import flatten

    spec = load_spec(ROOT / "workloads" / "sweeps" / "llama8b-batch.yaml")
    names = full_names(spec)
    assert {"model", "batch_slots", "decode_tokens_per_s", "warnings"} <= names
    assert "ttft_s" not in names and "memory" not in names  # sections: a run decides them
    flat = flatten(run(BASE, {"serving.requests": 4}).to_dict())
    assert names <= set(flat)


def test_an_unknown_metric_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """The evaluator's result schema names the metrics: a typo fails at the spec's line in
    `check`, a dry run and a sweep's start, with nothing computed or written."""
    spec = write_spec(tmp_path, SPEC.replace("memory.hbm.kv_bytes", "memory.hbm.kv_byte"))
    for attempt in (check_spec, lambda s: run_sweep(s, dry_run=True), run_sweep):
        with pytest.raises(ConfigError) as info:
            attempt(spec)
        issue = info.value.issues[0]
        assert (issue.field, issue.line) == ("metrics.2", 7)
        assert issue.message == (
            "not in the results: memory.hbm.kv_byte (did you mean 'memory.hbm.kv_bytes'?)"
        )
    assert not (tmp_path / "demo.sqlite").exists()


def test_every_unknown_metric_is_refused_not_only_the_first(tmp_path: Path) -> None:
    """Two misspelt metrics reported the first only; each is an issue at its own index."""
    text = SPEC.replace("decode_tokens_per_s", "decode_tokens_per_sec")
    spec = write_spec(tmp_path, text.replace("memory.hbm.kv_bytes", "memory.hbm.kv_byte"))
    with pytest.raises(ConfigError) as info:
        check_spec(spec)
    assert [(i.field, i.message) for i in info.value.issues] == [
        (
            "metrics.0",
            "not in the results: decode_tokens_per_sec (did you mean 'decode_tokens_per_s'?)",
        ),
        (
            "metrics.2",
            "not in the results: memory.hbm.kv_byte (did you mean 'memory.hbm.kv_bytes'?)",
        ),
    ]


def test_a_metric_only_a_run_can_refuse_keeps_the_point_then_stops(tmp_path: Path) -> None:
    """A memory tier no result has passes the schema (a run decides the tiers): the first
    point's result is stored, without it, before the sweep stops; a rerun stops again."""
    spec = write_spec(tmp_path, SPEC.replace("memory.hbm.kv_bytes", "memory.ddr.kv_bytes"))
    check_spec(spec)
    for _ in range(2):
        with pytest.raises(ConfigError) as info:
            run_sweep(spec, workers=1)
        issue = info.value.issues[0]
        assert (issue.field, issue.line) == ("metrics.2", 7)
        assert issue.message.startswith(
            "not in the results: memory.ddr.kv_bytes (did you mean 'memory.hbm.kv_bytes'?); "
            "the sweep stopped (the point computed is stored without it). Available metrics: "
        )
        stored = rows(tmp_path / "demo.sqlite")
        assert [r["status"] for r in stored] == ["done"]
        assert sorted(json.loads(stored[0]["metrics"])) == [
            "decode_tokens_per_s",
            "ttft_s.p50",
            "ttft_s.p90",
            "ttft_s.p99",
        ]


def test_the_schemas_name_every_metric_a_result_holds() -> None:
    """Differential: each flattened name of a real result is known to its evaluator's
    schema, and the schema's top-level names are the result's."""
    from rdu_sim.api import load as load_scenario
    from rdu_sim.sweep.evaluators import get_evaluator
    from rdu_sim.sweep.expand import Point as PointType
    from rdu_sim.sweep.worker import flatten

    scenario = load_scenario(BASE, ["serving.requests=4"])
    point = PointType(key="k", overrides={}, config={}, scenario=scenario)
    for name in ("simulate", "synthetic"):
        entry = get_evaluator(name)
        assert entry.result is not None
        schema = entry.result()
        result = entry.function(point, entry.options())
        # a paged KV pool's section is a paged stack's run's only (this one's slots are
        # static), and the replicas a plan holding MLA's query weights whole's
        assert list(result) == [n for n in schema.names if n not in ("kv_pool", "weight_replicas")]
        assert [m for m in flatten(result) if schema.unknown(m) is not None] == []
        assert schema.problem("provenance") is not None
    assert schema.problem("memory.hbm.capacity") == (  # synthetic's
        "not in the results: memory.hbm.capacity (did you mean 'memory.hbm.capacity_bytes'?)"
    )
    assert schema.problem("memory.hbm.capacity_bytes.x") == (
        "not in the results: memory.hbm.capacity_bytes.x (did you mean "
        "'memory.hbm.capacity_bytes'?)"
    )
    assert schema.problem("wibble") == (
        "not in the results: wibble; names: model, max_context, kv_policy, batch_slots, "
        "batch_capacity, kv_bytes_per_slot, decode_tokens_per_s, steady_decode_tokens_per_s, "
        "requests_truncated, prompt_tokens_truncated, output_tokens_truncated, ttft_s, tpot_s, "
        "memory, requests_completed"
    )
    assert schema.problem("model.name") == (
        "not in the results: model.name (did you mean 'model'?)"
    )


def test_dry_run_runs_and_writes_nothing(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    recorder = Recorder()
    summary = run_sweep(spec, dry_run=True, progress=recorder)
    assert summary.plan is not None and len(summary.plan.to_run) == 6
    assert not summary.db.exists() and "dry run" in recorder.messages[0]


def test_load_view_and_export(tmp_path: Path) -> None:
    summary = run_sweep(write_spec(tmp_path), workers=1)
    frame = load(summary.db)
    assert len(frame) == 6
    assert list(frame.columns[:5]) == [
        "key",
        "sweep",
        "status",
        "serving.batch_slots",
        "hw.socket.hbm.bandwidth",
    ]
    assert {"decode_tokens_per_s", "ttft_s.p50", "memory.hbm.kv_bytes", "error", "wall_s"} <= set(
        frame.columns
    )
    done = frame[frame.status == "done"]
    assert done["decode_tokens_per_s"].notna().all() and len(done) == 4
    failed = frame[frame.status == "failed"]
    assert failed["decode_tokens_per_s"].isna().all()
    assert (failed["serving.batch_slots"] == 4).all()

    with sqlite3.connect(summary.db) as conn:  # the flat view for SQL users
        flat = conn.execute(
            'SELECT "serving.batch_slots", "ttft_s.p50" FROM results_flat '
            "WHERE status = 'done' ORDER BY 1"
        ).fetchall()
    assert [slots for slots, _ in flat] == [1, 1, 2, 2]

    csv = export(frame, tmp_path / "out.csv")
    assert csv.read_text().splitlines()[0].startswith("key,sweep,status,serving.batch_slots")
    if not parquet_available():
        with pytest.raises(ConfigError, match="needs pyarrow"):
            export(frame, tmp_path / "out.parquet")
    with pytest.raises(ConfigError, match=r"use \.csv or \.parquet"):
        export(frame, tmp_path / "out.xlsx")


def forty_two(point: Point) -> Mapping[str, Any]:
    """An injected evaluator (module level, so it could pickle to a worker)."""
    return {"answer": 42, "slots": point.scenario.workload.serving.batch_slots}


def test_an_injected_evaluator_replaces_the_specs(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, SPEC.replace("metrics: [decode_tokens_per_s, ttft_s, memory.hbm.kv_bytes]", "")
    )
    summary = run_sweep(spec, workers=1, evaluator=forty_two)
    frame = load(summary.db)
    assert (frame["answer"] == 42).all() and (frame.status == "done").all()
    assert (frame["slots"] == frame["serving.batch_slots"]).all()


def listing(point: Point) -> Mapping[str, Any]:
    """Whole numbers, a ratio, a list and a mapping; batch_slots 4 fails."""
    slots = point.scenario.workload.serving.batch_slots
    if slots == 4:
        raise RuntimeError("four slots fail")
    warnings = [f"{slots} slots", 'a "quoted" word'] if slots == 1 else []
    return {"capacity": 8 * slots, "rate": slots / 3, "warnings": warnings, "window": [0.5, 1]}


def test_an_export_keeps_integers_and_writes_lists_as_json(tmp_path: Path) -> None:
    """A failed point's empty cell made an integer column float ('16.0'), and a list cell
    was written as Python's repr ("['1 slots']"): integers stay integers, lists are JSON."""
    spec = write_spec(
        tmp_path, SPEC.replace("metrics: [decode_tokens_per_s, ttft_s, memory.hbm.kv_bytes]", "")
    )
    summary = run_sweep(spec, workers=1, evaluator=listing)
    frame = load(summary.db)
    text = export(frame, tmp_path / "out.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    first = rows[0]
    assert (first["serving.batch_slots"], first["capacity"], first["rate"]) == (
        "1",
        "8",
        "0.3333333333333333",
    )
    assert json.loads(first["warnings"]) == ["1 slots", 'a "quoted" word']
    assert first["window"] == "[0.5, 1]"
    assert [r["capacity"] for r in rows] == ["8", "8", "16", "16", "", ""]
    assert [r["warnings"] for r in rows[2:]] == ["[]", "[]", "", ""]
    assert all(r["status"] == "failed" and r["error"] for r in rows[4:])
    for line in text.splitlines():
        assert "['" not in line and not re.search(r"\d\.0,", line)
    assert frame.attrs["integers"] == ["serving.batch_slots", "capacity"]


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "x.sqlite"
    bogus.write_text("hello, not sqlite " * 100)
    with pytest.raises(ConfigError, match="not a sweep database"):
        run_sweep(write_spec(tmp_path), db=bogus, workers=1)
    with pytest.raises(ConfigError, match="no such sweep database"):
        load(tmp_path / "missing.sqlite")


def sometimes(point: Point) -> Mapping[str, Any]:
    """Has `ddr` only when batch_slots != 2 (like a memory tier a plan may not use)."""
    slots = point.scenario.workload.serving.batch_slots
    return {"hbm": 1} if slots == 2 else {"hbm": 1, "ddr": slots}


def test_a_metric_only_some_points_lack_is_null(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, SPEC.replace("[decode_tokens_per_s, ttft_s, memory.hbm.kv_bytes]", "[hbm, ddr]")
    )
    summary = run_sweep(spec, workers=1, evaluator=sometimes)
    assert summary.done == 6
    frame = load(summary.db)
    assert frame.loc[frame["serving.batch_slots"] == 2, "ddr"].isna().all()
    assert (frame.loc[frame["serving.batch_slots"] == 4, "ddr"] == 4).all()
    assert run_sweep(spec, workers=1, evaluator=sometimes).ran == 0  # null is not "missing"


def test_rows_another_build_computed_are_reused_with_a_note(tmp_path: Path) -> None:
    """A point's key names the simulator's version, not its commit: rows stored by another
    build are reused, and the sweep says how many and from which build; --rerun computes
    them again and the note goes; failed rows (not reused as results) are not counted."""
    from rdu_sim.provenance import simulator
    from rdu_sim.sweep.run import evaluate_points

    spec = write_spec(tmp_path)
    first = run_sweep(spec, workers=1)
    same = Recorder()
    run_sweep(spec, workers=1, progress=same)
    assert "another build" not in same.messages[0]  # rows of this very build
    with sqlite3.connect(first.db) as conn:
        conn.execute("UPDATE results SET version = '0.1.0+g0123456789ab'")
    older = Recorder()
    run_sweep(spec, workers=1, progress=older)
    here = simulator().label
    assert older.messages[0].endswith(
        f"; 4 stored rows reused from another build (0.1.0+g0123456789ab; this is {here}): "
        "--rerun computes them again"
    )
    # a search's evaluations (rdu-sim plan) say the same
    searched = Recorder()
    points = run_sweep(spec, workers=1, dry_run=True).plan.expansion.points  # type: ignore[union-attr]
    evaluate_points("demo", points, lambda p: {}, first.db, reporter=searched)
    assert searched.messages == [older.messages[0].split("; ", 2)[2]]
    rerun = Recorder()
    run_sweep(spec, workers=1, rerun=True, progress=rerun)
    assert "another build" not in rerun.messages[0]
    assert {r["version"] for r in rows(first.db)} == {here}


def test_a_finished_sweep_is_one_file_and_reading_it_adds_none(tmp_path: Path) -> None:
    """The last writer to close folds its write-ahead log back in: a finished sweep is its
    database alone, and a reader (load, plot, export: read-only, unable to fold a log in)
    leaves nothing beside it. A writer closing while another is open leaves the log to it,
    which still writes."""
    from rdu_sim.sweep.store import Store

    def files() -> list[str]:
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("demo.sqlite"))

    db = run_sweep(write_spec(tmp_path), workers=1).db
    assert files() == ["demo.sqlite"]
    assert len(load(db)) == 6
    assert files() == ["demo.sqlite"]
    first, second = Store(db), Store(db)
    with second.transaction():
        second._conn.execute("INSERT INTO meta (name, value) VALUES ('a', '1')")
    first.close()
    assert "demo.sqlite-wal" in files()  # still in use: the mode stays
    with second.transaction():
        second._conn.execute("INSERT INTO meta (name, value) VALUES ('b', '2')")
    second.close()
    assert files() == ["demo.sqlite"]
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "SELECT value FROM meta WHERE name IN ('a', 'b') ORDER BY name"
        ).fetchall() == [
            ("1",),
            ("2",),
        ]
    assert len(load(db)) == 6 and files() == ["demo.sqlite"]


SLOTS_SPEC = """
name: {name}
set: {{serving.requests: {requests}}}
axes:
  serving.batch_slots: {slots}
metrics: [decode_tokens_per_s]
evaluator: {{name: synthetic}}
"""


def _slots_spec(tmp_path: Path, name: str, slots: str, requests: int = 4) -> Path:
    body = SLOTS_SPEC.format(name=name, slots=slots, requests=requests)
    return write_spec(tmp_path, body, f"{name}-{requests}-{len(slots)}.yaml")


def test_a_sweep_reads_back_its_specs_latest_points_in_grid_order(tmp_path: Path) -> None:
    # An edited spec under the same name leaves its old rows in the database: reading the
    # sweep back gives the new spec's points only, in its grid order (not by key), as the
    # sweep's own export does; and a point another sweep ran last is still this one's.
    db = tmp_path / "shared.sqlite"
    run_sweep(_slots_spec(tmp_path, "demo", "[1, 2, 4]"), workers=1, db=db)
    edited = run_sweep(_slots_spec(tmp_path, "demo", "[4, 2, 1]", requests=8), workers=1, db=db)
    assert len(rows(db)) == 6  # the old rows stay
    frame = load(db)
    assert list(frame["key"]) == list(edited.keys)  # the grid's order, the new points only
    assert list(frame["serving.batch_slots"]) == [4, 2, 1]
    assert load(db, sweep="demo")["key"].tolist() == list(edited.keys)
    refine = run_sweep(_slots_spec(tmp_path, "refine", "[2, 16]", requests=8), workers=1, db=db)
    assert refine.already_done == 1  # batch 2 at 8 requests: demo's row
    frame = load(db, sweep="refine")
    assert frame["key"].tolist() == list(refine.keys)
    assert frame["sweep"].tolist() == ["refine", "refine"]  # read back as refine's points
    assert sorted(load(db, sweep="demo")["serving.batch_slots"]) == [1, 2, 4]
    assert len(load(db)) == 7  # two sweeps: every row


def test_a_point_two_sweeps_reach_along_other_axes_reads_back_with_each_ones_axes(
    tmp_path: Path,
) -> None:
    # a sweeps batch slots at 4 requests; b sweeps requests at 8 slots; (8 slots, 4
    # requests) is a point of both, run by a. Read back as b's, it has b's axis values, and
    # b's plot goes along b's axis; a sweep that stored nothing yet is not listed.
    db = tmp_path / "two.sqlite"
    a = write_spec(tmp_path, SLOTS_SPEC.format(name="a", requests=4, slots="[4, 8]"), "a.yaml")
    b_text = SLOTS_SPEC.format(name="b", requests=0, slots="[]").replace(
        "set: {serving.requests: 0}\naxes:\n  serving.batch_slots: []",
        "set: {serving.batch_slots: 8}\naxes:\n  serving.requests: [4, 5]",
    )
    b = write_spec(tmp_path, b_text, "b.yaml")
    run_sweep(a, workers=1, db=db)
    assert run_sweep(b, workers=1, db=db).already_done == 1
    frame = load(db, sweep="b")
    assert frame.attrs["axes"] == ["serving.requests"]
    assert frame["serving.requests"].tolist() == [4, 5] and set(frame["sweep"]) == {"b"}
    assert load(db, sweep="a").attrs["axes"] == ["serving.batch_slots"]
    from rdu_sim.report import plots

    assert "b: " in plots.sweep_plot(frame).get_suptitle()
    from rdu_sim.sweep.load import sweep_names

    assert sweep_names(db) == ["a", "b"]
    from rdu_sim.sweep.store import Store

    with Store(db) as store:  # a sweep stopped before its first point stored anything
        store.set_members("c", [("no-such-key", "{}")])
    assert sweep_names(db) == ["a", "b"]


def refuse_some(point: Point) -> Mapping[str, Any]:
    """Bad input at batch 1 (the point's own problem), a bug at batch 2, a result at 4."""
    slots = point.scenario.workload.serving.batch_slots
    if slots == 1:
        raise ConfigError.single("f.yaml", "serving.batch_slots", "one slot is refused here")
    if slots == 2:
        raise RuntimeError("a bug")
    return {"slots": slots}


def test_a_failed_points_error_is_its_message_and_a_bugs_keeps_its_traceback(
    tmp_path: Path,
) -> None:
    spec = write_spec(tmp_path, SLOTS_SPEC.format(name="refuse", requests=4, slots="[1, 2, 4]"))
    spec.write_text(spec.read_text().replace("metrics: [decode_tokens_per_s]\n", ""))
    summary = run_sweep(spec, workers=1, evaluator=refuse_some)
    assert (summary.done, summary.failed) == (1, 2)
    errors = {r["serving.batch_slots"]: r["error"] for _, r in load(summary.db).iterrows()}
    message = str(ConfigError.single("f.yaml", "serving.batch_slots", "one slot is refused here"))
    assert errors[1] == f"ConfigError: {message}"  # no traceback: no install path in it
    assert errors[2].startswith("RuntimeError: a bug\nTraceback")


def test_a_wait_for_another_process_lock_is_said_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep whose database another process holds locked waited up to a minute saying
    nothing; it says so as soon as the wait passes NOTICE_AFTER_S, and goes on once the
    lock is let go."""
    import threading
    import time

    from rdu_sim.sweep import store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 10.0)
    db = tmp_path / "held.sqlite"
    run_sweep(write_spec(tmp_path), db=db, workers=1)  # a database to hold
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(2.0, lambda: holder.execute("ROLLBACK")).start()
    said: list[float] = []

    class Timed(Recorder):
        def message(self, text: str) -> None:
            if text.startswith("waiting for the database lock"):
                said.append(time.monotonic() - start)
            super().message(text)

    reporter = Timed()
    start = time.monotonic()
    summary = run_sweep(write_spec(tmp_path), db=db, workers=1, rerun=True, progress=reporter)
    waited = time.monotonic() - start
    holder.close()
    assert summary.ran == 6 and waited >= 1.9  # it waited for the lock, then ran
    assert said and said[0] < 1.0, said  # said at once, not when the wait ended
    assert store_module.waiting_notice(db) in reporter.messages


LOCKS: list[sqlite3.Connection] = []  # the connection the evaluator below locks with


def _register_locking_evaluator() -> None:
    """An evaluator that, at its first point, takes the sweep database's write lock from
    another connection and keeps it: the lock arrives mid-run, after the points are
    claimed."""
    from rdu_sim.config.base import StrictModel
    from rdu_sim.sweep.evaluators import evaluator_names, register

    class Options(StrictModel):
        db: str

    if "test_lock_midway" in evaluator_names():
        return

    @register("test_lock_midway", Options)
    def lock_midway(point: Point, options: Options) -> Mapping[str, Any]:
        if not LOCKS:
            holder = sqlite3.connect(options.db, isolation_level=None, check_same_thread=False)
            holder.execute("BEGIN EXCLUSIVE")
            LOCKS.append(holder)
        return {"decode_tokens_per_s": 1.0, "ttft_s": 0.1, "memory.hbm.kv_bytes": 1}


def test_a_lock_taken_mid_run_is_waited_for_once_and_the_claims_stay_takeable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's write waits out the lock and fails (one notice, one wait): giving the
    claims back does not wait again. Once the lock goes, the same process runs every point
    (its own claims are its to take)."""
    from rdu_sim.sweep import store as store_module
    from rdu_sim.sweep.store import StoreError

    _register_locking_evaluator()
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 1.0)
    db = tmp_path / "midway.sqlite"
    body = (
        SPEC.split("evaluator:")[0]
        + f"evaluator: {{name: test_lock_midway, options: {{db: '{db}'}}}}\n"
    )
    reporter = Recorder()
    try:
        with pytest.raises(StoreError, match="database is locked"):
            run_sweep(write_spec(tmp_path, body), db=db, workers=1, progress=reporter)
        notices = [m for m in reporter.messages if m.startswith("waiting for the database lock")]
        assert notices == [store_module.waiting_notice(db)]
    finally:
        for holder in LOCKS:
            holder.execute("ROLLBACK")
            holder.close()
    summary = run_sweep(write_spec(tmp_path, body), db=db, workers=1, progress=Recorder())
    assert summary.ran + summary.already_done == 6 and summary.failed == 0


def _hold_write_lock(db: Path) -> sqlite3.Connection:
    """Another connection with an open write transaction on ``db`` (a SQL shell's
    ``BEGIN IMMEDIATE; UPDATE ...``): it holds the write lock, readers may still read."""
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE meta SET value = value")
    return holder


def test_a_finished_sweep_resumes_while_another_connection_holds_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume with nothing to run only reads: another process's open write transaction
    (a SQL shell's) does not stop it. It failed at once with "database is locked ... held it
    for 60 s": opening switched the database to WAL, a write SQLite refuses at once."""
    from rdu_sim.sweep import store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 2.0)
    db = tmp_path / "done.sqlite"
    first = run_sweep(write_spec(tmp_path), db=db, workers=1)
    holder = _hold_write_lock(db)
    try:
        summary = run_sweep(write_spec(tmp_path), db=db, workers=1, progress=Recorder())
        frame = load(db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert summary.ran == 0 and summary.already_done == first.done
    assert len(frame) == 6


def test_a_write_waits_for_a_held_write_lock_and_says_how_long_it_waited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that must write waits the whole BUSY_TIMEOUT_S for another connection's
    write lock (it failed at once), and the error says the time it really waited."""
    import time

    from rdu_sim.sweep import store as store_module
    from rdu_sim.sweep.store import StoreError

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 1.5)
    db = tmp_path / "held.sqlite"
    run_sweep(write_spec(tmp_path), db=db, workers=1)
    holder = _hold_write_lock(db)
    start = time.monotonic()
    try:
        with pytest.raises(StoreError, match="database is locked") as caught:
            run_sweep(write_spec(tmp_path), db=db, workers=1, rerun=True, progress=Recorder())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    waited = time.monotonic() - start
    assert waited >= 1.4, waited
    assert re.search(r"held it for 1\.[4-9]\d* s", str(caught.value)), caught.value
    assert "60 s" not in str(caught.value)


def test_a_damaged_row_is_run_again_alone_and_every_good_row_kept(tmp_path: Path) -> None:
    """A row whose metrics column is not valid JSON blocked the whole database (and the
    advice, move it aside, threw the good rows away): it counts as not computed, with one
    warning naming the point and the column; a resume runs that point alone, and `load`
    reads the good rows meanwhile."""
    from rdu_sim.sweep.store import DamagedRowWarning

    db = tmp_path / "damaged.sqlite"
    first = run_sweep(write_spec(tmp_path), db=db, workers=1)
    clean = load(db)
    with sqlite3.connect(db) as conn:
        bad = conn.execute("SELECT key FROM results WHERE rowid = 2").fetchone()[0]
        conn.execute("UPDATE results SET metrics = '{' WHERE rowid = 2")
    conn.close()
    with pytest.warns(DamagedRowWarning) as read:
        partial = load(db)
    assert [str(w.message) for w in read] == [
        f"{db}: point {bad[:12]}: column metrics holds not valid JSON (Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1)); the point counts as not "
        "computed and is left out (its sweep runs it again)"
    ]
    assert list(partial["key"]) == [k for k in clean["key"] if k != bad]
    with pytest.warns(DamagedRowWarning, match=f"point {bad[:12]}: column metrics .* runs again"):
        resumed = run_sweep(write_spec(tmp_path), db=db, workers=1, progress=Recorder())
    assert resumed.ran == 1 and resumed.already_done == first.done - 1
    again = load(db)
    assert again.drop(columns=["wall_s", "started", "finished", "attempts", "worker"]).equals(
        clean.drop(columns=["wall_s", "started", "finished", "attempts", "worker"])
    )


def test_a_damaged_attempts_count_heals_on_its_rerun(tmp_path: Path) -> None:
    """A row whose attempts column holds a fraction is damaged; its rerun stores attempts 1
    (an integer), so the next resume finds the point done instead of warning and running
    it again at every sweep (1.5 + 1 would stay a fraction)."""
    from rdu_sim.sweep.store import DamagedRowWarning

    db = tmp_path / "attempts.sqlite"
    first = run_sweep(write_spec(tmp_path), db=db, workers=1)
    with sqlite3.connect(db) as conn:
        bad = conn.execute("SELECT key FROM results WHERE rowid = 1").fetchone()[0]
        conn.execute("UPDATE results SET attempts = 1.5 WHERE rowid = 1")
    conn.close()
    with pytest.warns(DamagedRowWarning, match=f"point {bad[:12]}: column attempts"):
        resumed = run_sweep(write_spec(tmp_path), db=db, workers=1, progress=Recorder())
    assert resumed.ran == 1
    with sqlite3.connect(db) as conn:
        stored = conn.execute(
            "SELECT attempts, typeof(attempts) FROM results WHERE key = ?", (bad,)
        ).fetchone()
    conn.close()
    assert stored == (1, "integer")
    again = run_sweep(write_spec(tmp_path), db=db, workers=1, progress=Recorder())
    assert again.ran == 0 and again.already_done == first.done


BUBBLE_SPEC = """
name: bubble
set: {serving.requests: 4, serving.batch_slots: 4, serving.output_tokens: {dist: fixed, value: 8}}
zip:
  - parallelism.tp: [8, 4]
    parallelism.pp: [1, 2]
metrics: [decode_tokens_per_s, decode_step.pipeline_bubble, kv_pool.pages, kv_pool.preemptions]
"""


@pytest.mark.parametrize("first_pp", [1, 2])
def test_a_name_the_result_declares_a_run_leaves_out_is_null(tmp_path: Path, first_pp: int) -> None:
    """``decode_step.pipeline_bubble`` (a pipeline's only) and ``kv_pool.pages`` (a paged
    stack's only): the run's JSON leaves them out where they do not apply, so a sweep over
    ``pp`` whose first point has no pipeline stopped ('not in the results'), and in the other
    order said of the pp=1 row 'the run ran no decode step'. Both orders now run, the pp=1
    point null, and the table says why."""
    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    body = BUBBLE_SPEC if first_pp == 1 else BUBBLE_SPEC.replace("[8, 4]", "[4, 8]")
    body = body if first_pp == 1 else body.replace("[1, 2]", "[2, 1]")
    spec = tmp_path / "bubble.yaml"
    spec.write_text(f"base: {ROOT / 'workloads' / 'llama3.1-8b-8socket.yaml'}\n" + body)
    result = CliRunner().invoke(cli, ["sweep", str(spec), "--workers", "1"])
    assert result.exit_code == 0, result.output
    frame = load(tmp_path / "bubble.sqlite").set_index("parallelism.pp")
    bubble, pages = frame["decode_step.pipeline_bubble"], frame["kv_pool.pages"]
    assert bubble.isna()[1] and 0 < bubble[2] < 1
    assert pages.isna().all()
    words = " ".join(result.output.split())
    assert "in decode_step.pipeline_bubble: the step runs no pipeline (parallelism.pp 1)" in words
    assert "the run ran no decode step" not in words
    assert "in kv_pool.pages: the stack keeps static slots, not a paged KV pool" in words
    # the preemptions' note, by its own start, fits a stack of static slots too
    assert "in kv_pool.preemptions: static slots, or a KV pool that reserves" in words
