"""The fast-forward's marks: the cycle rule compares states at evenly spaced tile ends of a
reference stage (``kernel_sim.MARKS_PER_LAYER`` a layer), not only at layer boundaries, so a
looped kernel is cut a layer sooner; the cut stays exact (the full simulation's results)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_engine_programs import hardware, llama_like_program

from rdu_sim import api
from rdu_sim.compiler import compile_program
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import kernel_sim
from rdu_sim.engine.fast_forward import STATE_RTOL, fewest_layers, find_cycle
from rdu_sim.engine.kernel_sim import Boundary, KernelSim, tile_works
from rdu_sim.engine.kernel_state import KernelState
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.timing import StepTiming
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
SNAPSTREAM = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
LLAMA_8 = ROOT / "workloads" / "llama3.1-8b-8socket.yaml"
QWEN_16 = ROOT / "workloads" / "qwen3-235b-a22b-16socket.yaml"


def _prefill(path: Path, tokens: int, **overrides: object) -> StepTiming:
    cost = api.step(path, dict(overrides), phase="prefill", tokens=tokens)
    assert isinstance(cost.detail, StepTiming)
    return cost.detail


@pytest.mark.parametrize(
    ("path", "tokens", "looped"),
    [
        (SNAPSTREAM, 1024, "decoder_moe"),  # 16 sockets, two-shot all-reduces, 8 tiles
        (SNAPSTREAM, 2048, "decoder_moe"),
        (LLAMA_8, 1024, "decoder"),  # collectives over 8 sockets
        (QWEN_16, 1024, "decoder"),
    ],
)
def test_marks_cut_shipped_prefill_steps_a_layer_sooner_and_exactly(
    path: Path, tokens: int, looped: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = _prefill(path, tokens)
    full = _prefill(path, tokens, **{"engine.fast_forward": False})
    monkeypatch.setattr(kernel_sim, "MARKS_PER_LAYER", ())  # the boundaries are the marks
    boundaries = _prefill(path, tokens)
    kernel, before = marks.kernel(looped), boundaries.kernel(looped)
    # seen at the end of layer 1, when the leading stages have started layer 2: 4 layers
    assert kernel.simulated_iterations == before.simulated_iterations - 1 == 4
    assert kernel.period_s is not None and kernel.simulated_iterations < kernel.calls
    assert marks.events < boundaries.events < full.events
    for fast in (marks, boundaries):
        assert fast.step_s == pytest.approx(full.step_s, rel=1e-12)
        assert fast.bytes_by_tier == pytest.approx(full.bytes_by_tier, rel=1e-12)
        assert fast.busy_s == pytest.approx(full.busy_s, rel=1e-12)
        assert fast.flops == pytest.approx(full.flops, rel=1e-12)
        assert fast.kernel(looped).time_s == pytest.approx(full.kernel(looped).time_s, rel=1e-12)


def test_a_live_run_cut_inside_a_layer_is_exactly_a_run_of_that_many_layers() -> None:
    # The cycle is seen at the end of layer 1; lowering the layer count there changes
    # nothing already decided: boundaries, marks, totals and events equal a fresh run
    # of that many layers, bit for bit.
    scenario = api.load(SNAPSTREAM)
    program = compile_program(scenario, StepShape("prefill", 1, 1024, 0))
    kernel = next(k for k in program.kernels if k.name == "decoder_moe")
    works = tile_works(kernel, kernel.tiles_or(0), scenario.hardware.socket)

    def sim(layers: int) -> KernelSim:
        return KernelSim(
            kernel,
            scenario.hardware,
            program.tp,
            EngineConfig(),
            works,
            layers=layers,
            looped=True,
            max_events=10**8,
        )

    live = sim(kernel.calls)
    per_layer = live.marks_per_layer
    assert per_layer == 2 and live.marks is not live.boundaries
    cycle = None
    while cycle is None and live.run_to_mark() is not None:
        cycle = find_cycle(live.marks, kernel.calls, live.safe, per_layer=per_layer)
    # seen at the end of layer 1 (the boundaries alone would show it at the end of layer 2)
    assert cycle is not None and len(live.marks) == 2 * per_layer
    n = cycle.layers
    assert fewest_layers(kernel, fast_forward=True) <= n == 4
    assert n < kernel.calls and (kernel.calls - n) % cycle.length == 0
    live.cut(n)
    cut = live.finish()
    fresh = sim(n)
    done = fresh.finish()
    assert cut.boundaries == done.boundaries and live.marks == fresh.marks
    assert cut.stats == done.stats and cut.events == done.events


def test_marks_are_evenly_spaced_tile_ends_or_else_the_boundaries() -> None:
    hw = hardware(zero=False)

    def run(tiles: int, tp: int) -> KernelSim:
        p = llama_like_program(tp=tp, batch=8, layers=12)
        k = next(k for k in p.kernels if k.looped)
        works = tile_works(k, tiles, hw.socket)
        sim = KernelSim(
            k, hw, p.tp, EngineConfig(), works, layers=12, looped=True, max_events=10**7
        )
        sim.finish()
        return sim

    even = run(8, tp=1)
    assert even.marks_per_layer == 2 and len(even.marks) == 24 and len(even.boundaries) == 12
    times = [m.end_s for m in even.marks]
    assert times == sorted(times)
    # the reference stage's last tile of each layer comes no later than the layer boundary
    # (when every sink has finished it), and its middle tile before
    for layer, boundary in enumerate(even.boundaries):
        middle, last = even.marks[2 * layer], even.marks[2 * layer + 1]
        assert middle.end_s < last.end_s <= boundary.end_s
    # no even split, or no sink without a collective (its tiles end as the collective's
    # chunks land): the layer boundaries are the marks
    for odd in (run(7, tp=1), run(8, tp=4)):
        assert odd.marks_per_layer == 1 and odd.marks is odd.boundaries and len(odd.marks) == 12


def _marks(states: list[tuple[float, float]], layers: int) -> list[Boundary]:
    """Two marks a layer, one layer taking 1 ms: the middle one at 0.4 ms, each with its
    state; the totals grow with time."""
    out = []
    for layer in range(layers):
        for offset, state in zip((0.4e-3, 1e-3), states, strict=True):
            end = layer * 1e-3 + offset
            out.append(Boundary(end, RunStats(time_s=end), KernelState((1,), state)))
    return out


def test_find_cycle_compares_marks_a_whole_layer_apart() -> None:
    # The middle of a layer and its end differ in state; the layer repeats. Read as two
    # marks a layer it is a one-layer cycle; read as boundaries it is none of length 1 (and
    # a two-"layer" cycle would skip half layers).
    log = _marks([(0.1, 0.2), (0.3, 0.4)], layers=4)
    cycle = find_cycle(log[:4], calls=20, safe=4, per_layer=2)
    assert cycle is not None and cycle.length == 1 and cycle.layers == 4
    assert cycle.increment.time_s == pytest.approx(1e-3, rel=STATE_RTOL)
    assert find_cycle(log[:4], calls=20, safe=4, lengths=(1,)) is None
    # too few marks to compare a layer apart with the span before: no cycle yet
    assert find_cycle(log[:3], calls=20, safe=4, per_layer=2) is None
    # a state that drifts from layer to layer is no cycle
    drifting = log[:4] + [
        Boundary(m.end_s, m.totals, KernelState((1,), (m.state.times[0] + 1e-9, 0.4)))
        for m in log[4:6]
    ]
    assert find_cycle(drifting, calls=20, safe=5, per_layer=2) is None
