"""Resource limits: absurdly large simulations are refused up front, clearly, never run away.

What guards what:
- ``serving.max_work`` (``rdu_sim/serving/limits.py``): the request level's estimated state changes,
  weighted by batch slots, plus the distinct step shapes; checked by ``api.run`` after the
  requests are drawn and before anything is simulated. A ``RunTooLargeError`` (a
  ConfigError: exit 2 from the CLI) names the knobs that shrink the run.
- ``engine.max_events``: one step's kernel simulation; an ``EventBudgetError`` (exit 2).
- the config's own bounds (``serving.requests <= 1,000,000``, ``tiles_per_stage <= 4096``).

The tests check that the shipped workloads and the benchmark case (10,000 DeepSeek-R1
requests) pass the guard, that the absurd cases are refused within seconds and a memory
ceiling, and that the estimate really bounds what a run does (rows and shapes).
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim import api
from rdu_sim.compiler.program import Placement, TierUsage
from rdu_sim.config.errors import ConfigError
from rdu_sim.engine import EventBudgetError
from rdu_sim.scenario import Scenario
from rdu_sim.serving.buckets import program_rows
from rdu_sim.serving.limits import RunTooLargeError, check_run, estimate_run
from rdu_sim.serving.requests import make_requests
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml")
LLAMA8 = str(ROOT / "workloads" / "llama3.1-8b-8socket.yaml")
SNAP = str(ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml")
FULL = str(ROOT / "workloads" / "deepseek-r1-128k-full.yaml")
SHIPPED = sorted(str(p) for p in (ROOT / "workloads").glob("*.yaml"))
MEMORY_CEILING = 3 * 2**30  # address space of a refusing CLI process
MILLION_LONG = {
    "serving.requests": 1_000_000,
    "serving.max_context": 131072,
    "serving.prompt_tokens": 30000,
    "serving.output_tokens": 100_000,
    "serving.prefill_chunk_tokens": 1024,
    "serving.batch_slots": 2,
}
TINY_MODEL = {
    "model": {
        "family": "llama",
        "name": "tiny",
        "vocab_size": 256,
        "hidden_size": 64,
        "layers": 1,
        "heads": 1,
        "kv_heads": 1,
        "head_dim": 64,
        "ffn_intermediate": 64,
        "max_context": 131072,
    }
}


def _estimate(path: str, overrides: dict[str, Any] | None = None) -> tuple[Scenario, Any]:
    """The run's estimate without simulating (batch slots from the real compiler)."""
    scenario = api.load(path, overrides)
    _, slots = api.resolve_batch_slots(scenario, api.EngineBackend())
    requests = make_requests(
        scenario.workload.serving, slots, scenario.base_dir, scenario.workload_file
    )
    return scenario, estimate_run(scenario, slots, requests)


# --- the guard admits what must run --------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: Path(p).stem)
def test_shipped_workloads_are_far_below_the_limit(path: str) -> None:
    scenario, estimate = _estimate(path)
    assert estimate.work < scenario.workload.serving.max_work / 5


@pytest.mark.parametrize("path", [SNAP, FULL], ids=["snapstream", "full"])
def test_benchmark_ten_thousand_deepseek_requests_pass(path: str) -> None:
    scenario, estimate = _estimate(path, {"serving.requests": 10_000})
    assert estimate.requests == 10_000
    assert estimate.work < scenario.workload.serving.max_work / 5


def test_a_million_plain_requests_are_admitted() -> None:
    """The config allows a million requests; at ordinary lengths they run (~70 s, ~1 GB)."""
    scenario, estimate = _estimate(LLAMA, {"serving.requests": 1_000_000})
    assert estimate.work <= scenario.workload.serving.max_work
    assert estimate.memory_bytes < 3 * 2**30


def test_a_coe_run_counts_its_router_and_its_switches_copies() -> None:
    """A Composition of Experts' router prefills every prompt (its steps counted twice) and
    each request may cost two switches of 112 chunks (1.88 GB a socket in 16 MiB chunks)."""
    coe = str(ROOT / "workloads" / "samba-coe-150x8b-8socket.yaml")
    scenario, estimate = _estimate(coe)
    _, alone = _estimate(coe, {"coe": None})
    assert estimate.copy_chunks == 2 * estimate.requests * 112 and alone.copy_chunks == 0
    assert estimate.state_changes == alone.state_changes + 2 * alone.prefill_steps
    assert estimate.work > alone.work + 3 * estimate.copy_chunks
    assert estimate.work < scenario.workload.serving.max_work / 5
    with pytest.raises(RunTooLargeError, match="chunks of expert switches to copy"):
        api.run(coe, {"serving.requests": 100_000})


# --- the guard refuses the absurd, naming the way out ---------------------------------------


@pytest.mark.timeout(60)
def test_million_long_requests_refused_by_the_api() -> None:
    with pytest.raises(RunTooLargeError) as error:
        api.run(LLAMA, MILLION_LONG)
    message = str(error.value)
    assert isinstance(error.value, ConfigError)
    for knob in ("serving.max_work", "serving.requests", "serving.prefill_chunk_tokens"):
        assert knob in message, message


@pytest.mark.timeout(60)
def test_million_slots_refused_naming_batch_slots() -> None:
    """`auto` slots on a tiny model is a capacity of about a million slots."""
    overrides = {
        **TINY_MODEL,
        "serving.batch_slots": "auto",
        "serving.requests": 1_000_000,
        "hw.socket.hbm.capacity": "1024 GiB",
    }
    with pytest.raises(RunTooLargeError) as error:
        api.run(LLAMA, overrides)
    assert "serving.batch_slots" in str(error.value)


