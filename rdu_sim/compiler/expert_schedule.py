"""The compiler's choice, once per step, between the two static schedules of a MoE step's
routed experts (`graph.moe`): gather the worst case, min(E, tokens x k) expert slots, after
the router (``gather``), or stream every expert (``all``).

Under ``moe_expert_loading: static`` a step whose tokens x k is below the E routed experts has
both, and neither is always faster. The gather reads fewer bytes, but which experts it reads
is known only once the router has run, so its loads wait for the router's layer
(``StageProgram.selected_by``; `engine.stage_runner`). Every expert's address is known when
the program is compiled, so the full stream prefetches them like any weight, behind the
layer's work before the router (the attention's collectives on the links, a small batch's
chain through the stages), where the HBM would otherwise idle. The full stream wins when the
extra experts' reads fit in that idle time: for DeepSeek-R1 on SN40L-16 never at batch 1 (8
slots gathered against 256 streamed), from 21 of its 32 slots on with full attention and 25
with SnapStream (248 slots gathered at batch 31: 50.5 ms; all 256: 38.0 ms).

The rule: the compiler compiles the step both ways and times both Programs on the scenario's
engine (as an autotuner times candidate kernels), and keeps the faster; a tie keeps the
gather (fewer bytes). The engine sits above the compiler, so it is handed in
(``ProgramTimer``: ``Compiler(scenario, timer=...)``, which the serving level's
``EngineBackend`` does for every simulated step, ``api.step`` and ``inspect graph`` among
them); a compiler given none (``compile_program`` alone) has nothing to time with and keeps
the gather. No estimate and no threshold: the engine's step time is the quantity
being minimised, so the choice is exact, and a step's time is the lesser of two schedules'
(each growing with the batch), so it cannot fall as the batch grows past tokens x k = E.
The cost is one more compile and two engine runs per such shape, of which the serving level
reuses the kept candidate's (``EngineBackend``'s timer keeps its timings; when steps are
shared, ``api.share_steps``, the shared run too: each is labelled before it is timed).
A candidate over ``engine.max_events`` loses to the gather, which is then timed on its own.

The chosen schedule is ``Program.expert_schedule`` (in ``rdu-sim step --json`` and
``inspect graph``): ``gather`` or ``all`` for a static MoE step (``all`` too when tokens x k
reaches E, where the two are one), empty otherwise (routed loading, a dense model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from rdu_sim.compiler.program import Program
from rdu_sim.input_errors import InputError
from rdu_sim.models.layers import MoeArchitecture
from rdu_sim.scenario import Scenario


def _programs(program: Program) -> Iterator[Program]:
    """``program`` and the Programs inside it (micro-batches, pipeline stages)."""
    yield program
    for inner in (*program.micro_batches, *program.pipeline):
        yield from _programs(inner)


def gathers(program: Program) -> bool:
    """Whether a step's routed experts are gathered after the router: some stage's weights
    are selected by another stage's output (``selected_by``)."""
    return any(
        stage.selected_by is not None
        for part in _programs(program)
        for kernel in part.kernels
        for stage in kernel.stages
    )


ProgramTimer = Callable[[Program], float]
"""Seconds one Program's step takes on the scenario's engine (the compiler's candidates)."""


def choose_schedule(
    scenario: Scenario, build: Callable[[bool], Program], timer: ProgramTimer | None
) -> Program:
    """The Program of a step, ``build(all_experts)`` compiling it with every expert streamed
    or not: under static expert loading the faster of the two by ``timer`` when the step
    gathers fewer than all experts (module docstring; the gather without a timer), labelled
    with its schedule; else the one."""
    gather = build(False)
    static_moe = scenario.workload.moe_expert_loading == "static" and isinstance(
        scenario.model, MoeArchitecture
    )
    if not static_moe:
        return gather
    if not gathers(gather):  # tokens x k reaches every expert: one schedule
        return replace(gather, expert_schedule="all")
    gather = replace(gather, expert_schedule="gather")  # labelled before it is timed, so
    if timer is None:  # the step the serving level runs is the one timed (shared steps)
        return gather
    every = replace(build(True), expert_schedule="all")
    try:
        faster = timer(every) < timer(gather)
    except InputError:  # the candidate is over the event budget: the gather stands alone
        faster = False
    return every if faster else gather
