"""Every notebook in notebooks/ runs top to bottom, and is committed without outputs.

Each runs in a fresh kernel with cwd = notebooks/ (as Jupyter does), through nbclient: the
same path `jupyter nbconvert --execute` takes. A notebook's default settings are small, so
the whole set stays within a few minutes on two cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 180
NOTEBOOK_BUDGET_S = 120  # the "under 2 minutes" per notebook
FIGURE_TITLES = {"06_gpu_comparison.ipynb": "llama-3.1-70b"}
"""Notebook -> what the title of the figure it keeps in ``figure`` names (its model)."""
CHECKS = {
    # what the prose says of the run: Poisson arrivals slower than the slots finish, so the
    # batch never fills (the trial found "4 requests/s" and "the batch fills" beside 1/s
    # and a peak of 11 of 16 slots)
    "02_throughput_curves.ipynb": (
        "for r in served:\n"
        "    assert r['load']['arrival'] == 'poisson', r['load']\n"
        "    assert max(r['slot_occupancy']['occupied']) < r['batch_slots'] == 16, r['load']"
    ),
    # docs/sweeps.md's "Fill the slots": at least 3 requests a slot, so every point has a
    # steady window, and the knobs are ranked by its rate (the trial found 32 requests on 16
    # slots, no steady rate at any point, and the ranking read from the whole run's)
    "03_design_space.ipynb": (
        "assert (frame['requests'] >= 3 * frame['batch_slots']).all(), frame\n"
        "assert frame['steady_decode_tokens_per_s'].notna().all(), frame\n"
        "for axis in AXES:\n"
        "    others = [a for a in AXES if a != axis]\n"
        "    steady = frame.pivot_table(index=others, columns=axis,\n"
        "                               values='steady_decode_tokens_per_s')\n"
        "    lo, hi = min(steady.columns, key=quantity), max(steady.columns, key=quantity)\n"
        "    assert ((effects[axis] - steady[hi] / steady[lo]).abs() < 1e-9).all(), axis"
    ),
    # the slots the memory holds grow a little less than the ratio, the slots a step runs
    # (a power-of-two program) exactly as the ratio; the 1x quality point loses a little
    "04_snapstream_quality.ipynb": (
        "assert (speed['slots gain'] == speed['ratio']).all(), speed\n"
        "assert (speed['memory gain'] <= speed['ratio']).all(), speed\n"
        "assert (speed['memory gain'] < speed['ratio']).any(), speed\n"
        # the 1x quality point is not lossless: the decode steps overwrite the ring
        "one = quality[quality.ratio == 1]\n"
        "assert len(one) == 2 and (one['relative_error'] > 1e-4).all(), one"
    ),
    "06_gpu_comparison.ipynb": (
        "shares = [row['launch share'] for row in levels if row['system'] == 'dgx-h100']\n"
        "assert shares and all(share > 0 for share in shares), shares\n"
        "plain = [row['launch share'] for row in levels\n"
        "         if row['system'] == 'dgx-h100' and row['CUDA graphs'] is False]\n"
        "assert max(plain) > 0.1, plain  # a launch per kernel: half an unfused step\n"
        # its words on what fits: every weight in HBM (memory.weights hbm), so nothing
        # fits beyond its capacity, and the 405B's 32 slots on sn40l-8 do not fit at all,
        # the reason saying why; under a hot set every batch fits with weights
        # read from DDR; a GPU's pool refuses what it cannot hold; a reason reads without
        # the workload's path (the trial found 405B at batch 64 on sn40l-8 beside "fitting
        # only when every weight is in HBM", DeepSeek-R1 at batch 64 on an H100 pool of 61
        # pages "fitting", and reasons led by an absolute path)
        "over = frame[frame.fits & (frame.batch > frame['batch capacity'])]\n"
        "assert over.empty and (frame[frame.fits]['DDR GiB/step'] == 0).all(), over\n"
        "big = frame[(frame.model == 'llama-3.1-405b') & (frame.system == 'sn40l-8')]\n"
        "assert not big.fits.any(), big\n"
        "assert big.reason.str.contains('keeps every weight in HBM').all(), big.reason\n"
        "assert spilled.fits.all() and (spilled['DDR GiB/step'] > 0).all(), spilled\n"
        "gpu = frame[(frame.system == 'dgx-h100') & (frame.model == 'deepseek-r1')]\n"
        "assert list(gpu.fits) == [True, False, False, False], gpu\n"
        "assert not frame.reason.str.startswith('/').any(), frame.reason"
    ),
    # what the prose says of its table: prefetched switches stall nothing, so the HBM size
    # leaves tokens/s as it was; fewer requests a turn as the experts grow
    "07_composition_of_experts.ipynb": (
        "assert (table['stall_s'] == 0).all(), table\n"
        "by_hbm = table.pivot(index='experts', columns='hbm_gib', values='tokens_per_s')\n"
        "assert (by_hbm.nunique(axis=1) == 1).all(), by_hbm\n"
        "turns = table.groupby('experts')['requests_per_turn'].first()\n"
        "assert turns.is_monotonic_decreasing and turns.iloc[-1] < turns.iloc[0], turns"
    ),
}
"""Notebook -> a cell run after it whose assertions catch a column the notebook reads from
the wrong place (a missing key read as 0: notebook 06's launch share once was), or a table
that no longer shows what the notebook's prose says of it."""


DEPRECATIONS = ("FutureWarning", "DeprecationWarning", "Pandas4Warning")
"""Warnings a notebook's run must not print: a library saying the notebook's code will break."""


def _kernel_name() -> str:
    """The kernel to run: 'python3' when its spec uses this interpreter, else a private one.

    A stale 'python3' spec (another interpreter without rdu_sim) would fail every import, so
    when the spec found does not point at this Python, ipykernel's own spec for
    ``sys.executable`` is installed into this environment's prefix under another name.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        spec = manager.get_kernel_spec("python3")
        if Path(spec.argv[0]).resolve() == Path(sys.executable).resolve() or spec.argv[0] in (
            "python",
            "python3",
        ):  # jupyter_client runs sys.executable
            return "python3"
    except NoSuchKernel:
        pass
    from ipykernel.kernelspec import install

    install(kernel_name="rdu-sim-tests", display_name="rdu-sim tests", prefix=sys.prefix)
    return "rdu-sim-tests"


@pytest.fixture(scope="module")
def kernel_name() -> str:
    return _kernel_name()


@pytest.mark.slow
def test_the_readme_line_executes_a_notebook_and_saves_it(tmp_path: Path) -> None:
    """README's `jupyter execute` line, run as written in an empty folder: it copies the
    shipped files, runs notebook 01 and saves it there with its tables and figures (the
    line it replaced ran the notebook and kept nothing)."""
    readme = (NOTEBOOKS_DIR.parent / "README.md").read_text()
    (line,) = re.findall(r"`(rdu-sim examples copy [^`]*jupyter execute [^`]*)`", readme)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    name = line.rsplit(" ", 1)[1]
    saved = nbformat.read(next(tmp_path.glob(f"*/notebooks/{name}")), as_version=4)
    outputs = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(o.output_type == "error" for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # its figures, saved
    shipped = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    assert not any(c.outputs for c in shipped.cells if c.cell_type == "code")


def test_there_are_notebooks() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {
        "01_memory_and_capacity.ipynb",
        "02_throughput_curves.ipynb",
        "03_design_space.ipynb",
        "04_snapstream_quality.ipynb",
        "05_calibration.ipynb",
        "06_gpu_comparison.ipynb",
    } <= names, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: commit notebooks without outputs"
            assert cell.execution_count is None
    assert any(c.cell_type == "markdown" for c in notebook.cells), "explain in prose cells"


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_BUDGET_S * 2)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path, kernel_name: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    if path.name in CHECKS:
        notebook.cells.append(nbformat.v4.new_code_cell(CHECKS[path.name]))
    if path.name in FIGURE_TITLES:  # ask the kernel what the figure shown is titled
        notebook.cells.append(nbformat.v4.new_code_cell("print(figure.get_suptitle())"))
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on any error
    elapsed = time.perf_counter() - start
    errors = [
        o
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors
    # no library's deprecation warning (pandas' FutureWarning for a "-" filled into a float
    # column was notebook 06's)
    warned = [
        o.text
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and any(kind in o.text for kind in DEPRECATIONS)
    ]
    assert not warned, warned
    assert elapsed < NOTEBOOK_BUDGET_S, f"{path.name} took {elapsed:.0f} s"
    if path.name in FIGURE_TITLES:
        (title,) = (o.text for o in notebook.cells[-1].outputs if o.output_type == "stream")
        assert FIGURE_TITLES[path.name] in title
