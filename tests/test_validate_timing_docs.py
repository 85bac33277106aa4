"""How long `rdu-sim validate` and `--quick` take is said one way wherever it is said (the
README said `--quick` took about a minute, docs/calibration.md the full suite 15-30 s,
notebook 05 `--quick` fifteen to thirty seconds, `--help` that `--quick` took a fraction of
the full suite's time; measured, both take about ten seconds on two busy cores, docs/
calibration.md "How long it takes")."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rdu_sim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
STALE = ("about a minute;", "~15-30 s", "fifteen to thirty", "a fraction of the full suite")


def _notebook(name: str) -> str:
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells)


def test_the_docs_say_one_duration_for_validate_and_its_quick_run() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    calibration = (ROOT / "docs" / "calibration.md").read_text()
    notebook = " ".join(_notebook("05_calibration.ipynb").split())
    helped = " ".join(CliRunner().invoke(cli, ["validate", "--help"]).output.split())
    for text in (readme, calibration, notebook, helped):
        assert not [stale for stale in STALE if stale in text]
    assert "`rdu-sim validate`, about ten seconds on two cores" in readme
    assert "--quick` runs the same code path with fewer requests, in about the same time" in (
        readme
    )
    assert calibration.count("deployment runs (~10 s)") == 1
    assert "1000 requests (~10 s)" in calibration
    assert "So `--quick` is hardly quicker" in calibration
    assert "It takes about ten seconds on two cores, about what the full suite takes" in notebook
    assert "hardly quicker" in helped
