"""Preemption policies (``serving.preemption``, ``rdu_sim.serving.preemption``): which running
request a decode step short of KV pages preempts, where the stack gives pages on demand.
Each shipped policy's victims on exact small cases where they differ from another's; the
registry's rule (the batching registry's: unknown names refused where they are written,
plugins through ``RDU_SIM_PLUGINS``, their code in provenance and sweep keys); an outside
policy's wrong answer one line; a policy field given parameters refused saying why."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_bad_input_kinds import clean_error, invoke, one_error
from test_plugins import doc_block, rdu_sim, run_json

from rdu_sim import api
from rdu_sim.config.workload import KVConfig, ServingConfig
from rdu_sim.kv import make_policy
from rdu_sim.kv.paged import PagedKV
from rdu_sim.plugins import PolicyAnswerError
from rdu_sim.provenance import outside_code, resolved_config
from rdu_sim.serving.kv_pool import OnDemandPool
from rdu_sim.serving.preemption import (
    DEFAULT,
    PreemptionPolicy,
    RunningView,
    make_preemption,
    preemption_names,
    register,
)
from rdu_sim.serving.preemption import base as preemption_base
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape
from rdu_sim.sweep.key import config_key

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
PREEMPTS = (
    "--set", "hardware=dgx-h100", "--set", "stack=vllm-2024",
    "--set", "stack.memory_utilization=0.22", "--set", "serving.max_context=2048",
    "--set", "serving.batch_slots=32", "--set", "serving.requests=60",
    "--set", "serving.arrival={process: poisson, rate: 40}",
    "--set", "serving.prompt_tokens={dist: uniform, low: 64, high: 768}",
    "--set", "serving.output_tokens={dist: uniform, low: 64, high: 1024}",
    "--set", "serving.seed=3",
)  # fmt: skip
"""The 8B model on an H100 under vLLM with a 1,285-page pool: 26 preemptions by default."""
WORDS = ("serving.preemption", "'nope'", f"valid: {', '.join(preemption_names())}")


def _step(shape: StepShape) -> StepCost:
    """A prefill step 1 ms, a decode step 10 ms, whatever the shape."""
    return StepCost(1e-3 if shape.phase == "prefill" else 1e-2, 0.5, 0.5)


def _victims(
    preemption: str,
    arrivals_s: list[float],
    prompts: list[int],
    outputs: list[int],
    pages: int,
    *,
    slots: int = 2,
    chunk: int | None = None,
    batching: str = "prefill_first",
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[int], ServingRecords]:
    """Serve the requests on 4-token pages given on demand (no watermark): the requests
    preempted, in order (each time a request gives its pages back but its last: it completes
    once), and the records."""
    given: list[int] = []
    original = OnDemandPool.give_back

    def give_back(self: OnDemandPool, request: int, now: int) -> None:
        given.append(request)
        original(self, request, now)

    monkeypatch.setattr(OnDemandPool, "give_back", give_back)
    requests = RequestSet(
        np.array(prompts, np.int64), np.array(outputs, np.int64), np.array(arrivals_s), None
    )
    kv = PagedKV(page_tokens=4, pages=pages, slot_tokens=1 << 20, on_demand=True)
    config = ServerConfig(
        slots, 512, batching, chunk, decode_rows="ladder", kv_pool=kv, preemption=preemption
    )
    policy = make_policy(KVConfig.model_validate({"policy": "full"}), 512)
    records = serve(requests, policy, StepCache(_step), config)
    monkeypatch.undo()
    last = {request: at for at, request in enumerate(given)}
    return [r for at, r in enumerate(given) if last[r] != at], records


def test_fewest_generated_takes_the_longer_prompt_of_two_that_generated_as_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two requests at 0 s, 32 and 8 prompt tokens (8 and 2 pages), 30 output tokens each, a
    20-page pool: both prefill, then decode in step; after 20 decode steps (21 tokens each)
    the 21st needs 14 + 8 pages. ``latest_arrival`` preempts request 1 (the same arrival, the
    larger id); ``fewest_generated`` (21 tokens each) the longer prompt, request 0. The one
    preempted finishes last, prefilled again after the other completed."""
    case = ([0.0, 0.0], [32, 8], [30, 30], 20)
    latest, by_arrival = _victims("latest_arrival", *case, monkeypatch=monkeypatch)
    fewest, by_tokens = _victims("fewest_generated", *case, monkeypatch=monkeypatch)
    assert (latest, fewest) == ([1], [0])
    assert by_arrival.preemptions.tolist() == [0, 1] and by_tokens.preemptions.tolist() == [1, 0]
    # 2 prefills, 29 decode steps: 292 ms; the other re-prefilled then, its 9 steps left
    assert (by_arrival.finish_ps // 10**9).tolist() == [292, 373]
    assert (by_tokens.finish_ps // 10**9).tolist() == [373, 292]


def test_fewest_generated_takes_a_request_still_prefilling_over_a_later_one_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Request 0 (0 s, 96 prompt tokens in chunks of 8: 24 pages at admission) and request 1
    (0.1 ms, 8 tokens: 2 pages) fill a 26-page pool; request 1 prefills in one chunk and
    its first decode step needs a third page while request 0 is still prefilling.
    ``latest_arrival`` preempts request 1 (the later arrival, 1 token generated),
    ``fewest_generated`` request 0 (none yet)."""
    case = ([0.0, 1e-4], [96, 8], [4, 60], 26)
    latest, _ = _victims("latest_arrival", *case, chunk=8, monkeypatch=monkeypatch)
    fewest, _ = _victims("fewest_generated", *case, chunk=8, monkeypatch=monkeypatch)
    assert (latest, fewest) == ([1], [0])


def test_last_admitted_differs_from_latest_arrival_where_admissions_are_not_fifo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two short requests at 0 s hold both slots; request 1 (1 us, 40 prompt tokens) and
    request 2 (2 us, 8 tokens) wait and are admitted when both complete at 12 ms.
    ``aging_spf`` admits the shorter prompt first: request 2, then 1. When the pool (20
    pages) runs short, ``latest_arrival`` preempts request 2, ``last_admitted`` (vLLM V1's
    ``running.pop()``) request 1; under ``prefill_first`` (FIFO admissions) both preempt
    request 2."""
    case = ([0.0, 1e-6, 2e-6], [4, 40, 8], [2, 30, 30], 20)
    aging = {"batching": "aging_spf", "monkeypatch": monkeypatch}
    assert _victims("latest_arrival", *case, **aging)[0] == [2]
    assert _victims("last_admitted", *case, **aging)[0] == [1]
    for name in ("latest_arrival", "last_admitted"):
        assert _victims(name, *case, monkeypatch=monkeypatch)[0] == [2]


def test_last_admitted_is_latest_arrival_while_admissions_are_fifo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Admitting in queue order, a preempted request (the latest arrival running) goes back to
    the front of a queue of later arrivals: the running requests' admission order stays
    their arrival order, so the two rules preempt alike, on a run of 50 random requests
    with many preemptions."""
    rng = np.random.default_rng(5)
    arrivals = np.sort(rng.uniform(0, 0.5, 50)).tolist()
    prompts = rng.integers(8, 120, 50).tolist()
    outputs = rng.integers(20, 120, 50).tolist()
    case = (arrivals, prompts, outputs, 120)
    latest, first = _victims("latest_arrival", *case, slots=8, monkeypatch=monkeypatch)
    admitted, second = _victims("last_admitted", *case, slots=8, monkeypatch=monkeypatch)
    fewest, third = _victims("fewest_generated", *case, slots=8, monkeypatch=monkeypatch)
    assert len(latest) > 10 and latest == admitted and fewest != latest
    assert first.finish_ps.tolist() == second.finish_ps.tolist() != third.finish_ps.tolist()
    assert (third.completions == 1).all()


def test_the_default_is_the_old_rule_and_names_are_registered_once() -> None:
    assert DEFAULT == "latest_arrival"
    assert ServingConfig().preemption == ServerConfig(1, 16).preemption == DEFAULT
    assert {"latest_arrival", "last_admitted", "fewest_generated"} <= set(preemption_names())
    first, second = make_preemption(DEFAULT), make_preemption(DEFAULT)
    assert first is not second
    with pytest.raises(ValueError, match="preemption policy 'latest_arrival' is already"):
        register("latest_arrival", PreemptionPolicy)
    with pytest.raises(ValueError, match=f"valid: {', '.join(preemption_names())}"):
        make_preemption("nope")
    from rdu_sim.cli.schema_cmd import json_schema

    serving = json_schema("workload")["$defs"]["ServingConfig"]["properties"]
    assert serving["preemption"]["enum"] == preemption_names()


def test_an_unknown_name_is_refused_where_it_is_written(tmp_path: Path) -> None:
    """From --set (no line), a workload file (its line; run and check alike), a cluster
    pool's set (the cluster file's line) and a sweep's axis."""
    error = one_error(invoke("run", LLAMA, "--set", "serving.preemption=nope"), *WORDS)
    assert error.startswith(f"error: {LLAMA}: serving.preemption: unknown preemption policy")
    assert error.endswith("(from --set serving.preemption)")
    data = yaml.safe_load(LLAMA.read_text())
    data["hardware"] = str((LLAMA.parent / data["hardware"]).resolve())
    data["serving"]["preemption"] = "nope"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    line = 1 + path.read_text().splitlines().index("  preemption: nope")
    for command in ("run", "check"):
        stderr = clean_error(invoke(command, path), *WORDS)
        assert stderr.startswith(f"error: {path}:{line}: serving.preemption: unknown")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "name": "pol",
                "pools": {
                    "serve": {
                        "workload": str(LLAMA),
                        "replicas": 2,
                        "set": {"serving.preemption": "nope"},
                    }
                },
                "traffic": {"rate": 4, "requests": 8, "prompt_tokens": 128, "output_tokens": 16},
                "slo": {"ttft": "2 s", "tpot": "100 ms", "attainment": 0.9},
            },
            sort_keys=False,
        )
    )
    at = 1 + cluster.read_text().splitlines().index("      serving.preemption: nope")
    errors = clean_error(invoke("check", cluster), *WORDS).splitlines()
    assert errors[0].startswith(f"error: {cluster}:{at}: pools.serve.set.serving.preemption:")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"base: {LLAMA}\naxes:\n  serving.preemption: [latest_arrival, nope]\n")
    stderr = clean_error(invoke("sweep", spec, "--dry-run"), "serving.preemption", "'nope'")
    assert "axes.serving.preemption" in stderr


