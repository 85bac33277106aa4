"""Which exceptions mean bad input (a typo in a file, a model that does not fit, a step too
large to simulate), not a bug: the CLI prints them as one line without a traceback
(``cli.errors``), a sweep stores a failed point's as its message alone (``sweep.worker``), and
a plan records its point as infeasible (``plan.evaluate``).
"""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(Exception):
    """The base of every error that means bad input: ConfigError (and the sweep database's
    StoreError), UnknownModelError, CapacityError, EventBudgetError, MissingDependencyError,
    StepShapeError (a step the workload cannot run: ``api.step(W, phase="bogus")``), and
    outside code's (``rdu_sim.plugins``: PluginError, PolicyAnswerError).
    Subclassing it is what makes an exception bad input everywhere (the one rule); a script
    catches it, as ``rdu_sim.InputError``, to tell its input's mistakes from bugs. It adds
    nothing: each keeps its own message. This module imports nothing, so the CLI's error
    boundary costs no import (`rdu-sim --help` loads neither the config models nor the
    simulator)."""
