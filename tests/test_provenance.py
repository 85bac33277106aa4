"""Every output says where it came from: simulator version and commit, files, overrides and
the resolved configuration; sweep keys carry the version, and `--rerun` reruns.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import __version__, api
from rdu_sim.cli.main import cli
from rdu_sim.provenance import Simulator, resolved_config, shown_file, simulator
from rdu_sim.sweep import expand, load_spec, run_sweep
from rdu_sim.sweep import key as sweep_key

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--set", "serving.requests=6", "--set", "serving.output_tokens=16"]


def run_json(*extra: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["run", "llama3.1-8b-1socket", "--json", *SMALL, *extra])
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.output)
    return data


def test_two_runs_differing_by_hbm_bandwidth_record_the_difference() -> None:
    slow = run_json("--set", "hw.socket.hbm.bandwidth=1.8 TB/s")
    fast = run_json("--set", "hw.socket.hbm.bandwidth=2.4 TB/s")
    assert slow["provenance"] != fast["provenance"]
    slow_p, fast_p = slow["provenance"], fast["provenance"]
    assert isinstance(slow_p, dict) and isinstance(fast_p, dict)
    assert fast_p["overrides"] == {
        "serving.requests": 6,
        "serving.output_tokens": 16,
        "hw.socket.hbm.bandwidth": "2.4 TB/s",
    }
    assert slow_p["config"]["hardware"]["socket"]["hbm"]["bandwidth"] == 1.8e12
    assert fast_p["config"]["hardware"]["socket"]["hbm"]["bandwidth"] == 2.4e12
    # everything else about the two runs' inputs is the same
    for block in (slow_p, fast_p):
        block["config"]["hardware"]["socket"]["hbm"].pop("bandwidth")
        block["overrides"].pop("hw.socket.hbm.bandwidth")
    assert slow_p == fast_p
    assert slow_p["files"] == {
        "workload": "shipped:workloads/llama3.1-8b-1socket.yaml",
        "hardware": "shipped:hw_configs/sn40l.yaml",
        "stack": "shipped:stacks/sambastack-2025.yaml",
    }
    assert slow_p["simulator"]["version"] == __version__
    assert slow["decode_tokens_per_s"] != fast["decode_tokens_per_s"]


def test_same_inputs_same_bytes_and_the_config_is_the_scenarios() -> None:
    first = CliRunner().invoke(cli, ["run", "llama3.1-8b-1socket", "--json", *SMALL])
    again = CliRunner().invoke(cli, ["run", "llama3.1-8b-1socket", "--json", *SMALL])
    assert first.output == again.output
    scenario = api.load("llama3.1-8b-1socket", SMALL[1::2])
    recorded = json.loads(first.output)["provenance"]["config"]
    assert recorded == json.loads(json.dumps(resolved_config(scenario)))
    assert recorded["workload"]["serving"]["requests"] == 6


def test_out_files_carry_the_provenance(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", "llama3.1-8b-1socket", *SMALL, "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "result.json").read_text())
    assert written["provenance"]["overrides"]["serving.requests"] == 6


def test_overrides_accumulate_through_with_overrides() -> None:
    scenario = api.load("llama3.1-8b-1socket", ["serving.requests=3"])
    again = api.load(scenario, ["hw.socket.hbm.latency=1 us"])
    assert dict(again.overrides) == {
        "serving.requests": 3,
        "hw.socket.hbm.latency": "1 us",
    }
    assert again.hardware.socket.hbm.latency == 1e-6


@pytest.mark.parametrize(
    ("first", "then", "left"),
    [
        # a new hardware file: the earlier hw. (and stack.) edits were another machine's
        (
            {"hw.system.sockets": 2, "stack.host.serial_per_step": "1 ms"},
            {"hardware": "sn40l-8"},
            {"hardware": "sn40l-8"},
        ),
        # a new stack: the earlier stack. edits were another stack's; hw. ones stay
        (
            {"hw.system.sockets": 2, "stack.host.serial_per_step": "1 ms"},
            {"stack": "none"},
            {"hw.system.sockets": 2, "stack": "none"},
        ),
    ],
)
def test_the_recorded_overrides_are_those_applied_and_replay_to_the_same_run(
    first: dict[str, object], then: dict[str, object], left: dict[str, object]
) -> None:
    """``api.load(s1, {"hardware": ...})`` ran the new file's own fields but recorded s1's
    ``hw.`` overrides beside it: its provenance replayed to another run."""
    base = {"serving.requests": 3, **first}
    scenario = api.load(api.load("llama3.1-8b-1socket", base), then)
    assert dict(scenario.overrides) == {"serving.requests": 3, **left}
    result = api.run(scenario)
    recorded = result.to_dict()["provenance"]["overrides"]
    assert recorded == {"serving.requests": 3, **left}
    assert api.run("llama3.1-8b-1socket", recorded).to_json() == result.to_json()


def test_an_override_given_again_replays_in_the_order_it_was_applied() -> None:
    """A key given again (``a.b``) after a mapping holding it (``a: {b: ...}``) wins in the
    record as it did in the scenario."""
    scenario = api.load("llama3.1-8b-1socket", {"serving.requests": 5, "serving": {"requests": 6}})
    again = api.load(scenario, {"serving.requests": 7})
    assert again.workload.serving.requests == 7
    assert api.load("llama3.1-8b-1socket", dict(again.overrides)).workload == again.workload


def test_the_simulator_is_this_checkouts_commit() -> None:
    me = simulator()
    assert me.version == __version__
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    assert me.commit == head.stdout.strip()
    assert Simulator("1.0", "a" * 40, True).label == "1.0+gaaaaaaaaaaaa.dirty"
    assert Simulator("1.0", None, None).label == "1.0"


def test_shown_file_is_the_same_on_every_machine(tmp_path: Path) -> None:
    assert shown_file(REPO / "hw_configs" / "sn40l-16.yaml") == "shipped:hw_configs/sn40l-16.yaml"
    assert shown_file(tmp_path / "mine.yaml") == str(tmp_path / "mine.yaml")


SPEC = """
name: rerun
base: {base}
set: {{serving.requests: 4}}
axes:
  serving.batch_slots: [1, 2]
