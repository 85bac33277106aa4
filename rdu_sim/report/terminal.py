"""The console every report prints to, in a module light enough for any command to import
(``report.console`` pulls in the run report's dependencies; a sweep's closing table must not
pay for them)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

__all__ = ["PIPED_WIDTH", "wide_console"]

PIPED_WIDTH = 160
"""Columns of a report printed to a pipe or a file, so its tables keep their numbers whole."""


def wide_console(**options: Any) -> Console:
    """The console every report prints to: stdout at the terminal's width, or
    :data:`PIPED_WIDTH` columns when stdout is not a terminal."""
    console = Console(**options)
    return console if console.is_terminal else Console(width=PIPED_WIDTH, **options)
