"""A fitted parameter as written, ``[SCOPE:]PATH=LOW:HIGH`` (``--fit``, a calibration spec's
``fit:`` entry), split into its parts: the one reading of the syntax, for
``validate.scope.parse_fit`` (which checks each part and reads the bounds) and for
``config.origins`` (which reads the shipped calibrations' entries to say which values of a
machine or a stack were fitted). Here in config, below both: ``check`` on a hardware file
reads it without importing the calibration machinery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FitText:
    """The parts of a ``[SCOPE:]PATH=LOW:HIGH`` text, stripped; ``equals`` and ``colon``:
    whether the text had the ``=`` and a ``:`` before it (``:PATH`` has an empty scope)."""

    scope: str
    path: str
    bounds: str
    equals: bool
    colon: bool


def split_fit(text: str) -> FitText:
    """``sn40l:hw.system.intra_node_link.bandwidth=8 GB/s:64 GB/s`` -> scope ``sn40l``, path
    ``hw.system.intra_node_link.bandwidth``, bounds ``8 GB/s:64 GB/s`` (unchecked)."""
    left, equals, bounds = text.partition("=")
    scope, colon, path = left.rpartition(":")
    return FitText(scope.strip(), path.strip(), bounds, bool(equals), bool(colon))
