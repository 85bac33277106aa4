"""A runtime that prefills ragged, unpadded prompts (a paged KV cache's: TensorRT-LLM,
vLLM) is simulated at a fine bucket, a static one at its compiled prompt bucket
(``serving.buckets``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.api_cluster import run_cluster
from rdu_sim.scenario import Scenario
from rdu_sim.serving.buckets import prefill_steps, prompt_bucket, prompt_buckets
from rdu_sim.serving.limits import UnchunkedPromptWarning
from rdu_sim.serving.run import served_prefill_steps
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.shapes import StepShape
from tests.test_api_run import FakeBackend
from tests.test_cluster import assert_served_once, write_cluster

LLAMA70 = "workloads/llama3.1-70b-decode.yaml"
LLAMA8 = Path("workloads/llama3.1-8b-1socket.yaml").resolve()


def test_ragged_buckets_exact_values() -> None:
    assert [prompt_bucket(n, 131072, ragged=True) for n in (1, 20, 520, 1000, 1024)] == [
        32,
        32,
        544,
        1024,
        1024,
    ]
    # above 1,024 tokens 32 buckets per octave: steps of 32, 64, 128, 512 tokens
    assert [prompt_bucket(n, 131072, ragged=True) for n in (1025, 2304, 5000, 20000)] == [
        1056,
        2304,
        5120,
        20480,
    ]
    assert [prompt_bucket(n, 131072) for n in (20, 520, 2304)] == [128, 1024, 3072]  # static
    assert prompt_bucket(8090, 8100, ragged=True) == 8100  # never past the context


def test_ragged_padding_is_at_most_31_tokens_or_a_32nd() -> None:
    buckets = prompt_buckets(131072, ragged=True)
    assert len(buckets) == 32 + 7 * 32  # to 1,024, then seven octaves
    for tokens in range(1, 131073, 7):
        bucket = prompt_bucket(tokens, 131072, ragged=True)
        assert tokens <= bucket <= tokens + max(31, tokens // 32)
        assert bucket in buckets


def test_a_ragged_last_chunk_is_not_padded_to_the_chunk() -> None:
    static = prefill_steps(5000, 8192, 2048)
    ragged = prefill_steps(5000, 8192, 2048, ragged=True)
    assert [(s.tokens, s.cache_len) for s in static] == [(2048, 0), (2048, 2048), (2048, 4096)]
    assert [(s.tokens, s.cache_len) for s in ragged] == [(2048, 0), (2048, 2048), (928, 4096)]


@pytest.mark.parametrize(("hardware", "timed_at"), [("dgx-h100", 544), ("sn40l-8", 1024)])
def test_a_run_times_a_prompt_at_its_runtimes_bucket(hardware: str, timed_at: int) -> None:
    """A 520-token prompt: TensorRT-LLM (paged) prefills it at 544 tokens, SambaStack
    (static programs) at its 1,024-token bucket; the run's prefill time is that step's."""
    scenario = api.load(LLAMA70, {"hardware": hardware})
    (shape,) = served_prefill_steps(scenario, 520)
    assert shape.tokens == timed_at
    step = api.step(scenario, phase="prefill", tokens=timed_at)
    assert step.step_s > 0
    shorter = api.step(scenario, phase="prefill", tokens=1024).step_s
    assert (step.step_s < shorter) == (timed_at < 1024)


def test_a_prompt_past_the_stacks_token_budget_warns_unless_chunked() -> None:
    """TensorRT-LLM's max_num_tokens (8,192): a 9,000-token prompt runs as one step past
    it, with a warning naming the chunk setting; with serving.prefill_chunk_tokens none."""
    sets = {
        "hardware": "dgx-h100",
        "serving.max_context": 16384,
        "serving.requests": 2,
        "serving.prompt_tokens": 9000,
        "serving.output_tokens": 2,
    }
    with pytest.warns(
        UnchunkedPromptWarning,
        match=r"up to 9,000 tokens exceed the stack "
        r"tensorrt-llm's prefill_batch_tokens \(8,192\)",
    ):
        result = api.run(LLAMA70, sets)
    (said,) = [w for w in result.summary().warnings if "prefill_batch_tokens" in w]
    assert said.startswith("prompts of up to 9,000 tokens")  # in the report and its JSON too
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnchunkedPromptWarning)
        api.run(LLAMA70, {**sets, "serving.prefill_chunk_tokens": 4096})
        api.run(LLAMA70, {**sets, "serving.prompt_tokens": 8192})


class _Recording(FakeBackend):
    """The fake backend, keeping every prefill shape it is asked to time."""

    def __init__(self) -> None:
        self.prefill_tokens: set[int] = set()

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        if shape.phase == "prefill":
            self.prefill_tokens.add(shape.tokens)
        return super().step_cost(scenario, shape)


@pytest.mark.parametrize("paged", [False, True])
def test_a_cluster_pool_prefills_as_its_runtime_does(tmp_path: Path, paged: bool) -> None:
    """A cluster pool of a paged runtime prefills ragged prompts at the fine buckets (every
    prefill shape the pool's replicas time), a static one at its compiled buckets."""
    sets = {"serving.batch_slots": 8, **({"stack.kv_page_tokens": 64} if paged else {})}
    path = write_cluster(
        tmp_path, pools={"serve": {"workload": str(LLAMA8), "replicas": 2, "set": sets}}
    )
    backend = _Recording()
    result = run_cluster(path, None, backend=backend)
    assert_served_once(result)
    fine = set(prompt_buckets(8192, ragged=True))
    static = set(prompt_buckets(8192))
    assert backend.prefill_tokens <= (fine if paged else static)
    assert bool(backend.prefill_tokens - static) == paged  # some off the static ladder


def test_a_cluster_pool_warns_of_prompts_past_its_stacks_token_budget(tmp_path: Path) -> None:
    """The cluster's traffic (prompts up to 3,000 tokens) against a pool whose stack packs at
    most 1,024 tokens a step, no chunking set: the pool's workload is named."""
    sets = {"serving.batch_slots": 8, "stack.prefill_batch_tokens": 1024}
    path = write_cluster(
        tmp_path, pools={"serve": {"workload": str(LLAMA8), "replicas": 2, "set": sets}}
    )
    with pytest.warns(UnchunkedPromptWarning, match=r"llama3.1-8b-1socket.yaml: prompts of up to"):
        run_cluster(path, None, backend=FakeBackend())
    chunked = {**sets, "serving.prefill_chunk_tokens": 1024}
    path = write_cluster(
        tmp_path, pools={"serve": {"workload": str(LLAMA8), "replicas": 2, "set": chunked}}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnchunkedPromptWarning)
        run_cluster(path, None, backend=FakeBackend())
