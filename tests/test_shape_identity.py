"""A step shape's hash is computed once and follows its fields (also after pickling into a
process with another string-hash seed), and equal prefill steps share one shape object, so
the serving level's step cache finds them by identity."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

from rdu_sim.serving import buckets
from rdu_sim.serving.buckets import prefill_step
from rdu_sim.shapes import StepShape


def test_equal_shapes_hash_alike_and_differing_fields_hash_apart() -> None:
    shape = StepShape("prefill", 1, 2048, 0, select=True)
    assert hash(shape) == hash(StepShape("prefill", 1, 2048, 0, select=True))
    assert hash(shape) == hash(("prefill", 1, 2048, 0, True, 0, 0, 0))  # the fields' tuple
    others = [
        StepShape("decode", 1, 2048, 0, select=True),
        StepShape("prefill", 2, 2048, 0, select=True),
        StepShape("prefill", 1, 1024, 0, select=True),
        StepShape("prefill", 1, 2048, 8, select=True),
        StepShape("prefill", 1, 2048, 0, select=None),
        StepShape("prefill", 1, 2048, 0, select=True, joint_tokens=2288),
        StepShape("prefill", 1, 2048, 0, select=True, decode_batch=4),
        StepShape("prefill", 1, 2048, 0, select=True, decode_batch=4, decode_cache_len=9),
    ]
    assert len({shape, *others}) == 9
    # the repr names the joint tokens only where the ranks run different shapes
    assert "joint_tokens" not in repr(shape)
    assert repr(others[5]).endswith("select=True, joint_tokens=2288)")
    assert pickle.loads(pickle.dumps(others[5])) == others[5]
    assert pickle.loads(pickle.dumps(others[-1])) == others[-1]


def test_a_shape_pickled_in_another_hash_seed_is_found_here() -> None:
    """The cached hash is not pickled: a shape from a worker process (another
    PYTHONHASHSEED, so other string hashes) must still find its equal in a dict here."""
    code = (
        "import pickle, sys; from rdu_sim.shapes import StepShape; "
        "sys.stdout.buffer.write(pickle.dumps(StepShape('decode', 8, 1, 4096)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    data = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, check=True
    ).stdout
    theirs = pickle.loads(data)
    assert {StepShape("decode", 8, 1, 4096): "here"}[theirs] == "here"


def test_prompts_padded_to_one_bucket_share_one_shape_object() -> None:
    first, done = prefill_step(1500, 0, 131072, None, False)
    second, _ = prefill_step(1900, 0, 131072, None, False)
    assert done == 1500 and first.tokens == second.tokens == 2048
    assert first is second
    chunk, _ = prefill_step(9000, 4096, 131072, 4096, False)
    assert chunk is prefill_step(8500, 4096, 131072, 4096, False)[0]
    assert chunk is not prefill_step(8192, 4096, 131072, 4096, True)[0]  # last chunk selects


def test_the_shared_shapes_stay_bounded_in_a_long_lived_process(monkeypatch: Any) -> None:
    """A sweep worker runs many contexts and chunks: the memo of shared prefill shapes starts
    over at its bound, and the shapes it gives stay equal to the ones it gave before."""
    monkeypatch.setattr(buckets, "_PREFILL_SHAPES", {})
    monkeypatch.setattr(buckets, "MAX_PREFILL_SHAPES", 8)
    before = [prefill_step(9000, done, 131072, 512, False)[0] for done in range(0, 8704, 512)]
    assert len(set(before)) == 17
    assert len(buckets._PREFILL_SHAPES) <= 8
    again = [prefill_step(9000, done, 131072, 512, False)[0] for done in range(0, 8704, 512)]
    assert again == before
