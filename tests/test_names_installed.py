"""Issue 36's "must show": from an empty folder, with rdu-sim laid out as an installed copy
(the package with its shipped files under ``rdu_sim/data/``, no checkout on the path), the
commands a new user reaches for take shipped names everywhere, and a missing optional
dependency is one ``error:`` line.

The installed copy is the package folder and ``shipped.files()`` copied as a wheel lays
them out (tests/test_packaging.py builds a real wheel, slowly), with the checkout's compiled
core when it has a current one (its extensions, their record and mypyc's shared library, as a
wheel carries them); each command runs in a subprocess with only that copy on ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rdu_sim import native
from rdu_sim.config import shipped

REPO = Path(__file__).resolve().parents[1]
NATIVE_LIBRARY = "rdu_sim_native__mypyc"
"""mypyc's shared library of the compiled modules (setup.py's NATIVE_GROUP), beside the package."""
BLOCK_DASK = (
    "import sys; sys.modules['distributed'] = None; "  # as if `pip install .` had no [dask]
    "from rdu_sim.cli.main import main; sys.argv[0] = 'rdu-sim'; main()"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site folder holding rdu_sim as a wheel installs it (data included)."""
    site = tmp_path_factory.mktemp("site")
    skipped = ["__pycache__", "data"]
    if not native.compiled():  # none, or stale: the copy is pure Python
        skipped += ["*.so", "*.pyd", native.RECORD_FILE]
    shutil.copytree(REPO / "rdu_sim", site / "rdu_sim", ignore=shutil.ignore_patterns(*skipped))
    if native.compiled():
        library = importlib.util.find_spec(NATIVE_LIBRARY)
        assert library is not None and library.origin is not None
        shutil.copy2(library.origin, site)
    for relative in shipped.files():
        target = site / "rdu_sim" / "data" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / relative, target)
    return site


def _rdu_sim(
    site: Path, cwd: Path, *args: str, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(site))
    command = (
        [sys.executable, "-c", code, *args]
        if code
        else [sys.executable, "-m", "rdu_sim.cli.main", *args]
    )
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_copy_finds_its_data_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    found = _rdu_sim(
        installed, tmp_path, code="from rdu_sim.config import shipped; print(shipped.root())"
    )
    assert Path(found.stdout.strip()) == installed / "rdu_sim" / "data", found.stderr
    core = _rdu_sim(
        installed, tmp_path, code="from rdu_sim import native; print(native.compiled())"
    )
    assert (core.stdout.strip(), core.stderr) == (str(native.compiled()), "")  # never stale
    listed = _rdu_sim(installed, tmp_path, "examples")
    assert "  workloads (workloads/speculative/): " in listed.stdout
    assert "llama3.1-70b-16socket-specdec" in listed.stdout


def test_shipped_names_work_in_every_command(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    plotted = _rdu_sim(
        installed, empty, "plot", "memory", "deepseek-r1-128k-snapstream", "-o", "m.png"
    )
    assert plotted.returncode == 0, plotted.stderr[-2000:]
    assert (empty / "m.png").read_bytes()[:4] == b"\x89PNG"

    compared = _rdu_sim(
        installed, empty, "compare", "llama3.1-70b-decode", "--hardware", "sn40l-8",
        "--hardware", "dgx-h100", "--json",
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr[-2000:]
    columns = json.loads(compared.stdout)["columns"]
    assert [c["hardware"] for c in columns] == ["sn40l-8", "dgx-h100"]
    assert all(c["fits"] and c["step_s"] > 0 for c in columns)

    ran = _rdu_sim(installed, empty, "run", "llama3.1-70b-16socket-specdec", "--json")
    assert ran.returncode == 0, ran.stderr[-2000:]
    result = json.loads(ran.stdout)
    assert result["workload"] == "llama3.1-70b-16socket-specdec"
    assert result["requests_completed"] == result["requests"] > 0
    assert result["provenance"]["files"]["workload"].startswith("shipped:")
    assert sorted(p.name for p in empty.iterdir()) == ["m.png"]  # nothing else written


def test_a_missing_name_and_a_missing_dask_are_one_error_line(
    installed: Path, tmp_path: Path
) -> None:
    missing = _rdu_sim(
        installed, tmp_path, "compare", "llama3.1-70b-decode", "--hardware", "sn40l-9"
    )
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "error: sn40l-9: file not found, and no shipped hardware file of that name; did you "
        "mean 'sn40l-8'? (shipped "
        "hardware files: dgx-h100, dgx-h100-2nodes, dgx-h100-4nodes, dgx-h100-9nodes, "
        "dgx-h100-vllm, dgx-h200, "
        "hgx-h800, "
        "sn40l, sn40l-16, sn40l-4racks, sn40l-8); "
        "`rdu-sim examples` lists them, "
        "`rdu-sim examples copy DIR` copies them to edit"
    ]
    swept = _rdu_sim(
        installed, tmp_path, "sweep", "llama8b-batch", "--cluster", "local", code=BLOCK_DASK
    )
    assert swept.returncode == 2, swept.stderr
    assert swept.stderr.splitlines() == [
        "error: --cluster local needs dask.distributed, which is not installed: "
        'pip install "rdu-sim[dask]"'
    ]
    assert swept.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_run_reads_a_mooncake_trace_given_with_set(installed: Path, tmp_path: Path) -> None:
    rows = [
        {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]},
        {"timestamp": 30535, "input_length": 1200, "output_length": 180, "hash_ids": [46]},
        {"timestamp": 39999, "input_length": 512, "output_length": 20, "hash_ids": [52]},
    ]
    (tmp_path / "mooncake.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ran = _rdu_sim(
        installed, tmp_path, "run", "llama3.1-8b-1socket", "--set",
        "serving.trace=mooncake.jsonl", "--out", "out",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    header = lines[0].split(",")
    table = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    assert [row["prompt_tokens"] for row in table] == ["6955", "1200", "512"]
    assert [float(row["arrival_s"]) for row in table] == [0.0, 3.053, 12.517]


@pytest.mark.slow
def test_the_readme_examples_run_as_written(installed: Path, tmp_path: Path) -> None:
    """The README's example block, verbatim, in bash from an empty folder (`rdu-sim` on the
    PATH runs the installed copy)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("Examples:\n\n```sh\n", 1)[1].split("```", 1)[0]
    before_copy = "".join(
        line.split("#")[0] for line in block.split("examples copy")[0].splitlines()
    )
    assert "workloads/" not in before_copy and "hw_configs/" not in before_copy  # names only
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    script = bin_folder / "rdu-sim"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rdu_sim.cli.main "$@"\n')
    script.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(
        PYTHONPATH=str(installed),
        PATH=f"{bin_folder}{os.pathsep}{env.get('PATH', '')}",
    )
    ran = subprocess.run(
        ["bash", "-euc", block], cwd=work, env=env, capture_output=True, text=True, timeout=1200
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((work / "result.json").read_text())["workload"] == (
        "deepseek-r1-128k-snapstream"
    )
    assert (work / "memory.png").is_file() and (work / "ex" / "workloads").is_dir()
