"""rdu_sim.serving"""

from rdu_sim.serving.steady import (
    MIN_TURNOVERS,
    NoSteadyWindow,
    SteadyState,
    find_steady_state,
    min_requests,
    steady_state,
)

__all__ = [
    "MIN_TURNOVERS",
    "NoSteadyWindow",
    "SteadyState",
    "find_steady_state",
    "min_requests",
    "steady_state",
]
