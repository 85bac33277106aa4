"""Calibration and validation against the published SnapStream deployment (issue 7).

``run_suite`` runs the SnapStream and full-attention DeepSeek-R1 workloads through
``rdu_sim.api.run`` (the code path of ``rdu-sim run``), measures them
(``rdu_sim.validate.measure``) and compares with the published figures
(``rdu_sim.validate.figures``). docs/calibration.md has the table, the assumptions and the
sensitivity study (``python -m rdu_sim.validate.sensitivity``).
"""

from rdu_sim.validate.figures import FIGURES, Figure, Measurements, Row, evaluate, with_tolerances
from rdu_sim.validate.suite import RunMeasurement, SuiteResult, run_suite, tolerance_overrides

__all__ = [
    "FIGURES",
    "Figure",
    "Measurements",
    "Row",
    "RunMeasurement",
    "SuiteResult",
    "evaluate",
    "run_suite",
    "tolerance_overrides",
    "with_tolerances",
]