@pytest.mark.parametrize("field", ["prefill_priority", "preemption"])
def test_a_policy_given_parameters_says_policies_take_none(field: str) -> None:
    result = invoke("run", LLAMA, "--set", f"serving.{field}={{name: aging_spf, rate: 100}}")
    error = one_error(result, f"serving.{field}", "policies take no parameters")
    assert "registered under a name of its own" in error and "Where to add a batching" in error


def test_a_kv_policy_or_router_given_parameters_says_where_they_go(tmp_path: Path) -> None:
    """A KV policy's parameters are kv's other fields and a router's settings router's: a
    mapping in their name's place says so, not pydantic's "a valid string"."""
    result = invoke("run", LLAMA, "--set", "kv.policy={name: snapstream, budget: 4096}")
    error = one_error(result, "kv.policy", "its parameters are kv's other fields")
    assert "kv.budget" in error and "valid string" not in error
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "name": "pol",
                "pools": {"serve": {"workload": str(LLAMA), "replicas": 2}},
                "router": {"policy": {"name": "round_robin", "seed": 3}},
                "traffic": {"rate": 4, "requests": 8, "prompt_tokens": 128, "output_tokens": 16},
                "slo": {"ttft": "2 s", "tpot": "100 ms", "attainment": 0.9},
            },
            sort_keys=False,
        )
    )
    error = clean_error(invoke("run", cluster), "router.policy", "router's other fields")
    assert "router.seed" in error and "valid string" not in error


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preemption registry as it is, restored after the test (it registers its own)."""
    monkeypatch.setattr(preemption_base, "_REGISTRY", dict(preemption_base._REGISTRY))


class Broken(PreemptionPolicy):
    """A policy from outside rdu-sim (this module) answering ``ANSWER``."""

    ANSWER: Any = 0

    def victim(self, running: RunningView) -> int:
        answer: int = self.ANSWER
        return answer


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (0.5, "returned 0.5 from victim: a float, not an integer"),
        (True, "returned True from victim: a bool, not an integer"),
        (7, "returned 7 from victim: no slot 7 (slots 0..1)"),
        (-1, "returned -1 from victim: no slot -1 (slots 0..1)"),
    ],
)
def test_an_outside_policys_wrong_answer_is_its_error(
    registry: None, monkeypatch: pytest.MonkeyPatch, answer: object, problem: str
) -> None:
    monkeypatch.setattr(Broken, "ANSWER", answer)
    register("broken", Broken)
    with pytest.raises(PolicyAnswerError) as caught:
        _victims("broken", [0.0, 0.0], [32, 8], [30, 30], 20, monkeypatch=monkeypatch)
    assert str(caught.value) == (
        f"preemption policy 'broken' {problem}; the running requests' slots are [0, 1]"
    )


def test_an_empty_slot_is_refused(registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three slots, two running: slot 2 is empty."""
    monkeypatch.setattr(Broken, "ANSWER", 2)
    register("broken", Broken)
    with pytest.raises(PolicyAnswerError, match=r"returned 2 from victim: slot 2 is empty; "):
        _victims("broken", [0.0, 0.0], [32, 8], [30, 30], 20, slots=3, monkeypatch=monkeypatch)


