"""README.md's "From Python" section is code a scripter copies: it runs, as a script (its
sweep's guard is ``if __name__ == "__main__"``) in an empty folder, and does what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_block() -> str:
    """The first ```python block under README.md's "## From Python" heading."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "no python block under ## From Python"
    return found.group(1)


def test_the_readme_python_section_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", python_block()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert float(lines[0]) > 0  # decode tokens/s
    assert lines[1].startswith("error: ") and "serving.batch_slots" in lines[1]
    assert "batch: ran 2 points" in done.stdout and (tmp_path / "batch.sqlite").is_file()
    assert "Traceback" not in done.stderr
