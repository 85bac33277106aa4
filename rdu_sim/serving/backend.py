"""Where a serving run gets its batch capacity, memory plan and step times: a Backend.

:class:`EngineBackend` is the real one: ``rdu_sim.compiler`` plans memory and compiles each
static shape, ``rdu_sim.engine`` simulates it (SN40L's engine or a GPU's, by the hardware's
kind: ``engine.for_hardware``). Tests pass a formula-based backend instead, so
the serving level can be checked against closed-form step times.
"""

from __future__ import annotations

from typing import Any, Protocol

from rdu_sim import human
from rdu_sim.compiler import CapacityError, Compiler
from rdu_sim.compiler.placement import (
    WeightsSpilledWarning,
    placement_warnings,
    slot_words,
    spill_absorbs,
)
from rdu_sim.compiler.program import Placement, Program
from rdu_sim.des.collector import collector_paused
from rdu_sim.engine.for_hardware import StepEngine, engine_for
from rdu_sim.engine.timing import StepTiming
from rdu_sim.scenario import Scenario
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.serving.step_shape import decode_cache
from rdu_sim.shapes import StepShape
from rdu_sim.sim_warnings import RduSimWarning, warn

__all__ = ["Backend", "EngineBackend", "resolve_batch_slots"]


class Backend(Protocol):
    """Where capacity, memory plans and step times come from (the compiler and engine)."""

    def batch_capacity(self, scenario: Scenario) -> int:
        """Largest batch whose memory plan fits; when none does, 0 or a CapacityError, and
        0 where ``compiler.placement.spill_absorbs`` leaves the batch to its memory plan."""
        ...

    def memory_capacity(self, scenario: Scenario) -> int:
        """Most slots memory holds beside the weights, whether or not the stack runs that
        batch (at least ``batch_capacity``)."""
        ...

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        """One socket's memory plan for ``batch_slots`` (CapacityError if it does not fit)."""
        ...

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        """Simulate one step of ``shape``."""
        ...


