"""A hardware file that ``extends:`` another: the overlay's fields over the base's, and
clear errors for a missing base, a loop and a bad base."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config.hardware_file import read_hardware

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "workloads" / "llama3.1-8b-1socket.yaml"


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_an_overlay_replaces_its_fields_and_keeps_the_rest() -> None:
    """dgx-h100-vllm restates only its runtime: every GPU field is dgx-h100's."""
    base = api.load(WORKLOAD, ["hardware=dgx-h100"]).hardware
    vllm = api.load(WORKLOAD, ["hardware=dgx-h100-vllm"]).hardware
    assert vllm.name == "dgx-h100-vllm" and base.name == "dgx-h100"
    assert vllm.runtime != base.runtime
    assert vllm.runtime.kv_page_tokens == 16 and base.runtime.kv_page_tokens == 64
    mine = vllm.model_dump(exclude={"name", "description", "runtime"})
    assert mine == base.model_dump(exclude={"name", "description", "runtime"})


def test_overlays_chain_and_merge_key_by_key(tmp_path: Path) -> None:
    """A chain of two overlays on a shipped file; a nested mapping merges field by field."""
    first = _write(
        tmp_path / "first.yaml",
        {"extends": "dgx-h100", "name": "first", "runtime": {"step_overhead": 0.5e-3}},
    )
    _write(
        tmp_path / "second.yaml",
        {"extends": first.name, "name": "second", "runtime": {"slot_overhead": 1e-6}},
    )
    data, _ = read_hardware(tmp_path / "second.yaml")
    assert data["name"] == "second" and "extends" not in data
    assert data["runtime"]["step_overhead"] == 0.5e-3 and data["runtime"]["slot_overhead"] == 1e-6
    assert data["runtime"]["kv_page_tokens"] == 64  # from dgx-h100, two files down
    workload = _write(
        tmp_path / "w.yaml",
        {**yaml.safe_load(WORKLOAD.read_text()), "hardware": "second.yaml"},
    )
    runtime = api.load(workload).hardware.runtime
    assert (runtime.step_overhead, runtime.slot_overhead) == (0.5e-3, 1e-6)


def _check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(path)])
    return result.exit_code, result.output


def test_a_missing_or_looping_or_bad_base_is_a_clear_error(tmp_path: Path) -> None:
    missing = _write(tmp_path / "missing.yaml", {"extends": "nowhere.yaml", "name": "x"})
    code, out = _check(missing)
    assert code == 2 and "Traceback" not in out
    assert "missing.yaml" in out and "extends" in out and "file not found" in out

    _write(tmp_path / "a.yaml", {"extends": "b.yaml", "name": "a"})
    _write(tmp_path / "b.yaml", {"extends": "a.yaml", "name": "b"})
    code, out = _check(tmp_path / "a.yaml")
    assert code == 2 and "loops: a.yaml -> b.yaml -> a.yaml" in out

    bad_base = yaml.safe_load((REPO / "hw_configs" / "dgx-h100.yaml").read_text())
    bad_base["gpu"]["hbm"]["efficiency"] = 7
    _write(tmp_path / "bad-base.yaml", bad_base)
    overlay = _write(tmp_path / "over.yaml", {"extends": "bad-base.yaml", "name": "o"})
    code, out = _check(overlay)
    assert code == 2 and "bad-base.yaml" in out and "gpu.hbm.efficiency" in out

    wrong = _write(tmp_path / "wrong.yaml", {"extends": 3, "name": "w"})
    code, out = _check(wrong)
    assert code == 2 and "extends" in out and "expected a hardware file's name or path" in out

    typo = _write(tmp_path / "typo.yaml", {"extends": "dgx-h100", "runtime": {"stepp": 1}})
    code, out = _check(typo)
    assert code == 2 and "typo.yaml" in out and "runtime.stepp" in out


def test_extends_resolves_beside_the_file_not_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative base is found beside the overlay whatever the current folder; one of the
    same name in the current folder is not picked up; ``~`` expands; spaces are trimmed."""
    mp = monkeypatch
    base = yaml.safe_load((REPO / "hw_configs" / "dgx-h100.yaml").read_text())
    _write(tmp_path / "base.yaml", base)
    sub = tmp_path / "sub"
    sub.mkdir()
    _write(sub / "over.yaml", {"extends": "base.yaml", "name": "o"})
    mp.chdir(tmp_path)  # ./base.yaml exists here, but not beside sub/over.yaml
    code, out = _check(sub / "over.yaml")
    assert code == 2 and "file not found" in out
    _write(sub / "up.yaml", {"extends": " ../base.yaml ", "name": "u"})
    mp.chdir(sub)
    assert _check(sub / "up.yaml")[0] == 0
    mp.setenv("HOME", str(tmp_path))
    _write(sub / "home.yaml", {"extends": "~/base.yaml", "name": "h"})
    assert _check(sub / "home.yaml")[0] == 0


def test_extends_refuses_a_workload_and_a_change_of_kind(tmp_path: Path) -> None:
    workload = _write(tmp_path / "w.yaml", {"extends": str(WORKLOAD), "name": "w"})
    code, out = _check(workload)
    assert code == 2 and len(out.strip().splitlines()) == 2  # the file's error, the summary
    assert "is a workload file, not a hardware file" in out
    kind = _write(tmp_path / "k.yaml", {"extends": "sn40l-8", "kind": "gpu", "name": "k"})
    code, out = _check(kind)
    assert code == 2 and "'gpu' differs from the kind of the file it extends ('rdu'" in out
