"""The console a report prints to: the terminal's width, or wide enough when piped."""

from __future__ import annotations

from typing import Any

from rich.console import Console

PIPED_WIDTH = 160
"""Columns of a report printed to a pipe or a file, so its tables keep their numbers whole."""


def wide_console(**options: Any) -> Console:
    """A console on stdout: the terminal's width, or ``PIPED_WIDTH`` columns when stdout is
    not a terminal."""
    console = Console(**options)
    return console if console.is_terminal else Console(width=PIPED_WIDTH, **options)
