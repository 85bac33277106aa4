"""Packaging that pyproject.toml cannot say: the shipped data folders mapped into the package.

The checkout's workloads/, hw_configs/, tests/models/ (the config.json files a shipped
workload reads) and notebooks/ are the one copy of each file. The wheel carries them under
``rdu_sim/data/`` in the same layout, so the relative paths inside the files
(``hardware: ../hw_configs/sn40l-16.yaml``) hold there too; ``rdu_sim.config.shipped`` finds
them installed or in a checkout. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

SHIPPED = {
    "rdu_sim.data.workloads": "workloads",
    "rdu_sim.data.hw_configs": "hw_configs",
    "rdu_sim.data.tests.models": "tests/models",
    "rdu_sim.data.notebooks": "notebooks",
}
"""Installed package -> checkout folder (a data-only package: no Python inside)."""

setup(
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
