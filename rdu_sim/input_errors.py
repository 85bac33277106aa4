"""Which exceptions mean bad input (a typo in a file, a model that does not fit, a step too
large to simulate), not a bug: the CLI prints them as one line without a traceback
(``cli.errors``), and a sweep stores a failed point's as its message alone (``sweep.worker``).
"""

from __future__ import annotations

import sys

__all__ = ["INPUT_ERRORS", "InputError", "expected_errors"]


class InputError(Exception):
    """The base of every error that means bad input (``INPUT_ERRORS``: a ConfigError and the
    sweep database's StoreError, a CapacityError, an EventBudgetError, an unknown model, a
    missing optional package): what a script catches, as ``rdu_sim.InputError``, to tell
    its input's mistakes from bugs. It adds nothing: each keeps its own message.
    """


# Input errors, named by (module, class) so the CLI does not import them: an exception of a
# class can only exist once its module is loaded, so looking in sys.modules finds every one
# that matters and costs no import (`rdu-sim --help` imports neither the config models nor
# the simulator, and `rdu-sim check` not the simulator).
INPUT_ERRORS: tuple[tuple[str, str], ...] = (
    ("rdu_sim.config.errors", "ConfigError"),  # a typo in a YAML file, a bad value
    ("rdu_sim.models.presets", "UnknownModelError"),  # a model name no preset has
    ("rdu_sim.compiler", "CapacityError"),  # a model or batch that does not fit in memory
    ("rdu_sim.compiler.errors", "CapacityError"),
    ("rdu_sim.engine", "EventBudgetError"),  # a step too large to simulate (engine.max_events)
    ("rdu_sim.engine.budget", "EventBudgetError"),
    ("rdu_sim.extras", "MissingDependencyError"),  # an optional package (Dask) not installed
)


def expected_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean "bad input", printed without a traceback."""
    found: list[type[BaseException]] = []
    for module_name, attr in INPUT_ERRORS:
        error = getattr(sys.modules.get(module_name), attr, None)
        if isinstance(error, type) and issubclass(error, BaseException) and error not in found:
            found.append(error)
    return tuple(found)
