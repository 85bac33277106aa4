"""Options shared by the commands that take a workload, so they read the same everywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def overrides_option(func: F) -> F:
    """`--set PATH=VALUE` (repeatable): edit a workload field, or a hardware one with `hw.`."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="PATH=VALUE",
        help="Override a workload field, e.g. serving.batch_slots=32; prefix hw. for the "
        "hardware file, e.g. 'hw.socket.hbm.bandwidth=2.4 TB/s'. Repeatable.",
    )(func)


def workload_argument(func: F) -> F:
    """The WORKLOAD file argument (its existence is checked by the loader, exit 2)."""
    return click.argument("workload", type=click.Path(path_type=Path))(func)
