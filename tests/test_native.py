"""The compiled core (rdu_sim/native.py, setup.py): the same bytes compiled and from source,
and never a stale or half-compiled engine."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rdu_sim
from rdu_sim import native

PACKAGE = Path(rdu_sim.__file__).resolve().parent
REPO = PACKAGE.parent
RECORD = PACKAGE / native.RECORD_FILE
GROUP = "rdu_sim_native__mypyc"  # mypyc's shared library for setup.py's NATIVE_GROUP
LISTED = [
    line.strip()[: -len(".py")].replace("/", ".")
    for line in (REPO / "native-modules.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _python(code: str, *, pure: bool, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(native.PURE_VARIABLE, None)
    if pure:
        env[native.PURE_VARIABLE] = "1"
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=path or REPO,  # ``python -c`` puts its folder first on the path
        timeout=300,
    )


def _without_provenance(text: str) -> str:
    data = json.loads(text)
    data.pop("provenance", None)
    return json.dumps(data, sort_keys=True)


def test_the_list_is_the_record() -> None:
    """setup.py compiles exactly the listed modules (when it compiled at all) and records
    every source they were type-checked against."""
    assert len(LISTED) == len(set(LISTED)) > 10
    for name in LISTED:
        assert native.module_source(name).is_file(), name
    if RECORD.is_file():
        record = native.BuildRecord.parse(RECORD.read_text())
        assert sorted(record.compiled) == sorted(LISTED)
        assert sorted(record.digests) == native.type_checked_modules(LISTED)


def test_the_record_covers_what_the_compiled_modules_import() -> None:
    """Modules the compiled ones only import (their types are baked into the C code) are
    recorded too, with the packages an import runs; modules outside the import graph are not."""
    checked = native.type_checked_modules(LISTED)
    assert set(LISTED) < set(checked)
    for imported in (
        "rdu_sim.compiler.program",
        "rdu_sim.compiler.buffers",
        "rdu_sim.config.hardware",
        "rdu_sim.config.workload",
        "rdu_sim.config.wiring",
        "rdu_sim.engine.run_stats",
        "rdu_sim.systolic",
        "rdu_sim.engine",  # engine/__init__.py runs on importing any engine module
    ):
        assert imported in checked, imported
    for elsewhere in ("rdu_sim.cli.main", "rdu_sim.report.plots", "rdu_sim.sweep.store"):
        assert native.module_source(elsewhere).is_file()
        assert elsewhere not in checked
    record = native.BuildRecord.of_sources(LISTED)
    assert native.BuildRecord.parse(record.text()).digests == record.digests
    assert native.BuildRecord.parse(record.text()).compiled == frozenset(LISTED)


def test_this_process_runs_what_was_built() -> None:
    """Compiled exactly when a build record exists and no source changed since (the
    suite runs from a fresh install: nothing is stale)."""
    pure_asked = os.environ.get(native.PURE_VARIABLE) == "1"
    assert native.compiled() == (RECORD.is_file() and not pure_asked)
    counting_env = sys.modules.get("rdu_sim.des.environment")
    if counting_env is not None:
        assert str(counting_env.__file__).endswith(".py") != native.compiled()


@pytest.mark.parametrize(
    "command",
    [
        "step workloads/deepseek-r1-128k-full.yaml --json",
        "step workloads/llama3.1-8b-8socket.yaml --phase prefill --tokens 2048 --json",
        "run workloads/llama3.1-8b-1socket.yaml --set serving.requests=40 --json",
    ],
)
def test_compiled_and_source_give_the_same_bytes(command: str) -> None:
    """The differential test: the same command compiled and from source (provenance aside,
    which says which it was)."""
    argv = ["rdu-sim", *command.split()]
    code = f"import sys; from rdu_sim.cli.main import main; sys.argv = {argv!r}; main()"
    outputs = {}
    for pure in (False, True):
        done = _python(code, pure=pure)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        outputs[pure] = done.stdout
        assert json.loads(done.stdout)["provenance"]["simulator"]["compiled"] == (
            RECORD.is_file() and not pure
        )
    assert _without_provenance(outputs[False]) == _without_provenance(outputs[True])


_WHERE = (
    "import sys, rdu_sim, importlib; "
    "mods = [importlib.import_module(n) for n in sys.argv[1:]]; "
    "print(rdu_sim.native.compiled(), *sorted({m.__file__.rsplit('.', 1)[1] for m in mods}))"
)


def _copy(tmp_path: Path, record: native.BuildRecord) -> Path:
    """The package (and mypyc's shared library, if built) copied with a build record."""
    shutil.copytree(PACKAGE, tmp_path / "rdu_sim", ignore=shutil.ignore_patterns("data"))
    spec = importlib.util.find_spec(GROUP)
    if spec is not None and spec.origin is not None:
        shutil.copy(spec.origin, tmp_path)
    (tmp_path / "rdu_sim" / native.RECORD_FILE).write_text(record.text())
    return tmp_path


def _where(path: Path, *, pure: bool = False) -> subprocess.CompletedProcess[str]:
    return _python(_WHERE.replace("sys.argv[1:]", repr(LISTED)), pure=pure, path=path)


def test_a_changed_source_runs_every_listed_module_from_source(tmp_path: Path) -> None:
    record = native.BuildRecord.of_sources(LISTED)
    stale = LISTED[len(LISTED) // 2]
    record.digests[stale] = "0" * 8  # as if its source had been edited after the build
    done = _where(_copy(tmp_path, record))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "py"]  # all of them, not only the stale one
    assert done.stderr.count("\n") == 1
    assert f"rdu-sim: {stale} changed since the core was compiled" in done.stderr


def test_an_edit_to_a_module_the_core_imports_is_stale(tmp_path: Path) -> None:
    """config/hardware.py is not compiled, but the compiled engine was type-checked against
    its classes: editing it after the build runs every compiled module from source."""
    copied = _copy(tmp_path, native.BuildRecord.of_sources(LISTED))
    hardware = copied / "rdu_sim" / "config" / "hardware.py"
    hardware.write_text(hardware.read_text() + "\n# edited after the build\n")
    done = _where(copied)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "py"]
    assert done.stderr.count("\n") == 1
    assert "rdu-sim: rdu_sim.config.hardware changed since the core was compiled" in done.stderr
    assert "(1 module(s) in all)" in done.stderr


