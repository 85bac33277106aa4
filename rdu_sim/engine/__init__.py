"""The engine: SimPy execution of one compiled Program step on the hardware model.

Public API: :func:`simulate_step`, :class:`Engine` (settings: ``config.EngineConfig``),
:class:`StepTiming`, :class:`KernelTiming`, :class:`EventBudgetError`, and the trace record
types the report layer turns into files.
"""

from rdu_sim.engine.budget import EventBudgetError
from rdu_sim.engine.engine import Engine, simulate_step
from rdu_sim.engine.records import TraceCounter, TraceRecords, TraceSlice
from rdu_sim.engine.timing import BYTE_TIERS, UNIT_KINDS, KernelTiming, StepTiming

__all__ = [
    "BYTE_TIERS",
    "UNIT_KINDS",
    "Engine",
    "EventBudgetError",
    "KernelTiming",
    "StepTiming",
    "TraceCounter",
    "TraceRecords",
    "TraceSlice",
    "simulate_step",
]
