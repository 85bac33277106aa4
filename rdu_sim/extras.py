"""Optional dependencies: the extra that brings each, and one error when one is missing.

rdu-sim's core needs only its declared dependencies; a few features need more (pyproject's
``[project.optional-dependencies]``): Dask for ``--cluster``, pyarrow for Parquet exports,
nbclient for running the notebooks. :func:`require` imports such a module or raises
:class:`MissingDependencyError`, which the CLI prints as one ``error:`` line naming the
``pip install "rdu-sim[EXTRA]"`` that fixes it (exit 2). Imports nothing of rdu_sim.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from rdu_sim.input_errors import InputError

EXTRAS: dict[str, tuple[str, str]] = {
    "distributed": ("dask", "dask.distributed"),
    "dask": ("dask", "dask"),
    "pyarrow": ("parquet", "pyarrow"),
    "nbclient": ("notebooks", "nbclient"),
    "nbformat": ("notebooks", "nbformat"),
}
"""Top-level module -> (the extra that installs it, the package's name in messages)."""


class MissingDependencyError(InputError):
    """An optional package a feature needs is not installed (one ``error:`` line, exit 2)."""


def install_hint(module: str) -> str:
    """``pip install "rdu-sim[dask]"`` for a module an extra brings."""
    extra, _ = EXTRAS[module]
    return f'pip install "rdu-sim[{extra}]"'


def missing(module: str, purpose: str) -> MissingDependencyError:
    """The error saying ``purpose`` needs ``module`` and which extra installs it."""
    _, package = EXTRAS[module]
    return MissingDependencyError(
        f"{purpose} needs {package}, which is not installed: {install_hint(module)}"
    )


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, say
        return False


def require(module: str, purpose: str) -> ModuleType:
    """``module`` imported, or :class:`MissingDependencyError` naming its extra.

    A module that is installed but fails to import for another reason (a missing module
    of its own) says so rather than claim it is absent.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name in (None, module, module.split(".")[0]):
            raise missing(module, purpose) from None
        _, package = EXTRAS[module]
        raise MissingDependencyError(
            f"{purpose} needs {package}, which cannot be imported ({exc}); reinstall it: "
            f"{install_hint(module)}"
        ) from None
