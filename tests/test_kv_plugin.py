"""A KV policy from outside rdu-sim: docs/kv.md's example policy, written as a plugin module
as the docs give it, named through ``RDU_SIM_PLUGINS`` in ``rdu-sim step`` and ``rdu-sim
run``; its code in provenance; a study resizing it as it resizes the shipped policies that
keep a budget; the registry's rule for a name taken by another class."""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_plugins import LLAMA, doc_block, rdu_sim

from rdu_sim.kv import policies
from rdu_sim.scenario import load_scenario
from rdu_sim.studies import point_settings

EXAMPLE = "# window_only.py"


@pytest.fixture
def kv_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KV policy registry as it is, restored after the test (it registers its own)."""
    monkeypatch.setattr(policies, "_REGISTRY", dict(policies._REGISTRY))


def _write_example(folder: Path) -> Path:
    module = folder / "window_only.py"
    module.write_text(doc_block("kv.md", EXAMPLE))
    return module


def test_the_docs_kv_policy_runs_as_a_plugin_in_step_and_run(tmp_path: Path) -> None:
    """``--set kv.policy=window_only`` finds the docs' policy through RDU_SIM_PLUGINS: a
    decode step attends to its 1,024-token slot, a run counts the prompts it cut by its own
    ``cache_at`` (those above 1,024 tokens), and both record its code."""
    module = _write_example(tmp_path)
    settings = ("--set", "kv.policy=window_only", "--set", "kv.budget=1024")
    step = rdu_sim("step", LLAMA, *settings, "--json", plugins_path=tmp_path, names="window_only")
    assert step.returncode == 0, step.stderr
    data = json.loads(step.stdout)
    assert data["context"] == 1024
    assert data["kv_layout"] == "window_only: 1,024 tokens a slot"
    digest = hashlib.sha256(
        b"window_only.py\0" + str(len(module.read_bytes())).encode() + b"\0" + module.read_bytes()
    ).hexdigest()
    code = {"name": "window_only.WindowOnly", "package": "window_only", "sha256": digest}
    assert data["provenance"]["config"]["plugins"] == {"kv.policy": code}

    requests = ("--set", "serving.requests=12", "--out", str(tmp_path / "out"))
    run = rdu_sim(
        "run", LLAMA, *settings, *requests, "--json", plugins_path=tmp_path, names="window_only"
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["kv_policy"] == "window_only"
    assert result["provenance"]["config"]["plugins"] == {"kv.policy": code}
    table = np.genfromtxt(tmp_path / "out" / "requests.csv", delimiter=",", names=True)
    prompts, outputs = table["prompt_tokens"], table["output_tokens"]
    assert len(prompts) == 12
    kept = result["kv_kept"]
    assert kept["prompts_compressed"] == int((prompts > 1024).sum()) > 0
    assert kept["slots_wrapped"] == int((prompts + outputs - 1 > 1024).sum())

    unknown = rdu_sim("step", LLAMA, *settings, plugins_path=tmp_path)  # no variable
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "unknown kv.policy 'window_only'" in unknown.stderr


def test_a_study_resizes_a_plugin_policy_that_keeps_a_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kv_registry: None
) -> None:
    """``takes_budget`` is the class's ``reads``: the plugin reads kv.budget, so a study's
    budget reaches it as it reaches SnapStream's, and full attention (no budget) gets none."""
    _write_example(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("window_only")
    try:
        scenario = load_scenario(LLAMA)
        assert policies.takes_budget("window_only") and policies.takes_budget("snapkv")
        assert not policies.takes_budget("full") and not policies.takes_budget("nothing")
        ours = point_settings(scenario, "window_only", 8192, snapstream_budget=2048)
        assert ours == {
            "serving.max_context": 8192,
            "kv.policy": "window_only",
            "kv.budget": 2048,
            "kv.compression_ratio": None,
        }
        full = point_settings(scenario, "full", 8192, snapstream_budget=2048)
        assert full == {"serving.max_context": 8192, "kv.policy": "full"}
        policy = load_scenario(LLAMA, ours).kv_policy
        assert policy.slot_tokens() == 2048 and policy.cache_after_prefill(3000) == 2048

        class Other(policies.PolicyBase):
            pass

        with pytest.raises(ValueError, match=r"KV policy 'window_only' is already registered"):
            policies.register_policy("window_only")(Other)
    finally:
        sys.modules.pop("window_only", None)
