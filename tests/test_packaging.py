"""Installed without the checkout, rdu-sim runs: the shipped files are package data found by
name, and a wheel built from this tree holds exactly them.

The slow test builds a wheel offline (``--no-build-isolation --no-index``: the build uses
this environment's setuptools), installs it into a fresh venv without its dependencies (a
.pth line lends them from this environment), and runs the issue's commands from an empty
folder with no PYTHONPATH: the checkout is nowhere on the path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from rdu_sim import __version__, api, native
from rdu_sim.cli.main import cli
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError
from rdu_sim.sweep import default_db, load_spec

REPO = Path(__file__).resolve().parents[1]
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "native-modules.txt",
    "MANIFEST.in",
    "README.md",
    "LICENSE",
    "rdu_sim",
    *shipped.FOLDERS,
)


def test_names_resolve_to_the_checkout_files() -> None:
    assert shipped.root() == REPO
    assert shipped.locate("deepseek-r1-128k-snapstream", ("workload",)) == (
        REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    )
    assert shipped.locate("llama8b-batch", ("sweep",)) == (
        REPO / "workloads" / "sweeps" / "llama8b-batch.yaml"
    )
    # a name shared by a cluster and a plan: each command looks among its own kinds
    assert shipped.locate("llama3.1-8b-chat", ("plan",)).parent.name == "plans"
    assert shipped.locate("llama3.1-8b-chat", ("cluster",)).parent.name == "clusters"
    assert "sn40l-16" in shipped.names("hardware")
    with pytest.raises(ConfigError, match=r"no shipped sweep of that name.*llama8b-batch"):
        shipped.locate("llama8b-bach", ("sweep",))


def test_a_path_under_the_shipped_root_works_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    found = shipped.locate("workloads/sweeps/llama8b-hbm-bandwidth.yaml", ("sweep",))
    assert found == REPO / "workloads" / "sweeps" / "llama8b-hbm-bandwidth.yaml"
    local = tmp_path / "workloads" / "sweeps" / "llama8b-hbm-bandwidth.yaml"
    local.parent.mkdir(parents=True)
    local.write_text("base: x.yaml\n")
    assert shipped.locate("workloads/sweeps/llama8b-hbm-bandwidth.yaml", ("sweep",)) == Path(
        "workloads/sweeps/llama8b-hbm-bandwidth.yaml"
    )  # a file of the user's own comes first


def test_a_workload_may_name_its_hardware(tmp_path: Path) -> None:
    workload = tmp_path / "mine.yaml"
    text = (REPO / "workloads" / "llama3.1-8b-8socket.yaml").read_text()
    workload.write_text(text.replace("../hw_configs/sn40l-8.yaml", "sn40l-8"))
    scenario = api.load(workload)
    assert Path(scenario.hardware_file) == REPO / "hw_configs" / "sn40l-8.yaml"
    workload.write_text(text.replace("../hw_configs/sn40l-8.yaml", "sn40l-9"))
    names = (
        "dgx-h100, dgx-h100-2nodes, dgx-h100-4nodes, dgx-h100-9nodes, dgx-h100-vllm, "
        "dgx-h200, hgx-h800, sn40l, "
        "sn40l-16, sn40l-4racks, sn40l-8"
    )
    with pytest.raises(ConfigError, match=f"shipped hardware file: {names}"):
        api.load(workload)


def test_commands_take_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", "llama8b-batch", "sn40l-16", "llama3.1-8b-1socket"])
    assert checked.exit_code == 0, checked.output
    assert checked.output.count("OK") == 3
    missing = runner.invoke(cli, ["run", "llama3.1-8b-1sock"])
    assert missing.exit_code == 2
    assert "no shipped workload or cluster of that name" in missing.output
    assert "llama3.1-8b-1socket" in missing.output


def test_examples_lists_and_copies_a_layout_that_still_resolves(tmp_path: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["examples"])
    assert listing.exit_code == 0
    listed = {
        name.strip()
        for line in listing.output.splitlines()[1:-1]
        for name in line.split(": ")[1].split(",")
    }
    named = {name for kind in shipped.KINDS for name in shipped.names(kind)}
    assert listed == named  # every shipped file, by kind, subfolders included
    # each shipped file has a kind and a name (a cluster and a plan may share one)
    assert all(shipped.kind_of(path) for path in shipped.files())
    assert sum(len(shipped.names(kind)) for kind in shipped.KINDS) == len(shipped.files())
    assert "  workloads (workloads/speculative/): deepseek-r1-128k-snapstream-specprefill, " in (
        listing.output
    )
    assert "  traces (workloads/traces/): chat-400, mooncake-300" in listing.output
    copied = runner.invoke(cli, ["examples", "copy", str(tmp_path / "mine")])
    assert copied.exit_code == 0, copied.output
    files = shipped.files()
    assert f"copied {len(files)} file(s)" in copied.output
    assert sorted(
        p.relative_to(tmp_path / "mine") for p in (tmp_path / "mine").rglob("*") if p.is_file()
    ) == (files)
    # relative paths inside the copies resolve within the copy
    scenario = api.load(tmp_path / "mine" / "workloads" / "gpt-oss-120b-8socket.yaml")
    assert Path(scenario.hardware_file).is_relative_to(tmp_path / "mine")
    again = runner.invoke(cli, ["examples", "copy", str(tmp_path / "mine")])
    assert f"copied 0 file(s) into {tmp_path / 'mine'}; kept {len(files)}" in again.output


def test_a_sweep_database_never_goes_into_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec("llama8b-batch")
    monkeypatch.chdir(tmp_path)  # from a checkout: the current folder, as from a wheel
    assert default_db(spec.file) == tmp_path / "llama8b-batch.sqlite"
    monkeypatch.setattr(shipped, "installed_root", lambda: REPO)  # as if REPO were installed
    assert default_db(spec.file) == tmp_path / "llama8b-batch.sqlite"


def _setup_py(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """setup.py as a module, its ``setup()`` call made a no-op."""
    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **_: None)
    spec = importlib.util.spec_from_file_location("rdu_sim_setup", REPO / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_compiled_cores_front_half_sees_simpy_and_no_other_installed_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypyc's front half runs with setup.py's options and environment. numpy, installed
    here, must read as Any there, as in an isolated build that lacks it, or this
    environment's C differs from an isolated install's (serving/clock's did); simpy, whose
    classes the compiled event loop subclasses, must stay typed."""
    setup_py = _setup_py(monkeypatch)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import numpy\nimport simpy\nreveal_type(numpy.zeros)\nreveal_type(simpy.Environment)\n"
    )
    mypy = [sys.executable, "-m", "mypy", *setup_py.BUILD_MYPY_OPTIONS, "--no-incremental"]
    checked = subprocess.run(
        [*mypy, "probe.py"],
        cwd=tmp_path,
        env=setup_py.front_half_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    revealed = [line for line in checked.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 2, checked.stdout + checked.stderr
    assert revealed[0].endswith('Revealed type is "Any"')
    assert 'Revealed type is "def (initial_time: ' in revealed[1]
    assert "simpy.core.Environment" in revealed[1]


def test_the_c_compilers_level_is_mypycs_variable_and_a_bad_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup_py = _setup_py(monkeypatch)
    monkeypatch.delenv("MYPYC_OPT_LEVEL", raising=False)
    assert setup_py.opt_level() == "3"
    monkeypatch.setenv("MYPYC_OPT_LEVEL", "1")
    assert setup_py.opt_level() == "1"
    monkeypatch.setenv("MYPYC_OPT_LEVEL", "fast")
    with pytest.raises(SystemExit, match=r"MYPYC_OPT_LEVEL='fast': expected one of 0, 1, 2, 3"):
        setup_py.opt_level()


def test_a_build_without_a_visible_library_installed_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_py = _setup_py(monkeypatch)
    monkeypatch.setattr(setup_py, "VISIBLE_LIBRARIES", ("simpy", "no_such_library_here"))
    with pytest.raises(SystemExit, match=r"needs no_such_library_here installed"):
        setup_py.front_half_environment(tmp_path)


def _archive_record(wheel: Path) -> str:
    """The compiled core's build record inside a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"rdu_sim/{native.RECORD_FILE}").decode()


def _build_tree(target: Path) -> Path:
    """The files a build reads, copied (the build writes build/ and *.egg-info into them)."""
    # an editable install's compiled modules and their record stay behind: the build makes its own
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.sqlite*", ".ipynb_checkpoints", "*.so", native.RECORD_FILE
    )
    target.mkdir(parents=True)
    for name in BUILD_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)
    return target


def _commit_all(source: Path, env: dict[str, str]) -> str | None:
    """Make the copied tree a git checkout of one commit (None when git is missing)."""
    if shutil.which("git") is None:
        return None
    who = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "build"]):
        assert _run(["git", *args], source, {**env, **who}).returncode == 0
    return _run(["git", "rev-parse", "HEAD"], source, env).stdout.strip()


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_wheel_runs_from_an_empty_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    source = _build_tree(tmp_path / "src")
    commit = _commit_all(source, env)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run(  # at -O0: the same C as a release's -O3, compiled in far less CPU (setup.py)
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), "."],
        source,
        {**env, "MYPYC_OPT_LEVEL": "0"},
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("rdu_sim-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    data = sorted(
        Path(n).relative_to("rdu_sim/data") for n in names if n.startswith("rdu_sim/data/")
    )
    assert data == shipped.files()  # setup.py's patterns ship exactly shipped.PATTERNS
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert b"License-Expression: Apache-2.0" in metadata
    if native.compiled():  # this environment compiles (mypyc and a C compiler): so does the wheel
        assert f"rdu_sim/{native.RECORD_FILE}" in names
        compiled = {n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")}
        record = native.BuildRecord.parse(_archive_record(wheel))
        assert record.compiled <= compiled
        assert set(record.digests) == set(native.type_checked_modules(record.compiled))

    venv = tmp_path / "venv"
    assert (
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env).returncode
        == 0
    )
    python = venv / "bin" / "python"
    installed = _run(
        [*pip, "--python", str(python), "install", "--no-index", "--no-deps", str(wheel)],
        tmp_path,
        env,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            tmp_path,
            env,
        ).stdout.strip()
    )
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    empty = tmp_path / "empty"
    empty.mkdir()
    where = _run(
        [str(python), "-c", "from rdu_sim.config import shipped; print(shipped.root())"], empty, env
    )
    assert Path(where.stdout.strip()) == site / "rdu_sim" / "data", where.stderr
    if commit is not None:  # the wheel knows the commit it was built from (setup.py)
        label = _run(
            [
                str(python),
                "-c",
                "from rdu_sim.provenance import simulator; print(simulator().label)",
            ],
            empty,
            env,
        )
        assert label.stdout.strip() == f"{__version__}+g{commit[:12]}", label.stderr
    rdu_sim = str(venv / "bin" / "rdu-sim")
    ran = _run([rdu_sim, "run", "deepseek-r1-128k-snapstream", "--json"], empty, env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    assert result["workload"] == "deepseek-r1-128k-snapstream"
    assert result["requests_completed"] == result["requests"] > 0
    validated = _run([rdu_sim, "validate", "--quick", "--json"], empty, env)
    assert validated.returncode in (0, 1), validated.stderr[-3000:]  # 1: a figure misses
    assert result["provenance"]["simulator"]["compiled"] == native.compiled()
    assert {row["name"] for row in json.loads(validated.stdout)} >= {"max_batch_ratio"}
    assert list(empty.iterdir()) == []  # nothing written where it ran
