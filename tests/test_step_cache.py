"""StepCache's accounting: steps per shape in first-run order, a miss per shape, hits for
every other step, and one simulation per shape whatever the counts."""

from __future__ import annotations

from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape


def test_counts_per_shape_hits_and_misses_are_exact() -> None:
    simulated: list[StepShape] = []

    def step_fn(shape: StepShape) -> StepCost:
        simulated.append(shape)
        return StepCost(step_s=1e-3 * shape.cache_len)

    cache = StepCache(step_fn)
    a = StepShape("decode", 4, 1, 2)
    b = StepShape("decode", 4, 1, 3)
    assert (cache.steps, cache.hits, cache.misses) == ({}, 0, 0)
    assert cache.step_ps(b) == 3_000_000_000  # asked before any run: simulated, not counted
    assert cache.run(a, 5) == 2_000_000_000
    assert cache.run(b) == 3_000_000_000
    assert cache.run(a, 2) == 2_000_000_000
    assert cache.run(StepShape("decode", 4, 1, 2), 3) == 2_000_000_000  # an equal shape
    assert list(cache.steps.items()) == [(a, 10), (b, 1)]  # first-run order
    assert (cache.hits, cache.misses) == (9, 2)
    assert simulated == [b, a]
    assert cache.hit_rate == 9 / 11