class EngineBackend:
    """The real thing: ``rdu_sim.compiler`` plans and compiles, ``rdu_sim.engine`` times
    (for SN40L or a GPU: the same backend, the engine chosen by the hardware's kind)."""

    def __init__(self, *, record: bool = False) -> None:
        self.record = record  # the engine collects trace records (StepTiming.records)
        # The last scenario's compiler and its draft's (a speculative run alternates between
        # them); each caches per instance.
        self._compilers: tuple[Compiler, ...] = ()

    def compiler(self, scenario: Scenario) -> Compiler:
        """One Compiler per scenario, so a run plans memory and capacity once, not per shape
        (a scenario and its draft keep one each)."""
        for compiler in self._compilers:
            if compiler.scenario is scenario:
                return compiler
        compiler = Compiler(scenario, timer=_Timer(engine_for(scenario)))
        kin = [
            c
            for c in self._compilers
            if c.scenario.draft is scenario or c.scenario is scenario.draft
        ]
        self._compilers = (*kin, compiler)
        return compiler

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle of the backend holds (a run's result holds its backend, through its
        step caches' step functions): its settings, not its compilers, a cache rebuilt on
        first use in the process that unpickles it."""
        return {**self.__dict__, "_compilers": ()}

    def batch_capacity(self, scenario: Scenario) -> int:
        """The compiler's batch capacity."""
        return self.compiler(scenario).batch_capacity()

    def memory_capacity(self, scenario: Scenario) -> int:
        """The compiler's count of what memory holds, whether or not the stack runs it."""
        return self.compiler(scenario).memory_capacity()

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        """The compiler's memory plan."""
        return self.compiler(scenario).placement(batch_slots)

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        """Compile the shape and simulate one step on the hardware model (recording its
        trace when the backend was built with ``record=True``), Python's cyclic collector
        paused (`des.collector`: nearly all a step allocates dies with it)."""
        with collector_paused():
            compiler = self.compiler(scenario)
            program = compiler.program(shape)
            timer = compiler.timer
            timed = timer.take(program) if isinstance(timer, _Timer) else None
            timing = (
                engine_for(scenario, record=True).simulate_step(program)
                if self.record
                else timed or engine_for(scenario).simulate_step(program)
            )
        return StepCost(
            step_s=float(timing.step_s),
            hbm_util=float(timing.hbm_bandwidth_fraction),
            pcu_util=float(timing.compute_utilization),
            flops=float(timing.flops) * program.tp,
            detail=timing,
            flops_util=float(timing.flops_fraction),
            runtime_s=float(timing.runtime_s),
        )


class _Timer:
    """A compiler's timer (`compiler.expert_schedule.ProgramTimer`): the step time of a
    Program on ``engine``, each timing kept until the serving level takes the one of the
    Program the compiler kept (`take`): a step whose candidates the compiler timed is not
    simulated again (the engine is deterministic). Keeps the last `KEPT` (a step's
    candidates: two expert schedules of two forms of MLA's queries); pickles without them."""

    KEPT = 4

    def __init__(self, engine: StepEngine) -> None:
        self.engine = engine
        self._timed: dict[int, tuple[Program, StepTiming]] = {}

    def __call__(self, program: Program) -> float:
        timing = self.engine.simulate_step(program)
        self._timed[id(program)] = (program, timing)  # the Program kept: its id stays its own
        if len(self._timed) > self.KEPT:
            del self._timed[next(iter(self._timed))]
        return timing.step_s

    def take(self, program: Program) -> StepTiming | None:
        """The timing of ``program`` if it was timed since the last take (the rest dropped)."""
        entry = self._timed.get(id(program))
        self._timed = {}
        return entry[1] if entry is not None and entry[0] is program else None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_timed": {}}


def resolve_batch_slots(scenario: Scenario, backend: Backend) -> tuple[int, int]:
    """(batch capacity, batch slots to run): ``serving.batch_slots``, or the capacity for
    ``auto``; CapacityError when not one sequence fits, unless the workload's explicit slots
    leave that to their memory plan (``compiler.placement.spill_absorbs``, the rule the
    compiler's capacity follows: it answers 0 there, and raises every other refusal)."""
    capacity = backend.batch_capacity(scenario)
    if capacity < 1 and not spill_absorbs(scenario):
        raise CapacityError(
            f"{scenario.workload_file}: not even one sequence ({slot_words(scenario)}) fits "
            "beside the weights "
            f"({scenario.model.name}, tp={scenario.tp}, kv.policy="
            f"{scenario.workload.kv.policy}); lower serving.max_context, use a compressing "
            "kv.policy, or add sockets"
        )
    return capacity, scenario.workload.serving.slots_for(lambda: capacity)


class StepOverPoolWarning(RduSimWarning):
    """A decode step's batch of sequences needs more pages than a paged stack's KV pool
    holds: no run of this stack would hold them all at once."""


def step_batch(scenario: Scenario, backend: Backend, context: int | None = None) -> int:
    """The batch a decode step of sequences of ``context`` tokens (default: the longest the
    KV policy keeps) runs when not told: the workload's batch slots, and on a paged stack at
    most the sequences of that context its KV pool holds at once (each reserving its
    context and one new token, ``kv.paged.reserved_pages``), one at least. (The slots of a
    paged stack count its smallest requests, so at a long context they overfill the pool.)"""
    slots = resolve_batch_slots(scenario, backend)[1]
    pool = backend.plan_memory(scenario, slots).kv_pool
    if pool is None:
        return slots
    need = pool.request_pages(decode_cache(scenario, context).context, 1)
    return max(1, min(slots, pool.pages // need))


def step_batch_note(scenario: Scenario, backend: Backend, context: int | None = None) -> str | None:
    """Why :func:`step_batch` runs fewer sequences than the workload's batch slots (its
    paged KV pool holds no more of that context), in one line; None when it runs them all."""
    slots = resolve_batch_slots(scenario, backend)[1]
    batch = step_batch(scenario, backend, context)
    pool = backend.plan_memory(scenario, slots).kv_pool
    if pool is None or batch >= slots:
        return None
    tokens = decode_cache(scenario, context).context
    need = pool.request_pages(tokens, 1)
    return (
        f"batch {batch:,}, not the workload's {slots:,} serving.batch_slots: a sequence of "
        f"{tokens:,} cached tokens reserves {need:,} KV pages of {pool.page_tokens} tokens "
        f"(its context and one new token) and the {scenario.stack.name} pool holds "
        f"{pool.pages:,}, so a default decode step runs the most it holds at once "
        "(at least one; --batch sets it)"
    )


def over_pool_words(
    scenario: Scenario, backend: Backend, batch: int, context: int | None
) -> str | None:
    """Why a decode step of ``batch`` sequences of ``context`` tokens (default: the longest
    the KV policy keeps) cannot run on a paged stack: it needs more of the KV pool (as
    planned at that batch) than the pool holds, in one sentence; None when it fits or the
    stack is not paged. One rule for ``rdu-sim step``'s warning (:func:`warn_over_pool`)
    and ``compare``'s refusal of a ``--batch`` its memory does not hold. (Only a paged
    stack plans for ``batch`` here: a static stack's step runs on the plan of its slots,
    ``Compiler.plan_slots``, which says what does not fit.)"""
    if not scenario.stack.dynamic_batch:
        return None
    pool = backend.plan_memory(scenario, batch).kv_pool
    if pool is None:
        return None
    tokens = decode_cache(scenario, context).context
    each = pool.request_pages(tokens, 1)
    if batch * each <= pool.pages:
        return None
    most = pool.pages // each
    held = f"at most {most:,} such sequences at once" if most else "not one such sequence"
    return (
        f"a decode step of {human.count(batch, 'sequence')} of "
        f"{tokens:,} cached tokens needs {batch * each:,} KV pages of "
        f"{pool.page_tokens} tokens, more than the {pool.pages:,} the "
        f"{scenario.stack.name} pool holds ({held})"
    )


def warn_spilled(scenario: Scenario, backend: Backend, shape: StepShape) -> None:
    """Warn, in a run's words (``WeightsSpilledWarning``), when the memory plan a step runs
    on (its workload's slots, or a larger ``batch``: ``Compiler.plan_slots``) pushes
    weights out of the HBM share ``memory.weights`` gives them. The engine's backend only
    (another has no compiler to ask which plan)."""
    if not isinstance(backend, EngineBackend):
        return
    compiler = backend.compiler(scenario)
    slots = compiler.plan_slots(shape)
    option = None if slots == compiler.batch_slots() else "batch"
    for words in placement_warnings(scenario, compiler.placement(slots), option):
        warn(WeightsSpilledWarning(f"{scenario.workload_file}: {words}"))


def warn_over_pool(scenario: Scenario, backend: Backend, batch: int, context: int | None) -> None:
    """Warn when a decode step of ``batch`` sequences needs more of a paged stack's KV pool
    than it holds (``StepOverPoolWarning``, :func:`over_pool_words`)."""
    words = over_pool_words(scenario, backend, batch, context)
    if words is not None:
        warn(StepOverPoolWarning(f"{scenario.workload_file}: {words}"))
