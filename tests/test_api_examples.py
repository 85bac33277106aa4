"""The ``>>>`` examples of the public API's docstrings are code a reader copies: each runs
(in order, one namespace per module, from the checkout's root as they are written) and
names only files that exist. They are not doctests with outputs (the numbers move with the
model), so each line is executed and its value, when it has one, must not be None.
README.md's Python block is run by tests/test_readme_python.py."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["rdu_sim.api", "rdu_sim.api_cluster"]


def examples(module: str) -> list[doctest.Example]:
    found = doctest.DocTestParser().get_examples(importlib.import_module(module).__doc__ or "")
    assert found, f"{module}'s docstring has no >>> example"
    return found


@pytest.mark.parametrize("module", MODULES)
def test_the_docstring_examples_run(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """api_cluster's example named ``workloads/cluster-llama3.1-8b.yaml``, which does not
    exist."""
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    for example in examples(module):
        source = example.source
        try:
            code = compile(source, f"<{module} example>", "eval")
        except SyntaxError:
            exec(compile(source, f"<{module} example>", "exec"), namespace)
            continue
        value = eval(code, namespace)
        assert value is not None, source


def test_the_examples_name_files_that_exist() -> None:
    for module in MODULES:
        for example in examples(module):
            for path in re.findall(r"[\"']((?:workloads|hw_configs)/[^\"']+)[\"']", example.source):
                assert (ROOT / path).is_file(), f"{module}: {path}"
