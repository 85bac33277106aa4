"""The workload's `engine:` fields (one EngineConfig, the engine's only settings) reach the
engine, and bad values are refused."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.engine import Engine

LLAMA8 = "workloads/llama3.1-8b-8socket.yaml"


def test_engine_fields_reach_the_engine_settings() -> None:
    scenario = api.load(
        LLAMA8,
        {
            "engine.buffer_tiles": 3,
            "engine.prefetch_tiles": 5,
            "engine.operand_buffer_fraction": 0.25,
        },
    )
    settings = Engine(scenario.hardware, scenario.workload.engine).config
    assert (settings.buffer_tiles, settings.prefetch_tiles) == (3, 5)
    assert settings.operand_buffer_fraction == 0.25


def test_defaults_are_double_buffering_and_half_the_sram() -> None:
    engine = api.load(LLAMA8).workload.engine
    assert (engine.buffer_tiles, engine.prefetch_tiles) == (2, 2)
    assert engine.operand_buffer_fraction == 0.5


def test_prefetch_depth_changes_the_simulated_step() -> None:
    """One tile of prefetch exposes more load latency than four: the field is not ignored."""
    shallow = api.step(LLAMA8, {"engine.prefetch_tiles": 1}).step_s
    deep = api.step(LLAMA8, {"engine.prefetch_tiles": 4}).step_s
    assert shallow > deep


def test_fast_forward_off_simulates_every_layer_and_call() -> None:
    """engine.fast_forward reaches the engine: off, nothing is skipped (the reference)."""
    fast: Any = api.step(LLAMA8).detail
    full: Any = api.step(LLAMA8, {"engine.fast_forward": False}).detail
    assert fast.fast_forward and not full.fast_forward
    assert any(k.simulated_iterations < k.calls for k in fast.kernels)
    assert all(k.simulated_iterations == k.calls for k in full.kernels)
    assert full.events > 2 * fast.events
    assert fast.step_s == pytest.approx(full.step_s, rel=5e-4)


@pytest.mark.parametrize(
    "override, field",
    [
        ("engine.buffer_tiles=0", "engine.buffer_tiles"),
        ("engine.prefetch_tiles=65", "engine.prefetch_tiles"),
        ("engine.operand_buffer_fraction=1.5", "engine.operand_buffer_fraction"),
        ("engine.fast_forward=sometimes", "engine.fast_forward"),
    ],
)
def test_bad_values_exit_2_naming_the_field(override: str, field: str) -> None:
    out = CliRunner().invoke(cli, ["step", LLAMA8, "--set", override])
    assert out.exit_code == 2, out.output
    assert field in out.stderr and "Traceback" not in out.output


def test_prefetch_window_never_exceeds_one_layer() -> None:
    """A stage loads at most one layer ahead (what keeps fast-forwarding exact), whatever
    engine.prefetch_tiles asks for; within a layer the SRAM share or the minimum decides."""
    from rdu_sim.engine.tile_work import TileWork, prefetch_window, split

    def work(tiles: int) -> TileWork:
        return TileWork(
            tiles=tiles,
            reads={"hbm": split(100.0 * tiles, tiles)},
            writes={},
            sram=(0.0,) * tiles,
            flops=0.0,
            vector_flops=0.0,
            output=(0.0,) * tiles,
            efficiency=1.0,
        )

    assert prefetch_window(work(1), buffer_bytes=1e9, minimum=2) == 1
    assert prefetch_window(work(8), buffer_bytes=1e9, minimum=2) == 8
    assert prefetch_window(work(8), buffer_bytes=1e9, minimum=64) == 8
    assert prefetch_window(work(8), buffer_bytes=350.0, minimum=2) == 3  # 3 tiles of 100 B fit
    assert prefetch_window(work(8), buffer_bytes=0.0, minimum=2) == 2


def test_a_deeper_prefetch_is_tiled_finer_to_fit_the_sram() -> None:
    # The operand window (prefetch_tiles tiles of a stage's weight/KV reads) must fit its
    # PMUs: the decode step's KV stream at 32k (~256 MB a layer per socket) makes the
    # compiler cut the decoder into more tiles the deeper the window, never fewer.
    tiles = {
        depth: api.step(LLAMA8, {"engine.prefetch_tiles": depth}).detail.kernel("decoder").tiles
        for depth in (2, 8, 64)
    }
    assert tiles[2] < tiles[8] < tiles[64]
