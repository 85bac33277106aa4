"""Preemption policies: which running request a decode step short of KV pages preempts.

A policy registers by name (``serving.preemption``), as the batching policies do
(``serving.batching``): a name taken by another class is refused and an unknown one lists
the valid names. Each shipped policy is one small module beside this file, imported here; a
plugin's registers when its module is imported (``rdu_sim.plugins``).
"""

from rdu_sim.serving.preemption import fewest_generated, last_admitted, latest_arrival  # noqa: F401
from rdu_sim.serving.preemption.base import (
    DEFAULT,
    PreemptionPolicy,
    RunningView,
    check_preemption,
    make_preemption,
    preemption_class,
    preemption_names,
    register,
)

__all__ = [
    "DEFAULT",
    "PreemptionPolicy",
    "RunningView",
    "check_preemption",
    "make_preemption",
    "preemption_class",
    "preemption_names",
    "register",
]