def test_the_docs_plugin_runs_from_the_cli_with_its_code_recorded(tmp_path: Path) -> None:
    """docs/architecture.md's ``most_pages`` as a plugin named in RDU_SIM_PLUGINS: it serves
    every request with other preemptions than the default's, its code (class, package,
    source sha256) in the run's provenance; the default's run records no plugin."""
    (tmp_path / "most_pages.py").write_text(doc_block("architecture.md", "# most_pages.py"))
    ours = run_json(
        *PREEMPTS,
        "--set",
        "serving.preemption=most_pages",
        plugins_path=tmp_path,
        names="most_pages",
    )
    default = run_json(*PREEMPTS, plugins_path=tmp_path)
    assert ours["requests_completed"] == default["requests_completed"] == 60
    assert default["kv_pool"]["preemptions"] == 26
    assert ours["kv_pool"]["preemptions"] != 26
    code = ours["provenance"]["config"]["plugins"]["serving.preemption"]
    assert code["name"] == "most_pages.MostPages" and code["package"] == "most_pages"
    assert len(code["sha256"]) == 64
    assert "plugins" not in default["provenance"]["config"]


def test_a_broken_plugin_is_one_line_from_the_cli(tmp_path: Path) -> None:
    (tmp_path / "off_by_one.py").write_text(
        "from rdu_sim.serving.preemption import PreemptionPolicy, register\n"
        "class OffByOne(PreemptionPolicy):\n"
        "    def victim(self, running):\n        return len(running)\n"
        "register('off_by_one', OffByOne)\n"
    )
    args = ("run", LLAMA, *PREEMPTS, "--set", "serving.preemption=off_by_one")
    done = rdu_sim(*args, plugins_path=tmp_path, names="off_by_one")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: preemption policy 'off_by_one' returned 32 from victim: no slot 32 (slots 0..31)"
    )


