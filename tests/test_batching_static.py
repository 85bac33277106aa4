"""The ``static`` batching policy (rdu_sim/serving/batching/static.py, docs/architecture.md's
worked example): a batch forms on an empty server, decodes to its end, and only then does
the next one form."""

from __future__ import annotations

import numpy as np
import pytest
from test_serving_alone import policy_of, requests_of, round_step

from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape

NS = 1000  # ps
PREFILL_NS, DECODE_NS = 7, 40


def flat_step(shape: StepShape) -> StepCost:
    """A prefill step 7 ns, a decode step 40 ns, whatever the shape."""
    return StepCost((PREFILL_NS if shape.phase == "prefill" else DECODE_NS) * 1e-9)


def times(policy: str, outputs: list[int]) -> dict[str, list[int]]:
    """Admission, first token and finish (ns) of requests of 100 prompt tokens and these
    outputs, all arriving at once, on two slots."""
    n = len(outputs)
    requests = RequestSet(np.full(n, 100, np.int64), np.array(outputs, np.int64), np.zeros(n), None)
    records = serve(
        requests, policy_of("full"), StepCache(flat_step), ServerConfig(2, 4096, policy)
    )
    return {
        name: (getattr(records, f"{name}_ps") // NS).tolist()
        for name in ("admit", "first_token", "finish")
    }


def test_a_batch_decodes_to_its_end_before_the_next_forms() -> None:
    p, d = PREFILL_NS, DECODE_NS
    static = times("static", [2, 5, 3, 4])
    # batch 1: requests 0 and 1 prefill back to back, then decode until 1 (4 steps) is done
    end_1 = 2 * p + 4 * d
    assert static["admit"] == [0, p, end_1, end_1 + p]
    assert static["first_token"] == [p, 2 * p, end_1 + p, end_1 + 2 * p]
    assert static["finish"][:2] == [2 * p + d, end_1]
    # batch 2 decodes 3 steps: request 3 joins nothing after
    assert static["finish"][2:] == [end_1 + 2 * p + 2 * d, end_1 + 2 * p + 3 * d]
    # continuous batching admits request 2 when request 0's slot frees
    assert times("prefill_first", [2, 5, 3, 4])["admit"][2] == 2 * p + d


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("slots", "spread"), [(3, 20_000), (5, 2_000), (8, 500)])
def test_nothing_joins_a_batch_once_it_decodes(seed: int, slots: int, spread: int) -> None:
    """Admissions in order: each either starts a batch (every request admitted before it
    has finished) or joins the forming one at the end of the previous prefill, before any
    decode step."""
    requests = requests_of(seed, 120, spread * NS)
    config = ServerConfig(slots, 4096, "static")
    records = serve(requests, policy_of("full"), StepCache(round_step), config)
    order = np.argsort(records.admit_ps, kind="stable")
    admit, first, finish = (
        getattr(records, name)[order] for name in ("admit_ps", "first_token_ps", "finish_ps")
    )
    batches = joined = 0
    for i in range(1, len(order)):
        if finish[:i].max() <= admit[i]:
            batches += 1
        else:
            assert admit[i] == first[i - 1], i  # joined at the end of the previous prefill
            joined += 1
    assert batches > 1 and joined > 0  # the run formed several batches of several requests


def test_static_batching_is_chosen_by_name() -> None:
    from rdu_sim.serving.batching import batching_names, make_batching
    from rdu_sim.serving.batching.static import StaticBatching

    assert "static" in batching_names()
    assert isinstance(make_batching("static"), StaticBatching)


def test_a_member_still_prefilling_when_its_batch_decodes_finishes_its_prefill() -> None:
    """Chunked prefill on a stack that mixes: request 0 (100 tokens) prefills in one chunk
    and decodes in the mixed step of request 1's first chunk (300 tokens, chunks of 256), so
    the batch decodes before request 1 has prefilled; its second chunk still runs (the run
    stalled there, 'serving stopped with 1 of 3 requests completed'), and request 2 waits for
    the next batch."""
    requests = RequestSet(
        np.array([100, 300, 100], np.int64), np.array([5, 5, 5], np.int64), np.zeros(3), None
    )
    config = ServerConfig(3, 4096, "static", prefill_chunk_tokens=256, mixed_batching=True)
    records = serve(requests, policy_of("full"), StepCache(flat_step), config)
    assert (records.completions == 1).all()
    admit, first, finish = records.admit_ps, records.first_token_ps, records.finish_ps
    assert admit[0] < first[0] == admit[1] < first[1]  # 1 joined before any decode step
    assert admit[2] == max(finish[0], finish[1])  # 2 waited for the batch's end
