"""The server's cluster hooks: prefix reuse, and the KV hand-off of disaggregated serving.

A server without hooks is the lone server of docs/serving.md; hooks that change nothing must
give the same records bit for bit, and hooks that skip cached prompt tokens must give the
times of the naive step-by-step reference (tests/test_serving_batched.py) told the same skips.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from simpy.events import Event
from simpy_loop import SimPyLoop
from test_serving_batched import fake_step, kv_config, reference_serve, serving_config

from rdu_sim.des.timeline import Timeline
from rdu_sim.kv import make_policy
from rdu_sim.kv.sharing import shares_prefix
from rdu_sim.serving.buckets import prefill_step, prompt_bucket, reusable_prefix
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import make_requests
from rdu_sim.serving.server import Server, ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.slots import DECODING, PREFILLING, WAITING, Slots
from rdu_sim.serving.step_cache import PS_PER_S, StepCache
from rdu_sim.shapes import StepShape


def test_reusable_prefix_rounds_down_to_a_compiled_cache_length() -> None:
    # No chunking: a prompt bucket (128, 256, 512, 1024, 2048, 3072, ...).
    assert reusable_prefix(1536, 4000, 8192, None) == 1024
    assert reusable_prefix(3584, 4000, 8192, None) == 3072
    assert reusable_prefix(100, 4000, 8192, None) == 0  # below the smallest bucket
    assert reusable_prefix(0, 4000, 8192, None) == 0
    # At least one prompt token is computed (its logits give the first output token).
    assert reusable_prefix(4096, 4096, 8192, None) == 3072
    assert reusable_prefix(512, 512, 8192, None) == 256
    # Chunked prompts: a multiple of the chunk, so the following chunks are the usual ones.
    assert reusable_prefix(3584, 5000, 8192, 1024) == 3072
    assert reusable_prefix(1000, 5000, 8192, 1024) == 0
    # A prompt no longer than a chunk is not chunked: the bucket rule applies.
    assert reusable_prefix(600, 900, 8192, 1024) == 512


def test_a_ragged_runtime_skips_the_cached_prefix_chunked_or_not() -> None:
    """TensorRT-LLM and vLLM start the prefill at the reused length and chunk from there:
    the skip is the cached tokens (at the ragged buckets' granularity), not whole chunks."""
    for chunk in (None, 1024, 2048):
        assert reusable_prefix(3584, 5000, 8192, chunk, ragged=True) == 3584
        assert reusable_prefix(1000, 5000, 8192, chunk, ragged=True) == 992  # 32-token steps
        assert reusable_prefix(5000, 5000, 8192, chunk, ragged=True) == 4992  # one computed
    # a static-graph server's chunked skip stays whole chunks
    assert reusable_prefix(3584, 5000, 8192, 1024) == 3072
    # the chunks after a ragged skip start at it; the last is unpadded
    first, done = prefill_step(5000, 3584, 8192, 1024, ragged=True)
    assert (first, done) == (StepShape("prefill", 1, 1024, 3584, select=False), 4608)
    last, done = prefill_step(5000, done, 8192, 1024, ragged=True)
    assert (last, done) == (StepShape("prefill", 1, 416, 4608, select=False), 5000)


def test_prefill_step_after_a_cached_prefix() -> None:
    shape, done = prefill_step(4000, 1024, 8192, None)
    assert shape == StepShape("prefill", 1, prompt_bucket(2976, 7168), 1024, select=False)
    assert shape.tokens == 3072 and done == 4000
    # The padded step never runs past the context.
    shape, _ = prefill_step(8000, 6144, 8192, None)
    assert shape.cache_len + shape.tokens <= 8192
    # Chunked: the chunk after the prefix, as in an ordinary chunked prefill.
    assert prefill_step(5000, 3072, 8192, 1024) == (
        StepShape("prefill", 1, 1024, 3072, False),
        4096,
    )


def test_prefix_sharing_follows_the_policy() -> None:
    full = make_policy(kv_config(policy="full"), 8192)
    snap = make_policy(kv_config(policy="snapstream", budget=2048, recent=512), 8192)
    streaming = make_policy(kv_config(policy="streamingllm", budget=1028), 8192)
    assert shares_prefix(full, 8000)
    assert shares_prefix(snap, 2048) and not shares_prefix(snap, 2049)  # compressed: no
    assert shares_prefix(streaming, 1028) and not shares_prefix(streaming, 1029)  # truncated


def test_slots_waiting_phase() -> None:
    slots = Slots(3)
    slots.reserve(0, 7)
    assert slots.phase[0] == WAITING and slots.waiting == 1 and slots.occupied == 1
    slots.start_decode(0, 10, 20, 5)
    assert slots.phase[0] == DECODING and slots.waiting == 0 and slots.decoding == 1
    slots.admit(1, 8)
    assert slots.phase[1] == PREFILLING
    slots.hold(1)
    assert slots.phase[1] == WAITING and not slots.prefill_order and slots.waiting == 1
    slots.release(1)
    assert slots.waiting == 0 and slots.occupied == 1


class NullHooks:
    """Hooks that change nothing."""

    def admitted(self, request: int, prompt: int) -> int:
        return 0

    def prefilled(self, request: int) -> Event | None:
        return None

    def receive(self, request: int) -> Event:  # pragma: no cover - mixed role never receives
        raise AssertionError

    def left(self, request: int) -> None:
        pass


class SkipHooks(NullHooks):
    """Hooks that spare each request a fixed number of prompt tokens, counting calls."""

    def __init__(self, skipped: dict[int, int]) -> None:
        self.skipped = skipped
        self.left_requests: list[int] = []

    def admitted(self, request: int, prompt: int) -> int:
        return self.skipped.get(request, 0)

    def left(self, request: int) -> None:
        self.left_requests.append(request)


def _serve_with(hooks: Any, case: dict[str, Any]) -> tuple[ServingRecords, Any, StepCache]:
    serving = serving_config(
        max_context=4096,
        requests=50,
        seed=3,
        prompt_tokens={"dist": "uniform", "low": 100, "high": 4000},
        output_tokens={"dist": "uniform", "low": 1, "high": 300},
        arrival={"process": "poisson", "rate": 4.0},
        **case,
    )
    requests = make_requests(serving, 4)
    policy = make_policy(kv_config(policy="full", min_bucket=256), 4096)
    cache = StepCache(fake_step)
    loop = SimPyLoop()  # (the oracle: a router's pushes as SimPy processes)
    env = loop.env
    records = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
    config = ServerConfig(4, 4096, serving.prefill_priority, serving.prefill_chunk_tokens)
    server = Server(loop, config, policy, cache, records, hooks=hooks)
    assert requests.arrival_s is not None
    arrivals = np.rint(requests.arrival_s * PS_PER_S).astype(np.int64)

    def submit() -> Any:
        for request, at in enumerate(arrivals.tolist()):
            yield env.timeout(at - env.now)
            server.submit(request)

    env.process(submit())
    env.run()
    assert server.completed == len(requests) and server.outstanding_tokens() == 0
    return records, requests, cache


@pytest.mark.parametrize("case", [{}, {"prefill_chunk_tokens": 512}])
def test_null_hooks_change_nothing(case: dict[str, Any]) -> None:
    plain = serve(*_lone(case))
    hooked, _, _ = _serve_with(NullHooks(), case)
    for name in ("arrival_ps", "admit_ps", "first_token_ps", "finish_ps", "slot"):
        np.testing.assert_array_equal(getattr(hooked, name), getattr(plain, name))


def _lone(case: dict[str, Any]) -> tuple[Any, Any, StepCache, ServerConfig]:
    serving = serving_config(
        max_context=4096,
        requests=50,
        seed=3,
        prompt_tokens={"dist": "uniform", "low": 100, "high": 4000},
        output_tokens={"dist": "uniform", "low": 1, "high": 300},
        arrival={"process": "poisson", "rate": 4.0},
        **case,
    )
    config = ServerConfig(4, 4096, serving.prefill_priority, serving.prefill_chunk_tokens)
    policy = make_policy(kv_config(policy="full", min_bucket=256), 4096)
    return make_requests(serving, 4), policy, StepCache(fake_step), config


@pytest.mark.parametrize("chunk", [None, 512])
def test_skipped_prefix_matches_the_reference(chunk: int | None) -> None:
    case = {} if chunk is None else {"prefill_chunk_tokens": chunk}
    requests, policy, _, _ = _lone(case)
    rng = np.random.default_rng(11)
    skipped = {
        i: reusable_prefix(int(rng.integers(0, p)), int(p), 4096, chunk)
        for i, p in enumerate(requests.prompt_tokens.tolist())
    }
    assert sum(v > 0 for v in skipped.values()) > 20  # the test exercises real skips
    hooks = SkipHooks(skipped)
    records, requests, cache = _serve_with(hooks, case)
    expected = reference_serve(requests, policy, cache, 4, 4096, chunk=chunk, skipped=skipped)
    np.testing.assert_array_equal(records.admit_ps, expected["admit"])
    np.testing.assert_array_equal(records.first_token_ps, expected["first"])
    np.testing.assert_array_equal(records.finish_ps, expected["finish"])
    assert sorted(hooks.left_requests) == list(range(len(requests)))


def test_hooks_must_skip_a_reusable_prefix() -> None:
    class Bad(NullHooks):
        def admitted(self, request: int, prompt: int) -> int:
            return prompt  # all of it: nothing left to produce the first token

    with pytest.raises(ValueError, match="not reusable"):
        _serve_with(Bad(), {})


def test_a_split_role_needs_hooks() -> None:
    requests, policy, cache, _ = _lone({})
    records = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
    with pytest.raises(ValueError, match="needs hooks"):
        Server(Timeline(), ServerConfig(4, 4096, role="decode"), policy, cache, records)
