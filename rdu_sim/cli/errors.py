"""How the CLI reports bad input: `error: <message>` in red on stderr, exit status 2.

Every command runs inside `RduGroup.invoke`, which catches the exceptions named by
`expected_errors()` (the one place that lists them). Those are mistakes in the user's input:
a typo in a YAML file, a model that does not fit in memory. Anything else is a bug in
rdu-sim and keeps its traceback, so it gets reported and fixed instead of hidden.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from rich.console import Console

from rdu_sim.config.errors import ConfigError
from rdu_sim.models.presets import UnknownModelError

EXIT_INPUT_ERROR = 2  # bad input (click uses 2 for usage errors too)
EXIT_NOT_AVAILABLE = 1  # a command whose simulator part has not landed yet

# Input errors raised by later stages, named by (module, class) so the CLI does not import
# them: an exception of a class can only exist once its module is loaded, so looking in
# sys.modules finds every one that matters and costs no import (`rdu-sim check` stays fast).
LATER_INPUT_ERRORS: tuple[tuple[str, str], ...] = (
    ("rdu_sim.compiler", "CapacityError"),  # a model or batch that does not fit in memory
    ("rdu_sim.compiler.errors", "CapacityError"),
    ("rdu_sim.engine", "EventBudgetError"),  # a step too large to simulate (engine.max_events)
    ("rdu_sim.engine.budget", "EventBudgetError"),
)


def expected_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean "bad input", printed without a traceback."""
    found: list[type[BaseException]] = [ConfigError, UnknownModelError]
    for module_name, attr in LATER_INPUT_ERRORS:
        error = getattr(sys.modules.get(module_name), attr, None)
        if isinstance(error, type) and issubclass(error, BaseException) and error not in found:
            found.append(error)
    return tuple(found)


def _console() -> Console:
    # soft_wrap: never insert line breaks into messages (scripts and tests grep them).
    return Console(stderr=True, soft_wrap=True, highlight=False)


def print_error(message: str) -> None:
    """Print each line of `message` as `error: <line>` in red on stderr."""
    console = _console()
    for line in str(message).splitlines() or [""]:
        console.print(f"error: {line}", style="red", markup=False)


def print_warning(message: str) -> None:
    """A yellow `warning: <message>` on stderr."""
    _console().print(f"warning: {message}", style="yellow", markup=False)


def fail(message: str, status: int = EXIT_INPUT_ERROR) -> NoReturn:
    """Print an error and leave with `status` (2 for bad input)."""
    print_error(message)
    raise SystemExit(status)


def not_available(what: str, detail: str = "") -> NoReturn:
    """Leave with status 1, saying which part of the simulator has not landed yet."""
    extra = f" {detail}" if detail else ""
    _console().print(
        f"{what}: not yet available: the simulator part it needs has not landed yet.{extra}",
        style="yellow",
        markup=False,
    )
    raise SystemExit(EXIT_NOT_AVAILABLE)


class RduGroup(click.Group):
    """A click group whose commands (and nested groups) report input errors uniformly."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except expected_errors() as exc:
            print_error(str(exc))
            ctx.exit(EXIT_INPUT_ERROR)
