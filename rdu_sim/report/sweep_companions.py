"""What a sweep keeps beside a throughput it was asked for: what bound that throughput.

A run's throughput can measure the load it was offered rather than the machine
(``throughput_bound`` ``offered_load``: Poisson arrivals at 1 req/s give more slots nothing
to do), and a machine-bound one is what its decode step waited on (``decode_step.bound``,
``decode_step.binds``). A spec whose ``metrics:`` ask for the throughput alone would lose
both, and its table and plot could read an arrival rate as the hardware's answer. This is
the one rule: the worker stores the companions a result holds (``sweep.worker.select``),
``sweep.load`` keeps them beside the spec's metrics, the sweep's table shows them and its
plot marks each point with them (``plots_sweep.mark_bounds``). No import of the sweep
package: its runner imports the report's table, which reads this.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["COMPANIONS", "OFFERED_LOAD", "OFFER_MORE", "THROUGHPUTS", "companions"]

THROUGHPUTS = ("decode_tokens_per_s", "steady_decode_tokens_per_s")
"""The metrics whose value a bound explains: a run's decode throughputs."""

COMPANIONS = ("throughput_bound", "decode_step.bound", "decode_step.binds")
"""What a throughput implies: what set it (the machine or the offered load), the resource
the decode step waited on, and whether that resource binds the step or is only its largest
part (a plot's marker is filled or hollow by it)."""

OFFERED_LOAD = "offered_load"
"""``throughput_bound`` of a point whose throughput measures its arrivals, not the machine."""

OFFER_MORE = (
    "raise serving.arrival.rate, or keep every slot busy with serving.arrival.process: closed_loop"
)
"""How to make such a point's throughput the machine's: the advice the sweep's table and
plot both give."""


def companions(metrics: Sequence[str] | None) -> tuple[str, ...]:
    """The companions a spec's ``metrics`` imply and do not name: :data:`COMPANIONS` when
    they ask for one of :data:`THROUGHPUTS`, else none (None, every metric, implies none:
    every one is kept anyway). Optional where stored: a result without one (a run with no
    decode step) keeps the rest, never fails for it."""
    if not metrics or not any(metric in THROUGHPUTS for metric in metrics):
        return ()
    return tuple(name for name in COMPANIONS if name not in metrics)
