"""KernelLauncher: kernel looping pays one launch and one sync for L layers."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import KernelLauncher, PCUGroup

LOAD, ARGS, SYNC = 20e-6, 5e-6, 30e-6
LAYER = 100e-6


def run(layers: int, looped: bool, sync: float = SYNC) -> tuple[float, KernelLauncher]:
    env = CountingEnvironment()
    agcu = KernelLauncher(env, LOAD, ARGS, sync)
    pcus = PCUGroup(env, 1, 1.0)
    seen: list[int] = []

    def layer(i: int) -> Generator[simpy.Event, Any, None]:
        seen.append(i)
        yield pcus.compute(LAYER)

    proc = agcu.call(layer, iterations=layers, looped=looped)
    env.run()
    assert seen == list(range(layers))
    assert proc.value == env.now
    return env.now, agcu


@pytest.mark.parametrize("layers", [1, 4, 61])
def test_looped_pays_one_launch_and_one_sync(layers: int) -> None:
    t, agcu = run(layers, looped=True)
    assert (agcu.launches, agcu.syncs, agcu.iterations) == (1, 1, layers)
    assert t == pytest.approx(LOAD + ARGS + layers * LAYER + SYNC)
    assert agcu.execute_time == pytest.approx(layers * LAYER)
    assert agcu.overhead_time == pytest.approx(LOAD + ARGS + SYNC)


@pytest.mark.parametrize("layers", [1, 4, 61])
def test_unlooped_pays_launch_and_sync_per_layer(layers: int) -> None:
    t, agcu = run(layers, looped=False)
    assert (agcu.launches, agcu.syncs) == (layers, layers)
    assert t == pytest.approx(layers * (LOAD + ARGS + LAYER + SYNC))


@pytest.mark.parametrize("layers", [1, 2, 32])
@pytest.mark.parametrize("sync", [0.0, 1e-6, 1e-3])
def test_looped_is_never_slower(layers: int, sync: float) -> None:
    assert run(layers, True, sync)[0] <= run(layers, False, sync)[0]


def test_concurrent_calls_serialize_on_the_agcu() -> None:
    env = CountingEnvironment()
    agcu = KernelLauncher(env, LOAD, ARGS, SYNC)

    def body(_i: int) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(LAYER)

    a, b = agcu.call(body), agcu.call(body)
    env.run()
    one = LOAD + ARGS + LAYER + SYNC
    assert a.value == pytest.approx(one) and b.value == pytest.approx(2 * one)
    assert agcu.busy.busy_time == pytest.approx(2 * one)


def test_bad_arguments() -> None:
    env = CountingEnvironment()
    with pytest.raises(ValueError):
        KernelLauncher(env, -1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        KernelLauncher(env, 0.0, 0.0, 0.0).call(None, iterations=-1)
