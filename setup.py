"""Packaging that pyproject.toml cannot say: the shipped data folders mapped into the package.

The checkout's workloads/, hw_configs/, tests/models/ (the config.json files a shipped
workload reads) and notebooks/ are the one copy of each file. The wheel carries them under
``rdu_sim/data/`` in the same layout, so the relative paths inside the files
(``hardware: ../hw_configs/sn40l-16.yaml``) hold there too; ``rdu_sim.config.shipped`` finds
them installed or in a checkout. Everything else is in pyproject.toml.
"""

import json
import subprocess
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

SHIPPED = {
    "rdu_sim.data.workloads": "workloads",
    "rdu_sim.data.hw_configs": "hw_configs",
    "rdu_sim.data.tests.models": "tests/models",
    "rdu_sim.data.notebooks": "notebooks",
}
"""Installed package -> checkout folder (a data-only package: no Python inside)."""


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


class BuildWithCommit(build_py):
    """Also write rdu_sim/_commit.json (the commit built and whether tracked files differed
    from it) when building from a git checkout, so an installed simulator can record the
    commit in its outputs (rdu_sim.provenance); nothing is written into the source tree."""

    def run(self) -> None:
        super().run()
        head = _git("rev-parse", "HEAD") if Path(".git").exists() else None
        status = _git("status", "--porcelain", "--untracked-files=no")
        if head is None or status is None or self.editable_mode:
            return
        target = Path(self.build_lib) / "rdu_sim" / "_commit.json"
        target.write_text(json.dumps({"commit": head.strip(), "dirty": bool(status.strip())}))


setup(
    cmdclass={"build_py": BuildWithCommit},
    packages=[*find_packages(include=["rdu_sim", "rdu_sim.*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={
        "rdu_sim": ["py.typed"],
        # rdu_sim.config.shipped.PATTERNS, the same files (tests/test_packaging.py checks)
        **{
            name: ["**/*.yaml", "**/*.csv", "**/*.jsonl", "**/*.json", "*.ipynb"]
            for name in SHIPPED
        },
    },
)
