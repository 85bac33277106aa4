"""MLA's query choice timed by the engine (compiler.query_choice.choose_queries): on a memory
plan holding q_b_proj and kv_b_proj whole, a step served through the engine is compiled both
ways, making every head's queries on every socket and gathering them, and keeps the faster.
Checked differentially against each form forced on the same memory plan."""

from __future__ import annotations

import pickle

import pytest

from rdu_sim import api
from rdu_sim.compiler import compile as compile_module
from rdu_sim.compiler.compile import Compiler, compile_program
from rdu_sim.compiler.placement import slot_tokens
from rdu_sim.compiler.program import Program
from rdu_sim.engine.for_hardware import StepEngine
from rdu_sim.engine.timing import StepTiming
from rdu_sim.scenario import Scenario
from rdu_sim.serving import backend as backend_module
from rdu_sim.serving.backend import EngineBackend
from rdu_sim.shapes import StepShape

SNAP = "deepseek-r1-128k-snapstream"
H200 = {"hardware": "dgx-h200", "stack": None, "parallelism.tp": 8}
"""DeepSeek-R1 at tp=8 on one DGX H200: the two forms within 0.2% at batch 4."""


def _step_s(
    overrides: dict[str, object],
    batch: int,
    monkeypatch: pytest.MonkeyPatch,
    force: bool | None = None,
) -> float:
    """The simulated decode step of ``batch`` slots: the compiler's choice, or every step
    forced to replicate (True) or gather (False) on the memory plan the compiler makes
    (which holds the weights whole where the estimate has its full step replicate)."""
    with monkeypatch.context() as patch:
        if force is not None:
            patch.setattr(compile_module, "replicates", lambda *args, **kwargs: force)
            patch.setattr(
                compile_module,
                "choose_queries",
                lambda build, timer: build(force),
                raising=False,
            )
        return api.step(SNAP, overrides, batch=batch).step_s


@pytest.mark.parametrize(
    ("overrides", "batch"),
    [({}, 8), ({}, 16), ({}, 64), ({}, 136), (H200, 4)],
    ids=["sn40l-8", "sn40l-16", "sn40l-64", "sn40l-136", "h200-tp8-4"],
)
def test_the_chosen_form_is_never_slower_than_either_forced_one(
    overrides: dict[str, object], batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: the estimate (a roofline on SN40L) gathered at 8 and 16 slots, steps
    5-6% longer than replicating (13.02 against 12.35 ms at 8 slots), and on the H200 at
    batch 4 gathered 15.43 ms where replicating takes 15.40."""
    gather = _step_s(overrides, batch, monkeypatch, force=False)
    replicate = _step_s(overrides, batch, monkeypatch, force=True)
    assert gather != replicate  # both forms exist on this plan
    assert _step_s(overrides, batch, monkeypatch) == min(gather, replicate)


def test_the_compiler_records_the_form_it_kept() -> None:
    """`Compiler.program_queries` reports the timed choice (``inspect graph``): replicated
    at 8 slots on SN40L-16, gathered at batch 1 (whose step replicating is 35% longer)."""
    scenario = api.load(SNAP)
    compiler = EngineBackend().compiler(scenario)
    tokens = slot_tokens(scenario)
    for batch, replicated in ((8, True), (1, False)):
        program = compiler.program(StepShape("decode", batch, 1, tokens))
        assert compiler.program_queries(program) == (True, replicated)


def test_without_an_engine_the_estimate_chooses() -> None:
    """A compiler given no timer (``compile_program``) keeps the estimate's form: the
    gather at 8 slots, as the roofline has it."""
    scenario = api.load(SNAP)
    shape = StepShape("decode", 8, 1, slot_tokens(scenario))
    compiler = Compiler(scenario)
    program = compiler.program(shape)
    assert compiler.program_queries(program) == (True, False)
    assert compile_program(scenario, shape).kernels == program.kernels


@pytest.mark.parametrize("record", [False, True])
def test_the_kept_candidate_is_not_simulated_again(
    record: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step the compiler timed both ways (8 slots on SN40L-16: two forms of the queries,
    each with two expert schedules) is simulated four times in all, the serving level
    reusing the kept candidate's timing; a recording backend simulates it again for its
    trace. The reused timing is the one a fresh simulation gives."""
    calls: list[bool] = []
    real = backend_module.engine_for

    def counting(scenario: Scenario, *, record: bool = False) -> StepEngine:
        engine = real(scenario, record=record)
        simulate = engine.simulate_step

        def counted(program: Program) -> StepTiming:
            calls.append(record)
            return simulate(program)

        monkeypatch.setattr(engine, "simulate_step", counted)
        return engine

    monkeypatch.setattr(backend_module, "engine_for", counting)
    scenario = api.load(SNAP)
    backend = EngineBackend(record=record)
    shape = StepShape("decode", 8, 1, slot_tokens(scenario))
    cost = backend.step_cost(scenario, shape)
    assert calls == [False] * 4 + [True] * record
    fresh = real(scenario).simulate_step(backend.compiler(scenario).program(shape))
    assert cost.step_s == fresh.step_s


def test_a_compilers_timer_pickles_without_its_timings() -> None:
    """A compiler (a sweep's worker may ship one) pickles its timer, not what it timed."""
    scenario = api.load(SNAP)
    compiler = EngineBackend().compiler(scenario)
    compiler.program(StepShape("decode", 8, 1, slot_tokens(scenario)))
    timer = pickle.loads(pickle.dumps(compiler.timer))
    assert timer.__dict__["_timed"] == {}