@pytest.mark.timeout(60)
def test_one_token_chunks_refused_naming_the_chunk() -> None:
    with pytest.raises(RunTooLargeError) as error:
        api.run(LLAMA, {"serving.prefill_chunk_tokens": 1, "serving.requests": 1000})
    assert "serving.prefill_chunk_tokens" in str(error.value)
    assert "step shapes" in str(error.value)


def test_max_work_is_a_knob() -> None:
    """Lowering serving.max_work refuses the shipped run; a bad value is a ConfigError."""
    with pytest.raises(RunTooLargeError, match=r"serving\.max_work = 1,000"):
        api.run(LLAMA, {"serving.max_work": 1000})
    with pytest.raises(ConfigError, match=r"serving\.max_work"):
        api.load(LLAMA, {"serving.max_work": 0})


def _limited_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`rdu-sim` in a subprocess under an address-space ceiling (a runaway would die)."""

    def limit() -> None:  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))

    return subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        preexec_fn=limit,
        check=False,
    )


@pytest.mark.timeout(120)
def test_cli_refuses_a_million_long_requests_with_exit_2() -> None:
    sets = [a for k, v in MILLION_LONG.items() for a in ("--set", f"{k}={v}")]
    result = _limited_cli("run", LLAMA, "--json", *sets)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")
    assert "serving.max_work" in result.stderr and "serving.requests" in result.stderr
    assert result.stdout == ""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak < MEMORY_CEILING


# --- the engine's event budget --------------------------------------------------------------


@pytest.mark.timeout(120)
def test_huge_engine_step_refused_by_the_api() -> None:
    """4096 tiles per stage on every socket of a TP-8 model: millions of events per step even
    if the fast-forward cut the decoder at the fewest layers it can (~9.5 million, above a
    budget of 5 million), refused before the step is simulated."""
    overrides = {
        "engine.tiles_per_stage": 4096,
        "engine.all_sockets": True,
        "engine.max_events": 5_000_000,
        "serving.requests": 1,
    }
    with pytest.raises(EventBudgetError) as error:
        api.run(LLAMA8, overrides)
    assert "engine.tiles_per_stage" in str(error.value)
    assert "engine.max_events" in str(error.value)


@pytest.mark.timeout(120)
def test_cli_engine_budget_exits_2_without_traceback() -> None:
    """Regression: EventBudgetError used to escape `rdu-sim run` as a traceback."""
    result = _limited_cli(
        "run", LLAMA, "--set", "engine.max_events=1000", "--set", "serving.requests=1"
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "engine.max_events" in result.stderr and "engine.tiles_per_stage" in result.stderr


# --- the estimate bounds the run -------------------------------------------------------------


class _Formula:
    """A fast backend: plenty of memory, step time from the shape (serving-level tests)."""

    def batch_capacity(self, scenario: Scenario) -> int:
        return 64

    def memory_capacity(self, scenario: Scenario) -> int:
        return 64

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        return Placement(batch_slots, {"hbm": TierUsage(2**40)})

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        work = shape.batch * (shape.tokens + shape.cache_len / 64)
        return StepCost(step_s=1e-4 + 1e-7 * work)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    requests=st.integers(1, 120),
    slots=st.integers(1, 12),
    prompt=st.integers(1, 6000),
    output=st.integers(1, 3000),
    chunk=st.sampled_from([None, 64, 512, 2048]),
    policy=st.sampled_from(["full", "snapstream", "streamingllm", "snapkv"]),
    process=st.sampled_from(["poisson", "closed_loop", "all_at_once"]),
    priority=st.sampled_from(["prefill_first", "decode_first"]),
    min_bucket=st.sampled_from([16, 1024]),
    seed=st.integers(0, 99),
    paged=st.booleans(),
    live=st.booleans(),
)
def test_estimate_bounds_rows_and_shapes(
    requests: int,
    slots: int,
    prompt: int,
    output: int,
    chunk: int | None,
    policy: str,
    process: str,
    priority: str,
    min_bucket: int,
    seed: int,
    paged: bool,
    live: bool,
) -> None:
    """State changes (time-series rows) and distinct shapes never exceed the estimate,
    static prefill shapes or a paged runtime's ragged ones, every slot's program or the
    queue's."""
    overrides: dict[str, Any] = {
        "serving.requests": requests,
        "serving.batch_slots": slots,
        "serving.max_context": 8192,
        "serving.seed": seed,
        "serving.prompt_tokens": {"dist": "uniform", "low": 1, "high": prompt},
        "serving.output_tokens": {"dist": "uniform", "low": 1, "high": output},
        "serving.arrival": {
            "process": process,
            **({"rate": 200.0} if process == "poisson" else {}),
        },
        "serving.prefill_priority": priority,
        "serving.prefill_chunk_tokens": chunk,
        "kv.policy": policy,
    }
    if paged:
        overrides["stack.kv_page_tokens"] = 64
    elif live:  # programs picked by the queue's length: a decode shape per program batch
        overrides["stack.decode_program"] = "live"
    if policy == "full":
        overrides["kv.min_bucket"] = min_bucket
    elif policy == "streamingllm":
        overrides["kv.recent"] = 1020  # budget = sinks + recent
    else:
        overrides.update({"kv.budget": 1024, "kv.recent": 256})
    scenario = api.load(LLAMA, overrides)
    result = api.run(scenario, backend=_Formula())
    estimate = check_run(scenario, result.batch_slots, result.requests_in)
    assert len(result.records.series) <= estimate.state_changes
    shapes = estimate.shapes
    if paged:  # the estimate counts a paged runtime's ladder once (limits.estimate_run)
        rungs = program_rows("ladder", result.batch_slots)
        shapes += len(scenario.kv_policy.buckets()) * (rungs - 1)
    assert len(result.cache.shapes) <= shapes
    assert result.records.prefill_steps <= estimate.prefill_steps
