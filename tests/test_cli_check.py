"""`rdu-sim check`: accepts every shipped file, rejects broken ones with exit 2 and no traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import rdu_sim.sweep
from rdu_sim.cli.check_cmd import file_kind
from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "hw_configs").glob("*.yaml")) + sorted(
    (REPO / "workloads").rglob("*.yaml")
)
LLAMA_1S = "llama3.1-8b-1socket.yaml"


def rdu_sim_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run the real command in a subprocess (what a user's shell does)."""
    return subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "hw_configs", tmp_path / "hw_configs")
    shutil.copytree(REPO / "workloads", tmp_path / "workloads")
    return tmp_path


def _misspell(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def test_check_accepts_every_shipped_file() -> None:
    result = rdu_sim_cli("check", *(str(p.relative_to(REPO)) for p in SHIPPED))
    assert result.returncode == 0, result.stderr
    ok_lines = [line for line in result.stdout.splitlines() if line.startswith("OK")]
    assert len(ok_lines) == len(SHIPPED)
    for path in SHIPPED:
        assert any(path.name in line for line in ok_lines)
    assert "Traceback" not in result.stderr


def test_check_counts_one_device_in_the_singular() -> None:
    """`1 socket`, `8 GPUs`: the count's noun agrees with it (it read `1 sockets`)."""
    result = CliRunner().invoke(cli, ["check", "sn40l", "dgx-h100"])
    assert result.exit_code == 0, result.output
    assert "hardware 'sn40l': 1 socket, " in result.output
    assert "hardware 'dgx-h100': 8 GPUs, " in result.output


@pytest.mark.parametrize(
    ("relative", "old", "new", "key"),
    [
        ("workloads/" + LLAMA_1S, "batch_slots:", "batch_slot:", "serving.batch_slot"),
        (
            "hw_configs/sn40l.yaml",
            "    bandwidth: 1.8 TB/s",
            "    bandwith: 1.8 TB/s",
            "socket.hbm.bandwith",
        ),
    ],
)
def test_check_and_run_reject_a_misspelled_key(
    tree: Path, relative: str, old: str, new: str, key: str
) -> None:
    broken = _misspell(tree / relative, old, new)
    line = next(n for n, text in enumerate(broken.read_text().splitlines(), 1) if new in text)
    workload = tree / "workloads" / LLAMA_1S  # checks its hardware file too
    for args in (["check", str(broken)], ["check", str(workload)], ["run", str(workload)]):
        result = rdu_sim_cli(*args, cwd=tree)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert key in result.stderr
        assert f"{broken.name}:{line}:" in result.stderr
        assert "error:" in result.stderr
        assert "Traceback" not in result.stderr


def test_check_reports_every_bad_file_before_failing(tree: Path) -> None:
    bad1 = _misspell(tree / "workloads" / LLAMA_1S, "batch_slots:", "batch_slot:")
    bad2 = tree / "workloads" / "empty.yaml"
    bad2.write_text("")
    good = tree / "workloads" / "llama3.1-8b-8socket.yaml"
    result = CliRunner().invoke(cli, ["check", str(bad1), str(good), str(bad2)])
    assert result.exit_code == 2
    assert str(bad1) in result.stderr and "serving.batch_slot" in result.stderr
    assert str(bad2) in result.stderr and "empty" in result.stderr
    assert f"OK  {good}" in result.stdout
    assert "2 of 3 file(s) failed" in result.stderr


def test_check_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "missing.yaml"), str(bad)])
    assert result.exit_code == 2
    assert "missing.yaml: file not found" in result.stderr
    assert f"{bad}:" in result.stderr and "not valid YAML" in result.stderr


def test_check_names_the_workload_when_its_hardware_is_bad(tree: Path) -> None:
    _misspell(tree / "hw_configs" / "sn40l.yaml", "usable_fraction:", "usable_fractoin:")
    workload = tree / "workloads" / LLAMA_1S
    result = CliRunner().invoke(cli, ["check", str(workload)])
    assert result.exit_code == 2
    assert str(workload) in result.stderr and "socket.usable_fractoin" in result.stderr