evaluator: {{name: synthetic}}
"""


def test_sweep_keys_carry_the_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(base=REPO / "workloads" / "llama3.1-8b-1socket.yaml"))
    before = [p.key for p in expand(load_spec(spec)).points]
    monkeypatch.setattr(sweep_key, "__version__", "99.0")
    after = [p.key for p in expand(load_spec(spec)).points]
    assert len(set(before) | set(after)) == 4  # a new version reuses no row


def test_rerun_runs_every_point_again_and_rows_record_the_commit(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(base=REPO / "workloads" / "llama3.1-8b-1socket.yaml"))
    db = tmp_path / "s.sqlite"
    assert run_sweep(spec, db=db, workers=1).ran == 2
    assert run_sweep(spec, db=db, workers=1).ran == 0
    again = run_sweep(spec, db=db, workers=1, rerun=True)
    assert again.ran == 2 and again.plan is not None and again.plan.rerun == 2
    assert "2 stored before, rerunning (--rerun)" in again.plan.describe()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT attempts, version FROM results").fetchall()
    assert rows == [(2, simulator().label)] * 2


def test_cli_rerun_and_an_export_it_cannot_write_is_refused_before_running(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(base=REPO / "workloads" / "llama3.1-8b-1socket.yaml"))
    db = tmp_path / "s.sqlite"
    refused = CliRunner().invoke(
        cli, ["sweep", str(spec), "--workers", "1", "--export", str(tmp_path / "out.xlsx")]
    )
    assert refused.exit_code == 2
    assert "cannot export to '.xlsx': use .csv or .parquet" in refused.output
    assert not db.exists()  # nothing ran
    for args in ([], ["--rerun"]):
        done = CliRunner().invoke(cli, ["sweep", str(spec), "--workers", "1", *args])
        assert done.exit_code == 0, done.output
    assert "2 stored before, rerunning (--rerun)" in done.output
