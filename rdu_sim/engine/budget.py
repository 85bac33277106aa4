"""The event budget: estimate a run's SimPy events before simulating it, refuse if too many.

The estimate counts, per stage tile on each simulated socket, the events the stage process
and the hardware primitives schedule (``stage_runner``): up to 2 per input edge (a wait for
the tile, the read port), 1 per output edge (a wait for a slot), up to 3 per HBM/DDR request
(latency, completion, wake-up timer), 1 each for matrix, vector and SRAM work and for the
tile's completion; per collective chunk the link transfers of its algorithm (3 events per
ring with the symmetric shortcut, which computes them in plain Python; a bidirectional ring
is two rings and their countdown: 7); per call the launcher's and
processes' bookkeeping. It is an upper bound in practice (timers are shared
between requests, waits happen only when a stage blocks), checked against the measured
counts by the tests.
"""

from __future__ import annotations

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.engine.tile_work import MEMORY_TIERS


class EventBudgetError(ValueError):
    """A step would need more SimPy events than ``engine.max_events`` allows."""


def _collective_events(kind: str, algorithm: str, group: int, chunks: int, sockets: int) -> int:
    """Link transfers of one collective of ``chunks`` chunks (plus its completion). The
    symmetric shortcut (one simulated socket) computes its transfers in plain Python
    (``hw.link_chains``): its completion, the timeout that fires it and at most one timeout
    superseded by a later collective."""
    if group <= 1:
        return 1
    rings = 2 if algorithm == "bidirectional_ring" and group > 2 else 1
    if sockets == 1:
        return 3 * rings + (rings - 1)  # each ring's events, plus the pair's countdown
    if algorithm == "tree" and kind == "allreduce":
        hops = 2 * (group - 1)
    else:
        steps = 2 * (group - 1) if kind == "allreduce" else group - 1
        hops = steps * group * rings
    return hops * chunks + 2 * rings


def estimate_events(
    kernel: KernelProgram,
    hardware: HardwareConfig,
    *,
    iterations: int,
    looped: bool,
    sockets: int,
    tiles: int,
) -> int:
    """Upper-bound estimate of the events one run of ``iterations`` layers processes."""
    sock, system = hardware.socket, hardware.system
    consumed = {name for s in kernel.stages for name in s.inputs}
    sinks = sum(1 for s in kernel.stages if s.name not in consumed)
    sources = sum(1 for s in kernel.stages if not s.inputs)
    calls = 1 if looped else iterations
    per_tile = 0
    per_call = 0
    for s in kernel.stages:
        loads = sum(1 for t in MEMORY_TIERS if s.reads.get(t, 0.0))
        stores = sum(1 for t in MEMORY_TIERS if s.writes.get(t, 0.0))
        outs = sum(1 for c in kernel.stages if s.name in c.inputs)
        if looped and s.name not in consumed:
            outs += sources
        ins = len(s.inputs) + (sinks if looped and not s.inputs else 0)
        per_tile += 2 * ins + outs + 3 * (loads + stores) + 4
        per_call += 4
        if s.collective is not None:
            chunk_events = _collective_events(
                s.collective.kind, system.collective_algorithm, s.collective.group, 1, sockets
            )
            per_call += system.collective_chunks * (chunk_events + 4 * sockets) // sockets
    per_layer = tiles * per_tile + len(kernel.stages) + sinks + 2
    total = sockets * (iterations * per_layer + calls * (per_call + 8)) + 8
    latency_timers = 1 if sock.hbm.latency > 0 or sock.ddr.latency > 0 else 0
    return int(total * (1 + 0.1 * latency_timers)) + 16


def check_budget(estimated: int, max_events: int, what: str) -> None:
    """Raise :class:`EventBudgetError` naming the knobs when ``estimated`` exceeds the budget."""
    if estimated > max_events:
        raise EventBudgetError(
            f"{what} needs an estimated {estimated:,} SimPy events, more than "
            f"engine.max_events = {max_events:,}; lower engine.tiles_per_stage or raise "
            f"engine.max_events (or keep the engine's fast_forward on)"
        )