def test_check_needs_a_file() -> None:
    result = CliRunner().invoke(cli, ["check"])
    assert result.exit_code == 2
    assert "Missing argument" in result.stderr


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ({"socket": {}, "system": {}}, "hardware"),
        ({"name": "x", "system": {}}, "hardware"),
        ({"hardware": "a.yaml", "model": "llama-3.1-8b"}, "workload"),
        ({"model": "x", "socket": {}}, "workload"),
        ({"base": "w.yaml", "axes": {}}, "sweep"),
        ({"name": "x"}, None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_file_kind(data: object, kind: str | None) -> None:
    assert file_kind(data) == kind


def test_unknown_kind_explains_what_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "what.yaml"
    path.write_text("name: mystery\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    assert "cannot tell what this file is" in result.stderr
    assert "'socket'" in result.stderr and "'hardware'" in result.stderr


def test_a_misspelt_kind_key_is_named_with_the_key_it_misses(tmp_path: Path) -> None:
    """A plan with 'serach:' read 'cannot tell what this file is' at line 1, where `plan`
    said 'did you mean search'."""
    path = tmp_path / "plan.yaml"
    path.write_text("name: p\ncluster: c.yaml\nserach: {tp: [1]}\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {path}:3: serach: cannot tell what this file is; did you mean 'search' "
        "(a plan spec has it)? a hardware file has"
    )


def test_sweep_specs_use_the_sweep_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("base: ../workloads/x.yaml\naxes: {serving.batch_slots: [1, 2]}\n")
    seen: list[Path] = []

    def good(path: Path) -> str:
        seen.append(path)
        return "2 points"

    monkeypatch.setattr(rdu_sim.sweep, "check_spec", good, raising=False)
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 0, result.output
    assert seen == [spec]
    assert "2 points" in result.stdout

    def bad(path: Path) -> str:
        raise ConfigError.single(str(path), "axes.serving.batch_slots", "bad axis", 2)

    monkeypatch.setattr(rdu_sim.sweep, "check_spec", bad, raising=False)
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 2
    assert "axes.serving.batch_slots: bad axis" in result.stderr


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ("[]", "must be a non-empty list of lengths >= 1, got []"),
        ("[0, 8192]", "must be a non-empty list of lengths >= 1, got [0, 8192]"),
        ("[1024]", "do not cover max_context=8192"),
    ],
)
def test_bad_context_buckets_name_their_line(tree: Path, buckets: str, message: str) -> None:
    """One rule (kv.policies.context_buckets) checks the bucket list, for check and run."""
    workload = _misspell(
        tree / "workloads" / LLAMA_1S, "policy: full", f"policy: full\n  context_buckets: {buckets}"
    )
    line = next(n for n, t in enumerate(workload.read_text().splitlines(), 1) if "buckets" in t)
    for command in ("check", "run"):
        result = CliRunner().invoke(cli, [command, str(workload)])
        assert result.exit_code == 2, result.output
        assert f"{workload.name}:{line}: kv.context_buckets:" in result.stderr
        assert message in result.stderr


def test_check_reads_a_measurement_file_as_one_not_as_a_trace(tmp_path: Path) -> None:
    """A CSV whose header names a metric column is a measurement file: the shipped ones by
    name pass with their row counts, a bad row fails with its line and column, and a request
    trace (no metric column) is still read as a trace."""
    header = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured\n"
    good = tmp_path / "mine.csv"
    row = "sn40l-8,llama-3.1-8b,8,16,128,128,e2e_s,0.6\n"
    good.write_text("# my own SN40L run\n" + header + row)
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "sn40l-8,llama-3.1-8b,8,-3,128,128,e2e_s,0.6\n")
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens\n100,20\n")
    out = CliRunner().invoke(cli, ["check", "argonne-sn40l", str(good), str(trace)])
    assert out.exit_code == 0, out.output
    assert "argonne-sn40l: measurement file: 20 measured rows (e2e_s)" in out.output
    assert "mine.csv: measurement file: 1 measured row (e2e_s)" in out.output
    assert "trace.csv: request trace: 1 row without" in out.output
    failed = CliRunner().invoke(cli, ["check", str(bad)])
    assert failed.exit_code == 2
    assert f"{bad}:2: batch: must be in 1..65536, got -3" in failed.output
    assert "Traceback" not in failed.output


