"""The event budget (``engine.max_events``): an early lower bound, and the error.

The budget is enforced exactly by counting: a step's SimPy environments never process more
than ``max_events`` events between them (``CountingEnvironment``), and going past it raises
:class:`EventBudgetError` mid-run. Before simulating, the engine refuses a step that cannot
fit in any case, by a lower bound that knows nothing of how the hardware primitives schedule
their events (latencies, wake-ups, waits, collectives, launches): it counts only the work
items each tile of a stage issues or waits for, each of which ends in an event of its own
(``stage_runner``): a read of each input edge (the previous layer's outputs too, in a looped
call), a request per off-chip tier read or written, the matrix and vector compute, the SRAM
stream, and the completion handed to its consumers. On every simulated socket, over the
fewest layers the run simulates. The tests check it against measured counts (it is about
half of them on compiled programs, less with fast-forward), so it never refuses a step that
would fit; a change that gives a work item no event of its own must change it too.
"""

from __future__ import annotations

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.input_errors import InputError
from rdu_sim.sim_warnings import RduSimWarning, warn


class EventBudgetError(ValueError, InputError):
    """A step would need more SimPy events than ``engine.max_events`` allows."""


SLOW_STEP_EVENTS = 250_000
"""Least events past which a step is slow to simulate (the measured count is 10-20 times
the bound: a minute or more in pure Python), so the user is told before it runs. No shipped
workload's default steps come near it; 4096 tiles per stage (the most) pass it."""


class SlowStepWarning(RduSimWarning):
    """A step whose simulation will take long (its least events past ``SLOW_STEP_EVENTS``);
    the CLI prints it as one `warning:` line."""


def warn_if_slow(least: int, what: str, tiles: int, setting: int) -> None:
    """Warn (SlowStepWarning) before simulating a step of at least ``SLOW_STEP_EVENTS``;
    ``tiles``: the most tiles a stage of it streams per call, ``setting``: the workload's
    ``engine.tiles_per_stage`` (the compiler cuts a kernel finer when its buffers need it, or
    when that re-reads its weights less: ``compile.choose_tiles``)."""
    if least > SLOW_STEP_EVENTS:
        warn(
            SlowStepWarning(
                f"{what} simulates at least {least:,} SimPy events (up to {tiles:,} tiles "
                f"per stage and call; engine.tiles_per_stage = {setting}): it may take a "
                "minute or more; fewer tiles simulate faster"
            )
        )


def min_events(
    kernel: KernelProgram, works: dict[str, TileWork], *, layers: int, sockets: int
) -> int:
    """Fewest events a run of ``layers`` layers (or calls) of ``kernel`` processes, with
    each stage's work cut into tiles as ``works``."""
    consumed = {name for s in kernel.stages for name in s.inputs}
    sinks = sum(1 for s in kernel.stages if s.name not in consumed)
    later = layers - 1 if kernel.looped else 0  # layers fed by the previous one
    per_socket = 0
    for stage in kernel.stages:
        work = works[stage.name]
        items = len(stage.inputs) + len(work.reads) + len(work.writes)
        items += (work.flops > 0) + (work.vector_flops > 0)
        hands_over = stage.name in consumed and (
            stage.collective is None or stage.collective.group <= 1
        )
        per_socket += layers * (work.tiles * (items + hands_over) + sum(b > 0 for b in work.sram))
        if not stage.inputs:  # a source: fed by every sink of the previous layer
            per_socket += later * work.tiles * sinks
    return sockets * per_socket


def check_budget(least: int, max_events: int, what: str) -> None:
    """Refuse before simulating when ``least`` events already exceed the budget."""
    if least > max_events:
        raise EventBudgetError(
            f"{what} needs at least {least:,} SimPy events, more than "
            f"engine.max_events = {max_events:,}; {_ADVICE}"
        )


def over_budget(max_events: int, what: str) -> EventBudgetError:
    """The error for a run stopped on reaching the budget (``what``: where it stopped)."""
    return EventBudgetError(
        f"{what} reached engine.max_events = {max_events:,} SimPy events before it "
        f"finished; {_ADVICE}"
    )


_ADVICE = (
    "raise engine.max_events or lower engine.tiles_per_stage (or keep engine.fast_forward "
    "on); the compiler cuts a kernel finer than engine.tiles_per_stage where its buffers do "
    "not fit its PMUs at fewer tiles, or where finer tiles re-read its weights less "
    "(rdu-sim inspect graph shows its tiles), so lowering the setting may not lower them"
)
