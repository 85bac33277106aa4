"""The DDR-to-HBM copy engine: exact times alone, shared channels under contention, FIFO
copies, bytes counted once per tier."""

from __future__ import annotations

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import CopyEngine, MemoryChannel

GB = 1e9


def _node(
    copy_bw: float = 100 * GB, chunk: float = 1 * GB
) -> tuple[simpy.Environment, MemoryChannel, MemoryChannel, CopyEngine]:
    env = CountingEnvironment()
    ddr = MemoryChannel(env, 200 * GB, efficiency=0.8, name="ddr")  # 160 GB/s sustained
    hbm = MemoryChannel(env, 1000 * GB, name="hbm")
    return env, ddr, hbm, CopyEngine(env, ddr, hbm, copy_bw, chunk)


def test_a_lone_copy_runs_at_its_slowest_rate() -> None:
    env, ddr, hbm, engine = _node(copy_bw=100 * GB)
    done = engine.copy(10 * GB)
    env.run(done)
    assert env.now == pytest.approx(10 * GB / (100 * GB), rel=1e-12)  # the engine's rate
    env, ddr, hbm, engine = _node(copy_bw=500 * GB)
    env.run(engine.copy(10 * GB))
    assert env.now == pytest.approx(10 * GB / (160 * GB), rel=1e-12)  # DDR's sustained rate
    assert ddr.reads.total == hbm.writes.total == 10 * GB
    assert engine.copies == 1 and engine.bytes_copied == 10 * GB


def test_a_copy_and_a_step_stream_share_the_ddr_channel() -> None:
    """A 16 GB DDR read issued with a 16 GB copy: both get half of DDR until the first
    finishes; the copy (engine cap 100 GB/s, above its 80 GB/s share) is slowed, and so is
    the read. Total DDR time is conserved: 32 GB at 160 GB/s = 0.2 s."""
    env, ddr, _, engine = _node(copy_bw=100 * GB, chunk=16 * GB)
    copy = engine.copy(16 * GB)
    read = ddr.read(16 * GB)
    env.run(env.all_of([copy, read]))
    assert env.now == pytest.approx(0.2, rel=1e-12)
    assert ddr.reads.total == 32 * GB
    alone = _node(copy_bw=100 * GB, chunk=16 * GB)
    alone[0].run(alone[3].copy(16 * GB))
    assert alone[0].now < env.now


def test_copies_queue_first_come_first_served() -> None:
    env, _, _, engine = _node(copy_bw=100 * GB)
    finished: list[tuple[str, float]] = []

    def watch(name: str, event: simpy.Event) -> None:
        event.callbacks.append(lambda _e: finished.append((name, env.now)))

    watch("a", engine.copy(5 * GB))
    watch("b", engine.copy(5 * GB))
    assert engine.busy
    env.run()
    assert [n for n, _ in finished] == ["a", "b"]
    assert finished[0][1] == pytest.approx(0.05) and finished[1][1] == pytest.approx(0.1)
    assert not engine.busy and engine.busy_s == pytest.approx(0.1)


def test_bad_arguments_are_refused() -> None:
    env, ddr, hbm, _ = _node()
    with pytest.raises(ValueError, match="bandwidth"):
        CopyEngine(env, ddr, hbm, 0.0)
    with pytest.raises(ValueError, match="nbytes"):
        CopyEngine(env, ddr, hbm, 1.0).copy(-1.0)
