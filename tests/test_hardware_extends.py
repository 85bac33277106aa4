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
    """dgx-h100-vllm restates only its default stack: every GPU field is dgx-h100's, and a
    workload on it runs vLLM's stack."""
    base = api.load(WORKLOAD, ["hardware=dgx-h100"])
    vllm = api.load(WORKLOAD, ["hardware=dgx-h100-vllm"])
    assert vllm.hardware.name == "dgx-h100-vllm" and base.hardware.name == "dgx-h100"
    assert (vllm.stack.name, base.stack.name) == ("vllm-2024", "tensorrt-llm")
    assert vllm.stack.kv_page_tokens == 16 and base.stack.kv_page_tokens == 64
    own = {"name", "description", "default_stack"}
    assert vllm.hardware.model_dump(exclude=own) == base.hardware.model_dump(exclude=own)


def test_the_sn40l_machines_are_one_file() -> None:
    """sn40l-8 and sn40l-16 restate only their system's size: the socket, its links and the
    default stack are sn40l.yaml's, so a fitted SN40L value is set once for both."""
    one = api.load(WORKLOAD).hardware
    for name, sockets in (("sn40l-8", 8), ("sn40l-16", 16)):
        machine = api.load(WORKLOAD, [f"hardware={name}"]).hardware
        assert machine.system.sockets == sockets
        assert machine.socket == one.socket
        assert machine.system.intra_node_link == one.system.intra_node_link
        assert machine.default_stack == one.default_stack


def test_overlays_chain_and_merge_key_by_key(tmp_path: Path) -> None:
    """A chain of two overlays on a shipped file; a nested mapping merges field by field."""
    first = _write(
        tmp_path / "first.yaml",
        {"extends": "dgx-h100", "name": "first", "gpu": {"kernel": {"sync": 5e-6}}},
    )
    _write(
        tmp_path / "second.yaml",
        {"extends": first.name, "name": "second", "gpu": {"kernel": {"launch": 1e-6}}},
    )
    data, _ = read_hardware(tmp_path / "second.yaml")
    assert data["name"] == "second" and "extends" not in data
    assert data["gpu"]["kernel"]["sync"] == 5e-6 and data["gpu"]["kernel"]["launch"] == 1e-6
    assert data["gpu"]["kernel"]["graph_launch"] == "3.5 us"  # from dgx-h100, two files down
    workload = _write(
        tmp_path / "w.yaml",
        {**yaml.safe_load(WORKLOAD.read_text()), "hardware": "second.yaml"},
    )
    kernel = api.load(workload).hardware.gpu.kernel  # type: ignore[union-attr]
    assert (kernel.sync, kernel.launch) == (5e-6, 1e-6)


def test_a_stack_overlay_extends_a_shipped_stack(tmp_path: Path) -> None:
    """A stack file written on top of a shipped one keeps what it does not restate; a
    workload names it with ``stack:``, and ``--set stack.`` edits the stack it runs."""
    _write(
        tmp_path / "mine.yaml",
        {"extends": "tensorrt-llm", "name": "mine", "host": {"serial_per_slot": 1e-6}},
    )
    data = {**yaml.safe_load(WORKLOAD.read_text()), "hardware": "dgx-h100", "stack": "mine.yaml"}
    workload = _write(tmp_path / "w.yaml", data)
    stack = api.load(workload).stack
    shipped = api.load(WORKLOAD, ["hardware=dgx-h100"]).stack
    assert stack.name == "mine" and stack.host.serial_per_slot == 1e-6
    assert stack.host.serial_per_step == shipped.host.serial_per_step
    assert stack.kv_page_tokens == shipped.kv_page_tokens
    edited = api.load(workload, ["stack.host.serial_per_step=2 ms"]).stack
    assert edited.host.serial_per_step == 2e-3 and edited.host.serial_per_slot == 1e-6
    assert api.load(workload, ["stack=none"]).stack.host.serial_per_step == 0.0


def test_a_runtime_in_a_hardware_file_says_where_it_went(tmp_path: Path) -> None:
    hardware = yaml.safe_load((REPO / "hw_configs" / "dgx-h100.yaml").read_text())
    hardware["runtime"] = {"step_overhead": 1e-3}
    _write(tmp_path / "old.yaml", hardware)
    code, out = _check(tmp_path / "old.yaml")
    assert code == 2 and "Traceback" not in out
    assert "old.yaml" in out and "belongs to a serving stack" in out and "stack:" in out


def test_a_runtime_in_a_hardware_file_is_refused_at_its_field_and_line(tmp_path: Path) -> None:
    """``runtime:`` is a field problem (file, line, field), as any other field's: not the
    file's first line without a field."""
    old = tmp_path / "old.yaml"
    old.write_text("extends: sn40l-8\nname: old\nruntime:\n  step_overhead: 1 ms\n")
    code, out = _check(old)
    assert code == 2 and "Traceback" not in out
    assert f"error: {old}:3: runtime: belongs to a serving stack, not to the hardware" in out


def test_a_stack_for_the_other_kind_of_hardware_is_refused(tmp_path: Path) -> None:
    data = {**yaml.safe_load(WORKLOAD.read_text()), "hardware": "sn40l", "stack": "tensorrt-llm"}
    workload = _write(tmp_path / "w.yaml", data)
    code, out = _check(workload)
    assert code == 2 and "Traceback" not in out
    assert "w.yaml" in out and "stack" in out and "runs on gpu hardware, not rdu" in out
    missing = _write(tmp_path / "m.yaml", {**data, "stack": "no-such-stack"})
    code, out = _check(missing)
    rows = missing.read_text().splitlines()
    line = next(n for n, row in enumerate(rows, 1) if row == "stack: no-such-stack")
    assert code == 2 and f"m.yaml:{line}: stack: unknown serving stack 'no-such-stack'" in out


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

    typo = _write(tmp_path / "typo.yaml", {"extends": "dgx-h100", "gpu": {"kernel": {"synk": 1}}})
    code, out = _check(typo)
    assert code == 2 and "typo.yaml" in out and "gpu.kernel.synk" in out


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