def test_an_older_builds_record_runs_from_source(tmp_path: Path) -> None:
    """A record of ``name digest`` lines (a build before the record covered imports) cannot
    tell whether a module the core imports changed: every compiled module runs from source,
    saying so once, even when every listed digest matches."""
    current = native.BuildRecord.of_sources(LISTED)
    older = "".join(f"{name} {current.digests[name]}\n" for name in sorted(LISTED))
    record = native.BuildRecord.parse(older)
    assert not record.complete and record.compiled == frozenset(LISTED)
    assert current.complete and native.BuildRecord.parse(current.text()).complete
    copied = _copy(tmp_path, current)
    (copied / "rdu_sim" / native.RECORD_FILE).write_text(older)
    done = _where(copied)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "py"]
    assert done.stderr.count("\n") == 1
    assert "built by an older rdu-sim" in done.stderr


def test_an_edit_outside_the_import_graph_keeps_the_core(tmp_path: Path) -> None:
    """An edit to a module the compiled ones never import (the CLI) is not stale."""
    copied = _copy(tmp_path, native.BuildRecord.of_sources(LISTED))
    main = copied / "rdu_sim" / "cli" / "main.py"
    main.write_text(main.read_text() + "\n# edited after the build\n")
    done = _where(copied)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # (a checkout never built has no extensions to copy: its sources load, but unflagged)
    assert done.stdout.split() == ["True", "so" if RECORD.is_file() else "py"]


def test_asking_for_source_is_silent(tmp_path: Path) -> None:
    done = _where(_copy(tmp_path, native.BuildRecord.of_sources(LISTED)), pure=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "py"]
    assert done.stderr == ""


def test_an_up_to_date_build_runs_compiled(tmp_path: Path) -> None:
    if not RECORD.is_file():
        pytest.skip("this install is pure Python (no C compiler at install time)")
    done = _where(_copy(tmp_path, native.BuildRecord.parse(RECORD.read_text())))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "so"]  # every listed module is an extension
    assert done.stderr == ""


def test_an_in_place_build_finds_the_extensions_of_modules_no_longer_compiled(
    tmp_path: Path,
) -> None:
    package = tmp_path / "rdu_sim"
    names = [
        "des/environment.cpython-311-x86_64-linux-gnu.so",  # compiled: kept
        "des/environment.cpython-312-x86_64-linux-gnu.so",  # another Python's: kept
        "hw/copy_engine.cpython-311-x86_64-linux-gnu.so",  # left the list: stale
        "hw/copy_engine.py",
        "engine/records.abi3.so",  # left the list: stale
    ]
    for name in names:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    stale = native.stale_extensions(package, {"rdu_sim.des.environment"})
    assert [p.relative_to(package).as_posix() for p in stale] == [
        "engine/records.abi3.so",
        "hw/copy_engine.cpython-311-x86_64-linux-gnu.so",
    ]
