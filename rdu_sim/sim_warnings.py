"""The base of every warning rdu-sim emits: ``rdu_sim.RduSimWarning``, a ``UserWarning``.

A script filters them all at once (``warnings.simplefilter("ignore", rdu_sim.RduSimWarning)``,
or ``"error"`` to stop at the first) or one kind by its class; the CLI prints each as one
``warning:`` line (``cli.errors``). Subclassing it is what makes a warning rdu-sim's (the
one rule; tests/test_sim_warnings.py checks every warning class in the package does). The
kinds, each where its rule lives:

- a field set that the choice of its section, or the workload's kind of hardware
  (``config.device_reads``), does not read: ``config.overrides.
  UnreadFieldWarning`` (``kv.policies.UnreadKVFieldWarning``), ``config.cluster.
  UnreadRouterFieldWarning``, a config.json's keys ``models.hf_config.UnreadKeyWarning``,
  and the keys that size a model left out ``models.hf_config.DefaultedShapeWarning``;
- a run's warnings, also its report's ``warnings`` (one rule: ``report.summary.
  run_warnings``): weights pushed to DDR ``compiler.placement.WeightsSpilledWarning``,
  speculation slower than plain decoding ``report.speculation.SlowSpeculationWarning``,
  prompts past the stack's token budget ``serving.limits.UnchunkedPromptWarning``, more
  requests asked for than the trace holds ``serving.requests.ShortTraceWarning``, a large
  share of requests cut to the context ``serving.requests.TruncatedRequestsWarning`` (said by
  ``rdu-sim check`` too);
- a step: ``engine.budget.SlowStepWarning`` (long to simulate), ``serving.backend.
  StepOverPoolWarning`` (more pages than the pool holds);
- a cluster: ``api_cluster.EmptyPrefixCacheWarning``, ``api_cluster.UncappedPrefixCacheWarning``;
- a calibration's group of parameters that stopped at its budget of fit steps: ``validate.
  fit_result.UnconvergedFitWarning``;
- ``rdu-sim kv-demo``'s compression other than asked: ``kv.quality.DemoCompressionWarning``;
- stored data: ``sweep.store.DamagedRowWarning``, ``validate.evaluation_cache.
  CutLineWarning``, ``validate.overlays.MissingFittedFileWarning``.

A warning raised in a worker process (a calibration's or the figure suite's pool) would print
there as Python's raw two lines: the work runs in ``kept`` instead, which sends its rdu-sim
warnings back with its result, and the parent says them (``say``) as if raised in it, so they
print as the in-process ones do, once each.

This module imports nothing (the CLI's warning printer reads it at no cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["RduSimWarning"]

R = TypeVar("R")


class RduSimWarning(UserWarning):
    """The base of every warning rdu-sim emits (this module's docstring lists them)."""


_PACKAGE = __file__.rpartition("/")[0] + "/"  # (this module imports nothing: no pathlib)


def warn(warning: RduSimWarning) -> None:
    """``warnings.warn(warning)`` attributed to the first frame outside the rdu_sim package:
    the caller's line (``api.load(W, {...})`` in a script or a notebook cell), not the
    scenario loader's, however deep inside the package the rule that warns sits."""
    import sys
    import warnings

    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


def kept(function: Callable[..., R], *args: Any) -> tuple[R, list[RduSimWarning]]:
    """``function(*args)`` in a worker process, and the rdu-sim warnings it raised (each
    shown once in this process, by its filters), to be said in the parent (``say``: shown
    here they would print as Python's raw lines); any other warning is shown here, as
    before. Its filters are left alone: changing them (``catch_warnings``) would clear what
    this process has shown, and show it again."""
    import warnings

    ours: list[RduSimWarning] = []
    shown = warnings.showwarning

    def keep(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if isinstance(message, RduSimWarning):
            ours.append(message)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = keep
    try:
        result = function(*args)
    finally:
        warnings.showwarning = shown
    return result, ours


def say(found: Sequence[RduSimWarning]) -> None:
    """Warnings ``kept`` sent back from a worker, raised here (``warn``): filtered and
    shown once each by this process's filters, as its own are (two workers' same warning
    once)."""
    for warning in found:
        warn(warning)
