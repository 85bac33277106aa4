"""A Composition of Experts run as the report reads it: its switching (``serving.coe``'s
``CoEStats``) and what CoE adds to a request's time to first token, from the per-request
records.

Before an expert admits a request, the router prefills its prompt on the same sockets, and
a request whose expert is not in HBM (a miss) may wait for its copy. Both happen between
arrival and admission, so both are inside ``queue_delay_s`` (admission - arrival, as for
any run) and so inside ``ttft_s``: ``router_prefill_s`` and ``miss_stall_s`` say how much.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from rdu_sim.report.percentiles import Percentiles
from rdu_sim.serving.coe import CoEStats
from rdu_sim.serving.records import ServingRecords

__all__ = ["CoESummary", "coe_summary"]


@dataclass(frozen=True)
class CoESummary(CoEStats):
    """The run's switching, and per request what CoE adds to its TTFT (all inside its
    queueing delay): the router's prefill of its prompt, and for a miss the time the node
    stood waiting for its expert's copy while it waited (0 when a prefetch hid the copy)."""

    misses: int  # requests whose expert had to be copied (requests x (1 - hbm_hit_rate))
    router_prefill_s: Percentiles  # every completed request's
    miss_stall_s: Percentiles  # every completed miss's


def coe_summary(stats: CoEStats, records: ServingRecords) -> CoESummary:
    """``stats`` with the completed requests' router prefill and their misses' copy stall."""
    done = records.completed
    miss = done & (records.expert_hit == 0)
    switching = {f.name: getattr(stats, f.name) for f in fields(CoEStats)}
    return CoESummary(
        **switching,
        misses=int((records.expert_hit == 0).sum()),
        router_prefill_s=Percentiles.of(records.seconds(records.router_ps[done])),
        miss_stall_s=Percentiles.of(records.seconds(records.copy_stall_ps[miss])),
    )