def test_a_plugins_source_is_in_the_sweep_key(
    tmp_path: Path, registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A point's key (the resolved config's sha256) holds a plugin preemption policy's
    source digest: an edit to it changes the key; a shipped policy's adds nothing."""
    (tmp_path / "keyed.py").write_text(
        "from rdu_sim.serving.preemption.latest_arrival import LatestArrival\n"
        "from rdu_sim.serving.preemption import register\n"
        "class Keyed(LatestArrival):\n    pass\n"
        "register('keyed', Keyed)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("keyed")
    try:
        scenario = api.load(LLAMA, {"serving.preemption": "keyed"})
        before = resolved_config(scenario)
        assert before["plugins"]["serving.preemption"]["name"] == "keyed.Keyed"
        (tmp_path / "keyed.py").write_text((tmp_path / "keyed.py").read_text() + "# edited\n")
        assert config_key(resolved_config(scenario)) != config_key(before)
        assert outside_code(None, None, preemption="fewest_generated") == {}
        assert "plugins" not in resolved_config(api.load(LLAMA, {}))
    finally:
        sys.modules.pop("keyed", None)


def test_a_cluster_pool_preempts_by_its_policy(tmp_path: Path) -> None:
    """A replica reads ``serving.preemption`` from its pool's set: the shipped Mooncake trace
    on one vLLM replica whose pool binds preempts 11 times by arrival, 10 by tokens
    generated, serving the same requests."""
    from rdu_sim.api_cluster import run_cluster

    served, preempted = {}, {}
    for name in ("latest_arrival", "fewest_generated"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"name: gpu\npools:\n  serve:\n    workload: {LLAMA}\n    replicas: 1\n"
            "    set: {hardware: dgx-h100, stack: vllm-2024, stack.kv_allocation: on_demand, "
            "stack.memory_utilization: 0.226, stack.prefill_batch_tokens: null, "
            f"serving.preemption: {name}}}\nrouter: {{policy: least_outstanding}}\n"
            f"traffic: {{trace: {ROOT / 'workloads' / 'traces' / 'mooncake-300.jsonl'}, "
            "format: mooncake}\nslo: {ttft: 1 s, tpot: 40 ms, attainment: 0.9}\n"
            "prefix_cache: {block_tokens: 512}\n"
        )
        run = run_cluster(path)
        served[name] = run.requests()["status"].tolist()
        preempted[name] = run.to_dict()["pools"]["serve"]["kv_pool"]["preemptions"]
    assert preempted == {"latest_arrival": 11, "fewest_generated": 10}
    assert served["latest_arrival"] == served["fewest_generated"]