def test_check_resolves_every_row_of_a_measurement_file_and_names_every_bad_one(
    tmp_path: Path,
) -> None:
    """Each row is resolved as calibrate and the deployment suite resolve it (nothing
    simulated): an unknown model, a missing hardware or stack file, a tp that does not
    divide the heads, and a cell that does not read are each named by line and column, in
    line order, exit 2; the good rows pass as before."""
    header = "hardware,stack,model,tp,batch,input_tokens,output_tokens,metric,measured\n"
    good = "dgx-h100,tensorrt-llm,llama-3.1-8b,1,8,512,256,e2e_s,2.45\n"
    rows = [
        good,
        good.replace("llama-3.1-8b", "llama-3.1-8bb"),
        good.replace("dgx-h100", "dgx-h999"),
        good.replace("tensorrt-llm", "nostack.yaml"),
        good.replace(",1,8,", ",3,8,"),
        good.replace(",512,", ",512 tok,"),
        good,
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("# mine\n" + header + "".join(rows))
    out = CliRunner().invoke(cli, ["check", str(bad)])
    assert out.exit_code == 2, out.output
    named = re.findall(rf"{re.escape(str(bad))}:(\d+): (\w+):", out.output)
    assert named == [
        ("4", "model"),
        ("5", "hardware"),
        ("6", "stack"),
        ("7", "tp"),
        ("8", "input_tokens"),
    ]
    assert "Traceback" not in out.output
    fine = tmp_path / "fine.csv"
    fine.write_text(header + good + good.replace(",1,8,", ",2,8,"))
    ok = CliRunner().invoke(cli, ["check", str(fine)])
    assert ok.exit_code == 0, ok.output
    assert "fine.csv: measurement file: 2 measured rows (e2e_s)" in ok.output


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("  batch_slots: 16\n", None),  # the workload as shipped: checked and run alike
        ("  batch_slots: 4096\n", "serving.batch_slots"),  # its KV cache alone past HBM
    ],
)
def test_check_refuses_a_workload_its_run_refuses_for_memory(
    tmp_path: Path, setting: str, field: str | None
) -> None:
    """``rdu-sim check`` makes the capacity and memory plan a run makes before simulating
    (``serving.run.plan_capacity``) for every workload, not a Composition of Experts' only:
    it passed 4,096 slots of Llama 3.1 8B on one socket that ``run`` then refused. The same
    one error line, at the file's line, exit 2 and no traceback."""
    text = (REPO / "workloads" / LLAMA_1S).read_text()
    text = re.sub(r"(?m)^hardware: .*$", "hardware: sn40l", text)
    text = re.sub(r"(?m)^  batch_slots: .*\n", setting, text)
    workload = tmp_path / "w.yaml"
    workload.write_text(text)
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", str(workload)])
    if field is None:
        assert checked.exit_code == 0, checked.output
        return
    ran = runner.invoke(cli, ["run", str(workload), "--set", "serving.requests=2"])
    line = text.splitlines().index(setting.rstrip("\n")) + 1
    for result in (checked, ran):
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
    first = ran.stderr.splitlines()[0]
    assert first.startswith(f"error: {workload}:{line}: {field}: the KV cache of 4,096 slots")
    assert checked.stderr.splitlines() == [first, "error: 1 of 1 file(s) failed the check"]
